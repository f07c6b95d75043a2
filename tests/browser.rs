//! The HTML report and the history dashboard opened in a real headless Chromium, from
//! `file://`: no console message, no request to any host, the key elements in the DOM after the
//! page's script ran (the verdict, the checklist, every case, the chart's points), sorting that
//! works when a header is clicked, and a screenshot per page kind at a desktop's and a phone's
//! width, compared loosely (its size, not blank) with the one docs/ shows.
//!
//! Chromium is `OPLEDGER_CHROMIUM`, else `chromium` (or `chromium-browser`, `google-chrome`) on
//! PATH. Without one the tests print SKIPPED, unless `OPLEDGER_REQUIRE_CHROMIUM` is set (CI
//! installs Debian's package), where a missing browser fails them. Screenshots are written under
//! `OPLEDGER_SCREENSHOTS` when it names a folder (how docs/img/ is made).

use crate::common;
use common::{bin, fixture, git, text};
use scraper::{Html, Selector};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Chromium, or `None` (SKIPPED) where there is none and none is required.
fn chromium(test: &str) -> Option<PathBuf> {
    let found = crate::common::parts::chromium();
    if found.is_none() {
        assert!(
            std::env::var_os("OPLEDGER_REQUIRE_CHROMIUM").is_none(),
            "OPLEDGER_REQUIRE_CHROMIUM is set but no Chromium was found"
        );
        eprintln!("SKIPPED: {test}: no Chromium (set OPLEDGER_CHROMIUM or install chromium)");
    }
    found
}

/// What a page showed Chromium: the DOM after its scripts ran, its console messages, and every
/// request it made to anything but a file.
struct Opened {
    dom: Html,
    console: Vec<String>,
    requests: Vec<String>,
}

fn chromium_cmd(browser: &Path, profile: &Path) -> Command {
    let mut c = Command::new(browser);
    // Root needs --no-sandbox; the rest keeps Chromium from its own network traffic, which a
    // closed network refuses and which would blur the page's own requests.
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

fn url(page: &Path) -> String {
    format!("file://{}", page.canonicalize().unwrap().display())
}

/// Opens `page`, waits for its scripts, and returns what it showed.
fn open(browser: &Path, page: &Path) -> Opened {
    let work = tempfile::tempdir().unwrap();
    let netlog = work.path().join("net.json");
    let o = chromium_cmd(browser, &work.path().join("profile"))
        .arg(format!("--log-net-log={}", netlog.display()))
        .arg("--virtual-time-budget=5000")
        .arg("--dump-dom")
        .arg(url(page))
        .output()
        .expect("Chromium starts");
    assert!(o.status.success(), "chromium: {}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    let console = stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    Opened {
        dom: Html::parse_document(&String::from_utf8_lossy(&o.stdout)),
        console,
        requests: page_requests(&netlog),
    }
}

/// The requests the page made (not Chromium's own): those of the `file://` page's network
/// isolation key, for anything but a file.
fn page_requests(netlog: &Path) -> Vec<String> {
    let Ok(bytes) = std::fs::read(netlog) else {
        return Vec::new();
    };
    // Chromium may stop before closing the JSON of a log; close it.
    let mut t = String::from_utf8_lossy(&bytes).trim_end().to_string();
    if !t.ends_with('}') {
        t = t.trim_end_matches(',').to_string() + "]}";
    }
    let log: serde_json::Value = serde_json::from_str(&t).expect("the net log is JSON");
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"].as_u64();
    log["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["type"].as_u64() == start_job)
        .filter(|e| {
            e["params"]["network_isolation_key"]
                .as_str()
                .is_some_and(|k| k.contains("file://"))
        })
        .filter_map(|e| e["params"]["url"].as_str().map(str::to_string))
        .filter(|u| !u.starts_with("file:"))
        .collect()
}

fn count(dom: &Html, selector: &str) -> usize {
    dom.select(&Selector::parse(selector).unwrap()).count()
}

fn texts(dom: &Html, selector: &str) -> Vec<String> {
    dom.select(&Selector::parse(selector).unwrap())
        .map(|e| e.text().collect::<String>().trim().to_string())
        .collect()
}

/// The page opened clean: its script ran, nothing logged, nothing asked of any host.
fn assert_clean(o: &Opened, what: &str) {
    assert_eq!(
        count(&o.dom, "html[data-ready='1']"),
        1,
        "{what}: the script ran"
    );
    assert!(o.console.is_empty(), "{what}: console: {:?}", o.console);
    assert!(o.requests.is_empty(), "{what}: requests: {:?}", o.requests);
}

/// A screenshot of `page` at `width`×`height`: the PNG's size is the window's, the picture is
/// not blank, and (loosely) it is the size of the one docs/ shows. Written under
/// `OPLEDGER_SCREENSHOTS` too when set.
fn screenshot(browser: &Path, page: &Path, name: &str, (width, height): (u32, u32)) {
    let work = tempfile::tempdir().unwrap();
    let shot = work.path().join(format!("{name}.png"));
    let o = chromium_cmd(browser, &work.path().join("profile"))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("--window-size={width},{height}"))
        .arg("--virtual-time-budget=5000")
        .arg(url(page))
        .output()
        .expect("Chromium starts");
    assert!(o.status.success(), "chromium: {}", text(&o));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (width, height), "{name}: size");
    let px = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
    let mut colours: Vec<[u8; 3]> = pixels.iter().map(|p| [p[0], p[1], p[2]]).collect();
    let inked = colours
        .iter()
        .filter(|c| c.iter().any(|v| *v < 200))
        .count() as f64
        / colours.len() as f64;
    colours.sort();
    colours.dedup();
    assert!(
        colours.len() >= 16 && inked > 0.01,
        "{name}: the screenshot looks blank ({} colours, {:.2}% inked)",
        colours.len(),
        inked * 100.0
    );
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("docs/img/{name}.png"));
    if let Ok(f) = std::fs::File::open(&docs) {
        let shown = png::Decoder::new(std::io::BufReader::new(f))
            .read_info()
            .unwrap();
        let (w, h) = (shown.info().width, shown.info().height);
        assert_eq!(
            (w, h),
            (width, height),
            "{name}: docs/img/{name}.png's size"
        );
    }
    if let Some(dir) = std::env::var_os("OPLEDGER_SCREENSHOTS") {
        std::fs::copy(&shot, Path::new(&dir).join(format!("{name}.png"))).unwrap();
    }
}

/// A copy of `page` with `script` run after the page's own, so that a test can click what a
/// person would and leave what it saw in the DOM.
fn with_script(page: &Path, script: &str) -> PathBuf {
    let html = std::fs::read_to_string(page).unwrap();
    let at = html.rfind("</body>").unwrap();
    let out = page.with_file_name(format!(
        "{}-probe.html",
        page.file_stem().unwrap().to_string_lossy()
    ));
    std::fs::write(
        &out,
        format!("{}<script>{script}</script>{}", &html[..at], &html[at..]),
    )
    .unwrap();
    out
}

/// Opens a page made by [`with_script`] (clean, as any page) and returns what its script left
/// in `body[data-order]`, split at commas.
fn probed(browser: &Path, page: &Path, what: &str) -> Vec<String> {
    let opened = open(browser, page);
    assert_clean(&opened, what);
    opened
        .dom
        .select(&Selector::parse("body").unwrap())
        .next()
        .and_then(|b| b.value().attr("data-order"))
        .unwrap_or_else(|| panic!("{what}: the probe left no order"))
        .split(',')
        .map(str::to_string)
        .collect()
}

#[test]
#[cfg_attr(not(has_chromium), ignore = "needs Chromium")]
fn the_html_report_opens_offline_with_its_verdict_checklist_cases_and_points() {
    let _one = serial();
    let Some(browser) = chromium("the HTML report") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fixture("run-fixed/results.json"), dir.join("results.json")).unwrap();
    let o = bin()
        .arg("report")
        .arg(&dir)
        .arg("--out")
        .arg(dir.join("report.html"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    let specs = results["specs"].as_array().unwrap();
    let page = dir.join("report.html");
    let opened = open(&browser, &page);
    assert_clean(&opened, "report.html");
    let dom = &opened.dom;
    assert_eq!(
        count(dom, "header#verdict[data-verdict='FAIL']"),
        1,
        "the run's verdict"
    );
    assert_eq!(
        count(dom, "table.checklist tr.item"),
        5,
        "five checklist items"
    );
    for s in specs {
        let name = s["name"].as_str().unwrap();
        assert_eq!(
            count(dom, &format!("section.spec[data-spec='{name}']")),
            1,
            "{name}'s section"
        );
        assert_eq!(
            count(
                dom,
                &format!("svg.roofline g.case[data-spec='{name}'] circle.pt")
            ),
            2,
            "{name}: its before and after points on the roofline"
        );
    }
    // Every point says what it is, to the pointer and to the keyboard.
    let tips = texts(dom, "svg.roofline circle.pt title");
    assert_eq!(tips.len(), 2 * specs.len());
    assert!(
        tips.iter()
            .all(|t| t.contains("FLOPs") && t.contains("median") && t.contains("of the roof")),
        "{tips:?}"
    );
    assert_eq!(
        count(dom, "svg.roofline circle.pt[tabindex='0']"),
        2 * specs.len()
    );
    // The sweep's two charts and each spec's sample distribution.
    let rows = results["sweeps"][0]["rows"].as_array().unwrap().len();
    assert_eq!(count(dom, "section.sweep svg.sweep circle.pt"), 4 * rows);
    assert_eq!(count(dom, "svg.samples g.box"), 2 * specs.len());
    // The failed claim is there as a failed check, with its words.
    let failed = texts(
        dom,
        "section.spec[data-spec='impossible-claim'] tr.check.fail",
    );
    assert!(!failed.is_empty(), "the failed check is marked");
    // The summary table sorts when a header is clicked: by the after median, ascending.
    let probe = with_script(
        &page,
        "var t=document.querySelector('table.summary');t.tHead.rows[0].cells[3].querySelector('button').click();\
         document.body.setAttribute('data-order',Array.prototype.map.call(t.tBodies[0].rows,function(r){return r.getAttribute('data-spec')}).join(','));",
    );
    let order = probed(&browser, &probe, "the sorted report");
    let mut by_after: Vec<(f64, String)> = specs
        .iter()
        .map(|s| {
            (
                s["after"]["summary"]["median_secs"].as_f64().unwrap(),
                s["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    by_after.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert_eq!(
        order,
        by_after.into_iter().map(|(_, n)| n).collect::<Vec<_>>()
    );
    screenshot(&browser, &page, "report", (1280, 2000));
    screenshot(&browser, &page, "report-phone", (390, 1600));
}

/// Runs at each commit of the dashboard's history, each timed and counted: the counted step
/// is exact whatever the machine's load; the timed charts show whatever shifts their noise
/// lets `history --changes` confirm (asserted to be the ones marked, not a number).
const RUNS_PER_COMMIT: usize = 4;

/// The tests of this file one at a time: a browser rendering beside the dashboard's runs on a
/// small machine slows both.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs of a spec in a scratch repository, timed and counted: [`RUNS_PER_COMMIT`] at each of two
/// commits, the second slower (its fused variant computes its output four times), the first run
/// accepted as the baseline.
fn store_with_a_step(repo: &Path) -> Vec<String> {
    git(repo, &["init", "-q", "-b", "main"]);
    std::fs::copy(fixture("good/tiny-chain.yaml"), repo.join("chain.yaml")).unwrap();
    git(repo, &["add", "chain.yaml"]);
    git(repo, &["commit", "-q", "-m", "spec"]);
    let mut shas = Vec::new();
    for (commit, slowdown) in [("fast", 0.0), ("slow", 3.0)] {
        std::fs::write(repo.join(commit), commit).unwrap();
        git(repo, &["add", commit]);
        git(repo, &["commit", "-q", "-m", commit]);
        shas.push(git(repo, &["rev-parse", "HEAD"]));
        for i in 0..RUNS_PER_COMMIT {
            let o = bin()
                .current_dir(repo)
                .env_remove("GITHUB_HEAD_REF")
                .env_remove("GITHUB_REF_NAME")
                .env("OPLEDGER_EXPERIMENT_SLOWDOWN", slowdown.to_string())
                .args(["run", "chain.yaml", "--default-branch", "main"])
                .args(common::FAST)
                .args(["--min-pairs", "10", "--max-pairs", "10", "--backend", "cpu"])
                .args(["--measure", "both"])
                .args(if commit == "fast" && i == 0 {
                    &["--accept"][..]
                } else {
                    &[][..]
                })
                .output()
                .unwrap();
            assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
        }
    }
    shas
}

#[test]
#[cfg_attr(
    any(not(has_chromium), not(has_valgrind)),
    ignore = "needs Chromium and Valgrind"
)]
#[expect(
    clippy::too_many_lines,
    reason = "one dashboard opened once and checked page by page: starting the browser dominates"
)]
fn the_dashboard_opens_offline_with_every_case_run_baseline_and_shift() {
    let _one = serial();
    let Some(browser) = chromium("the dashboard") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let shas = store_with_a_step(&repo);
    let site = tmp.path().join("site");
    let o = bin()
        .current_dir(&repo)
        .args(["site", "--out"])
        .arg(&site)
        .args(["--commit-url", "https://example.org/r/commit/{sha}"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The shifts the dashboard marks are the ones `history --changes` finds.
    let found = |metric: &str| -> usize {
        let o = bin()
            .current_dir(&repo)
            .args([
                "history",
                "--changes",
                "--format",
                "json",
                "--metric",
                metric,
            ])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c["shifts"].as_array().unwrap().len())
            .sum()
    };
    let (after, before, ratio) = (found("after"), found("before"), found("ratio"));
    let counted = found("counts-after");
    let runs = 2 * RUNS_PER_COMMIT;
    assert_eq!(
        counted, 1,
        "a fused variant four times as slow is one counted shift"
    );

    let index = open(&browser, &site.join("index.html"));
    assert_clean(&index, "index.html");
    assert_eq!(
        count(
            &index.dom,
            &format!("#totals[data-runs='{runs}'][data-cases='1']")
        ),
        1,
        "{runs} runs of one case"
    );
    let rows = texts(&index.dom, "table.cases tr.case td:first-child a");
    assert_eq!(rows, ["tiny-chain"]);
    assert_eq!(count(&index.dom, "table.cases svg.spark polyline"), 1);

    let case = std::fs::read_dir(site.join("cases"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("tiny-chain.html");
    let opened = open(&browser, &case);
    assert_clean(&opened, "the case page");
    let dom = &opened.dom;
    // Every run on each chart, linked to its page; both medians' CIs drawn.
    assert_eq!(count(dom, "#trend svg.trend .series-after a.pt-link"), runs);
    assert_eq!(
        count(dom, "#trend svg.trend .series-before a.pt-link"),
        runs
    );
    assert_eq!(count(dom, "svg.trend .series-ratio a.pt-link"), runs);
    assert_eq!(count(dom, "svg.trend line.ci.after"), runs);
    // The accepted run is ringed on both charts.
    assert_eq!(count(dom, "svg.trend circle.accepted:not(.sw)"), 2);
    assert_eq!(count(dom, "table.runs .badge.pass"), 1, "one accepted run");
    // Each shift marked once on its chart and listed once.
    let shifts = after + before + ratio + counted;
    assert_eq!(count(dom, "svg.trend g.shift-mark"), shifts);
    assert_eq!(count(dom, "table.shifts tr.shift-row"), shifts);
    assert_eq!(
        count(dom, "#counts svg.trend .series-after a.pt-link"),
        runs
    );
    // Commits link through the template.
    let links: Vec<String> = dom
        .select(&Selector::parse("table.runs a[href^='https://example.org/r/commit/']").unwrap())
        .filter_map(|a| a.value().attr("href").map(str::to_string))
        .collect();
    assert_eq!(links.len(), runs);
    // (The store keeps the commit as the run recorded it: a short SHA, which hosts resolve.)
    assert!(
        links.iter().all(|l| {
            let sha = l.rsplit('/').next().unwrap();
            sha.len() >= 7 && shas.iter().any(|s| s.starts_with(sha))
        }),
        "{links:?}"
    );
    // The run table sorts by its after column when its header is clicked.
    let probe = with_script(
        &case,
        "var t=document.querySelector('table.runs');t.tHead.rows[0].cells[7].querySelector('button').click();\
         document.body.setAttribute('data-order',Array.prototype.map.call(t.tBodies[0].rows,function(r){return r.cells[7].getAttribute('data-sort')}).join(','));",
    );
    let order: Vec<f64> = probed(&browser, &probe, "the sorted case page")
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");

    // A run's page: its report, linked back to the dashboard and to the case.
    let run_page = dom
        .select(&Selector::parse("table.runs a[href$='report.html']").unwrap())
        .next()
        .and_then(|a| a.value().attr("href"))
        .map(|h| case.parent().unwrap().join(h))
        .unwrap();
    let run = open(&browser, &run_page);
    assert_clean(&run, "a run's page");
    assert_eq!(count(&run.dom, "nav.top a[href='../../index.html']"), 1);
    assert_eq!(count(&run.dom, "section.spec[data-spec='tiny-chain']"), 1);
    assert_eq!(count(&run.dom, "a[href$='tiny-chain.html']"), 1);

    screenshot(&browser, &site.join("index.html"), "dashboard", (1280, 600));
    screenshot(&browser, &case, "dashboard-case", (1280, 1500));
    screenshot(&browser, &case, "dashboard-case-phone", (390, 1400));
}

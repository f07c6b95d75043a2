//! `opledger site`: the dashboard's files from a store of real runs (an index, a page per case,
//! a page per run whose archive is here), its bad input refused by name, a folder that is not
//! a site never replaced, a site made again replaced whole, and pages that stay inside it.
//! (The pages in a real browser: tests/browser.rs.)

use crate::common;
use common::{bin, fixture, quick_run, text};
use std::path::Path;

fn site(dir: &Path, args: &[&str]) -> std::process::Output {
    bin()
        .current_dir(dir)
        .arg("site")
        .args(args)
        .output()
        .unwrap()
}

/// Every file under `root`, relative, sorted.
fn files(root: &Path) -> Vec<String> {
    let mut out: Vec<String> = common::files_under(root)
        .iter()
        .map(|p| {
            p.strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_site_has_an_index_a_page_per_case_and_per_run_and_is_made_again_whole() {
    let dir = tempfile::tempdir().unwrap();
    let specs = [
        fixture("good/tiny-chain.yaml"),
        fixture("good/tiny-sweep.yaml"),
    ];
    for _ in 0..3 {
        let o = quick_run(dir.path(), &specs, &[]);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    }
    let o = site(dir.path(), &["--out", "site"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = dir.path().join("site");
    let all = files(&out);
    let pages: Vec<&String> = all.iter().filter(|f| f.ends_with(".html")).collect();
    // The index, three cases (the sweep's two points and the chain), three runs.
    assert_eq!(
        pages
            .iter()
            .filter(|f| f.starts_with("cases/") && f.ends_with(".html"))
            .count(),
        3,
        "{all:?}"
    );
    assert_eq!(
        pages.iter().filter(|f| f.ends_with("/report.html")).count(),
        3,
        "{all:?}"
    );
    assert!(all.contains(&"index.html".to_string()));
    assert!(all.contains(&"opledger-site.json".to_string()));
    // A run's page has the files its links name.
    let run = all
        .iter()
        .find(|f| f.starts_with("runs/") && f.ends_with("report.html"))
        .unwrap();
    let run_dir = out.join(run).parent().unwrap().to_path_buf();
    for f in [
        "results.json",
        "environment.json",
        "report.md",
        "roofline.svg",
    ] {
        assert!(run_dir.join(f).is_file(), "{f} beside {run}");
    }
    // Every page is self-contained: no stylesheet, script or image from anywhere.
    for p in &pages {
        let html = std::fs::read_to_string(out.join(p)).unwrap();
        assert!(html.contains("Content-Security-Policy"), "{p}");
        for bad in ["<link", "src=\"http", "src=\"//", "@import", "url(http"] {
            assert!(!html.contains(bad), "{p} holds {bad}");
        }
    }
    // Made again over itself: replaced whole, nothing stale left, nothing beside it.
    std::fs::write(out.join("stale.html"), "old").unwrap();
    let o = site(dir.path(), &["--out", "site", "tiny-chain"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let again = files(&out);
    assert!(!again.contains(&"stale.html".to_string()), "{again:?}");
    assert_eq!(
        again.iter().filter(|f| f.starts_with("cases/")).count(),
        1,
        "only the case asked for: {again:?}"
    );
    let beside: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(".opledger-site"))
        .collect();
    assert!(beside.is_empty(), "{beside:?}");
}

#[test]
fn a_run_whose_archive_is_gone_is_listed_without_a_page() {
    let dir = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        let o = quick_run(dir.path(), &[fixture("good/tiny-chain.yaml")], &[]);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    }
    let gone = common::only_run_dir(dir.path());
    std::fs::remove_dir_all(&gone).unwrap();
    let o = site(dir.path(), &["--out", "site"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = dir.path().join("site");
    let runs = files(&out)
        .iter()
        .filter(|f| f.ends_with("/report.html"))
        .count();
    assert_eq!(runs, 1, "one page: the other archive is gone");
    let case = files(&out)
        .into_iter()
        .find(|f| f.starts_with("cases/"))
        .unwrap();
    let html = std::fs::read_to_string(out.join(case)).unwrap();
    assert!(
        html.contains("(archive not here)"),
        "the run without a page says so"
    );
}

#[test]
fn bad_input_is_refused_by_name_and_a_folder_that_is_not_a_site_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    // No store yet.
    let o = site(dir.path(), &["--out", "site"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("no store at"), "{}", text(&o));
    let o = quick_run(dir.path(), &[fixture("good/tiny-chain.yaml")], &[]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    for bad in [
        "javascript:alert(1)//{sha}",
        "https://example.org/commit/",
        "https://example.org/\"onclick/{sha}",
    ] {
        let o = site(dir.path(), &["--out", "site", "--commit-url", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        assert!(text(&o).contains("--commit-url"), "{}", text(&o));
    }
    // A folder of someone's files: refused, untouched.
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(docs.join("notes.txt"), "mine").unwrap();
    let o = site(dir.path(), &["--out", "docs"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("is not a site opledger made"),
        "{}",
        text(&o)
    );
    assert_eq!(files(&docs), ["notes.txt"]);
    // A file where the folder would go.
    std::fs::write(dir.path().join("afile"), "x").unwrap();
    let o = site(dir.path(), &["--out", "afile"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("not a folder"), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("afile")).unwrap(),
        "x"
    );
}

/// The index leads with the main line: a case's latest verdict is its newest run on `main`,
/// whatever a feature branch ran since, and the branch is named.
#[test]
fn the_index_shows_mains_latest_run_and_names_its_branch() {
    let dir = tempfile::tempdir().unwrap();
    let spec = [fixture("good/tiny-chain.yaml")];
    for branch in ["main", "main", "feature"] {
        let o = quick_run(dir.path(), &spec, &["--branch", branch]);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    }
    let o = site(dir.path(), &["--out", "site"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let index = std::fs::read_to_string(dir.path().join("site/index.html")).unwrap();
    let row = index
        .lines()
        .find(|l| l.contains("data-spec=\"tiny-chain\""))
        .unwrap_or_else(|| panic!("{index}"));
    assert!(row.contains("· main</td>"), "{row}");
    assert!(!row.contains("feature"), "{row}");
}

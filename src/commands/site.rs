//! `opledger site --out DIR`: the history dashboard as a static site, made from the history
//! store: `index.html` (every case per device), `cases/<device>/<case>.html` (its trend) and
//! `runs/<run>/report.html` (each run's HTML report, drawn from its archive where the archive
//! is on this machine, with the files its links name). No server: it opens from `file://` and
//! any static host.
//!
//! The site is written into a fresh folder beside `DIR` and put in its place when whole, so a
//! failure leaves the old site as it was. `DIR` is replaced only when it is empty or a site this
//! command made (it holds [`MARKER`]); any other folder is refused, never overwritten.

use crate::error::{Error, ExitCode, Result};
use crate::report::{dashboard, html};
use crate::store::{Point, Query, Store, StoreUrl};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The file that marks a folder as a site `opledger site` made (what it was made from).
pub const MARKER: &str = "opledger-site.json";

/// The runs of each case a site shows unless `--last` says otherwise: a trend of a thousand
/// points still draws at once in a browser.
pub const DEFAULT_LAST: usize = 1000;

/// The files of an archive a run page links to, rendered beside it.
const RUN_FILES: [&str; 4] = [
    "results.json",
    "environment.json",
    crate::report::output::REPORT,
    "roofline.svg",
];

/// What `site` makes and from where.
pub struct Options {
    pub store: StoreUrl,
    pub query: Query,
    pub out: PathBuf,
    /// `https://…/commit/{sha}`.
    pub commit_url: Option<String>,
}

/// Checks a commit URL template: `http(s)://`, with `{sha}` where the commit goes.
pub fn check_commit_url(t: &str) -> Result<()> {
    let scheme_ok = t.starts_with("https://") || t.starts_with("http://");
    if !scheme_ok || !t.contains("{sha}") || t.chars().any(|c| c.is_whitespace() || c == '"') {
        return Err(Error::Flag(format!(
            "--commit-url {t:?}: expected an http:// or https:// address with {{sha}} where the commit goes, such as 'https://github.com/OWNER/REPO/commit/{{sha}}'"
        )));
    }
    Ok(())
}

/// Makes the site; prints where it is and what it holds.
pub fn site(o: &Options) -> Result<ExitCode> {
    if let Some(t) = &o.commit_url {
        check_commit_url(t)?;
    }
    o.store.require_existing("site")?;
    // `--out .` or `--out sub/..`: the folder's own name and its parent, so that the staging
    // folder is made beside it, never inside it.
    let out = crate::files::absolute(&o.out);
    check_out(&out)?;
    let started = std::time::Instant::now();
    let mut store = Store::open_reading(&o.store)?;
    let points = store.series(&o.query)?;
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| Error::write("creating", parent, e))?;
    let staging = tempfile::Builder::new()
        .prefix(".opledger-site-")
        .tempdir_in(parent)
        .map_err(|e| Error::write("creating", parent, e))?;
    let (run_pages, drawn) = run_pages(&store, &points, staging.path())?;
    let input = dashboard::Input {
        points: &points,
        run_pages: &run_pages,
        commit_url: o.commit_url.as_deref(),
        store: o.store.display(),
        generated_utc: crate::provenance::utc_now().0,
    };
    let pages = dashboard::pages(&input)?;
    for (rel, text) in &pages {
        write(staging.path(), rel, text.as_bytes())?;
    }
    // `cases/DEVICE/SPEC.html`; a case's pages of older runs lie a folder deeper.
    let cases = pages
        .iter()
        .filter(|(rel, _)| rel.starts_with("cases/") && rel.matches('/').count() == 2)
        .count();
    let marker = serde_json::json!({
        "generator": format!("opledger {}", env!("CARGO_PKG_VERSION")),
        "store": o.store.display(),
        "generated_utc": input.generated_utc,
        "cases": cases,
        "points": points.len(),
        "run_pages": drawn,
    });
    write(
        staging.path(),
        MARKER,
        &crate::report::output::json("the site's marker", &marker)?,
    )?;
    publish(staging, &out)?;
    eprintln!(
        "opledger: wrote {} ({} case pages, {} run pages, {} points) in {:.2} s; open {}",
        out.display(),
        cases,
        drawn,
        points.len(),
        started.elapsed().as_secs_f64(),
        out.join("index.html").display()
    );
    Ok(ExitCode::Pass)
}

/// `out` may be missing, an empty folder, or a site made before; nothing else.
fn check_out(out: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(out) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("reading", out, e)),
    };
    if !meta.is_dir() {
        return Err(Error::Flag(format!(
            "site --out {}: not a folder (a site is a folder of pages)",
            out.display()
        )));
    }
    let empty = std::fs::read_dir(out)
        .map_err(|e| Error::io("reading", out, e))?
        .next()
        .is_none();
    if !empty && !out.join(MARKER).is_file() {
        return Err(Error::Flag(format!(
            "site --out {}: the folder holds files and is not a site opledger made (no {MARKER}); refusing to replace it: name a new or empty folder",
            out.display()
        )));
    }
    Ok(())
}

/// Puts the finished site in the place of `out` (an old site is removed only once the new
/// one is in place).
fn publish(staging: tempfile::TempDir, out: &Path) -> Result<()> {
    let new = staging.keep();
    let old = if out.exists() {
        let aside = out.with_file_name(format!(
            ".opledger-site-old-{}-{}",
            std::process::id(),
            out.file_name()
                .map_or("site".into(), |n| n.to_string_lossy().to_string())
        ));
        if let Err(e) = std::fs::rename(out, &aside) {
            let _ = std::fs::remove_dir_all(&new);
            return Err(Error::write("moving aside", out, e));
        }
        Some(aside)
    } else {
        None
    };
    if let Err(e) = std::fs::rename(&new, out) {
        if let Some(a) = &old {
            let _ = std::fs::rename(a, out);
        }
        let _ = std::fs::remove_dir_all(&new);
        return Err(Error::write("moving into place", out, e));
    }
    if let Some(a) = old {
        let _ = std::fs::remove_dir_all(a);
    }
    Ok(())
}

fn write(root: &Path, rel: &str, bytes: &[u8]) -> Result<()> {
    let path = root.join(rel);
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).map_err(|e| Error::write("creating", p, e))?;
    }
    crate::files::write_atomic(&path, bytes)
}

/// Draws the page of every run whose archive is here; returns each point's page (relative to
/// the site) and how many pages were drawn. A missing or damaged archive gets no page and a
/// warning, never a failed site.
fn run_pages(store: &Store, points: &[Point], root: &Path) -> Result<(Vec<Option<String>>, usize)> {
    // One page per archive, named by its run id (made unique).
    let mut by_archive: BTreeMap<PathBuf, Option<String>> = BTreeMap::new();
    let mut taken: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut specs_of: BTreeMap<PathBuf, Vec<(String, String)>> = BTreeMap::new();
    for p in points {
        specs_of
            .entry(store.archive_dir(p))
            .or_default()
            .push((p.spec.to_string(), p.run.device_key.to_string()));
    }
    let mut drawn = 0;
    let mut out = Vec::with_capacity(points.len());
    for p in points {
        let dir = store.archive_dir(p);
        if let Some(page) = by_archive.get(&dir) {
            out.push(page.clone());
            continue;
        }
        let page = if dir.join("results.json").is_file() {
            let mut name = html::slug(&p.run.run_id);
            let mut k = 2;
            while taken.contains(&name) {
                name = format!("{}-{k}", html::slug(&p.run.run_id));
                k += 1;
            }
            match draw_run(&dir, root, &name, specs_of.get(&dir).map_or(&[][..], |v| v)) {
                Ok(()) => {
                    taken.insert(name.clone());
                    drawn += 1;
                    Some(format!("runs/{name}/{}", html::REPORT_HTML))
                }
                Err(e) => {
                    eprintln!("opledger: warning: run {} has no page: {e}", p.run.run_id);
                    None
                }
            }
        } else {
            None
        };
        by_archive.insert(dir, page.clone());
        out.push(page);
    }
    Ok((out, drawn))
}

/// One run's page: its HTML report drawn from its archive, linked back to the dashboard, and
/// the files the report links to. Every file published is one this command renders from the
/// archive's results — never a copy of the archive's bytes — so what the site serves is only
/// what opledger writes (an archive's own `roofline.svg` could carry a script; an unverified
/// archive's files could be anything). An archive without a manifest is drawn with the built-in
/// template and marked unverified on its page.
fn draw_run(dir: &Path, root: &Path, name: &str, cases: &[(String, String)]) -> Result<()> {
    let loaded = crate::archive::load(dir)?;
    let verified = loaded.verification.manifest.is_some();
    let place = html::Place {
        home: Some("../../index.html".into()),
        case_pages: cases
            .iter()
            .map(|(spec, device)| {
                (
                    spec.clone(),
                    format!("../../{}", dashboard::case_page(device, spec)),
                )
            })
            .collect(),
        unverified: !verified,
    };
    let page = html::report(&loaded.run, &place)?;
    let template = if verified {
        crate::archive::recorded_template(dir, &loaded.run)?
    } else {
        None
    };
    let files = crate::report::output::render_all(&crate::report::output::Rendering {
        run: &loaded.run,
        template: template.as_ref(),
    })?;
    let base = format!("runs/{name}");
    for (f, bytes) in files
        .iter()
        .filter(|(f, _)| RUN_FILES.contains(&f.as_str()))
    {
        write(root, &format!("{base}/{f}"), bytes)?;
    }
    write(
        root,
        &format!("{base}/{}", html::REPORT_HTML),
        page.as_bytes(),
    )
}

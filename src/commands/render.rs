//! `opledger report RUN_DIR`: an archive's report rendered again, nothing measured. With the
//! template the run recorded unless `--template` names another. Printed; or written to
//! `--out` with its charts beside it; or, when `--out` is the archive's own `report.md`, every
//! output of the archive written again (`archive::rerender`), the new template recorded; or,
//! when `--out` ends in `.html`, the HTML report alone.

use crate::error::{ExitCode, Result};
use crate::report::{self, output::REPORT};
use crate::{archive, files};
use std::path::Path;

/// Renders the report of the archive in `run_dir`.
pub fn report(run_dir: &Path, template: Option<&Path>, out: Option<&Path>) -> Result<ExitCode> {
    let loaded = archive::load(run_dir)?;
    let place = report::html::Place {
        unverified: loaded.verification.manifest.is_none(),
        ..Default::default()
    };
    let mut run = loaded.run;
    let template = match template {
        Some(p) => Some(report::load_template(p)?),
        None => archive::recorded_template(run_dir, &run)?,
    };
    let Some(o) = out else {
        print!("{}", report::render_with(&run, template.as_ref())?);
        return Ok(ExitCode::Pass);
    };
    crate::files::check_writable_file(o, "report (--out)")?;
    let dir = o
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let inside = loaded.verification.manifest.is_some()
        && files::overlaps(dir, run_dir)
        && files::absolute(dir).starts_with(files::absolute(run_dir));
    if inside && files::absolute(o) == files::absolute(&run_dir.join(REPORT)) {
        archive::rerender(
            run_dir,
            &loaded.verification,
            &mut run,
            template,
            "report",
            Vec::new(),
        )?;
        eprintln!(
            "opledger: wrote every output of {} again",
            run_dir.display()
        );
        return Ok(ExitCode::Pass);
    }
    // A report written into its own archive under another name: the manifest records the new
    // files and the manifest they replaced.
    let reseal = || -> Result<()> {
        if inside {
            archive::seal(
                run_dir,
                "report",
                vec![previous_manifest(run_dir, &loaded.verification, &run)],
            )?;
        }
        Ok(())
    };
    // `--out report.html` (or any `.html` file): the page, self-contained, nothing beside it.
    if o.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("html"))
    {
        let html = report::html::report(&run, &place)?;
        crate::files::write_atomic(o, html.as_bytes())?;
        reseal()?;
        eprintln!("opledger: wrote {}", o.display());
        return Ok(ExitCode::Pass);
    }
    let md = report::render_with(&run, template.as_ref())?;
    // The charts go beside the report, where its links point; say so.
    let charts = report::svg::files(&run)?;
    for (name, svg) in &charts {
        crate::files::write_atomic(&dir.join(name), svg.as_bytes())?;
    }
    crate::files::write_atomic(o, md.as_bytes())?;
    reseal()?;
    eprintln!(
        "opledger: wrote {} and, beside it, {}",
        o.display(),
        charts
            .iter()
            .map(|(n, _)| dir.join(n).display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(ExitCode::Pass)
}

/// The record of the manifest a report written into its own archive replaces.
fn previous_manifest(
    run_dir: &Path,
    verification: &archive::Verification,
    run: &crate::results::RunResult,
) -> archive::ReadRecord {
    archive::ReadRecord {
        what: "previous manifest".into(),
        path: run_dir.join(archive::MANIFEST).display().to_string(),
        sha256: verification.manifest_sha256.clone().unwrap_or_default(),
        run_id: Some(run.run_id.clone()),
    }
}

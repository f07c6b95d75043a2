//! `opledger ingest RUN_DIR…` (archives recorded into the history store, idempotent by run id and
//! manifest digest: the store can be rebuilt from the archives) and `opledger history` (each
//! case's series from the store).

use crate::error::{Error, ExitCode, Result};
use crate::store::{Query, Recorded, Store, StoreUrl};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// How `history` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
    Csv,
}

/// Records each archive (a run's folder; a merged folder's device archives) into the store.
pub fn ingest(dirs: &[PathBuf], url: &StoreUrl, branch: Option<&str>) -> Result<ExitCode> {
    if dirs.is_empty() {
        return Err(Error::Flag("ingest: no archive given".into()));
    }
    let mut store = Store::open(url)?;
    for d in dirs {
        for archive in archives_in(d)? {
            let loaded = crate::archive::load(&archive)?;
            // An archive written before manifests: its results file names it.
            let digest = match &loaded.verification.manifest_sha256 {
                Some(s) => s.clone(),
                None => crate::spec::sha256_hex(&crate::files::read_in(
                    &archive,
                    "results.json",
                    crate::files::MAX_RESULTS_BYTES,
                    "results",
                )?),
            };
            // An archive that cannot be checked never replaces a recorded run: with the same
            // run id it would take the place of the record its sealed archive made.
            if loaded.verification.manifest.is_none() {
                if let Some(stored) = store.recorded_manifest(&loaded.run)? {
                    if stored != digest {
                        return Err(Error::Refused {
                            path: archive.clone(),
                            message: format!(
                                "run {} is recorded in the store from another state of its archive, and this copy has no manifest to check it by: refusing to replace the record",
                                loaded.run.run_id
                            ),
                        });
                    }
                }
            }
            let what = store.record(&loaded.run, &archive, &digest, branch)?;
            println!(
                "{} {} ({}){}",
                match what {
                    Recorded::New => "recorded",
                    Recorded::Same => "already recorded",
                    Recorded::Replaced => "re-recorded",
                },
                loaded.run.run_id,
                archive.display(),
                if loaded.verification.manifest.is_none() {
                    " — unverified: no manifest"
                } else {
                    ""
                }
            );
        }
    }
    Ok(ExitCode::Pass)
}

/// The archives in `d`: itself when it holds `results.json`, else the device archives of a
/// merged folder (its subfolders that do).
fn archives_in(d: &Path) -> Result<Vec<PathBuf>> {
    if d.join("results.json").is_file() {
        return Ok(vec![d.to_path_buf()]);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(d)
        .map_err(|e| Error::io("listing", d, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() && p.join("results.json").is_file())
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(Error::NotAnArchive {
            command: "ingest",
            path: d.to_path_buf(),
        });
    }
    Ok(found)
}

/// Prints the series the query selects, or with `changes` the shifts of each case's series of
/// that metric.
pub fn history(
    url: &StoreUrl,
    q: &Query,
    format: Format,
    changes: Option<crate::store::series::Metric>,
) -> Result<ExitCode> {
    url.require_existing("history")?;
    let mut store = Store::open_reading(url)?;
    let points = store.series(q)?;
    if points.is_empty() {
        unknown_names(&mut store, q)?;
    }
    if let Some(metric) = changes {
        let found = crate::store::series::changes(&points, metric);
        match format {
            Format::Table => print!("{}", crate::report::history::changes_table(&found)),
            Format::Csv => print!("{}", crate::report::history::changes_csv(&found)),
            Format::Json => print_json("the changes", &found)?,
        }
        return Ok(ExitCode::Pass);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
    let written = match format {
        Format::Table => crate::report::history::write_table(&points, &mut out),
        Format::Csv => crate::report::history::write_points_csv(&points, &mut out),
        Format::Json => crate::report::history::write_points_json(&points, &mut out),
    };
    written
        .and_then(|()| out.flush())
        .map_err(|e| Error::write("writing the history to", "standard output", e))?;
    // Half a million points are freed by the process's exit, not one by one.
    std::mem::forget(points);
    Ok(ExitCode::Pass)
}

/// A query that selects nothing because it names what the store does not hold (a spec, branch or
/// device misspelled) is bad input: exit 2, with the closest known name and the others.
fn unknown_names(store: &mut Store, q: &Query) -> Result<()> {
    let [specs, branches, devices] = store.known_names()?;
    let asked = q
        .specs
        .iter()
        .map(|s| ("spec", s.as_str(), &specs))
        .chain(q.branch.as_deref().map(|b| ("--branch", b, &branches)))
        .chain(q.device.as_deref().map(|d| ("--device", d, &devices)));
    for (what, name, known) in asked {
        if known.iter().any(|k| k == name) {
            continue;
        }
        let closest = known
            .iter()
            .map(|k| (strsim::jaro_winkler(name, k), k))
            .filter(|(score, _)| *score > 0.8)
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, k)| k.clone());
        return Err(Error::NotInStore {
            what,
            name: name.to_string(),
            closest,
            known: known.clone(),
        });
    }
    Ok(())
}

/// `value` as JSON on standard output, one line break after it.
fn print_json(what: &'static str, value: &impl serde::Serialize) -> Result<()> {
    let bytes = crate::report::output::json(what, value)?;
    println!("{}", String::from_utf8_lossy(&bytes).trim_end());
    Ok(())
}

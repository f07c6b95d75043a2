//! `opledger merge RUN_DIR… --out DIR`: the archives of a sharded run (one per shard, written by
//! `run --shard`) merged into one sign-off: results, the spec files, every shard's environment
//! manifest, one report with its charts, JUnit XML and the short summary. Duplicated or
//! conflicting cases are refused; the cases of the suite that no shard ran are named (exit 1
//! unless `--allow-partial`). Shards measured on different devices are kept apart: one merged
//! archive per device, each gated on its own, and an index report above them.

use crate::error::{Error, ExitCode, Result};
use crate::results::{RunResult, RunVerdict, SpecResult};
use crate::{archive, files, report, spec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A shard as read: its folder and its results.
type Shard = (PathBuf, RunResult);

/// The cases of the suite (every spec file, sweeps expanded) that no shard ran.
fn missing_cases(
    spec_files: &BTreeMap<String, String>,
    ran: impl Fn(&str) -> bool,
) -> Result<Vec<String>> {
    let mut missing = Vec::new();
    for (name, text) in spec_files {
        let parsed = spec::parse(Path::new(name), text.as_bytes()).and_then(spec::expand)?;
        missing.extend(parsed.into_iter().map(|s| s.name).filter(|n| !ran(n)));
    }
    Ok(missing)
}

/// Merges the run folders `dirs` into `out`.
pub fn merge(
    dirs: &[PathBuf],
    out: &Path,
    allow_partial: bool,
    fail_on_inconclusive: bool,
) -> Result<ExitCode> {
    let (runs, read) = load_shards(dirs, out)?;
    let owner = one_run(&runs)?;
    let spec_files = suite_files(&runs)?;
    let missing = missing_cases(&spec_files, |n| owner.contains_key(n))?;

    files::check_writable_dir(out, "merge output (--out)")?;
    // Results grouped by device: the gate and the checklist hold per device.
    let mut by_device: BTreeMap<String, Vec<&Shard>> = BTreeMap::new();
    for r in &runs {
        by_device.entry(r.1.device.key.clone()).or_default().push(r);
    }
    let spec_list: Vec<(String, String)> = spec_files.into_iter().collect();
    let mut failed = false;
    let mut devices = Vec::new();
    let mut index = String::from("# opledger merged run\n\n| device | shards | specs | verdict | report |\n|---|--:|--:|---|---|\n");
    for (key, group) in &by_device {
        let dir = if by_device.len() == 1 {
            out.to_path_buf()
        } else {
            out.join(key)
        };
        let merged = write_device(&dir, group, &spec_list, &read)?;
        failed |= merged.verdict.exit_code(fail_on_inconclusive) != ExitCode::Pass;
        index.push_str(&format!(
            "| `{key}` | {} | {} | {} | [{}]({}) |\n",
            group.len(),
            merged.specs.len(),
            merged.verdict.status,
            crate::report::output::REPORT,
            if by_device.len() == 1 {
                crate::report::output::REPORT.to_string()
            } else {
                format!("{key}/report.md")
            }
        ));
        devices.push(crate::report::html::MergedDevice {
            key: key.clone(),
            shards: group.len(),
            specs: merged.specs.len(),
            verdict: merged.verdict.status.to_string(),
        });
        println!(
            "{}: {}, {}: {} pass, {} fail, {} inconclusive · {}",
            merged.verdict.status,
            report::format::counted(group.len() as u64, "shard", "shards"),
            report::format::counted(merged.specs.len() as u64, "spec", "specs"),
            merged.verdict.specs_passed,
            merged.verdict.specs_failed,
            merged.verdict.inconclusive,
            key
        );
        println!(
            "report: {}",
            dir.join(crate::report::output::REPORT).display()
        );
    }
    if by_device.len() > 1 {
        files::write_atomic(&out.join(crate::report::output::REPORT), index.as_bytes())?;
        // The worst device's verdict heads the index.
        let verdict = ["FAIL", "INCONCLUSIVE"]
            .into_iter()
            .find(|w| devices.iter().any(|d| d.verdict == *w))
            .unwrap_or("PASS");
        files::write_atomic(
            &out.join(crate::report::html::REPORT_HTML),
            crate::report::html::merged_index(&devices, verdict)?.as_bytes(),
        )?;
        // The index and every device's archive below it (each sealed on its own too).
        archive::seal(out, "merge", read)?;
        println!(
            "index: {}",
            out.join(crate::report::output::REPORT).display()
        );
    }
    if !missing.is_empty() {
        eprintln!(
            "opledger: {} case{} of the suite ran in no shard: {}",
            missing.len(),
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        );
        if !allow_partial {
            return Ok(ExitCode::GateFailed);
        }
    }
    Ok(if failed {
        ExitCode::GateFailed
    } else {
        ExitCode::Pass
    })
}

/// The shards, each loaded through the archive (verified, audited), with the record of what
/// was read; refused: no shard, one given twice, an output that is, contains or lies in one.
fn load_shards(dirs: &[PathBuf], out: &Path) -> Result<(Vec<Shard>, Vec<archive::ReadRecord>)> {
    if dirs.is_empty() {
        return Err(Error::Flag("merge: no run folder given".into()));
    }
    // The output never overwrites what is read: not an input, not inside one, not above one.
    for d in dirs {
        if files::overlaps(out, d) {
            let how = if same_dir(out, d) {
                "is"
            } else if files::absolute(out).starts_with(files::absolute(d)) {
                "lies inside"
            } else {
                "contains"
            };
            return Err(Error::Flag(format!(
                "merge: --out {} {how} the input {}: the merged archive would overwrite a shard; choose a folder outside every input",
                out.display(),
                d.display()
            )));
        }
    }
    let mut runs: Vec<(PathBuf, RunResult)> = Vec::new();
    let mut read: Vec<archive::ReadRecord> = Vec::new();
    // A runs folder holds its history store beside its archives (`history.sqlite` and SQLite's
    // side files): `runs/shard-*/*` names it too, and it is passed over, said, not refused.
    let dirs: Vec<&PathBuf> = dirs
        .iter()
        .filter(|d| {
            let store_file = d.is_file()
                && d.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    ["", "-wal", "-shm", "-journal"]
                        .iter()
                        .any(|side| n == format!("{}{side}", crate::store::DEFAULT_FILE))
                });
            if store_file {
                eprintln!(
                    "opledger: merge: {} passed over: a runs folder's history store, not a run archive",
                    d.display()
                );
            }
            !store_file
        })
        .collect();
    if dirs.is_empty() {
        return Err(Error::Flag(
            "merge: no run folder given (only history stores)".into(),
        ));
    }
    for d in dirs {
        if runs.iter().any(|(p, _)| same_dir(p, d)) {
            return Err(Error::Flag(format!(
                "merge: {} is given twice",
                d.display()
            )));
        }
        let loaded = archive::load(d)?;
        read.push(archive::read_record("shard", d, &loaded));
        runs.push((d.clone(), loaded.run));
    }
    Ok((runs, read))
}

/// The shards are one run: one commit, each case measured once. Returns each case's shard.
fn one_run(runs: &[Shard]) -> Result<BTreeMap<&str, &Path>> {
    // One commit: shards of different code are not one sign-off.
    let shas: Vec<&str> = runs.iter().map(|(_, r)| r.git_sha.as_str()).collect();
    if shas.iter().any(|s| *s != shas[0]) {
        return Err(Error::Mismatch(format!(
            "merge: the shards measured different commits ({}): merge the shards of one run",
            runs.iter()
                .map(|(p, r)| format!("{} in {}", r.git_sha, p.display()))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    // Each case once.
    let mut owner: BTreeMap<&str, &Path> = BTreeMap::new();
    for (p, r) in runs {
        for s in &r.specs {
            if let Some(first) = owner.insert(&s.name, p) {
                let other = runs
                    .iter()
                    .find(|(q, _)| q == first)
                    .and_then(|(_, r)| r.specs.iter().find(|x| x.name == s.name));
                let what = if other.is_some_and(|o| o == s) {
                    "twice with the same results (the same shard given twice?)"
                } else {
                    "twice with different results"
                };
                return Err(Error::Mismatch(format!(
                    "merge: case `{}` was measured {what}: in {} and {}",
                    s.name,
                    first.display(),
                    p.display()
                )));
            }
        }
    }
    Ok(owner)
}

/// The suite: every spec file of every shard (each shard archives the whole suite), the same
/// in each.
fn suite_files(runs: &[Shard]) -> Result<BTreeMap<String, String>> {
    // The suite: every spec file of every shard (each shard archives the whole suite).
    let mut spec_files: BTreeMap<String, String> = BTreeMap::new();
    for (p, _) in runs {
        let dir = p.join("specs");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = files::read_in(
                p,
                &format!("specs/{name}"),
                files::MAX_SPEC_BYTES,
                "archived spec",
            )?;
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if let Some(old) = spec_files.get(&name) {
                if *old != text {
                    return Err(Error::Mismatch(format!(
                        "merge: the shards hold different versions of spec file {name} ({})",
                        path.display()
                    )));
                }
            }
            spec_files.insert(name, text);
        }
    }
    Ok(spec_files)
}

/// The merged archive of one device's shards in `dir`: their results as one run, each shard's
/// environment manifest and source beside it, sealed with what was read.
fn write_device(
    dir: &Path,
    group: &[&Shard],
    spec_list: &[(String, String)],
    read: &[archive::ReadRecord],
) -> Result<RunResult> {
    std::fs::create_dir_all(dir).map_err(|e| Error::write("creating", dir, e))?;
    let mut merged = merged_run(group, dir);
    // Each shard's environment manifest and where it came from, beside the merged outputs.
    let mut extra = Vec::new();
    for (n, (p, r)) in group.iter().enumerate() {
        let shard = format!("shards/{}", n + 1);
        extra.push((
            format!("{shard}/environment.json"),
            report::output::json("a shard's environment manifest", &r.environment)?,
        ));
        extra.push((
            format!("{shard}/source.txt"),
            format!("{}\nrun {}\n", p.display(), r.run_id).into_bytes(),
        ));
    }
    // The template the shards were rendered with (they ran one command line).
    let template = archive::recorded_template(&group[0].0, &group[0].1)?;
    let shards_read: Vec<archive::ReadRecord> = read
        .iter()
        .filter(|r| group.iter().any(|(p, _)| r.path == p.display().to_string()))
        .cloned()
        .collect();
    let contents = archive::Contents {
        spec_files: spec_list,
        template: template.as_ref(),
        extra,
    };
    archive::save(dir, &mut merged, contents, "merge", shards_read)?;
    Ok(merged)
}

/// Whether two paths name one folder.
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// One run of the shards of one device.
fn merged_run(group: &[&Shard], dir: &Path) -> RunResult {
    let first = &group[0].1;
    let mut specs: Vec<SpecResult> = group
        .iter()
        .flat_map(|(_, r)| r.specs.iter().cloned())
        .collect();
    specs.sort_by(|a, b| a.name.cmp(&b.name));
    let mut run = first.clone();
    // The merged archive is a run of its own.
    run.run_uid = crate::provenance::new_uid();
    run.run_id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    run.started_utc = group
        .iter()
        .map(|(_, r)| r.started_utc.clone())
        .min()
        .unwrap_or_default();
    run.git_dirty = group.iter().any(|(_, r)| r.git_dirty);
    run.wall_secs = group.iter().map(|(_, r)| r.wall_secs).fold(0.0, f64::max);
    run.backend_note = format!(
        "merged from {} shard{}: {}",
        group.len(),
        if group.len() == 1 { "" } else { "s" },
        group
            .iter()
            .map(|(_, r)| r.run_id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    run.checklist = crate::results::derive::checklist(&specs);
    run.sweeps = crate::results::derive::sweeps(&specs);
    run.verdict = RunVerdict::of(&specs);
    run.specs = specs;
    run
}

/// `opledger merge`: the merged archive, then (unless `--no-store`) its device archives
/// recorded into the history store: the merge is the sign-off, its shards were not recorded.
pub fn merge_and_record(
    run_dirs: &[PathBuf],
    out: &Path,
    allow_partial: bool,
    fail_on_inconclusive: bool,
    store: Option<(&crate::store::StoreUrl, Option<&str>)>,
) -> Result<ExitCode> {
    let code = merge(run_dirs, out, allow_partial, fail_on_inconclusive)?;
    if let Some((url, branch)) = store {
        super::history::ingest(&[out.to_path_buf()], url, branch)?;
    }
    Ok(code)
}

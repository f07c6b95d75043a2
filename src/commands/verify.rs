//! `opledger verify RUN_DIR`: an archive against its manifest, then its names and verdict.

use crate::error::{Error, ExitCode, Result};
use std::path::Path;

/// `opledger verify RUN_DIR`: every file against the manifest, then the names and the verdict.
pub fn verify(dir: &Path) -> Result<ExitCode> {
    let manifest = dir.join(crate::archive::MANIFEST);
    let v = match crate::archive::verify(dir) {
        Ok(v) => v,
        // A manifest that is there but damaged is a failed verification (exit 1), not bad
        // input: the archive was given correctly, and it does not hold up.
        Err(e) if matches!(&e, Error::Corrupt { path, .. } | Error::Refused { path, .. } if *path == manifest) =>
        {
            println!("{e}");
            println!("{}: NOT INTACT: its manifest is damaged", dir.display());
            return Ok(ExitCode::GateFailed);
        }
        Err(e) => return Err(e),
    };
    let Some(m) = &v.manifest else {
        println!(
            "{}: no {} — its files cannot be checked (written before opledger sealed its archives, or the manifest was removed)",
            dir.display(),
            crate::archive::MANIFEST
        );
        return Ok(ExitCode::GateFailed);
    };
    for (file, why) in &v.mismatches {
        println!("{}: {}", dir.join(file).display(), why.words());
    }
    if !v.mismatches.is_empty() {
        println!(
            "{}: NOT INTACT: {} of the files differ from the manifest written by `opledger {}`",
            dir.display(),
            v.mismatches.len(),
            m.written_by
        );
        return Ok(ExitCode::GateFailed);
    }
    // The digests match: what they cover must also be a sound archive.
    let results = dir.join("results.json");
    if results.exists() {
        let checked = crate::results::load(dir).and_then(|run| {
            crate::archive::check_names(&run, &results)?;
            crate::archive::audit(&run, &results)
        });
        if let Err(e) = checked {
            println!("{e}");
            println!(
                "{}: NOT INTACT: its digests match, but its results are not sound",
                dir.display()
            );
            return Ok(ExitCode::GateFailed);
        }
    }
    println!(
        "{}: intact: {} files match the manifest written by `opledger {}` (opledger {}); manifest SHA-256 {}",
        dir.display(),
        m.files.len(),
        m.written_by,
        m.opledger_version,
        v.manifest_sha256.as_deref().unwrap_or("")
    );
    for r in &m.read {
        println!(
            "  made from {} {} (SHA-256 {}{})",
            r.what,
            r.path,
            r.sha256,
            r.run_id
                .as_ref()
                .map_or(String::new(), |id| format!(", run {id}"))
        );
    }
    Ok(ExitCode::Pass)
}

//! `opledger check`: spec files validated (every error, not the first), what each backend
//! refuses, and the claims the ledger alone decides.

use crate::device::DeviceKind;
use crate::error::{Error, ExitCode, Result};
use crate::report::format::counted;
use crate::spec;
use std::path::PathBuf;

/// Where a backend's refusal of a spec points: the workload when its kernels cannot run it,
/// else the `cuda:` side that only the CUDA backend runs.
fn refused_at(s: &spec::Spec, b: DeviceKind) -> Option<crate::error::Position> {
    use crate::spec::Implementation;
    let workload_refused = s.implementations.uses_builtin_kernels()
        && crate::backend::cannot_run(b, &s.workload).is_some();
    let cuda_side = [
        ("before", &s.implementations.before),
        ("after", &s.implementations.after),
    ]
    .into_iter()
    .find(|(_, i)| matches!(i, Some(Implementation::Cuda(_))))
    .map(|(side, _)| side);
    match cuda_side {
        Some(side) if !workload_refused => {
            spec::find_key(&s.source_text, &["variants", side, "cuda"])
        }
        _ => spec::find_key(&s.source_text, &["workload"]),
    }
}

/// `opledger check`: every spec file validated (all errors reported, not the first only), and
/// the claims the ledger alone decides (`io_saving`) judged, as `run` would judge them.
pub fn check(paths: &[PathBuf], backend: Option<DeviceKind>) -> Result<ExitCode> {
    let (specs, mut errors) = spec::load_all_collect(paths);
    let mut refuted = 0;
    // Capabilities: a backend that has no kernels for a spec refuses it before anything runs.
    let mut runnable = Vec::new();
    for s in specs {
        let cannot: Vec<(DeviceKind, String)> = DeviceKind::ALL
            .into_iter()
            .filter_map(|b| {
                crate::backend::cannot_run_sides(b, &s.workload, &s.implementations)
                    .map(|why| (b, why))
            })
            .collect();
        match cannot.iter().find(|(b, _)| Some(*b) == backend) {
            Some((b, why)) => errors.push(Error::Spec {
                path: s.file.clone(),
                pos: refused_at(&s, *b),
                message: format!(
                    "{}: the {} backend cannot run this workload: {why}",
                    s.name,
                    b.name()
                ),
            }),
            None => runnable.push((s, cannot)),
        }
    }
    let valid = runnable.len();
    for (s, cannot) in &runnable {
        let only = if cannot.is_empty() {
            String::new()
        } else {
            let runs: Vec<&str> = DeviceKind::ALL
                .into_iter()
                .filter(|b| cannot.iter().all(|(c, _)| c != b))
                .map(DeviceKind::name)
                .collect();
            format!("  [{} only]", runs.join(", "))
        };
        // The IO saving depends on how a backend tiles (flash attention's K/V re-reads): a
        // claim is refuted only when no backend's kernels could meet it.
        let judged: Vec<_> = DeviceKind::ALL
            .into_iter()
            .map(|k| {
                let t = k.tiling();
                let l = s.workload.ledger(s.variants.before, s.variants.after, &t);
                crate::verdict::io_saving_check(l.io_saving(), s.expect.io_saving.as_ref())
            })
            .collect();
        let io = &judged[0];
        if judged
            .iter()
            .all(|c| c.status == crate::verdict::Status::Fail)
        {
            refuted += 1;
            println!(
                "FAIL {:<24} io_saving: {} ({})",
                s.name,
                io.detail,
                s.file.display()
            );
        } else {
            println!(
                "ok   {:<24} {}{only}  ({})",
                s.name,
                s.workload.describe(),
                s.file.display()
            );
        }
    }
    for e in &errors {
        eprintln!("error: {e}");
    }
    println!(
        "{} valid, {} with a claim the ledger refutes, {}",
        counted((valid - refuted) as u64, "spec", "specs"),
        refuted,
        counted(errors.len() as u64, "error", "errors")
    );
    Ok(if !errors.is_empty() {
        ExitCode::BadInput
    } else if refuted > 0 {
        ExitCode::GateFailed
    } else {
        ExitCode::Pass
    })
}

//! Launching the profiler: the `ncu` command line, the marked profiling pass it runs, and
//! `run --ncu`, which measures, profiles and imports in one go.

use super::{import, ncu_args, which};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The marked pass that `ncu` profiles: for each spec of the run, in the run's order, a marker
/// then one execution of `before`, a marker then one of `after`, on the CUDA backend, with the
/// run's seed (`opledger profile-pass`, started by `run --ncu` under `ncu`).
pub fn profile_pass(run_dir: &Path, paths: &[PathBuf], seed: u64) -> Result<()> {
    use crate::backend::pair::{prepare_spec, Side};
    // ncu is writing its export into the run folder while this pass runs.
    let run = crate::archive::load_allowing(run_dir, Some(&export_path(run_dir)))?.run;
    let specs = crate::spec::load_all(paths)?;
    let (backend, _) = crate::backend::select(
        crate::backend::BackendChoice::Kind(crate::device::DeviceKind::Cuda),
        None,
        &crate::settings::Settings::default(),
    )?;
    for (case, r) in run.specs.iter().enumerate() {
        let s = specs.iter().find(|s| s.name == r.name).ok_or_else(|| {
            Error::Mismatch(format!(
                "{}: spec {} of the run is not among the specs given",
                run_dir.display(),
                r.name
            ))
        })?;
        let mut pair = prepare_spec(
            backend.as_ref(),
            s,
            seed,
            backend.flush_bytes().max(64 << 20),
        )?;
        let seq = 2 * case as u32;
        backend.mark(seq)?;
        pair.run_timed(Side::Before)?;
        backend.mark(seq + 1)?;
        pair.run_timed(Side::After)?;
    }
    Ok(())
}

/// `opledger run --ncu`: the run as usual (its timings unprofiled), then the marked pass under
/// `ncu` into `RUN_DIR/ncu.csv`, then the counters attached as `opledger counters` does.
/// Returns the run's exit code, or 1 when the counters disagree with a ledger.
pub fn run_with_ncu(opts: &crate::pipeline::RunOptions) -> Result<crate::error::ExitCode> {
    use crate::error::ExitCode;
    let ncu = which("ncu").ok_or_else(|| {
        Error::BackendUnavailable(
            "run --ncu: `ncu` (Nsight Compute) is not on PATH; install it with the CUDA toolkit, or profile the marked pass yourself and use `opledger counters`".into(),
        )
    })?;
    let (verdict, run_dir) = crate::pipeline::run(opts)?;
    let code = verdict.exit_code(opts.fail_on_inconclusive);
    let run = crate::archive::load(&run_dir)?.run;
    if !run.device.kind.has_hardware_counters() {
        return Err(Error::BackendUnavailable(format!(
            "run --ncu profiles GPU kernels, but this run used the {} backend: run with --backend cuda on a machine with a GPU",
            run.backend
        )));
    }
    let csv = export_path(&run_dir);
    let exe =
        std::env::current_exe().map_err(|e| Error::io("finding", "the opledger executable", e))?;
    let mut cmd = std::process::Command::new(&ncu);
    cmd.args(ncu_args(&csv))
        .arg(&exe)
        .arg("profile-pass")
        .arg(&run_dir)
        .args(&opts.paths)
        .args(["--seed", &opts.measure.seed.to_string()]);
    eprintln!("opledger: profiling the marked pass: {cmd:?}");
    let status = cmd.status().map_err(|e| Error::io("starting", &ncu, e))?;
    if !status.success() {
        return Err(Error::BackendUnavailable(format!(
            "run --ncu: `ncu` exited with {status} (its log: {}); the run itself is archived in {}",
            csv.display(),
            run_dir.display()
        )));
    }
    let findings = import(&run_dir, &csv)?;
    Ok(if findings > 0 {
        ExitCode::GateFailed
    } else {
        code
    })
}

/// Where `run --ncu` keeps the export inside the run folder.
pub fn export_path(run_dir: &Path) -> PathBuf {
    run_dir.join("ncu.csv")
}

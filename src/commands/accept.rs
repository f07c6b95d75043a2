//! `opledger accept RUN_DIR`: records the baselines of an archived run (a single run's folder or a
//! merged one), so that a signed-off archive becomes the baseline without measuring again. Only
//! specs that passed are recorded, each under the device that measured it, as `run --accept`
//! would have done. The archive is verified first (`archive::load`): its manifest, its names and
//! its verdict re-derived from its checks, so an edited `status` is refused, never accepted.

use crate::baseline::{self, StoreLock};
use crate::error::{ExitCode, Result};
use crate::results::RunResult;
use crate::verdict::Status;
use std::path::Path;

/// Records the passing specs of the run in `run_dir` into the store at `baselines_dir`.
pub fn accept(run_dir: &Path, baselines_dir: &Path) -> Result<ExitCode> {
    let run: RunResult = crate::archive::load(run_dir)?.run;
    crate::files::check_writable_dir(baselines_dir, "baselines store (--baselines)")?;
    let _lock = StoreLock::acquire(baselines_dir)?;
    baseline::remove_stale_temp_files(&baselines_dir.join(&run.device.key));
    let (mut recorded, mut skipped) = (0, 0);
    for s in &run.specs {
        let path = baseline::path_for(baselines_dir, &run.device.key, &s.name);
        if s.status != Status::Pass {
            println!("not accepted {}: the spec did not pass in that run", s.name);
            skipped += 1;
            continue;
        }
        let old = baseline::find(baselines_dir, &run.device, &s.name)?.baseline;
        let Some(new) = crate::gate::accept::baseline_of_run(s, &run, old.as_ref()) else {
            println!("not accepted {}: it holds no samples", s.name);
            skipped += 1;
            continue;
        };
        baseline::store(&path, &new)?;
        println!(
            "{}",
            crate::report::text::baseline_diff(&path, old.as_ref(), &new).trim_end()
        );
        recorded += 1;
    }
    println!(
        "accepted {recorded} baseline{} for device {} from run {} ({skipped} not accepted)",
        if recorded == 1 { "" } else { "s" },
        run.device.key,
        run.run_id
    );
    Ok(ExitCode::Pass)
}

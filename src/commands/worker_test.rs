//! `opledger worker-test SPEC [-- CMD…]`: the conformance check of the spec's workers (or of
//! `CMD`, standing in for the command of every worker side), without a run: each step of the
//! protocol against its rule (`backend::conformance`), listed with what it found; exit 0 when
//! every step kept the protocol, 1 when one broke it, 2 when the spec has no worker.

use crate::error::{Error, ExitCode, Result, WorkerTestProblem};
use crate::spec::{Implementation, WorkerCommand};
use std::path::Path;

pub fn worker_test(spec: &Path, command: &[String], timeout_secs: Option<f64>) -> Result<ExitCode> {
    let specs = crate::spec::load_all(&[spec.to_path_buf()])?;
    let Some(s) = specs.first() else {
        return Err(Error::WorkerTest {
            spec: spec.to_path_buf(),
            problem: WorkerTestProblem::NoSpec,
        });
    };
    // Each distinct command with the functions (and the variants they implement) it serves.
    let mut workers: Vec<(WorkerCommand, Vec<(String, String)>)> = Vec::new();
    for (implementation, variant) in [
        (&s.implementations.before, s.variants.before),
        (&s.implementations.after, s.variants.after),
    ] {
        let Some(Implementation::Worker(cmd)) = implementation else {
            continue;
        };
        let mut cmd = cmd.clone();
        if !command.is_empty() {
            cmd.command = command.to_vec();
        }
        if let Some(t) = timeout_secs {
            cmd.timeout_secs = t;
        }
        let function = (cmd.function.clone(), variant.name().to_string());
        match workers.iter_mut().find(|(c, _)| c.command == cmd.command) {
            // A function is tested once, whichever variants it implements.
            Some((_, fs)) if !fs.iter().any(|(f, _)| *f == function.0) => fs.push(function),
            Some(_) => {}
            None => workers.push((cmd, vec![function])),
        }
    }
    if workers.is_empty() {
        return Err(Error::WorkerTest {
            spec: spec.to_path_buf(),
            problem: WorkerTestProblem::NoWorker(s.name.clone()),
        });
    }
    // With Valgrind installed, each function is counted as `run --measure counts` counts it:
    // the kit's markers are part of what a worker must get right.
    let counter = match crate::measure::callgrind::found() {
        Ok(_) => Some(crate::measure::counts::valgrind::Counter::new(
            Default::default(),
            crate::measure::MeasureConfig::default().seed,
            &crate::settings::Settings::from_env()?,
        )?),
        Err(why) => {
            println!("counted runs: not checked: {why}");
            None
        }
    };
    let mut failed = false;
    for (cmd, functions) in &workers {
        let mut found = crate::backend::conformance::check(cmd, s.dir(), &s.workload, functions);
        if let Some(counter) = &counter {
            if found.iter().all(|f| f.ok) {
                for (function, variant) in functions {
                    let mut one = cmd.clone();
                    one.function = function.clone();
                    found.push(counted_run(counter, s, &one, variant));
                }
            }
        }
        failed |= found.iter().any(|f| !f.ok);
        print!(
            "{}",
            crate::report::conformance::table(&cmd.command.join(" "), &found)
        );
    }
    Ok(if failed {
        ExitCode::GateFailed
    } else {
        ExitCode::Pass
    })
}

/// A counted run of one function (the step `worker-test` adds where Valgrind is installed): its
/// call marked (the counts written), and a second call on the same inputs doing the work again.
fn counted_run(
    counter: &crate::measure::counts::valgrind::Counter,
    s: &crate::spec::Spec,
    cmd: &WorkerCommand,
    variant: &str,
) -> crate::backend::conformance::Finding {
    use crate::backend::conformance::{Finding, Rule};
    let finding = |ok: bool, detail: String| Finding {
        rule: Rule::Counted,
        step: format!("counted run {} (Valgrind)", cmd.function),
        ok,
        detail,
    };
    let Ok(variant) = serde_json::from_value::<crate::kinds::Variant>(variant.into()) else {
        return finding(false, format!("no variant `{variant}`"));
    };
    let s = match s.counted() {
        Ok(s) => s,
        Err(e) => return finding(false, e.to_string()),
    };
    match counter.count_worker(&s, variant, cmd) {
        Ok(Ok((counts, _, _, repeat))) => {
            let again = repeat.unwrap_or(0);
            let kept = crate::measure::kept_result_counted(counts.instructions, again);
            finding(
                !kept,
                format!(
                    "{} instructions counted in the call, {again} in a second call on the same inputs{}; DRAM read {:.2} MiB, write {:.2} MiB",
                    counts.instructions,
                    if kept { " (a result kept across calls)" } else { "" },
                    counts.dram_read_bytes as f64 / (1u64 << 20) as f64,
                    counts.dram_write_bytes as f64 / (1u64 << 20) as f64,
                ),
            )
        }
        // Counted runs are for counts mode only: a worker without them keeps the protocol,
        // and is told what counts mode will say of it.
        Ok(Err(
            crate::measure::counts::valgrind::NotCounted::OnGpu(why)
            | crate::measure::counts::valgrind::NotCounted::Unmarked(why),
        )) => finding(true, format!("not counted: {why}")),
        Err(e) => finding(false, e.to_string()),
    }
}

//! A GPU's counts: what the CUDA backend's kernels execute and move, read from the hardware's
//! counters by Nsight Compute rather than simulated. Each spec's sides run once each in a
//! process of their own under `ncu` (`opledger profile-counts`, started by a counting run and
//! by nothing else): both sides called once unmarked (module loads, first touches), the inputs
//! of the checked seed set, then a marker kernel before each side's one counted call. `ncu`
//! flushes the caches before every launch (`--cache-control all`), so each launch starts cold,
//! as the ledger assumes. The launches between a side's marker and the next add up to its
//! counts: warp instructions executed, DRAM bytes read and written, and the cycles measured.
//!
//! What differs from the simulator's counts: DRAM writes read low (dirty lines still in the L2
//! when a launch ends are written back by the next flush, outside every launch), so a side is
//! judged against its ledger on its reads, and its written bytes bound nothing; cycles are
//! measured and move with the clocks, so the counts gate compares DRAM bytes by default; a
//! warp instruction may be a matrix instruction of thousands of FLOPs, so the instructions
//! bound no FLOPs. A worker's kernels run in its own process, which the pass does not mark:
//! they are not counted.

use super::valgrind::Counter;
use super::Counted;
use super::{
    compulsory_bytes, CacheModel, Counts, CountsEngine, FunctionCounts, GpuCounting,
    LedgerAgreement, SideCounts,
};
use crate::backend::pair::{self, Side};
use crate::backend::{self, BackendChoice};
use crate::device::{DeviceInfo, DeviceKind};
use crate::error::{CountSideProblem, Error, ExitCode, Result};
use crate::ledger::VariantLedger;
use crate::ncu::{self, Tally};
use crate::spec::{Implementation, Spec};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::OUTPUT_FILES;

/// How many of a side's kernels its counts keep (those that executed most).
const TOP_KERNELS: usize = 10;

impl Counter {
    /// Counts the CUDA backend's kernels on `device` with Nsight Compute at `ncu_path`.
    pub fn for_gpu(ncu_path: PathBuf, device: &DeviceInfo, seed: u64) -> Result<Counter> {
        let profiler = profiler_version(&ncu_path)?;
        let model = CacheModel::of_gpu(device.llc_bytes);
        Counter::ready(
            &crate::settings::Settings::default(),
            Some(ncu_path),
            |binary_sha256| CountsEngine {
                valgrind: String::new(),
                cache_model: model,
                simd: String::new(),
                threads: 1,
                seed,
                arch: "cuda".into(),
                compiler: crate::backend::cuda::nvrtc::version().unwrap_or_default(),
                libc: String::new(),
                binary_sha256,
                gpu: Some(GpuCounting {
                    profiler,
                    device_key: device.key.clone(),
                    device: device.name.clone(),
                    driver: device.driver.clone(),
                }),
            },
        )
    }

    /// Both sides of `s` profiled under `ncu` in one process, each set against its ledger.
    pub(super) fn profile_spec(&self, ncu_path: &Path, s: &Spec) -> Result<Counted> {
        let ledger = s.workload.ledger(
            s.variants.before,
            s.variants.after,
            &super::ledger_tiling(&self.engine),
        );
        let not_counted = |side: Side| -> Option<String> {
            let implementation = match side {
                Side::Before => &s.implementations.before,
                Side::After => &s.implementations.after,
            };
            match implementation {
                Some(Implementation::Worker(_)) => Some(
                    "a worker's kernels run in its own process, which the profiled pass does not mark: not counted (the CUDA backend's kernels and `cuda:` sides are)".into(),
                ),
                Some(Implementation::Cuda(_)) => None,
                None => crate::backend::cannot_run(DeviceKind::Cuda, &s.workload),
            }
        };
        let skipped = [not_counted(Side::Before), not_counted(Side::After)];
        let tallies = if skipped.iter().all(Option::is_some) {
            [Tally::default(), Tally::default()]
        } else {
            self.profile(ncu_path, s)?
        };
        let model = &self.engine.cache_model;
        let output_name = s.workload.as_kind().output_name();
        let mut outputs: [Option<Vec<f32>>; 2] = [None, None];
        let mut side_of = |side: Side, ledger| -> Result<SideCounts> {
            let k = side as usize;
            if let Some(reason) = &skipped[k] {
                return Ok(SideCounts::NotAvailable {
                    reason: reason.clone(),
                });
            }
            let counted = side_counts(&tallies[k], ledger, &output_name, model);
            if counted.counts().is_some() {
                outputs[k] = Some(self.read_output(s, k)?);
            }
            Ok(counted)
        };
        let before = side_of(Side::Before, &ledger.before)?;
        let after = side_of(Side::After, &ledger.after)?;
        Ok(self.assemble(s, before, after, outputs))
    }

    /// Runs `opledger profile-counts` for `s` under `ncu` and splits its export at the markers.
    fn profile(&self, ncu_path: &Path, s: &Spec) -> Result<[Tally; 2]> {
        let work = self.work.path();
        let csv = work.join("ncu.csv");
        for f in [
            csv.clone(),
            work.join(OUTPUT_FILES[0]),
            work.join(OUTPUT_FILES[1]),
        ] {
            let _ = std::fs::remove_file(f);
        }
        // The spec file where it lies: a `cuda:` side's kernel source is found beside it.
        let file = std::path::absolute(&s.file).map_err(|e| Error::io("finding", &s.file, e))?;
        let mut cmd = std::process::Command::new(ncu_path);
        cmd.args(ncu::ncu_args(&csv))
            .arg(&self.exe)
            .arg("profile-counts")
            .arg(&file)
            .arg(&s.name)
            .arg(self.engine.seed.to_string())
            .current_dir(work);
        let done = cmd
            .output()
            .map_err(|e| Error::BackendUnavailable(format!("`ncu` cannot be run: {e}")))?;
        if !done.status.success() {
            let stderr = String::from_utf8_lossy(&done.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(12).collect();
            return Err(Error::Backend(crate::error::BackendError::Kernel(format!(
                "{}: the pass under Nsight Compute exited with {}: {}",
                s.name,
                done.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ))));
        }
        let mut segmenter = ncu::Segmenter::new(1, &csv);
        ncu::read_stream(&csv, &mut |l, line| segmenter.push(&l, line))?;
        let [t] = <[[Tally; 2]; 1]>::try_from(segmenter.finish()?)
            .map_err(|_| Error::Mismatch(format!("{}: one case's launches", csv.display())))?;
        Ok(t)
    }

    /// The output side `k`'s counted call left.
    fn read_output(&self, s: &Spec, k: usize) -> Result<Vec<f32>> {
        super::valgrind::read_output(&self.work.path().join(OUTPUT_FILES[k]), s)
    }
}

/// A side's counts from its launches: not available (with why) where a launch lacks a metric
/// the counts need, or the side launched nothing.
pub(super) fn side_counts(
    t: &Tally,
    ledger: &VariantLedger,
    output: &str,
    model: &CacheModel,
) -> SideCounts {
    if t.launches == 0 {
        return SideCounts::NotAvailable {
            reason: "Nsight Compute saw no kernel launch between this side's marker and the next"
                .into(),
        };
    }
    let whole = |m: &str| t.sum(m).map(|v| v.round() as u64);
    let (Some(read), Some(write), Some(instructions)) = (
        whole(ncu::DRAM_READ),
        whole(ncu::DRAM_WRITE),
        whole(ncu::INSTRUCTIONS),
    ) else {
        let missing: Vec<&str> = [ncu::DRAM_READ, ncu::DRAM_WRITE, ncu::INSTRUCTIONS]
            .into_iter()
            .filter(|m| t.sum(m).is_none())
            .collect();
        return SideCounts::NotAvailable {
            reason: format!(
                "Nsight Compute gave no {} for a launch of this side (n/a or absent)",
                missing.join(", ")
            ),
        };
    };
    let counts = Counts {
        instructions,
        dram_read_bytes: read,
        dram_write_bytes: write,
        estimated_cycles: whole(ncu::CYCLES).unwrap_or(0),
        ..Counts::default()
    };
    let mut functions: Vec<FunctionCounts> = t
        .kernels
        .iter()
        .zip(&t.kernel_work)
        .map(|((name, _), [instructions, dram_bytes])| FunctionCounts {
            function: name.clone(),
            instructions: instructions.round() as u64,
            ll_misses: (dram_bytes / model.ll.line_bytes.max(1) as f64).round() as u64,
        })
        .collect();
    functions.sort_by(|a, b| {
        b.instructions
            .cmp(&a.instructions)
            .then(a.function.cmp(&b.function))
    });
    functions.truncate(TOP_KERNELS);
    SideCounts::Counted {
        counts,
        ledger_read_bytes: ledger.movements.iter().map(|m| m.bytes * m.reads).sum(),
        ledger_write_bytes: ledger.movements.iter().map(|m| m.bytes * m.writes).sum(),
        // A warp instruction may be a matrix instruction of thousands of FLOPs: no bound.
        ledger_flops: 0,
        agreement: LedgerAgreement::of_reads(ledger, &counts, model),
        functions,
        repeat_instructions: None,
        // The inputs must be read from a cold L2; the writes read low, and bound nothing.
        compulsory_bytes: compulsory_bytes(ledger, output, model).map(|(read, _)| (read, 0)),
    }
}

/// `ncu --version`'s last line, or why `ncu` cannot be run.
fn profiler_version(ncu_path: &Path) -> Result<String> {
    let o = std::process::Command::new(ncu_path)
        .arg("--version")
        .output()
        .map_err(|e| Error::BackendUnavailable(format!("`ncu` cannot be run ({e})")))?;
    if !o.status.success() {
        return Err(Error::BackendUnavailable(format!(
            "`ncu --version` failed: {}",
            o.status
        )));
    }
    Ok(String::from_utf8_lossy(&o.stdout)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("ncu")
        .trim()
        .to_string())
}

/// In the process `ncu` profiles: both sides of one spec called once unmarked, the checked
/// seed's inputs set and the outputs filled with NaN, then each side's one counted call after
/// its marker; the outputs left in the current folder (`before.f32`, `after.f32`).
pub fn profile_counts(file: &Path, name: &str, seed: u64) -> Result<ExitCode> {
    let s = super::valgrind::counted_spec(file, name)?;
    let settings = crate::settings::Settings::from_env()?;
    let (backend, _) = backend::select(BackendChoice::Kind(DeviceKind::Cuda), None, &settings)?;
    let mut pair = pair::prepare_spec(backend.as_ref(), &s, seed, backend.flush_bytes())?;
    let sides = [Side::Before, Side::After];
    // Unmarked, so not counted: lazy set-up and first touches.
    for side in sides {
        pair.run_timed(side)?;
    }
    // The counted calls compute on inputs nothing before them saw, into outputs filled with
    // NaN: their outputs are checked, and a result kept from the calls before cannot pass.
    let checked = s.workload.as_kind().inputs(crate::checked_seed(seed));
    pair.refresh_inputs(Arc::new(checked))?;
    for side in sides {
        pair.poison_output(side)?;
    }
    for side in sides {
        backend.mark(side as u32)?;
        pair.run_timed(side)?;
        pair.keep_output(side)?;
    }
    pair.collect_outputs()?;
    if cfg!(target_endian = "big") {
        return Err(Error::CountSide(CountSideProblem::BigEndian));
    }
    for side in sides {
        let out = pair.output(side)?;
        let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
        crate::files::write_atomic(Path::new(OUTPUT_FILES[side as usize]), &bytes)?;
    }
    Ok(ExitCode::Pass)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Movement;
    use crate::values::Variant;

    fn launch(kernel: &str, grid_x: u64, metrics: &[(&str, f64)]) -> ncu::Launch {
        ncu::Launch {
            kernel: kernel.into(),
            grid_x: Some(grid_x),
            metrics: metrics
                .iter()
                .map(|(m, v)| (m.to_string(), Some(*v)))
                .collect(),
        }
    }

    #[test]
    fn a_sides_launches_become_its_counts_judged_on_their_reads() {
        let big = 64u64 << 20;
        let ledger = VariantLedger::new(
            Variant::Fused,
            vec![
                Movement {
                    tensor: "x".into(),
                    bytes: big,
                    reads: 1,
                    writes: 0,
                },
                Movement {
                    tensor: "out".into(),
                    bytes: big,
                    reads: 0,
                    writes: 1,
                },
            ],
            0,
            1,
        );
        let model = CacheModel::of_gpu(8 << 20);
        let m = |read: f64, write: f64, inst: f64| {
            [
                (ncu::DRAM_READ, read),
                (ncu::DRAM_WRITE, write),
                (ncu::INSTRUCTIONS, inst),
                (ncu::CYCLES, 1000.0),
            ]
        };
        let half = big as f64 / 2.0;
        // Writes at 60% of the ledger (dirty lines left in the L2): still agrees, on reads.
        let a = launch("k_a", 8, &m(half, 0.3 * big as f64, 100.0));
        let b = launch("k_b", 8, &m(half, 0.3 * big as f64, 300.0));
        let t = Tally::of(&[&a, &b, &a]);
        let c = side_counts(&t, &ledger, "out", &model);
        let counts = c.counts().unwrap();
        assert_eq!(counts.instructions, 500);
        assert_eq!(counts.dram_read_bytes, big * 3 / 2);
        assert_eq!(counts.estimated_cycles, 3000);
        // Three halves of the input read where the ledger says one: 1.5x, off by more than 5%.
        assert_eq!(c.agreement().and_then(LedgerAgreement::agrees), Some(false));
        let t = Tally::of(&[&a, &b]);
        let c = side_counts(&t, &ledger, "out", &model);
        assert_eq!(c.agreement().and_then(LedgerAgreement::agrees), Some(true));
        // The kernels by their instructions, each with its DRAM sectors.
        let f = c.functions();
        assert_eq!(f[0].function, "k_b");
        assert_eq!(f[0].instructions, 300);
        assert_eq!(
            f[0].ll_misses,
            ((half + 0.3 * big as f64) / 32.0).round() as u64
        );
        // The inputs read once bound the reads; the writes bound nothing.
        let SideCounts::Counted {
            compulsory_bytes, ..
        } = &c
        else {
            panic!("{c:?}")
        };
        assert_eq!(*compulsory_bytes, Some((big, 0)));
        // A launch without an instruction count: the side is not counted, and says which.
        let bare = launch("k_c", 8, &[(ncu::DRAM_READ, 1.0), (ncu::DRAM_WRITE, 1.0)]);
        let c = side_counts(&Tally::of(&[&a, &bare]), &ledger, "out", &model);
        let SideCounts::NotAvailable { reason } = c else {
            panic!("{c:?}")
        };
        assert!(reason.contains(ncu::INSTRUCTIONS), "{reason}");
        let c = side_counts(&Tally::default(), &ledger, "out", &model);
        assert!(c.counts().is_none());
    }
}

//! Counting a spec's sides on the CPU: each side counted once under Valgrind's cache simulator
//! on a fixed cache model (the arithmetic is `measure::counts`'s), and its simulated DRAM bytes
//! set against its IO ledger — the measurement that `run --measure counts|both`, `calibrate`,
//! `worker-test` and `opledger counts` start (the gate decides on it, `gate::decide_counts`).
//! Each side runs in a process of its own (`opledger count-side`, started under Callgrind by
//! this module and by nothing else): single-threaded, at the AVX2 level (the
//! simulator has no AVX-512), with the kind's seeded inputs, its environment cleared and its
//! paths of fixed length, so that the same binary and spec count the same on every x86-64
//! machine. Only the kernel call is counted: process start, input generation and the set-up
//! call before it are outside the counted interval.

use super::callgrind_file::{counts_of, read_events};
use super::{
    functions, CacheModel, Counted, Counts, CountsEngine, FunctionCounts, SideCounts, SpecCounts,
};
use crate::backend::pair::Side;
use crate::backend::{self, BackendChoice};
use crate::callgrind;
use crate::device::DeviceKind;
use crate::error::{CountSideProblem, Error, ExitCode, Result};
use crate::spec::{Implementation, Spec};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How many of a side's functions its counts keep (those that executed most).
const TOP_FUNCTIONS: usize = 10;

/// The SIMD level counted sides run at: AVX2's vectors (Valgrind executes no AVX-512) with each
/// multiply-add a multiply and an add. Valgrind 3.19 executes an FMA instruction lane by lane in
/// a helper call that saves and restores the floating-point control register twice: FMA was
/// four fifths of an attention side's counting time (docs/counts.md). The bytes the sides move,
/// which the ledger checks, are the same; the instructions hold one more per FMA.
pub const COUNTS_SIMD: &str = "avx2-nofma";

/// Counts sides under Callgrind: the engine found, a work folder of a fixed-length name under
/// `/tmp` holding the output files, a copy of the spec and a link to this binary (the counted
/// process's arguments and paths have the same lengths on every machine).
#[derive(Clone)]
pub struct Counter {
    pub engine: CountsEngine,
    /// The run's cache model was given on the command line: it decides for every spec (else a
    /// spec's own `measure.counts_cache_model` does for that spec).
    pub model_fixed: bool,
    pub(super) slowdown: f64,
    pub(super) work: Arc<crate::stop::PrivateDir>,
    pub(super) exe: PathBuf,
    /// The Valgrind whose version the engine records, started by absolute path.
    pub(super) valgrind: Option<PathBuf>,
    /// How long one counted process may run.
    pub(super) limit: std::time::Duration,
    /// Nsight Compute, where a GPU's kernels are counted (`nsight`) rather than simulated.
    pub(super) ncu: Option<PathBuf>,
}

/// What [`Counter::count_many`] calls as each spec's count ends: the spec's index, how many
/// have ended (this one included), its result, the seconds it took.
pub type CountEnded<'a> = dyn Fn(usize, usize, &Result<Counted>, f64) + Sync + 'a;

impl Counter {
    /// Finds Valgrind (exit 3 without it) and readies the work folder.
    pub fn new(
        model: Option<CacheModel>,
        seed: u64,
        settings: &crate::settings::Settings,
    ) -> Result<Counter> {
        if cfg!(not(target_arch = "x86_64")) {
            return Err(Error::BackendUnavailable(
                "counts run under Valgrind's cache simulator on x86-64 only".into(),
            ));
        }
        let (program, valgrind) = callgrind::found().map_err(Error::BackendUnavailable)?;
        let mut counter = Counter::ready(settings, None, |binary_sha256| CountsEngine {
            valgrind,
            cache_model: model.unwrap_or_default(),
            simd: COUNTS_SIMD.into(),
            threads: 1,
            seed,
            arch: std::env::consts::ARCH.into(),
            compiler: crate::device::RUSTC_VERSION.into(),
            libc: libc_version(),
            binary_sha256,
            gpu: None,
        })?;
        counter.valgrind = Some(program);
        counter.model_fixed = model.is_some();
        Ok(counter)
    }

    /// Refuses (exit 2, located at `measure.counts_sizes` or the workload) a spec whose counted
    /// sides cannot fit in `available` bytes of memory: the counted process holds the CPU
    /// backend's buffers of the counted workload and a flush of twice the model's last level,
    /// as a timed case is refused before it is allocated.
    pub fn refuse_oversized(&self, s: &Spec, available: Option<u64>) -> Result<()> {
        if self.ncu.is_some() {
            return Ok(());
        }
        let need = self.host_bytes(&*s.counted()?);
        crate::backend::check_memory(&s.name, need, available).map_err(|e| Error::Spec {
            path: s.file.clone(),
            pos: crate::spec::find_key(&s.source_text, &["measure", "counts_sizes"])
                .or_else(|| crate::spec::find_key(&s.source_text, &["workload"])),
            message: format!("counted under Valgrind: {e}"),
        })
    }

    /// The host memory the counted process of `counted` (a spec at its counted sizes) holds: the
    /// CPU backend's buffers and a flush of twice the model's last level.
    pub fn host_bytes(&self, counted: &Spec) -> u64 {
        let ll_bytes = self.engine_for(counted).cache_model.ll.bytes;
        crate::backend::cpu::host_bytes(&counted.workload, 2 * ll_bytes)
    }

    /// The work folder under `/tmp` and the link to this binary in it, and the engine `engine`
    /// makes of the binary's SHA-256.
    pub(super) fn ready(
        settings: &crate::settings::Settings,
        ncu: Option<PathBuf>,
        engine: impl FnOnce(String) -> CountsEngine,
    ) -> Result<Counter> {
        let exe = std::env::current_exe().map_err(|e| Error::io("finding", "opledger", e))?;
        let (work, link) = work_folder(&exe)?;
        let sha = crate::spec::sha256_hex(
            &std::fs::read(&exe).map_err(|e| Error::io("reading", &exe, e))?,
        );
        Ok(Counter {
            engine: engine(sha),
            model_fixed: false,
            slowdown: settings.experiment_slowdown,
            work: Arc::new(work),
            exe: link,
            valgrind: None,
            limit: settings.counts_limit(),
            ncu,
        })
    }

    /// A counter of the same engine with a work folder of its own (of the same name length, so
    /// that its counts are this one's), to count another spec at the same time.
    pub fn another(&self) -> Result<Counter> {
        let target =
            std::fs::read_link(&self.exe).map_err(|e| Error::io("reading", &self.exe, e))?;
        let (work, link) = work_folder(&target)?;
        Ok(Counter {
            engine: self.engine.clone(),
            model_fixed: self.model_fixed,
            slowdown: self.slowdown,
            work: Arc::new(work),
            exe: link,
            valgrind: self.valgrind.clone(),
            limit: self.limit,
            ncu: self.ncu.clone(),
        })
    }

    /// The engine `s`'s sides are counted under ([`CountsEngine::for_spec`]).
    pub fn engine_for(&self, s: &Spec) -> std::borrow::Cow<'_, CountsEngine> {
        self.engine.for_spec(s, self.model_fixed)
    }

    /// Both sides of `s`, each counted (or why not) and set against its ledger, with the output
    /// each counted call left (on the inputs of the checked seed), to be checked like any other
    /// run's. The sides that are opledger's own kernels are counted in one process (one
    /// Valgrind start, one set of inputs for both); a worker's side in its own.
    pub fn count_spec_with_outputs(&self, s: &Spec) -> Result<Counted> {
        if let Some(ncu) = &self.ncu {
            return self.profile_spec(ncu, s);
        }
        self.for_spec(s).count_spec_here(s)
    }

    /// Counts `specs` (each at its counted sizes) in this order, up to `at_once` counted
    /// processes at a time, each beside the others in a work folder of its own: their counts,
    /// in the same order. A spec's counts do not depend on what counts beside it. `done` is
    /// called as each spec's count ends ([`CountEnded`]), from the thread that counted it: what
    /// a terminal shows while counts are made.
    pub fn count_many(
        &self,
        specs: &[Spec],
        at_once: usize,
        done: &CountEnded<'_>,
    ) -> Vec<Result<Counted>> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Mutex;
        let results: Mutex<Vec<Option<Result<Counted>>>> =
            Mutex::new((0..specs.len()).map(|_| None).collect());
        let (next, ended) = (AtomicUsize::new(0), AtomicUsize::new(0));
        // Spec j counted by `counter`, and said to `done`.
        let count = |counter: &Counter, j: usize, s: &Spec| {
            let started = std::time::Instant::now();
            let c = counter.count_spec_with_outputs(s);
            let k = ended.fetch_add(1, Ordering::Relaxed) + 1;
            done(j, k, &c, started.elapsed().as_secs_f64());
            c
        };
        std::thread::scope(|scope| {
            for k in 0..at_once.clamp(1, specs.len().max(1)) {
                let (next, results, count) = (&next, &results, &count);
                scope.spawn(move || {
                    // The first thread counts with this counter; the others each in a work
                    // folder of their own.
                    let own;
                    let counter = if k == 0 {
                        self
                    } else {
                        match self.another() {
                            Ok(c) => {
                                own = c;
                                &own
                            }
                            Err(_) => return,
                        }
                    };
                    loop {
                        let j = next.fetch_add(1, Ordering::Relaxed);
                        let Some(s) = specs.get(j) else {
                            break;
                        };
                        let c = count(counter, j, s);
                        if let Ok(mut r) = results.lock() {
                            r[j] = Some(c);
                        }
                    }
                });
            }
        });
        results
            .into_inner()
            .unwrap_or_default()
            .into_iter()
            .zip(specs)
            .enumerate()
            // A spec no thread reached (a work folder could not be made): counted here.
            .map(|(j, (c, s))| c.unwrap_or_else(|| count(self, j, s)))
            .collect()
    }

    /// How many counted processes run at once for `specs` (at their counted sizes): the cores
    /// there are, no more than the specs, and no more than the memory holds of the largest of
    /// them. One for a GPU's profiler, and one where a side is a worker: ending a worker ends
    /// the processes left to this one without a worker's token, which a counted process of
    /// another spec would be.
    pub fn at_once(&self, specs: &[Spec]) -> usize {
        let workers = specs.iter().any(|s| {
            [&s.implementations.before, &s.implementations.after]
                .iter()
                .any(|i| matches!(i, Some(Implementation::Worker(_))))
        });
        if self.engine.gpu.is_some() || workers {
            return 1;
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let largest = specs
            .iter()
            .map(|s| self.host_bytes(s))
            .max()
            .unwrap_or(0)
            .max(1);
        let by_memory = crate::backend::available_memory_bytes().map_or(usize::MAX, |a| {
            usize::try_from(a / 10 * 9 / largest).unwrap_or(usize::MAX)
        });
        cores.min(specs.len()).min(by_memory).max(1)
    }

    /// How long `counted` (a spec at its counted sizes) takes to count, in units that only
    /// order specs: its sides' ledger FLOPs and bytes moved, under its engine's tiling.
    pub fn ledger_cost(&self, counted: &Spec) -> f64 {
        let tiling = super::ledger_tiling(&self.engine_for(counted));
        let ledger =
            counted
                .workload
                .ledger(counted.variants.before, counted.variants.after, &tiling);
        [&ledger.before, &ledger.after]
            .into_iter()
            .map(|l| {
                l.flops as f64
                    + l.movements
                        .iter()
                        .map(|m| (m.bytes * (m.reads + m.writes)) as f64)
                        .sum::<f64>()
            })
            .sum()
    }

    /// This counter, or (where `s` names a cache model of its own) one of the same work folder
    /// — one counted process at a time in it — under `s`'s engine.
    fn for_spec(&self, s: &Spec) -> std::borrow::Cow<'_, Counter> {
        match self.engine_for(s) {
            std::borrow::Cow::Borrowed(_) => std::borrow::Cow::Borrowed(self),
            std::borrow::Cow::Owned(engine) => std::borrow::Cow::Owned(Counter {
                engine,
                ..self.clone()
            }),
        }
    }

    /// [`Counter::count_spec_with_outputs`] under this counter's engine as it is.
    fn count_spec_here(&self, s: &Spec) -> Result<Counted> {
        // The sides the backend's own kernels run, counted together in one process.
        let runnable = crate::backend::cannot_run(DeviceKind::Cpu, &s.workload).is_none();
        let own: Vec<Side> = [Side::Before, Side::After]
            .into_iter()
            .filter(|&side| runnable && implementation_of(s, side).is_none())
            .collect();
        let mut counted_own = if own.is_empty() {
            Vec::new()
        } else {
            self.run_counted(s, &own)?
        };
        // The process's results, by side: taken out in the order `own` lists them.
        let mut take = |side: Side| {
            own.iter()
                .position(|&o| o == side)
                .map(|k| std::mem::take(&mut counted_own[k]))
        };
        let (before, before_output) = self.side_counts(s, Side::Before, take(Side::Before))?;
        let (after, after_output) = self.side_counts(s, Side::After, take(Side::After))?;
        Ok(self.assemble(s, before, after, [before_output, after_output]))
    }

    /// One side of `s` set against its ledger: counted in the process of its spec's own sides
    /// (`own`, where the side is one of them), counted as a worker, or why it is not counted;
    /// with the output its counted call left.
    fn side_counts(
        &self,
        s: &Spec,
        side: Side,
        own: Option<OwnCounted>,
    ) -> Result<(SideCounts, Option<Vec<f32>>)> {
        // The CPU kernels' tiles, with the model's last level as the cache that serves re-reads
        // (measured first without it, flash attention read 0.46-0.61x of a ledger that had
        // every K/V re-read reach memory).
        let tiling = super::ledger_tiling(&self.engine);
        let ledger = s
            .workload
            .ledger(s.variants.before, s.variants.after, &tiling);
        let implementation = implementation_of(s, side);
        let ledger = match side {
            Side::Before => &ledger.before,
            Side::After => &ledger.after,
        };
        let model = &self.engine.cache_model;
        let (counts, functions, output, repeat_instructions) = match (implementation, own) {
            (Some(Implementation::Cuda(_)), _) => {
                return Ok((SideCounts::NotAvailable {
                    reason: "a `cuda:` side's kernel runs on a GPU: counts are not available for it (a GPU's counts come from Nsight Compute)".into(),
                }, None))
            }
            (Some(Implementation::Worker(cmd)), _) => {
                match self.count_worker(s, variant_of(s, side), cmd)? {
                    Ok(counted) => counted,
                    Err(NotCounted::OnGpu(reason)) => {
                        return Ok((SideCounts::NotAvailable { reason }, None))
                    }
                    Err(NotCounted::Unmarked(why)) => {
                        return Err(Error::Backend(crate::error::BackendError::Kernel(why)))
                    }
                }
            }
            (None, Some((c, f, o))) => (c, f, o, None),
            (None, None) => {
                let why = crate::backend::cannot_run(DeviceKind::Cpu, &s.workload)
                    .unwrap_or_else(|| "the side was not counted".into());
                return Ok((SideCounts::NotAvailable { reason: why }, None));
            }
        };
        Ok((
            SideCounts::Counted {
                counts,
                functions,
                ledger_read_bytes: ledger.movements.iter().map(|m| m.bytes * m.reads).sum(),
                ledger_write_bytes: ledger.movements.iter().map(|m| m.bytes * m.writes).sum(),
                ledger_flops: ledger.flops,
                agreement: super::agreement(
                    &self.engine,
                    implementation.is_some(),
                    ledger,
                    &counts,
                ),
                repeat_instructions,
                compulsory_bytes: super::compulsory_bytes(
                    ledger,
                    &s.workload.as_kind().output_name(),
                    model,
                ),
            },
            Some(output),
        ))
    }

    /// `s`'s counts from its sides (counted by [`Counter::count_spec_with_outputs`], or
    /// profiled), with their counted calls' outputs, under the engine `s` is counted under.
    pub fn assemble(
        &self,
        s: &Spec,
        before: SideCounts,
        after: SideCounts,
        outputs: [Option<Vec<f32>>; 2],
    ) -> Counted {
        let engine = self.engine_for(s).into_owned();
        let [before_output, after_output] = outputs;
        Counted {
            counts: SpecCounts {
                counted_workload: (!s.measure.counts_sizes.is_empty())
                    .then(|| s.workload.describe()),
                name: s.name.clone(),
                spec_cache_model: s.counts_cache_model() == Some(engine.cache_model),
                engine,
                before_variant: s.variants.before.name().to_string(),
                after_variant: s.variants.after.name().to_string(),
                before,
                after,
            },
            before_output,
            after_output,
        }
    }

    /// Runs `opledger count-side` for `sides` of `s` (one process) under Callgrind and reads
    /// each side's two intervals: the kernel call, and the flush after it (whose dirty
    /// evictions are the call's last writes).
    fn run_counted(&self, s: &Spec, sides: &[Side]) -> Result<Vec<OwnCounted>> {
        let work = self.work.path();
        let model = &self.engine.cache_model;
        let out = work.join("callgrind.out");
        let parts = |k: usize| work.join(format!("callgrind.out.{k}"));
        let mut stale: Vec<PathBuf> = (1..=2 * sides.len()).map(parts).collect();
        stale.push(out.clone());
        stale.extend(sides.iter().map(|side| work.join(output_file(*side))));
        for f in stale {
            let _ = std::fs::remove_file(f);
        }
        // The spec's text in the work folder, which is the counted process's current folder: where
        // the spec lies on this machine (a path of another length, kept on the heap) must not move
        // the kernel's buffers against each other.
        let file = PathBuf::from("spec.yaml");
        crate::files::write_atomic(&work.join(&file), s.source_text.as_bytes())?;
        let sides_arg = sides
            .iter()
            .map(|side| side.name())
            .collect::<Vec<_>>()
            .join(",");
        let mut cmd = std::process::Command::new(self.valgrind_program()?);
        cmd.args(callgrind::args(model, &out))
            .arg(&self.exe)
            .arg("count-side")
            .arg(&file)
            .arg(&s.name)
            .arg(&sides_arg)
            .arg(self.engine.seed.to_string())
            .arg(model.ll.bytes.to_string())
            .current_dir(work)
            // The environment is cleared (its size moves the stack, and with it simulated misses):
            // only what the counted process needs, the same everywhere.
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env(crate::settings::SIMD_VAR, COUNTS_SIMD)
            .env("RAYON_NUM_THREADS", "1");
        if self.slowdown > 0.0 {
            cmd.env(crate::settings::SLOWDOWN_VAR, self.slowdown.to_string());
        }
        let what = match sides {
            [side] => format!("the {} side", side.name()),
            _ => "its sides".to_string(),
        };
        let done = self.run_bounded(cmd, s, &what)?;
        if !done.status.success() {
            let tail: String = crate::untrusted::printable(&String::from_utf8_lossy(&done.stderr))
                .lines()
                .rev()
                .take(12)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            return Err(Error::Backend(crate::error::BackendError::Kernel(format!(
                "{}: {what} under Callgrind exited with {}: {tail}",
                s.name, done.status
            ))));
        }
        let mut counted = Vec::with_capacity(sides.len());
        for (k, side) in sides.iter().enumerate() {
            let (call, call_text) = read_events(&parts(2 * k + 1))?;
            let (flush, _) = read_events(&parts(2 * k + 2))?;
            let output = read_output(&work.join(output_file(*side)), s)?;
            counted.push((
                counts_of(&call, &flush, model, &parts(2 * k + 1))?,
                functions(&call_text, TOP_FUNCTIONS),
                output,
            ));
        }
        Ok(counted)
    }
}

/// How `side` of `s` is implemented: `None` where it runs the backend's own kernels.
fn implementation_of(s: &Spec, side: Side) -> &Option<Implementation> {
    match side {
        Side::Before => &s.implementations.before,
        Side::After => &s.implementations.after,
    }
}

/// The variant `side` of `s` runs.
fn variant_of(s: &Spec, side: Side) -> crate::kinds::Variant {
    match side {
        Side::Before => s.variants.before,
        Side::After => s.variants.after,
    }
}

/// A side counted in its spec's process: its counts, its functions and its call's output.
type OwnCounted = (Counts, Vec<FunctionCounts>, Vec<f32>);

/// A private work folder of a fixed-length name under `/tmp` and a link in it to the binary
/// `exe` (the counted process's paths have the same lengths on every machine, and in every
/// folder of one run).
fn work_folder(exe: &Path) -> Result<(crate::stop::PrivateDir, PathBuf)> {
    let work = crate::stop::private_dir("opledger-counts-", Some(Path::new("/tmp")))
        .map_err(|e| Error::write("creating", "/tmp", e))?;
    let link = work.path().join("opledger");
    std::os::unix::fs::symlink(exe, &link).map_err(|e| Error::write("linking", &link, e))?;
    Ok((work, link))
}

/// Spec `name` of `file` as its sides are counted (`measure.counts_sizes` applied), in the
/// process that counts them.
pub(super) fn counted_spec(file: &Path, name: &str) -> Result<Spec> {
    let specs = crate::spec::load_expanded(file)?;
    let s = specs.into_iter().find(|s| s.name == name).ok_or_else(|| {
        Error::CountSide(CountSideProblem::NoSpec {
            name: name.to_string(),
            file: file.to_path_buf(),
        })
    })?;
    Ok(s.counted()?.into_owned())
}

/// The output a counted call of `s` left in `path`: the kind's output length of little-endian
/// f32s, or an error naming the file.
pub(super) fn read_output(path: &Path, s: &Spec) -> Result<Vec<f32>> {
    let want = s.workload.as_kind().output_len() * 4;
    let bytes = crate::files::read_regular(path, want, "a counted output")?;
    if bytes.len() as u64 != want {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            message: format!(
                "the counted call's output holds {} bytes where {want} were expected",
                bytes.len()
            ),
        });
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// A counted side: its counts, its functions, its output and (a worker's) the instructions of
/// its repeated call.
pub type CountedSide = (Counts, Vec<FunctionCounts>, Vec<f32>, Option<u64>);

/// How many times longer a worker's requests may take under Callgrind than natively.
const WORKER_SLOWDOWN: f64 = 100.0;

impl Counter {
    /// Counts a worker's side: the worker started under Callgrind (`backend::counted` drives
    /// it), its counted calls marked by its kit. Its first counted call is the side's counts
    /// and output; a second on the same inputs gives the instructions that show a result kept
    /// across calls. `Ok(Err(why))` where the worker cannot be counted: a GPU worker, or one
    /// whose protocol code does not mark its counted runs.
    pub fn count_worker(
        &self,
        s: &Spec,
        variant: crate::kinds::Variant,
        cmd: &crate::spec::WorkerCommand,
    ) -> Result<std::result::Result<CountedSide, NotCounted>> {
        let work = self.work.path();
        let model = &self.engine.cache_model;
        let out = work.join("worker.out");
        for k in 1..=4 {
            let _ = std::fs::remove_file(out.with_extension(format!("out.{k}")));
        }
        let _ = std::fs::remove_file(&out);
        let mut command = vec![self.valgrind_program()?.display().to_string()];
        command.extend(callgrind::args(model, &out));
        // What a worker's process may vary by the runner: thread pools sized by its cores (a
        // NumPy linked to a threaded BLAS) and Python's string hashing.
        let env = [
            ("OMP_NUM_THREADS", "1"),
            ("OPENBLAS_NUM_THREADS", "1"),
            ("MKL_NUM_THREADS", "1"),
            ("NUMEXPR_NUM_THREADS", "1"),
            ("PYTHONHASHSEED", "0"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        // Valgrind's own variables would change what counts (another tool build, other
        // options) while the engine names this one; its rc files are off (`callgrind::args`).
        let wrapper = crate::backend::worker::Wrapper {
            command,
            env,
            env_remove: vec!["VALGRIND_OPTS".into(), "VALGRIND_LIB".into()],
        };
        let kind = s.workload.as_kind();
        let warm = kind.inputs(self.engine.seed);
        let checked = kind.inputs(crate::checked_seed(self.engine.seed));
        let request = crate::backend::counted::CountRequest {
            wrapper: &wrapper,
            spec_dir: s.dir(),
            workload: &s.workload,
            variant,
            warm: &warm,
            checked: &checked,
            flush_bytes: 2 * model.ll.bytes,
            counted_runs: 2,
            slowdown: WORKER_SLOWDOWN,
        };
        let counted = match crate::backend::counted::count_worker(cmd, &request)? {
            crate::backend::counted::WorkerCounts::Counted(c) => c,
            crate::backend::counted::WorkerCounts::NotAvailable(why) => {
                return Ok(Err(NotCounted::OnGpu(why)))
            }
        };
        let file = |k: u32| out.with_extension(format!("out.{k}"));
        if !file(1).is_file() || !file(3).is_file() {
            return Ok(Err(NotCounted::Unmarked(format!(
                "{}: the worker of `{}` ({}) answered its counted runs without marking them: its kit predates counted runs (opledger_worker.h and opledger_worker.py 2 mark them), or its own protocol code ignores `counted` in a run request",
                s.name,
                variant.name(),
                counted.about
            ))));
        }
        let (call, call_text) = read_events(&file(1))?;
        let (flush, _) = read_events(&file(2))?;
        let (repeat, _) = read_events(&file(3))?;
        Ok(Ok((
            counts_of(&call, &flush, model, &file(1))?,
            functions(&call_text, TOP_FUNCTIONS),
            counted.output,
            Some(repeat.get("Ir")),
        )))
    }
}

/// Why a worker's side was not counted.
pub enum NotCounted {
    /// It runs on a GPU: not available, and said so.
    OnGpu(String),
    /// Its protocol code answered the counted runs without marking them: nothing was counted.
    Unmarked(String),
}

impl Counter {
    /// The Valgrind this counter found (a GPU's counter has none).
    fn valgrind_program(&self) -> Result<&Path> {
        self.valgrind.as_deref().ok_or_else(|| {
            Error::BackendUnavailable(
                "this counter reads a GPU's counters: it has no Valgrind".into(),
            )
        })
    }

    /// Runs a counted process (of `what` of `s`: "the before side", "its sides") in a process
    /// group of its own (ended if opledger is stopped), waiting at most the counter's limit:
    /// past it the process is ended, with an error that names the limit and how to raise it.
    fn run_bounded(
        &self,
        mut cmd: std::process::Command,
        s: &Spec,
        what: &str,
    ) -> Result<std::process::Output> {
        use std::io::Read;
        use std::os::unix::process::CommandExt;
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::BackendUnavailable(format!("valgrind cannot be run: {e}")))?;
        let _group = crate::stop::group(child.id());
        // Its error output is read meanwhile (a full pipe would stop it), up to 1 MiB.
        let stderr = child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut kept = Vec::new();
                let mut buf = [0u8; 8192];
                while let Ok(n) = e.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if kept.len() < 1 << 20 {
                        kept.extend_from_slice(&buf[..n]);
                    }
                }
                kept
            })
        });
        let started = std::time::Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() < self.limit => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Ok(None) => {
                    // SAFETY: kill with a negative pid signals the group this child leads
                    // (process_group(0)); no memory is touched.
                    unsafe {
                        libc::kill(-(child.id() as i32), libc::SIGKILL);
                    }
                    let _ = child.wait();
                    return Err(Error::Backend(crate::error::BackendError::Kernel(format!(
                        "{}: {what} under Callgrind did not finish within {} s and was ended (raise {} for larger counted sizes, or lower `measure.counts_sizes`)",
                        s.name,
                        self.limit.as_secs_f64(),
                        crate::settings::COUNTS_TIMEOUT_VAR
                    ))));
                }
                Err(e) => {
                    return Err(Error::BackendUnavailable(format!(
                        "valgrind could not be waited for: {e}"
                    )))
                }
            }
        };
        let stderr = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
        Ok(std::process::Output {
            status,
            stdout: Vec::new(),
            stderr,
        })
    }
}

/// The file a counted process leaves `side`'s call's output in, in the work folder.
fn output_file(side: Side) -> &'static str {
    super::OUTPUT_FILES[side as usize]
}

/// The C library's version (`glibc 2.36`): another one can move a kernel's buffers, and with
/// them its simulated misses.
fn libc_version() -> String {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: gnu_get_libc_version returns a pointer to a static NUL-terminated string.
        let v = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
        format!("glibc {}", v.to_string_lossy())
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        "unknown".into()
    }
}

/// In the process Callgrind runs: `sides` of one spec (the backend's own kernels), set up on
/// one set of inputs and each called once uncounted (lazy set-up: the thread pool, first
/// touches of its buffers); then the checked seed's inputs, and for each side in turn: its
/// output filled with NaN, one counted call, a read of twice the last level's size in an
/// interval of its own (which evicts the lines the call left dirty), and its output written
/// to the work folder. Each counted interval starts from empty simulated caches (Callgrind
/// empties them when counting starts), so a side counts as it would in a process of its own
/// but for where the other side's buffers moved the heap (docs/counts.md: a few hundredths of a
/// percent). Which sides share a process is decided by the spec alone, never by the machine,
/// so that the counts of a binary and spec are the same everywhere.
pub fn count_sides(
    file: &Path,
    name: &str,
    sides: &[Side],
    seed: u64,
    ll_bytes: u64,
) -> Result<ExitCode> {
    if !callgrind::running_on_valgrind() {
        return Err(Error::CountSide(CountSideProblem::NotUnderCounts));
    }
    // One thread, and it is this one: with a pool thread of its own, this thread would wait for
    // the kernel in a loop whose length the scheduler decides, and that loop would be counted.
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .use_current_thread()
        .build_global()
        .map_err(|e| Error::CountSide(CountSideProblem::ThreadPool(e.to_string())))?;
    if cfg!(target_endian = "big") {
        return Err(Error::CountSide(CountSideProblem::BigEndian));
    }
    // The kernel sources of `cuda:` sides stay beside the original spec: they were checked
    // there, and are not run here.
    let s = counted_spec(file, name)?;
    let settings = crate::settings::Settings::from_env()?;
    let (backend, _) = backend::select(BackendChoice::Kind(DeviceKind::Cpu), Some(0), &settings)?;
    let inputs = Arc::new(s.workload.as_kind().inputs(seed));
    // The backend's own kernels only: the other side may be a worker, which is neither counted
    // nor started here.
    let variant = |side: Side| variant_of(&s, side);
    let mut case = backend.prepare(&s.workload, inputs)?;
    for &side in sides {
        case.run_timed(variant(side))?;
    }
    // The counted calls compute on the checked seed's inputs, which nothing before them saw,
    // into outputs filled with NaN: their outputs are checked, and a result kept from the calls
    // before cannot pass for them.
    let checked = Arc::new(s.workload.as_kind().inputs(crate::checked_seed(seed)));
    case.set_inputs(checked)?;
    let flush = vec![1u8; (2 * ll_bytes) as usize];
    for &side in sides {
        case.poison_output(variant(side))?;
        callgrind::start();
        case.run_timed(variant(side))?;
        callgrind::dump();
        let mut sum = 0u64;
        for b in flush.iter().step_by(64) {
            sum = sum.wrapping_add(u64::from(*b));
        }
        std::hint::black_box(sum);
        callgrind::dump();
        callgrind::stop();
        let output = case.output(variant(side))?;
        // SAFETY: an f32 slice is plain data without padding; its bytes are read as a u8 slice
        // of four times its length, within the same allocation, while `output` is borrowed.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                output.as_ptr().cast::<u8>(),
                std::mem::size_of_val(&*output),
            )
        };
        crate::files::write_atomic(Path::new(output_file(side)), bytes)?;
    }
    Ok(ExitCode::Pass)
}

//! The two sides of a comparison, made ready: what the measurement loop drives. Each side is a
//! variant of the backend's own kernels or the user's implementation in a worker process; a
//! worker that serves both sides (one command) is started once.

use super::worker::{self, Request, TensorFile, Worker};
use super::{Backend, Case};
use crate::error::{BackendError, Result};
use crate::kinds::{Tensors, Variant, Workload};
use crate::spec::{Implementation, Implementations, Variants, WorkerCommand};
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Which side of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Before,
    After,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Before => "before",
            Side::After => "after",
        }
    }
}

/// Both sides of a spec, ready to run on the same inputs.
pub trait Pair {
    /// Runs `side` once and returns its duration in seconds, as its runner times it.
    fn run_timed(&mut self, side: Side) -> Result<f64>;
    /// Makes the next run of either side start from cold caches.
    fn flush_caches(&mut self);
    /// How [`Pair::flush_caches`] makes them cold.
    fn flush_method(&self) -> crate::device::FlushMethod;
    /// Fetches the outputs of the last runs where they live elsewhere (a worker's `.npy`), so
    /// that both can be read at once.
    fn collect_outputs(&mut self) -> Result<()> {
        Ok(())
    }
    /// The output of the last run of `side`, on the host (after [`Pair::collect_outputs`]), or
    /// the one [`Pair::keep_output`] kept.
    fn output(&self, side: Side) -> Result<Cow<'_, [f32]>>;
    /// Fills `side`'s output with NaN before the run whose output is checked.
    fn poison_output(&mut self, _side: Side) -> Result<()> {
        Ok(())
    }
    /// Makes both sides compute on `inputs` from now on (the same tensors, another seed's
    /// values), before the checked run: a side that answers with a result kept from earlier
    /// runs fails the check. A worker is set up again on them.
    fn refresh_inputs(&mut self, inputs: Arc<Tensors>) -> Result<()>;
    /// Lets go of the inputs the backend's own kernels hold ([`Case::release_inputs`]) before
    /// the new set for [`Pair::refresh_inputs`] is made: one set in memory at a time.
    fn release_inputs(&mut self) {}
    /// Whether [`Pair::output`] holds a side's output as soon as it ran (the backend's own
    /// kernels on both sides): the checked run's outputs can then be checked at once instead
    /// of kept (`opledger_measure::measure_pairs`).
    fn outputs_at_once(&self) -> bool {
        false
    }
    /// Keeps what the run after [`Pair::poison_output`] wrote: the output the check reads,
    /// whatever later runs leave. A worker's output is fetched after the last run instead.
    fn keep_output(&mut self, _side: Side) -> Result<()> {
        Ok(())
    }
    /// Who ran `side` when it is not the backend's own kernel: the worker, its device, and what
    /// the protocol added to each sample's wall time beyond the time the worker reported.
    fn implementation(&self, _side: Side) -> Option<String> {
        None
    }
}

/// Where a spec's files are, and how cold samples are made: what preparing its sides needs
/// besides the workload.
pub struct PairContext<'a> {
    /// The spec file's folder: workers start there.
    pub spec_dir: &'a Path,
    /// Bytes a CPU worker streams to flush its caches (the backend's own flush size).
    pub flush_bytes: u64,
}

/// Readies both sides of `workload`: the backend's kernels for the built-in sides, workers for
/// the user's.
pub fn prepare(
    backend: &dyn Backend,
    workload: &Workload,
    variants: Variants,
    implementations: &Implementations,
    inputs: Arc<Tensors>,
    ctx: &PairContext<'_>,
) -> Result<Box<dyn Pair>> {
    if !implementations.any() {
        return Ok(Box::new(Builtin {
            case: backend.prepare(workload, inputs)?,
            variants,
            kept: [None, None],
        }));
    }
    let builtin = match (&implementations.before, &implementations.after) {
        (Some(_), Some(_)) => None,
        _ => Some(backend.prepare(workload, inputs.clone())?),
    };
    Ok(Box::new(UserSides::start(
        backend,
        builtin,
        workload,
        variants,
        implementations,
        &inputs,
        ctx,
    )?))
}

/// Both sides of spec `s` on `backend`: [`prepare`] on the kind's inputs of `seed`, workers
/// started in the spec's folder.
pub fn prepare_spec(
    backend: &dyn Backend,
    s: &crate::spec::Spec,
    seed: u64,
    flush_bytes: u64,
) -> Result<Box<dyn Pair>> {
    let inputs = Arc::new(s.workload.as_kind().inputs(seed));
    let ctx = PairContext {
        spec_dir: s.dir(),
        flush_bytes,
    };
    prepare(
        backend,
        &s.workload,
        s.variants,
        &s.implementations,
        inputs,
        &ctx,
    )
}

/// Both sides on the backend's kernels.
struct Builtin {
    case: Box<dyn Case>,
    variants: Variants,
    /// The outputs of the checked run, before and after.
    kept: [Option<crate::kinds::tensors::LineVec>; 2],
}

impl Builtin {
    fn variant(&self, side: Side) -> Variant {
        match side {
            Side::Before => self.variants.before,
            Side::After => self.variants.after,
        }
    }
}

impl Pair for Builtin {
    fn run_timed(&mut self, side: Side) -> Result<f64> {
        let v = self.variant(side);
        self.case.run_timed(v)
    }
    fn flush_caches(&mut self) {
        self.case.flush_caches()
    }
    fn flush_method(&self) -> crate::device::FlushMethod {
        self.case.flush_method()
    }
    fn output(&self, side: Side) -> Result<Cow<'_, [f32]>> {
        match &self.kept[UserSides::index(side)] {
            Some(k) => Ok(Cow::Borrowed(&k[..])),
            None => self.case.output(self.variant(side)),
        }
    }
    fn poison_output(&mut self, side: Side) -> Result<()> {
        let v = self.variant(side);
        self.case.poison_output(v)
    }
    fn refresh_inputs(&mut self, inputs: Arc<Tensors>) -> Result<()> {
        self.case.set_inputs(inputs)
    }
    fn release_inputs(&mut self) {
        self.case.release_inputs();
    }
    fn outputs_at_once(&self) -> bool {
        // Case::output is on the host after every run, on every backend.
        true
    }
    fn keep_output(&mut self, side: Side) -> Result<()> {
        let kept = crate::kinds::tensors::LineVec::copy_of(&self.case.output(self.variant(side))?);
        self.kept[UserSides::index(side)] = Some(kept);
        Ok(())
    }
}

/// How one side runs when workers are involved.
enum Runner {
    Builtin(Variant),
    /// The user's kernel, run by the backend (a CUDA source).
    Kernel(Box<dyn super::UserKernel>),
    Worker {
        /// Index into `UserSides::workers`.
        worker: usize,
        /// What the spec named for this side (its function).
        cmd: WorkerCommand,
        /// The `setup` request it was readied by, sent again on new inputs.
        setup: Box<Request>,
        timeout: Duration,
        output: PathBuf,
        /// The output read back after the last `output` request.
        last: Vec<f32>,
        /// Per run: the request's wall time less the seconds the worker reported (the
        /// protocol's round trip, which the reported time excludes).
        round_trip_secs: Vec<f64>,
    },
}

/// At least one side the user's code (a worker or a CUDA kernel of theirs); the other, if
/// built in, on the backend's kernels.
struct UserSides {
    /// Inputs as `.npy`, outputs, and the workers' logs; removed with the pair.
    dir: crate::stop::PrivateDir,
    builtin: Option<Box<dyn Case>>,
    workers: Vec<(WorkerCommand, Worker)>,
    sides: [Runner; 2],
    output_shape: Vec<u64>,
    /// Set by `flush_caches`: the next worker run is asked to start cold.
    cold: bool,
    /// The outputs of the checked run of the sides opledger runs (built-in or `cuda:`).
    kept: [Option<crate::kinds::tensors::LineVec>; 2],
}

/// The worker module (`python/opledger_worker/`) and each input as `.npy` in `dir`, for the
/// workers to read; returns the inputs' files by tensor name.
pub(super) fn write_worker_files(
    dir: &Path,
    python: &Path,
    inputs: &Tensors,
) -> Result<std::collections::BTreeMap<String, TensorFile>> {
    std::fs::create_dir(python)
        .and_then(|_| std::fs::write(python.join("opledger_worker.py"), worker::PYTHON_MODULE))
        .map_err(|e| BackendError::Kernel(format!("cannot write the worker module: {e}")))?;
    write_inputs(dir, "input", inputs)
}

/// Each input as `dir/<prefix>-<name>.npy`; returns the files by tensor name.
pub(super) fn write_inputs(
    dir: &Path,
    prefix: &str,
    inputs: &Tensors,
) -> Result<std::collections::BTreeMap<String, TensorFile>> {
    let mut input_files = std::collections::BTreeMap::new();
    for (name, shape, data) in inputs.iter() {
        let path = dir.join(format!("{prefix}-{name}.npy"));
        worker::write_npy(&path, shape, data)?;
        input_files.insert(
            name.to_string(),
            TensorFile {
                path,
                shape: shape.to_vec(),
                dtype: "float32".into(),
            },
        );
    }
    Ok(input_files)
}

/// A side's own CUDA kernel: its source file (beside the spec), read and bounded.
fn user_source(src: &crate::spec::CudaSource, spec_dir: &Path) -> Result<super::UserSource> {
    let path = spec_dir.join(&src.source);
    let text = crate::files::read_regular(&path, 16 << 20, "CUDA source")
        .map_err(|e| BackendError::Kernel(e.to_string()))?;
    let text = String::from_utf8(text)
        .map_err(|_| BackendError::Kernel(format!("{}: not UTF-8 text", path.display())))?;
    Ok(super::UserSource {
        path,
        text,
        spec: src.clone(),
    })
}

impl UserSides {
    fn start(
        backend: &dyn Backend,
        builtin: Option<Box<dyn Case>>,
        workload: &Workload,
        variants: Variants,
        implementations: &Implementations,
        inputs: &Tensors,
        ctx: &PairContext<'_>,
    ) -> Result<Self> {
        let dir = crate::stop::private_dir("opledger-workers-", None).map_err(|e| {
            BackendError::Kernel(format!("cannot create a folder for workers: {e}"))
        })?;
        // The worker module and the inputs as `.npy`, written only for workers (a CUDA kernel of
        // the user's gets the device buffers of the tensors themselves).
        let python = dir.path().join("python");
        let has_worker = [&implementations.before, &implementations.after]
            .iter()
            .any(|i| matches!(i, Some(Implementation::Worker(_))));
        let input_files = if has_worker {
            write_worker_files(dir.path(), &python, inputs)?
        } else {
            std::collections::BTreeMap::new()
        };
        let kind = workload.as_kind();
        let output_shape = kind.output_shape();
        let workload_json = serde_json::to_value(workload).unwrap_or(serde_json::Value::Null);
        let mut workers: Vec<(WorkerCommand, Worker)> = Vec::new();
        let mut runners = Vec::new();
        for (side, variant, implementation) in [
            (Side::Before, variants.before, &implementations.before),
            (Side::After, variants.after, &implementations.after),
        ] {
            let cmd = match implementation {
                None => {
                    runners.push(Runner::Builtin(variant));
                    continue;
                }
                Some(Implementation::Cuda(src)) => {
                    let user = user_source(src, ctx.spec_dir)?;
                    runners.push(Runner::Kernel(
                        backend.user_kernel(&user, workload, variant, inputs)?,
                    ));
                    continue;
                }
                Some(Implementation::Worker(cmd)) => cmd,
            };
            // One process per command: a worker that registers both functions serves both sides.
            let index = match workers.iter().position(|(c, _)| c.command == cmd.command) {
                Some(i) => i,
                None => {
                    workers.push((cmd.clone(), Worker::start(cmd, ctx.spec_dir, &python)?));
                    workers.len() - 1
                }
            };
            let w = &mut workers[index].1;
            if !w.functions.is_empty() && !w.functions.contains(&cmd.function) {
                return Err(w
                    .failure(format!(
                        "it serves no function `{}` (it registered: {}); name one in variants.{}.function",
                        cmd.function,
                        w.functions.join(", "),
                        side.name()
                    ))
                    .into());
            }
            let output = dir.path().join(format!("output-{}.npy", side.name()));
            let timeout = Duration::from_secs_f64(cmd.timeout_secs);
            let setup = Request::Setup {
                id: side.name().into(),
                function: cmd.function.clone(),
                variant: variant.name().into(),
                workload: workload_json.clone(),
                inputs: input_files.clone(),
                output: TensorFile {
                    path: output.clone(),
                    shape: output_shape.clone(),
                    dtype: "float32".into(),
                },
                flush_bytes: ctx.flush_bytes,
                ready: true,
            };
            w.request(&setup, timeout * 10)?;
            runners.push(Runner::Worker {
                worker: index,
                cmd: cmd.clone(),
                setup: Box::new(setup),
                timeout,
                output,
                last: Vec::new(),
                round_trip_secs: Vec::new(),
            });
        }
        let after = runners.pop();
        let before = runners.pop();
        let (Some(before), Some(after)) = (before, after) else {
            return Err(BackendError::Kernel("a pair needs two sides".into()).into());
        };
        Ok(UserSides {
            dir,
            builtin,
            workers,
            sides: [before, after],
            output_shape,
            cold: false,
            kept: [None, None],
        })
    }

    fn index(side: Side) -> usize {
        match side {
            Side::Before => 0,
            Side::After => 1,
        }
    }

    /// Whether the built-in side starts cold by the read flush: beside a worker's side, whose
    /// process reads it, so that both sides start cold by the same means.
    fn builtin_reads(&self) -> bool {
        !self.workers.is_empty()
    }
}

impl Pair for UserSides {
    fn run_timed(&mut self, side: Side) -> Result<f64> {
        let cold = std::mem::take(&mut self.cold);
        match &mut self.sides[Self::index(side)] {
            Runner::Builtin(v) => match &mut self.builtin {
                Some(case) => case.run_timed(*v),
                None => Err(BackendError::Kernel("no built-in case".into()).into()),
            },
            Runner::Kernel(k) => k.run_timed(),
            Runner::Worker {
                worker,
                timeout,
                round_trip_secs,
                ..
            } => {
                let w = &mut self.workers[*worker].1;
                let started = std::time::Instant::now();
                let reply = w.request(
                    &Request::Run {
                        id: side.name().into(),
                        count: 1,
                        cold,
                        counted: false,
                    },
                    *timeout,
                )?;
                let wall = started.elapsed().as_secs_f64();
                let secs = reply.secs.as_ref().and_then(|s| s.first().copied());
                match secs {
                    // What no clock could have seen: more than the request took as opledger
                    // timed it, or less than the shortest run any workload takes.
                    Some(s) if s.is_finite() && !super::worker::possible_secs(s, wall) => {
                        Err(w
                            .failure(format!(
                                "impossible time: the worker reported {s:e} s for a run whose whole request took {wall:e} s by opledger's clock{}; its timer does not time the run",
                                if s < super::worker::FLOOR_SECS {
                                    format!(" (below the {:e} s floor)", super::worker::FLOOR_SECS)
                                } else {
                                    String::new()
                                }
                            ))
                            .into())
                    }
                    Some(s) if s.is_finite() && s > 0.0 => {
                        // Cold runs include the worker's flush in the wall time: only warm
                        // requests measure the protocol alone.
                        if !cold {
                            round_trip_secs.push((wall - s).max(0.0));
                        }
                        Ok(s)
                    }
                    _ => Err(w
                        .failure(format!(
                            "protocol error: `run` must reply `secs`: a list of positive seconds; got {:?}",
                            reply.secs
                        ))
                        .into()),
                }
            }
        }
    }

    fn flush_method(&self) -> crate::device::FlushMethod {
        match &self.builtin {
            Some(case) if !self.builtin_reads() => case.flush_method(),
            _ => crate::device::FlushMethod::Read,
        }
    }

    fn flush_caches(&mut self) {
        let reads = self.builtin_reads();
        if let Some(case) = &mut self.builtin {
            if reads {
                case.flush_by_reading();
            } else {
                case.flush_caches();
            }
        } else if let Some(Runner::Kernel(k)) = self
            .sides
            .iter_mut()
            .find(|s| matches!(s, Runner::Kernel(_)))
        {
            k.flush_caches();
        }
        self.cold = true;
    }

    fn collect_outputs(&mut self) -> Result<()> {
        for side in [Side::Before, Side::After] {
            if let Runner::Worker {
                worker,
                timeout,
                output,
                last,
                ..
            } = &mut self.sides[Self::index(side)]
            {
                let w = &mut self.workers[*worker].1;
                w.request(
                    &Request::Output {
                        id: side.name().into(),
                    },
                    *timeout * 10,
                )?;
                *last = worker::read_npy(output, &self.output_shape).map_err(|m| w.failure(m))?;
            }
        }
        Ok(())
    }

    fn poison_output(&mut self, side: Side) -> Result<()> {
        match &mut self.sides[Self::index(side)] {
            Runner::Builtin(v) => match &mut self.builtin {
                Some(case) => case.poison_output(*v),
                None => Ok(()),
            },
            Runner::Kernel(k) => k.poison_output(),
            Runner::Worker { .. } => Ok(()),
        }
    }

    fn release_inputs(&mut self) {
        if let Some(case) = &mut self.builtin {
            case.release_inputs();
        }
    }

    fn refresh_inputs(&mut self, inputs: Arc<Tensors>) -> Result<()> {
        if let Some(case) = &mut self.builtin {
            case.set_inputs(inputs.clone())?;
        }
        let mut files = None;
        for side in [Side::Before, Side::After] {
            match &mut self.sides[Self::index(side)] {
                Runner::Builtin(_) => {}
                Runner::Kernel(k) => k.set_inputs(&inputs)?,
                Runner::Worker {
                    worker,
                    setup,
                    timeout,
                    ..
                } => {
                    // New files beside the old ones, and the case set up again on them (the
                    // worker replaces a case set up twice); the old files go once every side
                    // has its new ones.
                    let new = match &files {
                        Some(f) => f,
                        None => files.insert(write_inputs(self.dir.path(), "check", &inputs)?),
                    };
                    // Set up again without the readying call: the checked run is the first call
                    // on these inputs.
                    if let Request::Setup { inputs: old, .. } = setup.as_mut() {
                        *old = new.clone();
                    }
                    let mut again = setup.as_ref().clone();
                    if let Request::Setup { ready, .. } = &mut again {
                        *ready = false;
                    }
                    self.workers[*worker].1.request(&again, *timeout * 10)?;
                }
            }
        }
        if files.is_some() {
            for (name, _, _) in inputs.iter() {
                let _ = std::fs::remove_file(self.dir.path().join(format!("input-{name}.npy")));
            }
        }
        Ok(())
    }

    fn keep_output(&mut self, side: Side) -> Result<()> {
        if matches!(self.sides[Self::index(side)], Runner::Worker { .. }) {
            return Ok(());
        }
        let kept = crate::kinds::tensors::LineVec::copy_of(&self.output(side)?);
        self.kept[Self::index(side)] = Some(kept);
        Ok(())
    }

    fn output(&self, side: Side) -> Result<Cow<'_, [f32]>> {
        if let Some(k) = &self.kept[Self::index(side)] {
            return Ok(Cow::Borrowed(&k[..]));
        }
        match &self.sides[Self::index(side)] {
            Runner::Builtin(v) => match &self.builtin {
                Some(case) => case.output(*v),
                None => Err(BackendError::Kernel("no built-in case".into()).into()),
            },
            Runner::Kernel(k) => k.output(),
            Runner::Worker { last, .. } if !last.is_empty() => Ok(Cow::Borrowed(&last[..])),
            Runner::Worker { .. } => Err(BackendError::NotRun {
                variant: side.name(),
            }
            .into()),
        }
    }

    fn implementation(&self, side: Side) -> Option<String> {
        if let Runner::Kernel(k) = &self.sides[Self::index(side)] {
            return Some(k.describe());
        }
        let Runner::Worker {
            worker,
            cmd,
            round_trip_secs,
            ..
        } = &self.sides[Self::index(side)]
        else {
            return None;
        };
        let w = &self.workers[*worker].1;
        let mut text = format!("worker {}: {}", cmd.describe(), w.about);
        if !round_trip_secs.is_empty() {
            let mut rt = round_trip_secs.clone();
            rt.sort_by(f64::total_cmp);
            text.push_str(&format!(
                "; protocol round trip {:.0} µs per warm run (median of {}), outside the reported time",
                rt[rt.len() / 2] * 1e6,
                rt.len()
            ));
        }
        Some(text)
    }
}

impl Drop for UserSides {
    fn drop(&mut self) {
        for (_, w) in self.workers.drain(..) {
            w.shutdown();
        }
    }
}

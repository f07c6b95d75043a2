//! A worker's side run for counting: the worker started under a wrapper (Valgrind's Callgrind,
//! which `measure::counts::valgrind` assembles), readied and run once on the warm-up inputs, set up again
//! on the checked inputs without its readying call, then asked for counted runs on them: the
//! first call on those inputs, whose counts and output are the side's, and a repeat on the same
//! inputs, whose counts show a result kept across calls. What is counted is decided by the
//! worker's kit (Valgrind client requests around the function call, `counted: true` in the run
//! request); this module only drives the protocol and reads the output back.

use super::pair::{write_inputs, write_worker_files};
use super::worker::{self, Request, TensorFile, Worker, Wrapper};
use crate::error::{BackendError, Result};
use crate::kinds::{Tensors, Variant, Workload};
use crate::spec::WorkerCommand;
use std::path::Path;
use std::time::Duration;

/// What a worker's counted runs left: the output of the first, and what the worker said of
/// itself.
pub struct CountedWorker {
    pub output: Vec<f32>,
    /// `memo_gemm.c (opledger_worker.h 2) on cpu`.
    pub about: String,
}

/// Why a worker's side was not counted, where that is no error (a GPU worker).
pub enum WorkerCounts {
    Counted(CountedWorker),
    NotAvailable(String),
}

/// What a counted worker run needs besides the worker's command.
pub struct CountRequest<'a> {
    pub wrapper: &'a Wrapper,
    pub spec_dir: &'a Path,
    pub workload: &'a Workload,
    pub variant: Variant,
    /// Inputs of the uncounted readying and warm-up calls.
    pub warm: &'a Tensors,
    /// Inputs of the counted calls, new to the worker when the first is made.
    pub checked: &'a Tensors,
    /// Bytes the kit reads after each counted call, to write back what the call left dirty.
    pub flush_bytes: u64,
    /// Counted runs on the checked inputs (1, or 2 to see a result kept across calls).
    pub counted_runs: u32,
    /// How many times longer than natively each request may take under the wrapper.
    pub slowdown: f64,
}

/// Runs `cmd`'s function as `r` says; its counts are in the files the wrapper wrote.
pub fn count_worker(cmd: &WorkerCommand, r: &CountRequest<'_>) -> Result<WorkerCounts> {
    let dir = crate::stop::private_dir("opledger-counted-", None)
        .map_err(|e| BackendError::Kernel(format!("cannot create a folder for a worker: {e}")))?;
    let python = dir.path().join("python");
    let warm_files = write_worker_files(dir.path(), &python, r.warm)?;
    let mut cmd = cmd.clone();
    cmd.timeout_secs *= r.slowdown;
    let mut w = Worker::start_under(r.wrapper, &cmd, r.spec_dir, &python)?;
    if !w.device.starts_with("cpu") {
        let why = format!(
            "the worker runs on {}: counts count the work of a CPU process (a GPU's counts come from Nsight Compute)",
            w.device
        );
        w.shutdown();
        return Ok(WorkerCounts::NotAvailable(why));
    }
    if !w.functions.is_empty() && !w.functions.contains(&cmd.function) {
        return Err(w
            .failure(format!(
                "it serves no function `{}` (it registered: {})",
                cmd.function,
                w.functions.join(", ")
            ))
            .into());
    }
    let kind = r.workload.as_kind();
    let output_shape = kind.output_shape();
    let output = dir.path().join("output.npy");
    let timeout = Duration::from_secs_f64(cmd.timeout_secs);
    let mut setup = Request::Setup {
        id: "counted".into(),
        function: cmd.function.clone(),
        variant: r.variant.name().into(),
        workload: serde_json::to_value(r.workload).unwrap_or(serde_json::Value::Null),
        inputs: warm_files,
        output: TensorFile {
            path: output.clone(),
            shape: output_shape.clone(),
            dtype: "float32".into(),
        },
        flush_bytes: r.flush_bytes,
        ready: true,
    };
    let run = |counted| Request::Run {
        id: "counted".into(),
        count: 1,
        cold: false,
        counted,
    };
    // Readied, and run once more uncounted: lazy set-up (compilation, first touches of the
    // worker's buffers) stays outside the counts.
    w.request(&setup, timeout * 10)?;
    w.request(&run(false), timeout)?;
    let checked = write_inputs(dir.path(), "check", r.checked)?;
    if let Request::Setup { inputs, ready, .. } = &mut setup {
        *inputs = checked;
        *ready = false;
    }
    w.request(&setup, timeout * 10)?;
    let mut first = None;
    for _ in 0..r.counted_runs.max(1) {
        w.request(&run(true), timeout)?;
        if first.is_none() {
            w.request(
                &Request::Output {
                    id: "counted".into(),
                },
                timeout * 10,
            )?;
            first = Some(worker::read_npy(&output, &output_shape).map_err(|m| w.failure(m))?);
        }
    }
    let about = w.about.clone();
    w.shutdown();
    Ok(WorkerCounts::Counted(CountedWorker {
        output: first.unwrap_or_default(),
        about,
    }))
}

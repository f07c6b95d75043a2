//! Workers: the user's implementation of a variant, in any language, as a long-lived process
//! that opledger starts and drives over the worker protocol (version [`PROTOCOL`],
//! docs/workers.md): JSON lines on a Unix socket handed to the worker as file descriptor 3
//! (`OPLEDGER_WORKER_FD`), so the worker's stdout stays free for its framework. Inputs and
//! outputs are `.npy` files; the worker times its own runs (only it knows its device).
//!
//! Every failure is a spec's failure with the reason and the tail of the worker's output, never a
//! hang or an orphan: each request has a time limit, a reply that is not the protocol's is an
//! error, and the worker's whole process group is killed when it is dropped.

use crate::error::BackendError;
use crate::spec::WorkerCommand;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The protocol version this opledger speaks.
pub const PROTOCOL: u64 = 1;
/// The file descriptor the channel is on, in the worker.
pub const WORKER_FD: i32 = 3;
/// Longest reply line read (a reply is a small JSON object; more is garbage).
const MAX_REPLY_BYTES: u64 = 1 << 20;
/// Lines of the worker's output quoted in an error.
const LOG_TAIL_LINES: usize = 20;

/// A request of the protocol: one JSON object on one line, `op` naming it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// First request: the protocol version opledger speaks. The reply says the worker's
    /// version, its device and the functions it registered.
    Hello { protocol: u64 },
    /// Ready `function` as case `id` (`before` or `after`) on the inputs (`.npy` files opledger
    /// wrote); its output goes to `output.path`.
    Setup {
        id: String,
        function: String,
        /// The ledger variant the function implements (`fused`, …).
        variant: String,
        /// The validated workload, as results.json stores it (`kind` and its parameters).
        workload: serde_json::Value,
        /// Input tensors by name (the kind's ledger names: `x`, `bias`, `A`, `Q`, …).
        inputs: std::collections::BTreeMap<String, TensorFile>,
        output: TensorFile,
        /// Bytes a CPU worker streams to evict its caches before a cold run.
        flush_bytes: u64,
    },
    /// Run case `id` `count` times; with `cold`, flush the device's caches first. The reply
    /// holds the seconds of each run, as the worker timed it.
    Run { id: String, count: u64, cold: bool },
    /// Write the last run's output of case `id` to its `output.path` as `.npy`.
    Output { id: String },
    /// Exit (opledger ends the process group right after).
    Shutdown,
}

/// A tensor exchanged as a `.npy` file.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct TensorFile {
    pub path: PathBuf,
    /// Row-major shape.
    pub shape: Vec<u64>,
    /// Always `float32` in protocol version 1.
    pub dtype: String,
}

/// A reply: `ok`, and the fields of the request answered (or `error`).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Reply {
    pub ok: bool,
    /// Why the request failed (with `ok: false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where it failed, for the user (quoted in opledger's error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceback: Option<String>,
    /// hello: the protocol version the worker speaks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u64>,
    /// hello: the worker's name and version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// hello: the device it runs on (`cpu`, `cuda`, `cuda:0 NVIDIA H200`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// hello: the functions registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub functions: Option<Vec<String>>,
    /// run: seconds of each run, timed by the worker (CUDA events on a GPU, a monotonic clock on
    /// the CPU), excluding the protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secs: Option<Vec<f64>>,
}

/// The JSON Schema of the protocol's messages (`opledger schema worker`).
pub fn schema() -> serde_json::Value {
    /// One line of opledger's worker protocol, version 1: a request (opledger to worker) or a
    /// reply (worker to opledger).
    #[derive(schemars::JsonSchema)]
    #[schemars(untagged)]
    #[allow(dead_code)]
    enum Message {
        Request(Request),
        Reply(Reply),
    }
    let mut root = schemars::generate::SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<Message>()
        .to_value();
    root["$id"] = serde_json::json!("https://opledger.dev/schemas/worker.schema.json");
    root["title"] = serde_json::json!("opledger worker protocol 1");
    root
}

/// A running worker process.
pub struct Worker {
    child: Child,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    log: PathBuf,
    /// `program args…`, for messages.
    command: String,
    /// What the worker said of itself in its hello.
    pub about: String,
    /// The functions it registered.
    pub functions: Vec<String>,
}

impl Worker {
    /// Starts `cmd` in `dir` with its output going to `log`, and greets it (protocol version,
    /// the functions it serves).
    pub fn start(
        cmd: &WorkerCommand,
        dir: &Path,
        log: &Path,
        python_path: &Path,
    ) -> Result<Self, BackendError> {
        let command = cmd.command.join(" ");
        let fail = |message: String| BackendError::Worker {
            command: command.clone(),
            message,
            output_tail: String::new(),
        };
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| fail(format!("cannot create its channel: {e}")))?;
        let out = std::fs::File::create(log)
            .map_err(|e| fail(format!("cannot create {}: {e}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(|e| fail(format!("cannot share {}: {e}", log.display())))?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&theirs);
        let mut c = Command::new(&cmd.command[0]);
        c.args(&cmd.command[1..])
            .current_dir(dir)
            .env("OPLEDGER_WORKER_FD", WORKER_FD.to_string())
            .env("OPLEDGER_WORKER_PROTOCOL", PROTOCOL.to_string())
            // The reference module, importable by every Python worker without installing it.
            .env("PYTHONPATH", python_path_with(python_path))
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            // A group of its own: ending the worker ends whatever it started too.
            .process_group(0);
        // SAFETY: between fork and exec only async-signal-safe calls (dup2, fcntl) on file
        // descriptors this process owns: the socket's end moves to WORKER_FD without
        // close-on-exec, so the worker (and only it) inherits the channel.
        unsafe {
            c.pre_exec(move || {
                if fd == WORKER_FD {
                    let flags = libc::fcntl(fd, libc::F_GETFD);
                    if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(fd, WORKER_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = c.spawn().map_err(|e| {
            fail(format!(
                "cannot start `{}` in {}: {e}",
                cmd.command[0],
                dir.display()
            ))
        })?;
        drop(theirs);
        let writer = ours
            .try_clone()
            .map_err(|e| fail(format!("cannot share its channel: {e}")))?;
        let mut w = Worker {
            child,
            reader: BufReader::new(ours),
            writer,
            log: log.to_path_buf(),
            command,
            about: String::new(),
            functions: Vec::new(),
        };
        let setup_limit = Duration::from_secs_f64(cmd.timeout_secs * 10.0);
        let hello = w.request(&Request::Hello { protocol: PROTOCOL }, setup_limit)?;
        if hello.protocol != Some(PROTOCOL) {
            return Err(w.failure(format!(
                "it speaks protocol {}, this opledger {PROTOCOL}",
                hello
                    .protocol
                    .map_or("(none said)".to_string(), |p| p.to_string())
            )));
        }
        w.about = format!(
            "{} on {}",
            hello.worker.as_deref().unwrap_or("a worker"),
            hello.device.as_deref().unwrap_or("an unnamed device")
        );
        w.functions = hello.functions.unwrap_or_default();
        Ok(w)
    }

    /// Sends one request and reads its reply within `limit`; a reply with `ok: false` is an
    /// error carrying the worker's message.
    pub fn request(&mut self, request: &Request, limit: Duration) -> Result<Reply, BackendError> {
        let op = match request {
            Request::Hello { .. } => "hello",
            Request::Setup { .. } => "setup",
            Request::Run { .. } => "run",
            Request::Output { .. } => "output",
            Request::Shutdown => "shutdown",
        };
        let mut line = serde_json::to_string(request)
            .map_err(|e| self.failure(format!("cannot encode `{op}`: {e}")))?;
        line.push('\n');
        if let Err(e) = self.writer.write_all(line.as_bytes()) {
            return Err(self.failure(format!("cannot send `{op}`: {e}")));
        }
        if let Err(e) = self.reader.get_ref().set_read_timeout(Some(limit)) {
            return Err(self.failure(format!("cannot set the time limit: {e}")));
        }
        let mut reply = String::new();
        let read = (&mut self.reader)
            .take(MAX_REPLY_BYTES)
            .read_line(&mut reply);
        match read {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(self.failure(format!(
                    "no reply to `{op}` within {:.0} s",
                    limit.as_secs_f64()
                )))
            }
            Err(e) if e.kind() != std::io::ErrorKind::ConnectionReset => {
                return Err(self.failure(format!("reading the reply to `{op}`: {e}")))
            }
            Err(_) | Ok(0) => {
                let status = self.exit_status();
                return Err(self.failure(format!(
                    "the worker closed the channel instead of answering `{op}` ({status})"
                )));
            }
            Ok(_) if !reply.ends_with('\n') => {
                return Err(self.failure(format!(
                    "protocol error: the reply to `{op}` is not one line of at most {MAX_REPLY_BYTES} bytes"
                )))
            }
            Ok(_) => {}
        }
        let value: Reply = match serde_json::from_str(&reply) {
            Ok(v) => v,
            Err(e) => {
                let shown: String = reply.trim_end().chars().take(200).collect();
                return Err(self.failure(format!(
                    "protocol error: the reply to `{op}` is not the protocol's ({e}): {shown:?}"
                )));
            }
        };
        if value.ok {
            return Ok(value);
        }
        let mut message = value.error.unwrap_or_else(|| "(no message)".into());
        if let Some(tb) = value.traceback {
            message.push('\n');
            message.push_str(tb.trim_end());
        }
        Err(self.failure(format!("`{op}` failed: {message}")))
    }

    /// The worker's exit status if it has exited (waiting a moment for it), in words.
    fn exit_status(&mut self) -> String {
        for _ in 0..20 {
            if let Ok(Some(s)) = self.child.try_wait() {
                return format!("it exited: {s}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        "it is still running".into()
    }

    /// An error about this worker, with the tail of its output.
    pub fn failure(&self, message: String) -> BackendError {
        BackendError::Worker {
            command: self.command.clone(),
            message,
            output_tail: tail(&self.log, LOG_TAIL_LINES),
        }
    }

    /// Asks the worker to exit, then ends its process group whatever it answered.
    pub fn shutdown(mut self) {
        let _ = self.request(&Request::Shutdown, Duration::from_secs(2));
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: kill with a negative pid signals the process group the worker leads (it was
        // started with process_group(0), so its group id is its pid); no memory is touched.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// The Python worker module shipped inside opledger.
pub const PYTHON_MODULE: &str = include_str!("../../python/opledger_worker.py");

/// `PYTHONPATH` with `dir` first.
fn python_path_with(dir: &Path) -> std::ffi::OsString {
    let mut paths = vec![dir.to_path_buf()];
    if let Some(old) = std::env::var_os("PYTHONPATH") {
        paths.extend(std::env::split_paths(&old));
    }
    std::env::join_paths(paths).unwrap_or_else(|_| dir.as_os_str().to_owned())
}

/// The last `lines` lines of a log file (empty if it cannot be read).
fn tail(path: &Path, lines: usize) -> String {
    let Ok(text) = std::fs::read(path) else {
        return String::new();
    };
    // The end of a huge log is enough.
    let start = text.len().saturating_sub(64 << 10);
    let text = String::from_utf8_lossy(&text[start..]);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Writes `data` as a little-endian float32 `.npy` file of `shape`.
pub fn write_npy(path: &Path, shape: &[u64], data: &[f32]) -> Result<(), BackendError> {
    use npyz::WriterBuilder;
    let io = |e: std::io::Error| BackendError::Kernel(format!("writing {}: {e}", path.display()));
    let file = std::fs::File::create(path).map_err(io)?;
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(std::io::BufWriter::new(file))
        .begin_nd()
        .map_err(io)?;
    w.extend(data.iter().copied()).map_err(io)?;
    w.finish().map_err(io)
}

/// Reads a float32 `.npy` file that must have `shape` (C order).
pub fn read_npy(path: &Path, shape: &[u64]) -> Result<Vec<f32>, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let npy = npyz::NpyFile::new(std::io::BufReader::new(file))
        .map_err(|e| format!("{} is not a .npy file: {e}", path.display()))?;
    if npy.shape() != shape {
        return Err(format!(
            "the output has shape {:?}; expected {shape:?}",
            npy.shape()
        ));
    }
    if npy.order() != npyz::Order::C {
        return Err("the output is in Fortran order; expected C order (row-major)".into());
    }
    let dtype = npy.dtype().descr();
    let data = npy
        .data::<f32>()
        .map_err(|_| format!("the output's dtype is {dtype}; expected float32 (<f4)"))?;
    data.collect::<std::io::Result<Vec<f32>>>()
        .map_err(|e| format!("reading {}: {e}", path.display()))
}

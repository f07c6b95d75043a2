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
        let hello = w.request(
            &serde_json::json!({"op": "hello", "protocol": PROTOCOL}),
            setup_limit,
        )?;
        if hello.get("protocol").and_then(|p| p.as_u64()) != Some(PROTOCOL) {
            return Err(w.failure(format!(
                "it speaks protocol {}, this opledger {PROTOCOL}",
                hello.get("protocol").unwrap_or(&serde_json::Value::Null)
            )));
        }
        w.about = format!(
            "{} on {}",
            hello
                .get("worker")
                .and_then(|v| v.as_str())
                .unwrap_or("a worker"),
            hello
                .get("device")
                .and_then(|v| v.as_str())
                .unwrap_or("an unnamed device")
        );
        w.functions = hello
            .get("functions")
            .and_then(|f| f.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        Ok(w)
    }

    /// Sends one request and reads its reply within `limit`; a reply with `ok: false` is an
    /// error carrying the worker's message.
    pub fn request(
        &mut self,
        request: &serde_json::Value,
        limit: Duration,
    ) -> Result<serde_json::Value, BackendError> {
        let op = request
            .get("op")
            .and_then(|v| v.as_str())
            .unwrap_or("?")
            .to_string();
        let mut line = request.to_string();
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
        let value: serde_json::Value = match serde_json::from_str(&reply) {
            Ok(v) => v,
            Err(e) => {
                let shown: String = reply.trim_end().chars().take(200).collect();
                return Err(self.failure(format!(
                    "protocol error: the reply to `{op}` is not JSON ({e}): {shown:?}"
                )));
            }
        };
        match value.get("ok").and_then(|v| v.as_bool()) {
            Some(true) => Ok(value),
            Some(false) => {
                let mut message = value
                    .get("error")
                    .and_then(|v| v.as_str())
                    .unwrap_or("(no message)")
                    .to_string();
                if let Some(tb) = value.get("traceback").and_then(|v| v.as_str()) {
                    message.push('\n');
                    message.push_str(tb.trim_end());
                }
                Err(self.failure(format!("`{op}` failed: {message}")))
            }
            None => Err(self.failure(format!(
                "protocol error: the reply to `{op}` has no boolean `ok`"
            ))),
        }
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
        let _ = self.request(
            &serde_json::json!({"op": "shutdown"}),
            Duration::from_secs(2),
        );
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

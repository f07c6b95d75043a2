//! Workers: the user's implementation of a variant, in any language, as a long-lived process
//! that opledger starts and drives over the worker protocol (version [`PROTOCOL`],
//! docs/workers.md): JSON lines on a Unix socket handed to the worker as file descriptor 3
//! (`OPLEDGER_WORKER_FD`), so the worker's stdout stays free for its framework. Inputs and
//! outputs are `.npy` files; the worker times its own runs (only it knows its device).
//!
//! Every failure is a spec's failure with the reason and the tail of the worker's output, never a
//! hang or an orphan: each request has a time limit, a worker that exits is noticed at once (even
//! when a process it started still holds the channel), a reply that is not the protocol's is an
//! error, and when the worker is dropped its whole process group is killed and, on Linux, every
//! process descended from it too (opledger is their subreaper, so a `setsid()` does not escape).
//! Only the last [`TAIL_BYTES`] of its output are kept, in memory, however much it writes.

use crate::error::BackendError;
use crate::spec::WorkerCommand;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The protocol version this opledger speaks.
/// The shortest run a worker may report: no kernel of a whole workload finishes in less, so a
/// smaller time is a timer that is not one.
pub const FLOOR_SECS: f64 = 1e-8;

/// Whether a run's reported seconds are possible: finite, at least [`FLOOR_SECS`], and no more
/// than `wall_secs`, the request's own time by opledger's clock.
pub fn possible_secs(secs: f64, wall_secs: f64) -> bool {
    secs.is_finite() && secs >= FLOOR_SECS && secs <= wall_secs
}

pub const PROTOCOL: u64 = 1;
/// The file descriptor the channel is on, in the worker.
pub const WORKER_FD: i32 = 3;
/// Longest reply line read (a reply is a small JSON object; more is garbage).
const MAX_REPLY_BYTES: u64 = 1 << 20;
/// Lines of the worker's output quoted in an error.
const LOG_TAIL_LINES: usize = 20;
/// Bytes of the worker's output kept (the end of it; the rest is read and dropped).
pub const TAIL_BYTES: usize = 64 << 10;
/// How often a wait for a reply looks whether the worker is still alive.
const LIVENESS_POLL: Duration = Duration::from_millis(50);
/// The variable that marks a worker's processes, so that they can be found and ended.
const TOKEN_VAR: &str = "OPLEDGER_WORKER_TOKEN";

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
        /// Whether the worker may call the function once at setup to ready it (compile,
        /// autotune). False when the case is set up again on new inputs before the checked
        /// run: that run must be the first call on them, so that no result computed before it
        /// can pass for it. Absent: true.
        #[serde(default = "ready_by_default")]
        ready: bool,
    },
    /// Run case `id` `count` times; with `cold`, flush the device's caches first. The reply
    /// holds the seconds of each run, as the worker timed it.
    Run {
        id: String,
        count: u64,
        cold: bool,
        /// Counts mode: the worker runs under Valgrind's Callgrind, and the kit turns counting
        /// on around the function call (a client request, which also empties the simulated
        /// caches), dumps the call's counts, reads `flush_bytes` to write back the lines the
        /// call left dirty, dumps that, and turns counting off. Only with `count: 1`. Absent:
        /// false.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        counted: bool,
    },
    /// Write the last run's output of case `id` to its `output.path` as `.npy`.
    Output { id: String },
    /// Exit (opledger ends the process group right after).
    Shutdown,
}

fn ready_by_default() -> bool {
    true
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

/// The end of a worker's stdout and stderr, filled by a thread that drains the pipe.
#[derive(Clone, Default)]
struct OutputTail {
    bytes: Arc<Mutex<std::collections::VecDeque<u8>>>,
    /// A second handle on the pipe's read end, to see how much is still unread.
    pipe: Option<Arc<std::io::PipeReader>>,
}

impl OutputTail {
    /// Starts draining `pipe` into a new tail (until every writer has closed it).
    fn drain(mut pipe: std::io::PipeReader) -> Self {
        let tail = OutputTail {
            pipe: pipe.try_clone().ok().map(Arc::new),
            ..Default::default()
        };
        let bytes = tail.bytes.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let mut t = bytes.lock().unwrap_or_else(|e| e.into_inner());
                        t.extend(&buf[..n]);
                        let excess = t.len().saturating_sub(TAIL_BYTES);
                        t.drain(..excess);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        });
        tail
    }

    /// Gives the draining thread a moment to take what the pipe still holds (a worker that just
    /// crashed wrote its last words there), so that an error quotes them.
    fn settle(&self) {
        use std::os::fd::AsRawFd;
        let Some(pipe) = &self.pipe else {
            return;
        };
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(500) {
            let mut unread: libc::c_int = 0;
            // SAFETY: FIONREAD writes one int, the count of unread bytes of the pipe we hold.
            let r = unsafe { libc::ioctl(pipe.as_raw_fd(), libc::FIONREAD, &mut unread) };
            if r < 0 || unread == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        // The thread may hold bytes it read but has not stored yet.
        std::thread::sleep(Duration::from_millis(5));
    }

    /// The last `lines` lines.
    fn lines(&self, lines: usize) -> String {
        self.settle();
        let t = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let (a, b) = t.as_slices();
        let text = String::from_utf8_lossy(&[a, b].concat()).into_owned();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// A running worker process.
pub struct Worker {
    child: Child,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    output: OutputTail,
    /// The value of [`TOKEN_VAR`] in its environment (and its children's).
    token: String,
    /// `program args…`, for messages.
    command: String,
    /// What the worker said of itself in its hello.
    pub about: String,
    /// The functions it registered.
    pub functions: Vec<String>,
    /// The device it said it runs on (`cpu`, `cuda`, …).
    pub device: String,
    /// Its process group, ended if opledger is stopped.
    _group: crate::stop::Group,
}

/// A program a worker is started under (Valgrind, in counts mode), with variables of its own.
#[derive(Debug, Clone, Default)]
pub struct Wrapper {
    /// The program and its arguments, put before the worker's command.
    pub command: Vec<String>,
    /// Variables set for the worker besides opledger's own.
    pub env: Vec<(String, String)>,
    /// Variables the worker must not inherit (those that would change what the wrapper does).
    pub env_remove: Vec<String>,
}

impl Worker {
    /// Starts `cmd` in `dir` (its output kept as a bounded tail), and greets it (protocol
    /// version, the functions it serves).
    pub fn start(
        cmd: &WorkerCommand,
        dir: &Path,
        python_path: &Path,
    ) -> Result<Self, BackendError> {
        Self::start_under(&Wrapper::default(), cmd, dir, python_path)
    }

    /// [`Worker::start`], the worker's command run by `wrapper`'s program (messages still name
    /// the worker's own command).
    pub fn start_under(
        wrapper: &Wrapper,
        cmd: &WorkerCommand,
        dir: &Path,
        python_path: &Path,
    ) -> Result<Self, BackendError> {
        let command = cmd.command.join(" ");
        let fail = |message: String| BackendError::Worker {
            command: command.clone(),
            message,
            output_tail: String::new(),
        };
        if !dir.is_dir() {
            return Err(fail(format!(
                "its working folder `{}` (the spec's folder) is not a folder",
                dir.display()
            )));
        }
        become_subreaper();
        let token = new_token();
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| fail(format!("cannot create its channel: {e}")))?;
        let (out_read, out) =
            std::io::pipe().map_err(|e| fail(format!("cannot create its output pipe: {e}")))?;
        let err = out
            .try_clone()
            .map_err(|e| fail(format!("cannot share its output pipe: {e}")))?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&theirs);
        let argv: Vec<&String> = wrapper.command.iter().chain(&cmd.command).collect();
        let mut c = Command::new(argv[0]);
        withhold(&mut c, wrapper);
        c.args(&argv[1..])
            .envs(wrapper.env.iter().map(|(k, v)| (k, v)))
            .current_dir(dir)
            .env(TOKEN_VAR, &token)
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
            let why = if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "`{}` was not found (not on PATH, nor a path from the spec's folder)",
                    argv[0]
                )
            } else {
                e.to_string()
            };
            fail(format!(
                "cannot start `{}` in {}: {why}",
                argv[0],
                dir.display()
            ))
        })?;
        // Our copies of the pipe's write end go with the Command: only the worker's remain.
        drop(c);
        drop(theirs);
        let output = OutputTail::drain(out_read);
        live_workers().push(child.id() as i32);
        let group = crate::stop::group(child.id());
        let writer = ours
            .try_clone()
            .map_err(|e| fail(format!("cannot share its channel: {e}")))?;
        let mut w = Worker {
            child,
            _group: group,
            reader: BufReader::new(ours),
            writer,
            output,
            token,
            command,
            about: String::new(),
            functions: Vec::new(),
            device: String::new(),
        };
        w.greet(Duration::from_secs_f64(cmd.timeout_secs * 10.0))?;
        Ok(w)
    }

    /// The first request: the protocol's version, and what the worker says of itself.
    fn greet(&mut self, limit: Duration) -> Result<(), BackendError> {
        let hello = self.request(&Request::Hello { protocol: PROTOCOL }, limit)?;
        if hello.protocol != Some(PROTOCOL) {
            return Err(self.failure(format!(
                "it speaks protocol {}, this opledger {PROTOCOL}",
                hello
                    .protocol
                    .map_or("(none said)".to_string(), |p| p.to_string())
            )));
        }
        self.about = format!(
            "{} on {}",
            hello.worker.as_deref().unwrap_or("a worker"),
            hello.device.as_deref().unwrap_or("an unnamed device")
        );
        self.functions = hello.functions.unwrap_or_default();
        self.device = hello.device.unwrap_or_default();
        Ok(())
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
        let line = serde_json::to_string(request)
            .map_err(|e| self.failure(format!("cannot encode `{op}`: {e}")))?;
        let value = self.exchange(&line, op, limit)?;
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

    /// Sends one line (any text: `worker-test` sends requests that are not the protocol's too)
    /// and reads its reply within `limit`, `ok` or not; an error only when no reply of the
    /// protocol's shape came.
    pub fn exchange(
        &mut self,
        line: &str,
        op: &str,
        limit: Duration,
    ) -> Result<Reply, BackendError> {
        let mut line = line.to_string();
        line.push('\n');
        if let Err(e) = self.writer.write_all(line.as_bytes()) {
            return Err(self.failure(format!("cannot send `{op}`: {e}")));
        }
        let deadline = Instant::now() + limit;
        self.wait_readable(deadline, op, limit)?;
        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        if let Err(e) = self.reader.get_ref().set_read_timeout(Some(remaining)) {
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
        match serde_json::from_str(&reply) {
            Ok(v) => Ok(v),
            Err(e) => {
                let shown: String = reply.trim_end().chars().take(200).collect();
                Err(self.failure(format!(
                    "protocol error: the reply to `{op}` is not the protocol's ({e}): {shown:?}"
                )))
            }
        }
    }

    /// Whether the worker's process has exited within `wait` (its status in words).
    pub fn exited_within(&mut self, wait: Duration) -> Option<String> {
        let deadline = Instant::now() + wait;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s.to_string());
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the channel has something to read (a reply, or its end) or the deadline
    /// passes, looking every [`LIVENESS_POLL`] whether the worker has exited: a worker that exits
    /// while a process it started keeps the channel open would otherwise be waited for until
    /// the deadline.
    fn wait_readable(
        &mut self,
        deadline: Instant,
        op: &str,
        limit: Duration,
    ) -> Result<(), BackendError> {
        use std::os::fd::AsRawFd;
        let fd = self.reader.get_ref().as_raw_fd();
        let readable = |wait: Duration| -> std::io::Result<bool> {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd on a socket this worker owns, valid for the call.
            let r =
                unsafe { libc::poll(&mut pfd, 1, wait.as_millis().min(i32::MAX as u128) as i32) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                return if e.kind() == std::io::ErrorKind::Interrupted {
                    Ok(false)
                } else {
                    Err(e)
                };
            }
            Ok(r > 0)
        };
        loop {
            if !self.reader.buffer().is_empty() {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self.failure(format!(
                    "no reply to `{op}` within {:.0} s",
                    limit.as_secs_f64()
                )));
            }
            match readable((deadline - now).min(LIVENESS_POLL)) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(self.failure(format!("waiting for the reply to `{op}`: {e}"))),
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                // A reply written just before it exited is still a reply.
                if readable(Duration::ZERO).unwrap_or(false) {
                    return Ok(());
                }
                return Err(self.failure(format!(
                    "the worker exited ({status}) without answering `{op}`; a process it started still holds the channel"
                )));
            }
        }
    }

    /// The worker's exit status if it has exited (waiting a moment for it), in words.
    fn exit_status(&mut self) -> String {
        match self.exited_within(Duration::from_secs(1)) {
            Some(s) => format!("it exited: {s}"),
            None => "it is still running".into(),
        }
    }

    /// An error about this worker, with the tail of its output.
    pub fn failure(&self, message: String) -> BackendError {
        // The worker's words and output are data: shown, never obeyed by a terminal or a CI log.
        BackendError::Worker {
            command: self.command.clone(),
            message: crate::untrusted::printable(&message),
            output_tail: crate::untrusted::printable(&self.output.lines(LOG_TAIL_LINES)),
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
        end_descendants(pid, &self.token);
        let _ = self.child.wait();
        live_workers().retain(|&p| p != pid);
    }
}

/// What a worker does not inherit: no secret (the store's URL and any variable holding a
/// password are what every output masks, and a worker's output reaches the results and the
/// report), nor the variables its wrapper names.
fn withhold(c: &mut Command, wrapper: &Wrapper) {
    c.env_remove(crate::settings::STORE_VAR);
    for name in crate::secret::secret_vars() {
        c.env_remove(name);
    }
    for name in &wrapper.env_remove {
        c.env_remove(name);
    }
}

/// The pids of the workers alive in this process (their trees are not another worker's).
fn live_workers() -> std::sync::MutexGuard<'static, Vec<i32>> {
    static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A token no other worker of any opledger process has.
fn new_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Makes this process the subreaper of its descendants (Linux): a worker's grandchild whose
/// parent exits is re-parented here, not to init, so it can still be found and ended.
fn become_subreaper() {
    #[cfg(target_os = "linux")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes one integer and touches no memory.
            unsafe {
                libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong);
            }
        });
    }
}

/// Ends every process of a worker's tree on Linux: the descendants of `worker` (by parent pid,
/// whatever session or group they moved to), the processes carrying its token, and the orphans
/// re-parented to this process that carry it or no token at all. Repeated until none is left,
/// since a process may fork while its tree is being ended; the ones that were our children are
/// reaped. Elsewhere the process group (killed by the caller) is all that is ended.
fn end_descendants(worker: i32, token: &str) {
    #[cfg(target_os = "linux")]
    {
        let me = std::process::id() as i32;
        let marker = format!("{TOKEN_VAR}={token}");
        for _ in 0..50 {
            let procs = proc_table();
            let others: Vec<i32> = live_workers()
                .iter()
                .copied()
                .filter(|&p| p != worker)
                .collect();
            let mut roots: Vec<i32> = vec![worker];
            for p in &procs {
                if p.pid == me || others.contains(&p.pid) || p.zombie {
                    continue;
                }
                let env = std::fs::read(format!("/proc/{}/environ", p.pid)).unwrap_or_default();
                let ours = env.split(|&b| b == 0).any(|v| v == marker.as_bytes());
                let unmarked = !env
                    .split(|&b| b == 0)
                    .any(|v| v.starts_with(TOKEN_VAR.as_bytes()));
                if ours || (p.ppid == me && unmarked) {
                    roots.push(p.pid);
                }
            }
            // Descendants by parent pid.
            let mut victims: Vec<i32> = Vec::new();
            let mut queue = roots;
            while let Some(v) = queue.pop() {
                if v == me || victims.contains(&v) {
                    continue;
                }
                victims.push(v);
                queue.extend(procs.iter().filter(|p| p.ppid == v).map(|p| p.pid));
            }
            let alive: Vec<&ProcEntry> = procs
                .iter()
                .filter(|p| victims.contains(&p.pid) && p.pid != worker)
                .collect();
            for p in &alive {
                // SAFETY: signals a process of the worker's tree; no memory is touched.
                unsafe {
                    libc::kill(p.pid, libc::SIGKILL);
                }
            }
            for p in alive.iter().filter(|p| p.ppid == me) {
                // SAFETY: reaps a child of this process that was just killed (WNOHANG: never
                // blocks); the worker itself is left to its `Child`.
                unsafe {
                    libc::waitpid(p.pid, std::ptr::null_mut(), libc::WNOHANG);
                }
            }
            if alive.iter().all(|p| p.zombie) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (worker, token);
}

#[cfg(target_os = "linux")]
struct ProcEntry {
    pid: i32,
    ppid: i32,
    zombie: bool,
}

/// Every process of /proc with its parent and whether it is a zombie.
#[cfg(target_os = "linux")]
fn proc_table() -> Vec<ProcEntry> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`: comm may hold spaces and parentheses, so split after the
        // last `)`.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("");
        let ppid = f.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        out.push(ProcEntry {
            pid,
            ppid,
            zombie: state == "Z" || state == "X",
        });
    }
    out
}

/// The Python worker module shipped inside opledger.
pub const PYTHON_MODULE: &str = include_str!("../../../python/opledger_worker/__init__.py");

/// `PYTHONPATH` with `dir` first.
fn python_path_with(dir: &Path) -> std::ffi::OsString {
    let mut paths = vec![dir.to_path_buf()];
    if let Some(old) = std::env::var_os("PYTHONPATH") {
        paths.extend(std::env::split_paths(&old));
    }
    std::env::join_paths(paths).unwrap_or_else(|_| dir.as_os_str().to_owned())
}

/// Writes `data` as a little-endian float32 `.npy` file of `shape`.
pub fn write_npy(path: &Path, shape: &[u64], data: &[f32]) -> Result<(), BackendError> {
    let io = |e: std::io::Error| BackendError::Kernel(format!("writing {}: {e}", path.display()));
    // Whatever is at `path` (a worker may have swapped the file for a FIFO, whose open would
    // block, or a link) is removed first, and the file is created new.
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
        _ => {}
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io)?;
    let mut w = std::io::BufWriter::new(file);
    crate::npy::write(&mut w, shape, data).map_err(io)?;
    std::io::Write::flush(&mut w).map_err(io)
}

/// Largest `.npy` header read (NumPy writes 128 bytes, padded; version 2 allows 4 GiB).
const MAX_NPY_HEADER_BYTES: u64 = 1 << 16;

/// Reads a float32 `.npy` file that must have `shape` (C order). Bounded in time and size,
/// whatever a worker left at `path`: only a regular file is read (opened without following a
/// link or blocking on a FIFO, so a worker that swaps its output for `/dev/zero`, a FIFO or a
/// link cannot hang the run), and no more than the header and 8 bytes an element.
pub fn read_npy(path: &Path, shape: &[u64]) -> Result<Vec<f32>, String> {
    let file = crate::files::open_no_follow(path).map_err(|e| {
        if e.raw_os_error() == Some(libc::ELOOP) {
            format!(
                "{} is a symbolic link: a worker's output must be a regular file (written with numpy.save or the kit's writer)",
                path.display()
            )
        } else {
            format!("cannot read {}: {e}", path.display())
        }
    })?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "{} is not a regular file: a worker's output must be one (written with numpy.save or the kit's writer)",
            path.display()
        ));
    }
    let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    let max_bytes = elements
        .and_then(|n| n.checked_mul(8))
        .and_then(|n| n.checked_add(MAX_NPY_HEADER_BYTES))
        .unwrap_or(u64::MAX);
    if meta.len() > max_bytes {
        return Err(format!(
            "{} holds {} bytes, more than a .npy of shape {shape:?} can",
            path.display(),
            meta.len()
        ));
    }
    let mut input = std::io::BufReader::new(std::io::Read::take(file, max_bytes));
    let header = crate::npy::read_header(&mut input, MAX_NPY_HEADER_BYTES)
        .map_err(|e| format!("{} is not a .npy file: {e}", path.display()))?;
    if header.shape != shape {
        return Err(format!(
            "the output has shape {:?}; expected {shape:?}",
            header.shape
        ));
    }
    if header.fortran_order {
        return Err("the output is in Fortran order; expected C order (row-major)".into());
    }
    if !crate::npy::is_f32(&header.descr) {
        return Err(format!(
            "the output's dtype is '{}'; expected float32 (<f4)",
            header.descr
        ));
    }
    let n = elements
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("the shape {shape:?} is too large"))?;
    crate::npy::read_f32(&mut input, &header.descr, n)
        .map_err(|e| format!("reading {}: {e}", path.display()))
}

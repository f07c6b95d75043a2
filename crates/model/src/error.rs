//! Error types of the library and the exit codes they map to.
//!
//! Every error that reaches the user says which file it concerns and, for specs, the line and
//! column; the CLI turns each kind into one of the named exit codes.

use std::path::PathBuf;

/// The process exit codes of `opledger`: a CI gate reads these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Every check passed.
    Pass = 0,
    /// A check or the regression gate failed.
    GateFailed = 1,
    /// Bad input: a spec, a flag, a baseline or a template.
    BadInput = 2,
    /// The requested backend is not available on this machine or in this build.
    BackendUnavailable = 3,
    /// An output could not be written or serialised (a full disk, a folder's permissions, a
    /// bug): what was measured is not at fault, and neither is the input.
    OutputFailed = 4,
    /// Under `run --bisect` only: the run was INCONCLUSIVE, and `git bisect run` skips a commit
    /// that exits 125.
    BisectSkip = 125,
}

impl ExitCode {
    /// The status of the process: the code itself, or under `run --bisect` (where `git bisect
    /// run` reads 1 to 127 but 125 as "bad") bad input, an unavailable backend and a failed
    /// output as 128 + the code, which makes `git bisect run` stop instead of blaming a commit.
    pub fn status(self, bisect: bool) -> i32 {
        match self {
            ExitCode::BadInput | ExitCode::BackendUnavailable | ExitCode::OutputFailed
                if bisect =>
            {
                128 + self as i32
            }
            code => code as i32,
        }
    }
}

/// A position in a text file, 1-based like editors show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// Formats `path` or `path:line:col` for error messages.
pub fn located(path: &std::path::Path, pos: Option<Position>) -> String {
    match pos {
        Some(p) => format!("{}:{}", path.display(), p),
        None => path.display().to_string(),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A spec file that could not be read, parsed or validated.
    #[error("{}: {message}", located(.path, *.pos))]
    Spec {
        path: PathBuf,
        pos: Option<Position>,
        message: String,
    },
    /// Reading an input (or listing a folder of inputs), with the path it concerned.
    #[error("{action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Writing an output (an archive, a baseline, a report), with the path it concerned.
    #[error("{action} {}: {source}", .path.display())]
    Write {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A stored baseline or result file that is not what we wrote.
    #[error("{}: {message}", .path.display())]
    Corrupt { path: PathBuf, message: String },
    /// A file refused before it is read or written (not a regular file, too large, a folder
    /// that cannot be written).
    #[error("{}: {message}", .path.display())]
    Refused { path: PathBuf, message: String },
    /// A flag or argument that makes no sense, or asks more than this machine has.
    #[error("{0}")]
    Flag(String),
    /// A history store's address that cannot be used (from `--store` or `OPLEDGER_STORE`),
    /// shown without its password.
    #[error("store {shown}: {problem}")]
    StoreUrl {
        shown: String,
        problem: StoreUrlProblem,
    },
    /// A reference the gate is asked to judge a spec against that the history store cannot
    /// give (`--against`, a spec's `gate.against`).
    #[error("{spec}: the gate judges against `{against}`, {problem}")]
    Reference {
        spec: String,
        against: String,
        problem: ReferenceProblem,
    },
    /// A store a reading command was pointed at that does not exist (an SQLite file it would
    /// otherwise create, empty).
    #[error("{command}: no store at {} (runs record into `<runs-dir>/history.sqlite`; --store or --runs-dir names another)", .path.display())]
    NoStore { command: String, path: PathBuf },
    /// No spec to run: none given, or a folder that holds none.
    #[error("{}", match .folder { Some(f) => format!("{}: no spec files (*.yaml, *.yml) in this directory", f.display()), None => "no spec files given".to_string() })]
    NoSpecs { folder: Option<PathBuf> },
    /// The bandwidth probe and the cold-cache flush need more memory than there is.
    #[error("the bandwidth probe (3 arrays of {} MiB) and the cold-cache flush buffer ({} MiB) need {:.2} GiB of memory but only {:.2} GiB is available (the least of free memory, `ulimit -v` and the cgroup's limit): lower --probe-mib and --flush-mib", .probe_bytes >> 20, .flush_bytes >> 20, gib(*.need_bytes), gib(*.available_bytes))]
    ProbeMemory {
        probe_bytes: u64,
        flush_bytes: u64,
        need_bytes: u64,
        available_bytes: u64,
    },
    /// Counting asked for where it cannot be done, or a counting option without counting.
    #[error("{0}")]
    Counts(CountsRefusal),
    /// The counted child process (`count-side`) could not count its side.
    #[error("count-side: {0}")]
    CountSide(CountSideProblem),
    /// `worker-test` given a spec it cannot test.
    #[error("worker-test: {}: {problem}", .spec.display())]
    WorkerTest {
        spec: PathBuf,
        problem: WorkerTestProblem,
    },
    /// A folder given as a run's archive that holds none.
    #[error("{command}: {}: no results.json there, nor in a folder of it: not a run's archive", .path.display())]
    NotAnArchive {
        command: &'static str,
        path: PathBuf,
    },
    /// A case, branch or device the history store does not hold.
    #[error("history: {what} `{name}` is not in the store{} (it holds: {})", .closest.as_ref().map(|k| format!("; did you mean `{k}`?")).unwrap_or_default(), if .known.is_empty() { "none".to_string() } else { .known.join(", ") })]
    NotInStore {
        what: &'static str,
        name: String,
        closest: Option<String>,
        known: Vec<String>,
    },
    /// `--shard` (or the scheduler's variables it reads) that names no shard.
    #[error("--shard: {0}")]
    Shard(String),
    /// Inputs that do not belong together (shards of different commits, two runs without a
    /// spec in common, a run and specs that are not its).
    #[error("{0}")]
    Mismatch(String),
    /// An `OPLEDGER_*` environment variable with a value opledger cannot use.
    #[error("{var}={value:?}: expected {expected}")]
    Env {
        var: &'static str,
        value: String,
        expected: &'static str,
    },
    /// The history store could not be opened, read or written.
    #[error("history store {store}: {action}: {message}")]
    Store {
        /// The store's file, or its server URL without the password.
        store: String,
        action: StoreAction,
        message: String,
        /// The failure was a full disk: a failed write of an output (exit 4) whatever the
        /// store was doing.
        out_of_space: bool,
    },
    /// A value opledger made that it could not serialise (a bug, never the user's input).
    #[error("cannot serialise {what}: {message}")]
    Serialize { what: &'static str, message: String },
    /// A hardware-counter export (Nsight Compute CSV) that cannot be read or matched to a run.
    #[error("{}{}: {message}", .path.display(), .line.map(|l| format!(":{l}")).unwrap_or_default())]
    Counters {
        path: PathBuf,
        line: Option<u64>,
        message: String,
    },
    /// A template that does not parse or render.
    #[error("template {name}: {message}")]
    Template { name: String, message: String },
    /// A chart that could not be made (a sweep group that is not a spec's name).
    #[error("chart {name}: {message}")]
    Chart { name: String, message: String },
    /// The requested backend cannot run here.
    #[error("backend unavailable: {0}")]
    BackendUnavailable(String),
    /// A backend failed while running a case (kernel error, allocation refused).
    #[error("backend error: {0}")]
    Backend(#[from] BackendError),
}

/// Why a store's address cannot be used.
/// Why the history store cannot give a reference.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceProblem {
    /// No store is named at all.
    #[error("from the history store, and none is named: set --store or OPLEDGER_STORE")]
    NoStore,
    /// `--no-store` reads a store; this SQLite file is not there.
    #[error("but the history store {} does not exist (--no-store reads a store, it never makes one)", .0.display())]
    StoreMissing(PathBuf),
    /// git could not name the merge-base.
    #[error("but git cannot name the merge-base: {0}")]
    MergeBase(String),
}

/// Why a run cannot count what it was asked to.
#[derive(Debug, thiserror::Error)]
pub enum CountsRefusal {
    /// `--cache-model` where nothing is counted.
    #[error("--cache-model is the model of the counts, and no spec is counted: add --measure counts or both")]
    CacheModelWithoutCounts,
    /// `--cache-model` where a GPU's own caches are counted.
    #[error("--cache-model is the model Valgrind simulates; the CUDA backend's counts are read from the GPU, whose caches are its own: leave it out, or count on --backend cpu")]
    CacheModelOnGpu,
    /// Counts asked of the CUDA backend where Nsight Compute is not installed.
    #[error("counts (--measure counts|both, or a spec's measure.mode) of the CUDA backend's kernels are read by Nsight Compute, and `ncu` is not on PATH: install it (it comes with the CUDA toolkit), or count the CPU backend's kernels under Valgrind (--backend cpu)")]
    NoProfiler,
}

/// Why the counted child process could not count its side.
#[derive(Debug, thiserror::Error)]
pub enum CountSideProblem {
    /// Started by hand rather than by a counting run.
    #[error("it counts under Valgrind and is started by `opledger counts`: run that")]
    NotUnderCounts,
    /// Its thread pool could not be made.
    #[error("the thread pool: {0}")]
    ThreadPool(String),
    /// The spec file holds no spec of that name.
    #[error("no spec {name} in {}", .file.display())]
    NoSpec { name: String, file: PathBuf },
    /// Its outputs are written in the host's byte order, which must be little-endian.
    #[error("a little-endian host is expected")]
    BigEndian,
}

/// Why `worker-test` cannot test a spec.
#[derive(Debug, thiserror::Error)]
pub enum WorkerTestProblem {
    /// The file holds no spec.
    #[error("no spec")]
    NoSpec,
    /// No side of the spec is a worker.
    #[error("no side of spec `{0}` is a worker (`command:`): nothing to test")]
    NoWorker(String),
}

#[derive(Debug, thiserror::Error)]
pub enum StoreUrlProblem {
    /// An empty path or SQLite's in-memory database.
    #[error("names no file, so the store would keep nothing: name an SQLite file (`sqlite:PATH` or a path) or a PostgreSQL server, or use --no-store")]
    KeepsNothing,
    /// A PostgreSQL URL its client library refuses (the reason, secrets scrubbed).
    #[error("not a PostgreSQL URL that can be used: {0}")]
    NotPostgres(String),
    /// Another server's scheme.
    #[error("expected an SQLite file (`sqlite:PATH` or a path) or a PostgreSQL server (`postgres://USER@HOST:PORT/DB`)")]
    OtherScheme,
    /// A PostgreSQL URL given to a build without the PostgreSQL store.
    #[error("this opledger was built without PostgreSQL (cargo feature `postgres`): name an SQLite file (`sqlite:PATH` or a path)")]
    NoPostgres,
}
impl Error {
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// A failed write of an output.
    pub fn write(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Write {
            action,
            path: path.into(),
            source,
        }
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            Error::BackendUnavailable(_) | Error::Counts(CountsRefusal::NoProfiler) => {
                ExitCode::BackendUnavailable
            }
            Error::Backend(_) => ExitCode::GateFailed,
            Error::Serialize { .. } | Error::Write { .. } => ExitCode::OutputFailed,
            Error::Store {
                action: StoreAction::Writing,
                ..
            }
            | Error::Store {
                out_of_space: true, ..
            } => ExitCode::OutputFailed,
            _ => ExitCode::BadInput,
        }
    }
}

/// What the history store was doing when it failed: a failed write is a failed output (exit
/// 4); a store that cannot be opened, migrated or read is bad input (exit 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreAction {
    Opening,
    Migrating,
    Reading,
    Writing,
}

impl std::fmt::Display for StoreAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StoreAction::Opening => "opening",
            StoreAction::Migrating => "migrating",
            StoreAction::Reading => "reading",
            StoreAction::Writing => "writing",
        })
    }
}

/// What went wrong in a backend, with its parts (never a string to parse back).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The backend has no kernel for this workload (a capability, refused before measuring).
    #[error("the {backend} backend cannot run this workload: {reason}")]
    Unsupported {
        backend: &'static str,
        reason: String,
    },
    /// A case larger than the memory there is.
    #[error("{spec}: the case needs {:.2} GiB of memory but only {:.2} GiB is available; reduce the workload size", gib(*.need_bytes), gib(*.available_bytes))]
    OutOfMemory {
        spec: String,
        need_bytes: u64,
        available_bytes: u64,
    },
    /// A driver call failed.
    #[error("{what}: {detail}")]
    Driver { what: String, detail: String },
    /// An earlier fault left the GPU's context unusable (a sticky error): nothing more runs on
    /// it in this process.
    #[error("not run: the CUDA context was lost to an earlier fault ({first}); every later call on this GPU fails until opledger starts again: run the specs after it again")]
    ContextLost { first: String },
    /// A sample whose device time exceeds the host's clock around it: a timer that does not
    /// time the sample (events of another context, a clock that jumped).
    #[error("impossible GPU time: the events measured {device_secs:e} s for a sample whose enqueue-to-finish took {host_secs:e} s by the host's clock; the sample is not timed")]
    ImpossibleTime { device_secs: f64, host_secs: f64 },
    /// The output of a variant was asked before the variant ran.
    #[error("variant {variant} has not run")]
    NotRun { variant: &'static str },
    /// A kernel source that did not compile or load (NVRTC's log, or the driver's refusal).
    #[error("{log}")]
    Compile { log: String },
    /// A worker (the user's implementation of a variant) that failed: it could not start,
    /// crashed, did not answer in time, broke the protocol or returned a wrong output. Its
    /// message and output are the worker's text made printable (`untrusted::printable`) where
    /// the error is made.
    #[error("worker `{command}`: {message}{}", if .output_tail.is_empty() { String::new() } else { format!("\n  its last output:\n{}", .output_tail.lines().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n")) })]
    Worker {
        command: String,
        message: String,
        output_tail: String,
    },
    /// A kernel or launch that cannot run as asked (geometry, sizes).
    #[error("{0}")]
    Kernel(String),
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Errors made of parts read as the sentences the commands printed when they were strings,
    /// and are bad input.
    #[test]
    fn structured_errors_read_as_sentences_and_are_bad_input() {
        let cases: Vec<(Error, &str)> = vec![
            (Error::NoSpecs { folder: None }, "no spec files given"),
            (
                Error::NoSpecs {
                    folder: Some(PathBuf::from("specs")),
                },
                "specs: no spec files (*.yaml, *.yml) in this directory",
            ),
            (
                Error::ProbeMemory {
                    probe_bytes: 64 << 20,
                    flush_bytes: 128 << 20,
                    need_bytes: 320 << 20,
                    available_bytes: 256 << 20,
                },
                "the bandwidth probe (3 arrays of 64 MiB) and the cold-cache flush buffer (128 MiB) need 0.31 GiB of memory but only 0.25 GiB is available",
            ),
            (
                Error::Counts(CountsRefusal::CacheModelOnGpu),
                "--cache-model is the model Valgrind simulates; the CUDA backend's counts are read from the GPU",
            ),
            (
                Error::CountSide(CountSideProblem::NoSpec {
                    name: "s".into(),
                    file: PathBuf::from("a.yaml"),
                }),
                "count-side: no spec s in a.yaml",
            ),
            (
                Error::WorkerTest {
                    spec: PathBuf::from("w.yaml"),
                    problem: WorkerTestProblem::NoWorker("s".into()),
                },
                "worker-test: w.yaml: no side of spec `s` is a worker (`command:`): nothing to test",
            ),
            (
                Error::NotAnArchive {
                    command: "ingest",
                    path: PathBuf::from("runs/x"),
                },
                "ingest: runs/x: no results.json there, nor in a folder of it: not a run's archive",
            ),
            (
                Error::NotInStore {
                    what: "--branch",
                    name: "mian".into(),
                    closest: Some("main".into()),
                    known: vec!["dev".into(), "main".into()],
                },
                "history: --branch `mian` is not in the store; did you mean `main`? (it holds: dev, main)",
            ),
            (
                Error::NotInStore {
                    what: "spec",
                    name: "x".into(),
                    closest: None,
                    known: vec![],
                },
                "history: spec `x` is not in the store (it holds: none)",
            ),
        ];
        for (e, starts) in cases {
            assert!(e.to_string().starts_with(starts), "{e}");
            assert_eq!(e.exit_code(), ExitCode::BadInput, "{e}");
        }
        // A missing profiler is a backend that cannot count here, not bad input.
        let e = Error::Counts(CountsRefusal::NoProfiler);
        assert!(e.to_string().contains("`ncu` is not on PATH"), "{e}");
        assert_eq!(e.exit_code(), ExitCode::BackendUnavailable);
    }

    /// The subsystems' errors say what failed in their own words, with what it concerns.
    #[test]
    fn reference_and_store_errors_name_the_spec_and_the_path() {
        let e = Error::Reference {
            spec: "fuse-gelu".into(),
            against: "history".into(),
            problem: ReferenceProblem::StoreMissing(PathBuf::from("runs/history.sqlite")),
        };
        assert_eq!(
            e.to_string(),
            "fuse-gelu: the gate judges against `history`, but the history store runs/history.sqlite does not exist (--no-store reads a store, it never makes one)"
        );
        let e = Error::Reference {
            spec: "s".into(),
            against: "merge-base:main".into(),
            problem: ReferenceProblem::MergeBase(
                "git merge-base HEAD main: no common ancestor".into(),
            ),
        };
        assert_eq!(
            e.to_string(),
            "s: the gate judges against `merge-base:main`, but git cannot name the merge-base: git merge-base HEAD main: no common ancestor"
        );
        let e = Error::NoStore {
            command: "site".into(),
            path: PathBuf::from("runs/history.sqlite"),
        };
        assert!(e
            .to_string()
            .starts_with("site: no store at runs/history.sqlite ("));
    }

    #[test]
    fn each_kind_of_error_has_its_exit_code() {
        let io = || std::io::Error::other("x");
        let cases: Vec<(Error, ExitCode)> = vec![
            (Error::io("reading", "in.yaml", io()), ExitCode::BadInput),
            (Error::Flag("--runs 1".into()), ExitCode::BadInput),
            (Error::Mismatch("two commits".into()), ExitCode::BadInput),
            (Error::Shard("0/3".into()), ExitCode::BadInput),
            (
                Error::Reference {
                    spec: "s".into(),
                    against: "history".into(),
                    problem: ReferenceProblem::NoStore,
                },
                ExitCode::BadInput,
            ),
            (
                Error::Env {
                    var: "OPLEDGER_SIMD",
                    value: "x".into(),
                    expected: "scalar",
                },
                ExitCode::BadInput,
            ),
            (
                Error::write("writing", "out/report.md", io()),
                ExitCode::OutputFailed,
            ),
            (
                Error::Serialize {
                    what: "results",
                    message: "x".into(),
                },
                ExitCode::OutputFailed,
            ),
            (
                Error::BackendUnavailable("no GPU".into()),
                ExitCode::BackendUnavailable,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(e.exit_code(), code, "{e}");
        }
        // The path is in every file error's message.
        assert!(Error::write("writing", "out/report.md", io())
            .to_string()
            .contains("out/report.md"));
    }
}

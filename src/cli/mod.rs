//! The command line: the arguments clap parses into `Cli` (this file), the flags checked into
//! each command's options (`flags`), and the dispatch of a parsed command to its file in
//! `commands/` (`dispatch`).

mod dispatch;
mod flags;

pub use dispatch::dispatch;

use crate::backend::BackendChoice;
use crate::commands::{self, schema::SchemaKind};
use crate::device::DeviceKind;
use crate::measure::MeasureConfig;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// The exit codes, for every `--help`.
const EXIT_CODES: &str = "Exit codes:
  0  every check passed (INCONCLUSIVE specs included, unless --fail-on-inconclusive)
  1  a check or the regression gate failed (or a claim the ledger refutes, for `check`);
     with --fail-on-inconclusive (run, compare, merge) also a spec that is INCONCLUSIVE
  2  bad input: a spec (file:line:column), a flag, a damaged baseline or results file, an archive
     edited after the run, a template
  3  the requested backend is unavailable (e.g. --backend cuda without a usable GPU)
  4  an output could not be written or serialised (a full disk, a folder's permissions)
run --bisect: 0 PASS, 1 FAIL, 125 INCONCLUSIVE (skip), 128 + 2, 3 or 4 (stop the bisection)";

#[derive(Debug, Parser)]
#[command(
    name = "opledger",
    version,
    about = "The operator ledger of GPU optimizations: IO ledger, roofline, before/after measurement, a CI gate and a sign-off report.",
    after_help = EXIT_CODES
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Measure specs on a backend, check their claims, compare with baselines, write a report.
    Run(RunArgs),
    /// Run unchanged code N times: the drift of each compared value between runs, the smallest
    /// slowdown this machine can gate at (<= 1% false alarms, >= 95% detection), and with
    /// --accept those runs recorded as the baseline.
    Calibrate {
        #[command(flatten)]
        run: RunArgs,
        /// How many runs of every spec (3 to 50).
        #[arg(long, default_value_t = commands::calibrate::DEFAULT_RUNS)]
        runs: usize,
        /// With --accept, the runs join the accepted baseline's history (the newest 10 kept)
        /// instead of replacing it: calibrations in several sittings make one spread, as a VM
        /// whose speed moves between phases needs.
        #[arg(long, requires = "accept")]
        keep_history: bool,
    },
    /// Validate spec files without running anything.
    Check {
        /// Spec files or directories of *.yaml specs.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Also refuse (exit 2) the specs this backend has no kernels for, with the reason.
        #[arg(long, value_enum)]
        backend: Option<DeviceKind>,
    },
    /// Print the IO ledger of each variant of the specs, and its roofline on datasheet devices.
    Ledger {
        /// Spec files or directories of *.yaml specs.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Whose kernels' tiling the ledger models (tiled GEMM, flash attention).
        #[arg(long, value_enum, default_value_t = DeviceKind::Cpu)]
        tiling: DeviceKind,
        /// The GPU's L2 in MiB (with `--tiling cuda`): flash K/V re-reads that fit in a quarter
        /// of it count once, as in a run on that device (e.g. 50 for an H100 SXM, 60 for an
        /// H200). Without it the ledger counts every re-read as device-memory traffic.
        #[arg(long, value_name = "MIB")]
        l2_mib: Option<u64>,
    },
    /// The roofline model: T = max(FLOPs/Peak, Bytes/BW), and the bound.
    Roofline(RooflineArgs),
    /// Compile every CUDA kernel with NVRTC (no GPU needed): CUBIN for sm_<arch> and PTX.
    CudaCompile {
        /// Compute capability, e.g. 90 for H100/H200.
        #[arg(long, default_value_t = 90)]
        arch: u32,
        /// Write the .cubin and .ptx files into this directory.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Compare two archived runs (before → after) with the gate's statistics: for every spec in
    /// both, the ratio of the `after` medians with its CI and the regression decision.
    Compare {
        /// The earlier run directory (the reference) and the later one; with `--base`, the
        /// later one only.
        #[arg(required = true, num_args = 1..=2, value_name = "RUN_DIR")]
        runs: Vec<PathBuf>,
        /// The reference from the history store instead of a folder: `merge-base:BRANCH`, the
        /// newest archived run at `git merge-base HEAD BRANCH` on B's device (else at its
        /// nearest ancestor with one).
        #[arg(long, value_name = "merge-base:BRANCH")]
        base: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
        /// Also write a short pull-request comment (Markdown, first line a hidden marker that a
        /// workflow finds to update its comment in place).
        #[arg(long)]
        markdown: Option<PathBuf>,
        /// Exit 1 when a case is INCONCLUSIVE.
        #[arg(long)]
        fail_on_inconclusive: bool,
        /// The baselines store whose history of this device and spec gives the drift between
        /// runs (as `run` gates); without one, the decision assumes no drift.
        #[arg(long, default_value = crate::baseline::DEFAULT_DIR)]
        baselines: PathBuf,
        /// Links of the comment start with this URL (a CI artifact's) instead of being
        /// relative to the comment file.
        #[arg(long, value_name = "URL")]
        link_base: Option<String>,
    },
    /// Reconcile a run's IO ledger with hardware counters: read an Nsight Compute CSV export
    /// (`--page raw` or `--page details`) of the run's marked profiling pass, write each variant's
    /// DRAM/L2 bytes beside its ledger into results.json and the report. Exit 1 when a variant's
    /// DRAM read bytes fall below 0.95× or above 1.5× its ledger's (beyond ±15% of a tiled ledger's
    /// where its tiles fit the L2).
    Counters {
        /// The run folder holding results.json.
        run_dir: PathBuf,
        /// The `ncu --csv` export.
        ncu_csv: PathBuf,
    },
    /// Count each side of the specs once under Valgrind's cache simulator on a fixed cache
    /// model (instructions, cache misses, DRAM bytes, estimated cycles: the same on every
    /// x86-64 machine), and set the DRAM bytes against the IO ledger. Exit 1 when a side's
    /// bytes disagree with its ledger, 3 without Valgrind.
    Counts {
        /// Spec files or directories of *.yaml specs.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// The simulated caches, e.g. `LL=16777216,16,64` (any of I1=, D1=, LL= as
        /// SIZE,WAYS,LINE; default I1=32768,8,64 D1=32768,8,64 LL=8388608,16,64).
        #[arg(long, value_name = "MODEL")]
        cache_model: Option<String>,
        /// Seed of the inputs.
        #[arg(long, default_value_t = crate::measure::MeasureConfig::default().seed)]
        seed: u64,
        /// `table` (Markdown) or `json`.
        #[arg(long, default_value = "table", value_parser = ["table", "json"])]
        format: String,
    },
    /// A spec's own sides counted under Callgrind (started by `opledger counts`, not by hand).
    #[command(hide = true)]
    CountSide {
        file: PathBuf,
        name: String,
        #[arg(value_parser = ["before", "after", "before,after"])]
        sides: String,
        seed: u64,
        ll_bytes: u64,
    },
    /// One spec's sides counted under Nsight Compute (started by a counting run on the CUDA
    /// backend, not by hand).
    #[command(hide = true)]
    ProfileCounts {
        file: PathBuf,
        name: String,
        seed: u64,
    },
    /// The marked pass `run --ncu` profiles (run under `ncu`, not by hand).
    #[command(hide = true)]
    ProfilePass {
        run_dir: PathBuf,
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Record the baselines of an archived run (a run's folder, or a merged one's device
    /// folder): the specs that passed there, as `run --accept` would have, without measuring.
    Accept {
        /// The run folder holding results.json.
        run_dir: PathBuf,
        /// The baselines store.
        #[arg(long, default_value = crate::baseline::DEFAULT_DIR)]
        baselines: PathBuf,
    },
    /// Merge the run folders of a sharded run (`run --shard`) into one archive: results, spec
    /// files, every shard's manifest, one report, JUnit XML and a summary; one archive per
    /// device when the shards ran on several. Exit 1 when a case of the suite ran in no shard
    /// (unless --allow-partial) or a spec failed.
    Merge {
        /// The shards' run folders.
        #[arg(required = true)]
        run_dirs: Vec<PathBuf>,
        /// The merged archive's folder (created).
        #[arg(long)]
        out: PathBuf,
        /// Accept shards that together miss cases of the suite (they are still named).
        #[arg(long)]
        allow_partial: bool,
        /// Exit 1 when the merged verdict is INCONCLUSIVE.
        #[arg(long)]
        fail_on_inconclusive: bool,
        /// The history store the merged archive is recorded into (run the shards with
        /// `--no-store` then, or each case is recorded twice: by its shard and by the merge).
        #[command(flatten)]
        store: StoreArgs,
        /// Record nothing into the history store.
        #[arg(long)]
        no_store: bool,
        /// The branch the shards measured (default: git's branch, or on a detached HEAD the
        /// CI's).
        #[arg(long)]
        branch: Option<String>,
    },
    /// Print the JSON Schema of spec files or of results.json (generated from opledger's types;
    /// the same files ship in `schemas/`).
    Schema {
        #[arg(value_enum)]
        which: SchemaKind,
        /// Write the schema here instead of printing it.
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
    /// Record archived runs (CI artifacts, merged archives) into the history store; a run
    /// already there with the same manifest is left as it is.
    Ingest {
        /// Run folders, or merged folders (each device archive in them).
        #[arg(required = true)]
        run_dirs: Vec<PathBuf>,
        #[command(flatten)]
        store: StoreArgs,
        /// The branch the runs measured (default: none recorded).
        #[arg(long)]
        branch: Option<String>,
    },
    /// Each case's series from the history store, one row per run, newest last.
    History {
        /// Cases (spec names); all when none.
        cases: Vec<String>,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        only: SeriesFilter,
        /// The newest N runs of each case.
        #[arg(long, value_name = "N")]
        last: Option<usize>,
        #[arg(long, value_enum, default_value_t = commands::history::Format::Table)]
        format: commands::history::Format,
        /// Where each case's level changed on each device (binary segmentation of the mean,
        /// confirmed by a t-test; counted series step exactly): each shift with its size and
        /// 95% CI, the runs on each side and the commits between which it began.
        #[arg(long)]
        changes: bool,
        /// The value of each run `--changes` follows.
        #[arg(long, value_enum, default_value_t = crate::store::series::Metric::After, requires = "changes")]
        metric: crate::store::series::Metric,
    },
    /// The history dashboard as a static site made from the history store: an index of the
    /// cases per device (a sparkline, the latest verdict), a page per case with its trend (both
    /// medians and the after/before ratio with their CIs, baselines and change points marked),
    /// and each run's HTML report. Opens from `file://` or any static host.
    Site {
        /// The folder to write (new, empty, or a site made before, which is replaced whole).
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        only: SeriesFilter,
        /// The newest N runs of each case (a page of more draws slowly in a browser).
        #[arg(long, value_name = "N", default_value_t = commands::site::DEFAULT_LAST)]
        last: usize,
        /// Where a commit is shown, `{sha}` standing for it:
        /// 'https://github.com/OWNER/REPO/commit/{sha}'.
        #[arg(long, value_name = "URL")]
        commit_url: Option<String>,
        /// Only these cases (spec names); all when none.
        cases: Vec<String>,
    },
    /// Check a worker against the protocol without a run: hello, setup of each function the
    /// spec names on its workload, cold and warm runs, the output, the failure paths (a function
    /// it does not serve, a case never set up, an unknown op, a line that is not JSON) and
    /// shutdown, each step against its rule. Exit 0 when every step keeps the protocol, 1 when
    /// one breaks it.
    WorkerTest {
        /// A spec whose sides are workers (`command:`): its workload is what setup gets.
        spec: PathBuf,
        /// Per-request limit instead of the spec's `timeout_secs` (setup: ten times as long).
        #[arg(long, value_name = "SECS")]
        timeout_secs: Option<f64>,
        /// The worker to test instead of the spec's command (after `--`).
        #[arg(last = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Check an archive against its manifest: every file's SHA-256 as the command that wrote
    /// it recorded, nothing removed or added, its names valid and its verdict the one its checks
    /// give. Exit 0 when it is intact, 1 when anything differs or it has no manifest.
    Verify {
        /// A run (or merged) folder.
        run_dir: PathBuf,
    },
    /// Re-render the report of an archived run directory (nothing is measured).
    Report {
        /// A run directory holding results.json.
        run_dir: PathBuf,
        /// A minijinja template to use instead of the one the run recorded (or the built-in one).
        #[arg(long)]
        template: Option<PathBuf>,
        /// Write the report here instead of printing it (its SVG charts go beside it). The
        /// archive's own report.md writes every output of the archive again, and the archive
        /// records the --template given.
        #[arg(long, short)]
        out: Option<PathBuf>,
    },
}

/// Largest probe or flush buffer a flag may ask for (1 TiB); the memory check refuses what this
/// machine cannot hold.
const MAX_BUFFER_MIB: u64 = 1 << 20;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Spec files or directories of *.yaml specs.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Backend: auto picks CUDA when a GPU is usable, else the CPU.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Record (or update) the baselines of the specs that pass.
    #[arg(long)]
    pub accept: bool,
    /// After the run, profile one marked execution of each variant under Nsight Compute (`ncu`
    /// on PATH; CUDA backend) and reconcile its DRAM bytes with the ledger (`opledger counters`).
    #[arg(long)]
    pub ncu: bool,
    /// What to measure of every spec: `time` (interleaved before/after pairs), `counts` (each
    /// side counted once under Valgrind's cache simulator: instructions, cache misses and DRAM
    /// bytes that are the same on every x86-64 machine, checked against the IO ledger and gated
    /// against counts baselines; CPU backend, x86-64, Valgrind installed), `both`, or `auto`
    /// (time, and counts too where they can be made). Without it, each spec's `measure.mode`
    /// (default `time`).
    #[arg(long = "measure", value_name = "MODE", value_parser = ["time", "counts", "both", "auto"])]
    pub measure_mode: Option<String>,
    /// The cache model of the counts (as `opledger counts --cache-model`).
    #[arg(long, value_name = "MODEL")]
    pub cache_model: Option<String>,
    /// Threads of the CPU kernels (default: one per core the OS gives this process; rayon's
    /// RAYON_NUM_THREADS is honoured too). Part of the device's baseline key.
    #[arg(long, env = "OPLEDGER_THREADS", value_name = "N")]
    pub threads: Option<usize>,
    /// Fail specs that have no comparable baseline.
    #[arg(long)]
    pub require_baseline: bool,
    /// Exit 1 when a spec is INCONCLUSIVE (a claim's CI across its bound, a gate that cannot
    /// decide): for CI jobs that must decide.
    #[arg(long)]
    pub fail_on_inconclusive: bool,
    /// Exit as `git bisect run` reads it: 0 PASS, 1 FAIL, 125 INCONCLUSIVE (skip the commit),
    /// and 128 + the code for bad input, an unavailable backend or a failed output (stop the
    /// bisection instead of marking the commit bad).
    #[arg(long)]
    pub bisect: bool,
    /// Root of the baselines store.
    #[arg(long, default_value = crate::baseline::DEFAULT_DIR)]
    pub baselines: PathBuf,
    /// Where run directories are created.
    #[arg(long, default_value = "runs")]
    pub runs_dir: PathBuf,
    /// The history store every run is recorded into: an SQLite file (`sqlite:PATH` or a path)
    /// or a PostgreSQL server (`postgres://USER:PASSWORD@HOST:PORT/DB`, the password never
    /// shown); default `OPLEDGER_STORE`, else `<runs-dir>/history.sqlite`.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// Record nothing into the history store; a reference the gate takes from it
    /// (`--against history|merge-base`) is still read, from `--store` or its default.
    #[arg(long)]
    pub no_store: bool,
    /// The branch this run measures (default: git's branch, or on a detached HEAD the CI's).
    #[arg(long)]
    pub branch: Option<String>,
    /// The repository's default branch, whose runs are watched for new shifts of a case's
    /// level (default: the remote's HEAD, else `main` or `master`).
    #[arg(long, value_name = "BRANCH")]
    pub default_branch: Option<String>,
    /// What the gate judges every spec against: `baselines` (the accepted ones), `history` (the
    /// newest runs of this branch in the history store; every branch outside git),
    /// `history:BRANCH`, or `merge-base:BRANCH` (the store's runs at `git merge-base HEAD
    /// BRANCH`, else at its nearest ancestor with runs). Default: each spec's `gate.against`,
    /// else `baselines`.
    #[arg(long, value_name = "REFERENCE")]
    pub against: Option<String>,
    /// With `--against merge-base:BRANCH`: measure the merge-base commit again first (a git
    /// worktree of it, run by this opledger, recorded into the store as BRANCH's run), so that
    /// the head is judged against a base measured in this machine's state today.
    #[arg(long, requires = "against")]
    pub rerecord_base: bool,
    /// A minijinja template for the report instead of the built-in one.
    #[arg(long)]
    pub template: Option<PathBuf>,
    /// Keep caches warm between samples (default: cold, a flush before every sample).
    #[arg(long)]
    pub warm: bool,
    /// Fewest before/after pairs per spec.
    #[arg(long, default_value_t = MeasureConfig::default().min_pairs)]
    pub min_pairs: usize,
    /// Most before/after pairs per spec.
    #[arg(long, default_value_t = MeasureConfig::default().max_pairs)]
    pub max_pairs: usize,
    /// Wall-clock cap of one spec's sampling, in seconds.
    #[arg(long, default_value_t = MeasureConfig::default().time_cap_secs)]
    pub time_cap_secs: f64,
    /// Stop sampling once both medians' 95% CIs are within this fraction (0.01 = ±1%).
    #[arg(long, default_value_t = MeasureConfig::default().target_rel_ci)]
    pub target_ci: f64,
    /// Seed of inputs, sample order and bootstrap.
    #[arg(long, default_value_t = MeasureConfig::default().seed)]
    pub seed: u64,
    /// Size of each bandwidth-probe array in MiB, at least two thirds of the last-level cache
    /// (default: two thirds of it, so that the triad's three arrays span twice the cache).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_BUFFER_MIB))]
    pub probe_mib: Option<u64>,
    /// Make each cold sample's caches cold by reading a buffer of this many MiB, at least the
    /// last-level cache, instead of evicting the case's own cache lines (the default; a
    /// worker's process reads twice the last-level cache); --warm for no flush.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_BUFFER_MIB))]
    pub flush_mib: Option<u64>,
    /// Append a short Markdown summary to this file (default: $GITHUB_STEP_SUMMARY when set;
    /// an empty value writes none, as a matrix job's shards do).
    #[arg(long, env = "GITHUB_STEP_SUMMARY", value_parser = any_path)]
    pub summary_to: Option<PathBuf>,
    /// Write JUnit XML (one test case per check) to this file, for CI dashboards.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Run only shard M of N of the cases: hash:M/N (stable as specs are added), count:M/N
    /// (round-robin over the sorted names), or auto (from Slurm, a Kubernetes Indexed Job with
    /// OPLEDGER_SHARD_TOTAL, or OPLEDGER_SHARD=M/N).
    #[arg(long)]
    pub shard: Option<String>,
    /// Run only the named case (a spec's name, or a sweep point's: `flash-attention--seq-len-1024`);
    /// repeat for several. A name no spec has is refused.
    #[arg(long = "case", value_name = "NAME")]
    pub cases: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RooflineArgs {
    /// Peak compute, TFLOP/s (or use --device).
    #[arg(long, required_unless_present = "device")]
    pub peak_tflops: Option<f64>,
    /// Memory bandwidth, GB/s (or use --device).
    #[arg(long, required_unless_present = "device")]
    pub bw_gbps: Option<f64>,
    /// A datasheet device (l40s, a100-sxm, h100-sxm, h200, rtx-4090); its tensor-core peak.
    #[arg(long, conflicts_with_all = ["peak_tflops", "bw_gbps"])]
    pub device: Option<String>,
    /// FLOPs of the operator.
    #[arg(long)]
    pub flops: f64,
    /// Bytes the operator moves through memory.
    #[arg(long)]
    pub bytes: f64,
}

/// Where `ingest` and `history` find the store, as `run` does.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The history store (`sqlite:PATH` or a path, or `postgres://USER@HOST:PORT/DB`; default
    /// `OPLEDGER_STORE`, else `<runs-dir>/history.sqlite`).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// The runs folder whose default store to use.
    #[arg(long, default_value = "runs")]
    pub runs_dir: PathBuf,
}

impl StoreArgs {
    /// The store these flags name (see [`flags::store_url`]).
    fn url(
        &self,
        settings: &crate::settings::Settings,
    ) -> crate::error::Result<crate::store::StoreUrl> {
        flags::store_url(self.store.as_deref(), settings, &self.runs_dir)
    }
}

/// Which runs of the store a command reads (`history`, `site`).
#[derive(clap::Args, Debug)]
pub struct SeriesFilter {
    /// Only runs of this device key.
    #[arg(long)]
    pub device: Option<String>,
    /// Only runs of this branch.
    #[arg(long)]
    pub branch: Option<String>,
}

/// The variables clap reads as flags' defaults (`env = …` below).
pub const ENV_DEFAULTS: [&str; 2] = ["OPLEDGER_THREADS", "GITHUB_STEP_SUMMARY"];

impl Cli {
    /// Whether the exit status is `git bisect run`'s (`run --bisect`).
    pub fn bisect(&self) -> bool {
        matches!(&self.command, Command::Run(a) if a.bisect)
    }
}

/// A path as given, the empty one included (`--summary-to ""` asks for no summary; clap's own
/// path parser refuses an empty value).
fn any_path(s: &str) -> std::result::Result<PathBuf, std::convert::Infallible> {
    Ok(PathBuf::from(s))
}

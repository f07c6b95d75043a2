//! The history store: every run's cases as rows, so that a branch's past can be queried (the
//! series of a case, by device and branch). The archives stay the evidence; the store is their
//! index, rebuilt from them by `opledger ingest` (idempotent by run id and manifest digest).
//!
//! Embedded SQLite through `rusqlite` with its bundled SQLite by default: no system library to
//! match, one file beside the archives (`<runs-dir>/history.sqlite`), many writers serialised by
//! SQLite's own locking (write-ahead log, a busy timeout). A team's runners share a PostgreSQL
//! server instead (`--store postgres://…`, the `postgres` crate): the same schema and the same
//! SQL (`db`). The schema is versioned: `schema_version` holds the migrations applied, and `open`
//! applies the missing ones in order, one opener at a time. The tables are documented in
//! `docs/history.md`.

mod db;
pub mod series;

use crate::error::{Error, Result, StoreAction, StoreUrlProblem};
use crate::results::{RunResult, SpecResult};
use db::{Db, Val, ValRef};
use std::path::{Path, PathBuf};

/// The migrations, in order: migration k brings the schema from version k to k + 1.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE runs (
    run_key           TEXT PRIMARY KEY,
    run_id            TEXT NOT NULL,
    manifest_sha256   TEXT NOT NULL,
    started_utc       TEXT NOT NULL,
    git_sha           TEXT NOT NULL,
    git_dirty         BIGINT NOT NULL,
    branch            TEXT,
    device_key        TEXT NOT NULL,
    backend           TEXT NOT NULL,
    opledger_version  TEXT NOT NULL,
    triad_bytes_per_sec DOUBLE PRECISION NOT NULL,
    fma_flops_per_sec DOUBLE PRECISION NOT NULL,
    verdict           TEXT NOT NULL,
    archive           TEXT NOT NULL
);
CREATE TABLE cases (
    run_key           TEXT NOT NULL REFERENCES runs(run_key) ON DELETE CASCADE,
    spec              TEXT NOT NULL,
    spec_sha256       TEXT NOT NULL,
    sweep_label       TEXT,
    verdict           TEXT NOT NULL,
    before_median_secs DOUBLE PRECISION,
    before_ci_lo_secs DOUBLE PRECISION,
    before_ci_hi_secs DOUBLE PRECISION,
    before_n          BIGINT,
    after_median_secs DOUBLE PRECISION,
    after_ci_lo_secs  DOUBLE PRECISION,
    after_ci_hi_secs  DOUBLE PRECISION,
    after_n           BIGINT,
    ratio             DOUBLE PRECISION,
    ratio_lo          DOUBLE PRECISION,
    ratio_hi          DOUBLE PRECISION,
    gate_state        TEXT,
    gate_ratio        DOUBLE PRECISION,
    checks            TEXT NOT NULL,
    PRIMARY KEY (run_key, spec)
);
CREATE INDEX cases_by_spec ON cases (spec, run_key);
CREATE INDEX runs_by_device ON runs (device_key, branch, started_utc);
"#,
    // Runs that start in the same second are ordered by their start in nanoseconds.
    "ALTER TABLE runs ADD COLUMN started_ns BIGINT",
    // Where each case stood against its baselines (`accepted` marks the runs that became one).
    "ALTER TABLE cases ADD COLUMN baseline_status TEXT",
    // Each side's counts under the cache simulator, with the engine key they compare under.
    "ALTER TABLE cases ADD COLUMN counts_key TEXT;
ALTER TABLE cases ADD COLUMN before_instructions BIGINT;
ALTER TABLE cases ADD COLUMN after_instructions BIGINT;
ALTER TABLE cases ADD COLUMN before_dram_bytes BIGINT;
ALTER TABLE cases ADD COLUMN after_dram_bytes BIGINT;
ALTER TABLE cases ADD COLUMN before_cycles BIGINT;
ALTER TABLE cases ADD COLUMN after_cycles BIGINT;
ALTER TABLE cases ADD COLUMN counts_engine TEXT;",
    // The run's order beside each case, and an index in that order: a case's newest runs are
    // read from the index's end instead of sorting all of them (`history --last`, the site).
    "ALTER TABLE cases ADD COLUMN started_utc TEXT;
ALTER TABLE cases ADD COLUMN started_ns BIGINT;
ALTER TABLE cases ADD COLUMN run_id TEXT;
UPDATE cases SET started_utc = (SELECT r.started_utc FROM runs r WHERE r.run_key = cases.run_key),
    started_ns = (SELECT COALESCE(r.started_ns, 0) FROM runs r WHERE r.run_key = cases.run_key),
    run_id = (SELECT r.run_id FROM runs r WHERE r.run_key = cases.run_key);
CREATE INDEX cases_by_spec_in_order ON cases (spec, started_utc, started_ns, run_id, run_key);",
    // Each counts engine once, named by the SHA-256 of its JSON: a counted case names its engine
    // by that digest (every case of a machine's runs has the same engine, and its JSON in each
    // row was half the row). Rows recorded before keep the JSON itself, and are read as such.
    "CREATE TABLE counts_engines (
    engine_sha256 TEXT PRIMARY KEY,
    engine        TEXT NOT NULL
);",
    // Where each case stands as a reference, as the gate decided it (`gate::rule::standing`):
    // 0 nothing failed, 1 only a regression gate failed, 2 another check failed. Rows recorded
    // before are given theirs from the checks they stored (a failed check is `"fail"` there).
    r#"ALTER TABLE cases ADD COLUMN standing BIGINT;
UPDATE cases SET standing = CASE
    WHEN verdict <> 'fail' THEN 0
    WHEN (LENGTH(checks) - LENGTH(REPLACE(checks, '"fail"', ''))) / 6
        = (LENGTH(checks) - LENGTH(REPLACE(checks, '"regression","fail"', ''))) / 19
        + (LENGTH(checks) - LENGTH(REPLACE(checks, '"counts_regression","fail"', ''))) / 26
        THEN 1
    ELSE 2 END;"#,
];

/// The default store's file name, inside the runs folder.
pub const DEFAULT_FILE: &str = "history.sqlite";

/// Where a store is: an SQLite file (`sqlite:PATH`, or a bare path) or a PostgreSQL server
/// (`postgres://…` or `postgresql://…`, libpq's URL form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    Sqlite(PathBuf),
    Postgres(Box<PgUrl>),
}

/// A PostgreSQL server's URL, parsed where it enters the program: the connection settings
/// (whose password only the connection reads; their `Debug` masks it) and the URL as it may be
/// shown, with every secret masked (`secret::redact_url`). The raw text is not kept.
#[derive(Debug, Clone)]
pub struct PgUrl {
    config: postgres::Config,
    /// The same settings for the asynchronous client (the store's long reads).
    scan: tokio_postgres::Config,
    shown: String,
}

impl PartialEq for PgUrl {
    fn eq(&self, other: &Self) -> bool {
        self.shown == other.shown
    }
}
impl Eq for PgUrl {}

impl StoreUrl {
    /// `sqlite:PATH`, a path, or a PostgreSQL URL; another server's scheme is refused by name,
    /// and so is a store that would keep nothing (an empty path, SQLite's `:memory:`).
    pub fn parse(text: &str) -> Result<StoreUrl> {
        let refused = |shown: String, problem| Error::StoreUrl { shown, problem };
        let sqlite = |p: &str| {
            if p.trim().is_empty() || p == ":memory:" || p.starts_with("file::memory:") {
                return Err(refused(format!("{text:?}"), StoreUrlProblem::KeepsNothing));
            }
            Ok(StoreUrl::Sqlite(PathBuf::from(p)))
        };
        if let Some(p) = text.strip_prefix("sqlite:") {
            return sqlite(p);
        }
        if let Some((scheme, _)) = text.split_once("://") {
            if scheme == "postgres" || scheme == "postgresql" {
                let shown = crate::secret::redact_url(text);
                let not_postgres = |e: postgres::Error| {
                    let why = crate::secret::scrub(&error_chain(&e), text);
                    refused(shown.clone(), StoreUrlProblem::NotPostgres(why))
                };
                let config = text.parse::<postgres::Config>().map_err(not_postgres)?;
                let scan = text
                    .parse::<tokio_postgres::Config>()
                    .map_err(not_postgres)?;
                return Ok(StoreUrl::Postgres(Box::new(PgUrl {
                    config,
                    scan,
                    shown,
                })));
            }
            let scheme = crate::secret::redact_text(scheme);
            return Err(refused(
                format!("{scheme}://…"),
                StoreUrlProblem::OtherScheme,
            ));
        }
        sqlite(text)
    }

    /// For a command that reads a store (`history`, `site`): an SQLite store must exist; opening
    /// one would create an empty store and show nothing.
    pub fn require_existing(&self, command: &str) -> Result<()> {
        if let StoreUrl::Sqlite(path) = self {
            if !path.is_file() {
                return Err(Error::NoStore {
                    command: command.to_string(),
                    path: path.clone(),
                });
            }
        }
        Ok(())
    }

    /// How errors and outputs name the store: the file, or the URL with its secrets masked.
    pub fn display(&self) -> String {
        match self {
            StoreUrl::Sqlite(p) => p.display().to_string(),
            StoreUrl::Postgres(url) => url.shown.clone(),
        }
    }
}

/// An error with its causes, one after another (`db error` alone says nothing; its cause
/// names what the server refused).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// What recording a run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The run was not in the store.
    New,
    /// The run was there with the same manifest: nothing changed.
    Same,
    /// The run was there from an earlier state of its archive (counters imported, a report
    /// re-rendered): its rows were replaced.
    Replaced,
}

/// A text of a point that many points share (a run's commit, branch, device and archive are the
/// same for each of its cases; a case's name for each of its runs): read once, shared, so that
/// half a million points are not millions of copies.
pub type Text = std::sync::Arc<str>;

/// What every case's point of one run shares (its identity, commit, branch, device and
/// archive), held once per run: half a million points of one store are then 100 bytes smaller
/// each, and made with one shared count raised instead of six.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PointRun {
    pub run_id: Text,
    pub started_utc: Text,
    pub git_sha: Text,
    /// The run measured uncommitted changes on top of `git_sha`.
    pub git_dirty: bool,
    pub branch: Option<Text>,
    pub device_key: Text,
    /// The archive's folder: relative to the store's folder for an SQLite store (the two travel
    /// together), as the run wrote it for a server.
    pub archive: Text,
    /// Where the run stands in the store's order (not written out).
    #[serde(skip)]
    pub(crate) order: RunOrder,
}

/// Where a run stands in the store's order, after its start's text: the start as a number (see
/// [`utc_number`]), its start's nanoseconds, and its key in the store (what orders runs that
/// start in the same second).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RunOrder {
    started: u64,
    started_ns: i64,
    key: Text,
}

impl RunOrder {
    /// What orders runs: start, then nanoseconds, then key.
    fn key(&self) -> (u64, i64, &str) {
        (self.started, self.started_ns, &self.key)
    }
}

/// One run of one case, as `history` shows it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Point {
    /// The run's fields (written as the point's own).
    #[serde(flatten)]
    pub run: std::sync::Arc<PointRun>,
    pub spec: Text,
    pub verdict: Text,
    pub before_median_secs: Option<f64>,
    pub after_median_secs: Option<f64>,
    /// after/before with its 95% CI.
    pub ratio: Option<f64>,
    pub ratio_lo: Option<f64>,
    pub ratio_hi: Option<f64>,
    /// The 95% CIs of both medians.
    pub before_ci_lo_secs: Option<f64>,
    pub before_ci_hi_secs: Option<f64>,
    pub after_ci_lo_secs: Option<f64>,
    pub after_ci_hi_secs: Option<f64>,
    /// This run was recorded as (part of) the case's baseline (`run --accept`).
    pub accepted: bool,
    /// Both sides' counts under the cache simulator, where the run counted them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counts: Option<Box<PointCounts>>,
}

/// A case's counts as the store keeps them: the engine key they compare under, and each
/// side's instructions, DRAM bytes (read and written) and estimated cycles (a side not counted
/// has none).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PointCounts {
    pub key: Text,
    /// What counted (Valgrind, compiler, C library, binary digest…): a comparison across
    /// engines of one key is flagged, not trusted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<std::sync::Arc<crate::measure::counts::CountsEngine>>,
    pub before_instructions: Option<u64>,
    pub after_instructions: Option<u64>,
    pub before_dram_bytes: Option<u64>,
    pub after_dram_bytes: Option<u64>,
    pub before_cycles: Option<u64>,
    pub after_cycles: Option<u64>,
}

impl PointCounts {
    /// A case's counts from its result, where it was counted.
    fn of(s: &SpecResult) -> Option<PointCounts> {
        let c = s.counts.as_ref()?;
        let side = |x: &crate::measure::counts::SideCounts| x.counts().copied();
        let (b, a) = (side(&c.before), side(&c.after));
        Some(PointCounts {
            key: c.engine.key().into(),
            engine: Some(std::sync::Arc::new(c.engine.clone())),
            before_instructions: b.map(|x| x.instructions),
            after_instructions: a.map(|x| x.instructions),
            before_dram_bytes: b.map(|x| x.dram_read_bytes + x.dram_write_bytes),
            after_dram_bytes: a.map(|x| x.dram_read_bytes + x.dram_write_bytes),
            before_cycles: b.map(|x| x.estimated_cycles),
            after_cycles: a.map(|x| x.estimated_cycles),
        })
    }
}

/// Which series to read.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// These cases (all when empty).
    pub specs: Vec<String>,
    pub device: Option<String>,
    pub branch: Option<String>,
    /// The newest N runs of each case.
    pub last: Option<usize>,
}

/// The branch a `run --bisect` step is recorded under (unless `--branch` names one): a
/// bisection measures commits that are no branch's, and its runs stay out of every series and
/// reference that does not ask for them (`history --branch bisect` shows them).
pub const BISECT_BRANCH: &str = "bisect";

/// The rows one select reads (every filter optional).
#[derive(Debug, Clone, Default)]
struct Filter<'a> {
    device: Option<&'a str>,
    spec: Option<&'a str>,
    spec_sha256: Option<&'a str>,
    branch: Option<&'a str>,
    /// Only cases that did not fail and have both medians (what a reference can rest on).
    judged: bool,
    /// Only cases with both medians, failed or not (what a series of levels is made of).
    measured: bool,
    /// Only cases with both medians that failed nothing but the regression gate: what a
    /// commit's level is (a regression is a level; a wrong output or a broken run is not).
    level: bool,
    /// Only runs of committed code.
    clean: bool,
    /// The newest N rows.
    newest: Option<usize>,
    /// Only cases counted under this engine key, standing as the second says.
    counted: Option<(&'a str, CountedAs)>,
}

/// Which counted runs a query reads.
#[derive(Debug, Clone, Copy)]
enum CountedAs {
    /// Those that failed nothing: what a branch's history rests on.
    History,
    /// Those whose counts are the code's level: a merge-base that regressed is still the base.
    Level,
}

pub struct Store {
    db: Db,
    url: StoreUrl,
    /// Case tables of this many rows or more are read in two halves at once (SQLite opened
    /// for writing; see [`Store::case_rows`]).
    split_rows: i64,
    /// The store's counts engines by their digests, once read (a query reads them once, not
    /// once per case of `--last`); forgotten when this store records a run.
    engines: Option<Engines>,
}

/// Counts engines by what names them in a case row (their digests).
type Engines = std::sync::Arc<std::collections::HashMap<String, Engine>>;

impl Store {
    /// Opens (creating it when missing) the store at `url`, its schema brought up to date.
    pub fn open(url: &StoreUrl) -> Result<Store> {
        let db = match url {
            StoreUrl::Sqlite(path) => {
                open_sqlite(path).map_err(|e| failed(url, StoreAction::Opening, e))?
            }
            StoreUrl::Postgres(u) => Db::Postgres(Box::new(db::Pg::new(
                u.config
                    .connect(postgres::NoTls)
                    .map_err(|e| failed(url, StoreAction::Opening, error_chain(&e)))?,
            ))),
        };
        let mut store = Store {
            db,
            url: url.clone(),
            split_rows: SPLIT_ROWS,
            engines: None,
        };
        store.migrate()?;
        Ok(store)
    }

    /// Opens the store at `url` to read it (`history`, `site`, `compare`): as [`Store::open`],
    /// and where an SQLite store cannot be written (a read-only file, folder or mount), read-only
    /// as it is — its schema must then be the current one already.
    pub fn open_reading(url: &StoreUrl) -> Result<Store> {
        let StoreUrl::Sqlite(path) = url else {
            return Store::open(url);
        };
        let first = match Store::open(url) {
            Ok(s) => return Ok(s),
            Err(e) => e,
        };
        let Ok(db) = open_sqlite_read_only(path) else {
            return Err(first);
        };
        let mut store = Store {
            db,
            url: url.clone(),
            // Opened as immutable: a second connection could not take the locks a read needs.
            split_rows: i64::MAX,
            engines: None,
        };
        match store.schema_version() {
            Ok(v) if v == MIGRATIONS.len() => Ok(store),
            _ => Err(first),
        }
    }

    /// The store's URL.
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    fn fail(&self, action: StoreAction) -> impl Fn(db::DbError) -> Error + '_ {
        move |m| failed(&self.url, action, m)
    }

    /// The schema version this store is at.
    pub fn schema_version(&mut self) -> Result<usize> {
        let url = self.url.clone();
        let rows = self
            .db
            .query("SELECT COUNT(*) FROM schema_version", &[])
            .map_err(|m| failed(&url, StoreAction::Reading, m))?;
        Ok(rows
            .first()
            .and_then(|r| r.first())
            .and_then(Val::int)
            .unwrap_or(0) as usize)
    }

    fn migrate(&mut self) -> Result<()> {
        let url = self.url.clone();
        let outcome = self.db.transaction(|db| {
            // Two runners opening a new server store at once: one migrates, the other waits.
            db.lock("opledger schema")?;
            db.batch("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT PRIMARY KEY)")?;
            let at = db
                .query("SELECT COUNT(*) FROM schema_version", &[])?
                .first()
                .and_then(|r| r.first())
                .and_then(Val::int)
                .unwrap_or(0) as usize;
            if at > MIGRATIONS.len() {
                return Ok(Some(at));
            }
            for (k, sql) in MIGRATIONS.iter().enumerate().skip(at) {
                db.batch(sql)?;
                db.execute(
                    "INSERT INTO schema_version (version) VALUES ($1)",
                    &[Val::Int(k as i64 + 1)],
                )?;
            }
            Ok(None)
        });
        match outcome.map_err(|m| failed(&url, StoreAction::Migrating, m))? {
            Some(at) => Err(Error::Corrupt {
                path: PathBuf::from(url.display()),
                message: format!(
                    "history store of schema version {at}, newer than this opledger's {}: use a newer opledger",
                    MIGRATIONS.len()
                ),
            }),
            None => Ok(()),
        }
    }

    /// Records a run's cases (one transaction): new, the same as stored, or replacing the rows
    /// of an earlier state of its archive.
    pub fn record(
        &mut self,
        run: &RunResult,
        archive: &Path,
        manifest_sha256: &str,
        branch: Option<&str>,
    ) -> Result<Recorded> {
        let archive_at = self.archive_path(archive);
        let key = run_key(run);
        let url = self.url.clone();
        self.engines = None;
        self.db
            .transaction(|db| {
                // The same run recorded by two writers at once (two `ingest`s of one artifact).
                db.lock(&key)?;
                let stored = db
                    .query(
                        "SELECT manifest_sha256 FROM runs WHERE run_key = $1",
                        &[Val::from(&key)],
                    )?
                    .first()
                    .and_then(|r| r.first())
                    .and_then(Val::text);
                let outcome = match stored.as_deref() {
                    Some(s) if s == manifest_sha256 => return Ok(Recorded::Same),
                    Some(_) => {
                        db.execute("DELETE FROM runs WHERE run_key = $1", &[Val::from(&key)])?;
                        Recorded::Replaced
                    }
                    None => Recorded::New,
                };
                db.execute(
                    "INSERT INTO runs (run_key, run_id, manifest_sha256, started_utc, git_sha, git_dirty, branch, device_key, backend, opledger_version, triad_bytes_per_sec, fma_flops_per_sec, verdict, archive, started_ns) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
                    &[
                        Val::from(&key),
                        Val::from(&run.run_id),
                        Val::from(manifest_sha256),
                        Val::from(&run.started_utc),
                        Val::from(&run.git_sha),
                        Val::Int(run.git_dirty as i64),
                        Val::from(branch),
                        Val::from(&run.device.key),
                        Val::from(&run.backend),
                        Val::from(&run.opledger_version),
                        Val::Real(run.ceilings.triad_bytes_per_sec),
                        Val::Real(run.ceilings.fma_flops_per_sec),
                        Val::from(run.verdict.status.to_string()),
                        Val::from(&archive_at),
                        Val::from(run.started_unix_ns),
                    ],
                )?;
                let mut engines: Vec<(String, String)> = Vec::new();
                for s in &run.specs {
                    let engine = s.counts.as_ref().map(|c| engine_json(&c.engine));
                    if let Some(e) = &engine {
                        if !engines.contains(e) {
                            db.execute(
                                "INSERT INTO counts_engines (engine_sha256, engine) VALUES ($1, $2) ON CONFLICT (engine_sha256) DO NOTHING",
                                &[Val::from(&e.0), Val::from(&e.1)],
                            )?;
                            engines.push(e.clone());
                        }
                    }
                    insert_case(db, &key, run, s, engine.as_ref().map(|e| e.0.as_str()))?;
                }
                Ok(outcome)
            })
            .map_err(|m| failed(&url, StoreAction::Writing, m))
    }

    /// Where an archive is, as the store records it: relative to an SQLite store's folder (the
    /// two travel together as a CI cache or artifact), `/`-separated; absolute for a server.
    fn archive_path(&self, archive: &Path) -> String {
        let abs = crate::files::absolute(archive);
        let rel = match &self.url {
            StoreUrl::Sqlite(path) => {
                let base = crate::files::absolute(path.parent().unwrap_or(Path::new(".")));
                pathdiff::diff_paths(&abs, &base).unwrap_or(abs)
            }
            StoreUrl::Postgres(_) => abs,
        };
        rel.to_string_lossy().replace('\\', "/")
    }

    /// The folder of a point's archive on this machine (it may be gone: a CI runner's).
    pub fn archive_dir(&self, p: &Point) -> PathBuf {
        match &self.url {
            StoreUrl::Sqlite(path) => path
                .parent()
                .unwrap_or(Path::new("."))
                .join(&*p.run.archive),
            StoreUrl::Postgres(_) => PathBuf::from(&*p.run.archive),
        }
    }

    /// The reference a branch's history gives a case: its newest `last` runs on this device
    /// with this exact spec (by digest) that did not fail, oldest first.
    pub fn reference(
        &mut self,
        device_key: &str,
        spec: &str,
        spec_sha256: &str,
        branch: Option<&str>,
        last: usize,
    ) -> Result<Vec<Point>> {
        self.select(&Filter {
            device: Some(device_key),
            spec: Some(spec),
            spec_sha256: Some(spec_sha256),
            branch,
            judged: true,
            newest: Some(last),
            ..Filter::default()
        })
    }

    /// The newest `last` measured runs of a case on this device with this exact spec on
    /// `branch`, failed ones included, oldest first: the series whose levels a run watches (a
    /// regression that fails every run after it is still a new level).
    pub fn measured(
        &mut self,
        device_key: &str,
        spec: &str,
        spec_sha256: &str,
        branch: &str,
        last: usize,
    ) -> Result<Vec<Point>> {
        self.select(&Filter {
            device: Some(device_key),
            spec: Some(spec),
            spec_sha256: Some(spec_sha256),
            branch: Some(branch),
            measured: true,
            newest: Some(last),
            ..Filter::default()
        })
    }

    /// The newest `last` measured runs of a case on this device with this exact spec, of any
    /// branch but a bisection's, failed ones included (a run that failed a claim measured its
    /// medians all the same), oldest first: the drift between runs the store knows of the case
    /// (`compare`, where no baseline holds a history).
    pub fn recent(
        &mut self,
        device_key: &str,
        spec: &str,
        spec_sha256: &str,
        last: usize,
    ) -> Result<Vec<Point>> {
        self.select(&Filter {
            device: Some(device_key),
            spec: Some(spec),
            spec_sha256: Some(spec_sha256),
            measured: true,
            newest: Some(last),
            ..Filter::default()
        })
    }

    /// The newest run of a case with this exact spec on `branch` (any branch's but a
    /// bisection's when `None`), counted under the engine key `key` on this device (on any
    /// device when `None`: counts of one engine key are the same on every machine), that did
    /// not fail: the counts gate's reference from history.
    pub fn newest_counted(
        &mut self,
        device_key: Option<&str>,
        spec: &str,
        spec_sha256: &str,
        branch: Option<&str>,
        key: &str,
    ) -> Result<Option<Point>> {
        Ok(self
            .select(&Filter {
                device: device_key,
                spec: Some(spec),
                spec_sha256: Some(spec_sha256),
                branch,
                counted: Some((key, CountedAs::History)),
                newest: Some(1),
                ..Filter::default()
            })?
            .pop())
    }

    /// Every run of committed code of a case on this device with this exact spec that measured
    /// its level (judged, or failed by the regression gate alone), on any branch, oldest first:
    /// where the merge-base's run is looked for. A base that regressed is still the base.
    pub fn committed(
        &mut self,
        device_key: &str,
        spec: &str,
        spec_sha256: &str,
    ) -> Result<Vec<Point>> {
        self.select(&Filter {
            device: Some(device_key),
            spec: Some(spec),
            spec_sha256: Some(spec_sha256),
            level: true,
            clean: true,
            ..Filter::default()
        })
    }

    /// Every run of committed code of a case with this exact spec counted under the engine key
    /// `key` (on this device; on any when `None`) whose counts are the code's level (nothing
    /// failed but a regression gate), on any branch, oldest first: where the merge-base's
    /// counted run is looked for.
    pub fn committed_counted(
        &mut self,
        device_key: Option<&str>,
        spec: &str,
        spec_sha256: &str,
        key: &str,
    ) -> Result<Vec<Point>> {
        self.select(&Filter {
            device: device_key,
            spec: Some(spec),
            spec_sha256: Some(spec_sha256),
            clean: true,
            counted: Some((key, CountedAs::Level)),
            ..Filter::default()
        })
    }

    /// Every run of committed code of a case with this exact spec whose time on this device,
    /// or whose counts under the engine key `key` on any device (counts of one engine key are
    /// the same on every machine), are the code's level, on any branch, oldest first: where
    /// `compare --base` looks for the base run (a run that was only counted is one).
    pub fn committed_measured(
        &mut self,
        device_key: &str,
        spec: &str,
        spec_sha256: &str,
        key: Option<&str>,
    ) -> Result<Vec<Point>> {
        let mut points = self.committed(device_key, spec, spec_sha256)?;
        if let Some(key) = key {
            points.extend(self.committed_counted(None, spec, spec_sha256, key)?);
            points.sort_by(|a, b| a.run.order.key().cmp(&b.run.order.key()));
            points.dedup_by(|a, b| a.run.order == b.run.order);
        }
        Ok(points)
    }

    /// Every case's series, oldest first within each case (cases in name order). With `last`,
    /// each case is read on its own, newest runs first, so that only those rows are read.
    pub fn series(&mut self, q: &Query) -> Result<Vec<Point>> {
        let one = |store: &mut Store, spec: Option<&str>, newest: Option<usize>| {
            store.select(&Filter {
                device: q.device.as_deref(),
                branch: q.branch.as_deref(),
                spec,
                newest,
                ..Filter::default()
            })
        };
        if q.specs.is_empty() && q.last.is_none() {
            return one(self, None, None);
        }
        let mut specs = if q.specs.is_empty() {
            self.spec_names()?
        } else {
            q.specs.clone()
        };
        specs.sort();
        specs.dedup();
        let read = |store: &mut Store, specs: &[String]| -> Result<Vec<Point>> {
            let mut out = Vec::new();
            for s in specs {
                out.extend(one(store, Some(s), q.last)?);
            }
            Ok(out)
        };
        // Many cases' newest rows on PostgreSQL (a site's): the later half of the cases read on
        // a second connection at once, the server's work and the client's on both cores. On
        // SQLite, whose work is all in this process, a second connection read no faster and
        // took more processor time (docs/history.md).
        let rows = q.last.unwrap_or(0).saturating_mul(specs.len());
        let many = matches!(self.url, StoreUrl::Postgres(_))
            && i64::try_from(rows).unwrap_or(i64::MAX) >= self.split_rows / 10;
        if let Some(mut second) = (specs.len() >= 2 && many)
            .then(|| self.second_store())
            .flatten()
        {
            let (first_specs, second_specs) = specs.split_at(specs.len() / 2);
            let (first, last) = std::thread::scope(|scope| {
                let last = scope.spawn(|| read(&mut second, second_specs));
                (read(self, first_specs), last.join())
            });
            let mut out = first?;
            match last {
                Ok(last) => out.extend(last?),
                Err(panic) => std::panic::resume_unwind(panic),
            }
            return Ok(out);
        }
        read(self, &specs)
    }

    /// A second connection to this PostgreSQL store, to read from at once with this one (its
    /// schema already checked by this one); `None` on SQLite or where one cannot be opened
    /// (then this one reads alone).
    fn second_store(&self) -> Option<Store> {
        let StoreUrl::Postgres(u) = &self.url else {
            return None;
        };
        let db = Db::Postgres(Box::new(db::Pg::new(
            u.config.connect(postgres::NoTls).ok()?,
        )));
        Some(Store {
            db,
            url: self.url.clone(),
            split_rows: i64::MAX,
            engines: self.engines.clone(),
        })
    }

    /// The rows a filter selects: cases in name order, each oldest first.
    fn select(&mut self, f: &Filter<'_>) -> Result<Vec<Point>> {
        let conditions = conditions(f);
        let engines = self.engines().map_err(self.fail(StoreAction::Reading))?;
        let mut texts = Texts::naming(&engines);
        if let Some(newest) = f.newest {
            // A case's newest rows: from the end of its index, each case row with its run.
            let (filter, mut params) = where_of(conditions.iter());
            // Any count past i64 (a `--last` of 1e19) means every row; `as` would wrap negative.
            params.push(Val::Int(i64::try_from(newest).unwrap_or(i64::MAX)));
            let sql = format!(
                "SELECT {RUN_COLUMNS}, {CASE_COLUMNS} FROM cases c JOIN runs r ON r.run_key = c.run_key {filter}
                 ORDER BY c.spec DESC, c.started_utc DESC, c.started_ns DESC, c.run_id DESC, c.run_key DESC
                 LIMIT ${}",
                params.len()
            );
            let mut points = self
                .db
                .query_each(&sql, &params, |row| {
                    let (run, case) = row.split_at(RUN_COLUMN_COUNT.min(row.len()));
                    let spec = case.first().and_then(|v| v.text()).unwrap_or_default();
                    let spec = texts.of(100, spec);
                    point(&run_fields(run, &mut texts), case, spec, &mut texts)
                })
                .map_err(self.fail(StoreAction::Reading))?;
            points.reverse();
            return Ok(points);
        }
        // Every row: the runs the filter keeps, read once (thousands), then the case rows in the
        // table's own order, each joined to its run here and the points sorted here. SQLite's
        // join of half a million case rows with their runs, and its walk in the index's order,
        // cost more than all of this.
        let (filter, params) = where_of(conditions.iter().filter(|c| c.table == Table::Runs));
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs r {filter}");
        let mut runs: std::collections::HashMap<String, Run> = std::collections::HashMap::new();
        self.db
            .query_each(&sql, &params, |row| {
                let run = run_fields(row, &mut texts);
                runs.insert(run.order.key.to_string(), run);
            })
            .map_err(self.fail(StoreAction::Reading))?;
        // Each case's vectors are made large enough at once where the whole table is read.
        let cases = if conditions.iter().any(|c| c.table == Table::Cases) {
            0
        } else {
            self.spec_names()?.len()
        };
        let parts = self
            .case_rows(&conditions, &runs, &engines, cases, self.split_rows)
            .map_err(self.fail(StoreAction::Reading))?;
        Ok(in_case_order(parts))
    }

    /// Every case row the case conditions keep whose run is in `runs`, as a point, gathered by
    /// case in the order read (the table's), each reader's cases in start order. A table of
    /// `split_rows` rows or more is read in two parts at once (SQLite's row ids on a second
    /// connection; PostgreSQL's pages, each on a connection of the read's own): stepping
    /// through half a million rows and making their points is most of the time of every point,
    /// and a second core halves it. Rows a writer adds meanwhile belong to runs not in `runs`,
    /// and are left out as any such row is. `engines`
    /// names the store's counts engines; `cases` is how many cases the table holds where all of
    /// it is read (each case's vector is sized from it), else 0.
    fn case_rows(
        &mut self,
        conditions: &[Condition],
        runs: &std::collections::HashMap<String, Run>,
        engines: &Engines,
        cases: usize,
        split_rows: i64,
    ) -> db::DbResult<Vec<CaseRows>> {
        let case_conditions: Vec<&Condition> = conditions
            .iter()
            .filter(|c| c.table == Table::Cases)
            .collect();
        let (filter, params) = where_of(case_conditions.iter().copied());
        let read = |source: Source<'_>, part: Option<Part>, rows: usize| {
            let mut params = params.clone();
            let mut filter = filter.clone();
            if let Some(part) = part {
                let within = part.condition(&mut params);
                filter = if filter.is_empty() {
                    format!("WHERE {within}")
                } else {
                    format!("{filter} AND {within}")
                };
            }
            let sql = format!("SELECT {CASE_COLUMNS} FROM cases c {filter}");
            let room = rows.min(MAX_ROOM) / cases.max(1);
            read_cases(source, &sql, &params, runs, engines, room)
        };
        // A condition on the case rows (one case, a spec's digest) is served by an index and
        // reads few rows: split by place in the table, the table would be walked instead.
        if !case_conditions.is_empty() {
            return Ok(vec![read(Source::Db(&mut self.db), None, 0)?]);
        }
        // A run has a row a case at most: what sizes the vectors where the table cannot say.
        let most_rows = runs.len().saturating_mul(cases);
        let Some(split) = self.split(most_rows, split_rows)? else {
            return Ok(vec![read(Source::Db(&mut self.db), None, most_rows)?]);
        };
        let Split {
            mut second,
            parts: [first_part, second_part],
            rows: [first_rows, second_rows],
        } = split;
        // SQLite: this connection and a second one; PostgreSQL: two of the read's own.
        let pg = match &second {
            Second::Postgres(config) => Some(config.clone()),
            Second::Sqlite(_) => None,
        };
        let first_source = pg.as_ref().map_or(Source::Db(&mut self.db), Source::Pg);
        let (first, last) = std::thread::scope(|scope| {
            let last = scope.spawn(|| read(second.source(), Some(second_part), second_rows));
            let first = read(first_source, Some(first_part), first_rows);
            (first, last.join())
        });
        match last {
            Ok(last) => Ok(vec![first?, last?]),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// The store's counts engines, by their digests (a few: one per machine and build).
    fn engines(&mut self) -> db::DbResult<Engines> {
        if let Some(engines) = &self.engines {
            return Ok(engines.clone());
        }
        let mut engines = std::collections::HashMap::new();
        self.db.query_each(
            "SELECT engine_sha256, engine FROM counts_engines",
            &[],
            |row| {
                let text = |i: usize| row.get(i).and_then(|v| v.text());
                if let (Some(digest), Some(json)) = (text(0), text(1)) {
                    if let Ok(engine) = serde_json::from_str(json) {
                        engines.insert(digest.to_string(), std::sync::Arc::new(engine));
                    }
                }
            },
        )?;
        let engines = std::sync::Arc::new(engines);
        self.engines = Some(engines.clone());
        Ok(engines)
    }

    /// Where the whole case table is read by two readers at once: a second connection and the
    /// two parts of the table (SQLite's row ids, PostgreSQL's pages), each with the rows it
    /// holds about. `None` where the table has fewer than `split_rows` rows (`most_rows` at
    /// most, which PostgreSQL is judged by), or where a second connection cannot be opened: then
    /// one reads it all.
    fn split(&mut self, most_rows: usize, split_rows: i64) -> db::DbResult<Option<Split>> {
        let enough = |rows: i64| rows >= split_rows;
        match &self.url {
            StoreUrl::Sqlite(path) => {
                // The ends of the table's tree: its first and last row ids.
                let span = self
                    .db
                    .query("SELECT MIN(rowid), MAX(rowid) FROM cases", &[])?;
                let at = |i: usize| span.first().and_then(|r| r.get(i)).and_then(Val::int);
                let Some((first, last)) = at(0).zip(at(1)) else {
                    return Ok(None);
                };
                if !enough(last.saturating_sub(first)) {
                    return Ok(None);
                }
                let Some(second) = second_sqlite(path) else {
                    return Ok(None);
                };
                let middle = first + (last - first) / 2;
                let end = last.saturating_add(1);
                let rows = |from: i64, to: i64| usize::try_from(to - from).unwrap_or(0);
                Ok(Some(Split {
                    second: Second::Sqlite(second),
                    parts: [
                        Part::Rowids {
                            from: first,
                            to: middle,
                        },
                        Part::Rowids {
                            from: middle,
                            to: end,
                        },
                    ],
                    rows: [rows(first, middle), rows(middle, end)],
                }))
            }
            StoreUrl::Postgres(u) => {
                if !enough(i64::try_from(most_rows).unwrap_or(i64::MAX)) {
                    return Ok(None);
                }
                let size = self.db.query(
                    "SELECT CAST(pg_relation_size('cases') / CAST(current_setting('block_size') AS BIGINT) AS BIGINT)",
                    &[],
                )?;
                let pages = size
                    .first()
                    .and_then(|r| r.first())
                    .and_then(Val::int)
                    .unwrap_or(0);
                if pages < 2 {
                    return Ok(None);
                }
                let middle = pages / 2;
                Ok(Some(Split {
                    second: Second::Postgres(u.scan.clone()),
                    parts: [
                        Part::Pages {
                            from: 0,
                            to: middle,
                        },
                        // Past the last page: a page a writer adds meanwhile holds rows of runs
                        // that are not read.
                        Part::Pages {
                            from: middle,
                            to: i64::from(u32::MAX),
                        },
                    ],
                    rows: [most_rows / 2, most_rows - most_rows / 2],
                }))
            }
        }
    }

    /// The names the store knows for what a `history` query can name: specs, branches,
    /// devices (each sorted), so that a name it does not know is answered with the known ones.
    pub fn known_names(&mut self) -> Result<[Vec<String>; 3]> {
        let specs = self.spec_names()?;
        let mut names = |sql: &str| -> Result<Vec<String>> {
            let rows = self
                .db
                .query(sql, &[])
                .map_err(self.fail(StoreAction::Reading))?;
            Ok(rows
                .iter()
                .filter_map(|r| r.first().and_then(Val::text))
                .collect())
        };
        Ok([
            specs,
            names("SELECT DISTINCT branch FROM runs WHERE branch IS NOT NULL ORDER BY branch")?,
            names("SELECT DISTINCT device_key FROM runs ORDER BY device_key")?,
        ])
    }

    fn spec_names(&mut self) -> Result<Vec<String>> {
        let rows = self
            .db
            // A walk along the case index, one step a name (what a "loose index scan" does),
            // instead of `SELECT DISTINCT` reading every row of every case: 0.2 ms instead of
            // 22 ms on SQLite, 6 instead of 39 on PostgreSQL, over 500 000 rows.
            .query(
                "WITH RECURSIVE t(spec) AS (SELECT MIN(spec) FROM cases UNION ALL SELECT (SELECT MIN(spec) FROM cases WHERE spec > t.spec) FROM t WHERE t.spec IS NOT NULL) SELECT spec FROM t WHERE spec IS NOT NULL",
                &[],
            )
            .map_err(self.fail(StoreAction::Reading))?;
        Ok(rows
            .iter()
            .filter_map(|r| r.first().and_then(Val::text))
            .collect())
    }
}

/// Opens an SQLite file, its folder made when missing.
/// Opens (creating it) an SQLite store. What is not a regular file (a device such as
/// `/dev/zero`, a FIFO, a folder) is refused before SQLite touches it: SQLite would read it as
/// a database and leave a `-journal` file beside it.
fn open_sqlite(path: &Path) -> db::DbResult<Db> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => return Err(db::DbError::from(
            "not a regular file: an SQLite store is a file (name a new or existing .sqlite file)"
                .to_string(),
        )),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(db::DbError::from(e.to_string())),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| db::DbError {
            message: format!("creating {}: {e}", dir.display()),
            out_of_space: e.raw_os_error() == Some(libc::ENOSPC),
        })?;
    }
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(30))?;
    // Switching a new file to WAL takes a lock that SQLite's busy handler does not wait for:
    // runners opening a new store at once retry it (within the same 30 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Ok(()) => break,
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => return Err(e.into()),
        }
    }
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(Db::Sqlite(conn))
}

/// Opens an existing SQLite store that cannot be written, read-only and as immutable (SQLite
/// then needs no lock or journal beside it, which a read-only folder could not hold).
/// The case rows `sql` selects (its columns [`CASE_COLUMNS`]) whose run is in `runs`, as points
/// gathered by case, each case in start order; `room` points made room for at once a case.
fn read_cases(
    source: Source<'_>,
    sql: &str,
    params: &[Val],
    runs: &std::collections::HashMap<String, Run>,
    engines: &Engines,
    room: usize,
) -> db::DbResult<CaseRows> {
    let mut texts = Texts::naming(engines);
    let mut read = CaseRows::with_room(room);
    // A run's cases come together: its fields are looked up once for all of them.
    let mut last: Option<(&str, &Run)> = None;
    let on_row = |row: &[ValRef<'_>]| {
        let Some(key) = row.get(CASE_RUN_KEY).and_then(|v| v.text()) else {
            return;
        };
        let run = match last {
            Some((k, run)) if k == key => run,
            _ => match runs.get_key_value(key) {
                Some((k, run)) => {
                    last = Some((k, run));
                    run
                }
                // A case of a run the filter left out.
                None => return,
            },
        };
        let spec = row.first().and_then(|v| v.text()).unwrap_or_default();
        read.push(spec, |spec| point(run, row, spec, &mut texts));
    };
    match source {
        Source::Db(db) => db.query_each(sql, params, on_row).map(drop)?,
        Source::Pg(config) => db::pg_scan(config, sql, params, on_row)?,
    }
    // Each reader puts its own cases in order (both cores at work); the cases of two readers
    // are then mostly in order one after the other.
    for case in &mut read.cases {
        in_start_order(&mut case.points);
    }
    Ok(read)
}

/// A second connection to an SQLite store another one has open, to read only.
fn second_sqlite(path: &Path) -> Option<Db> {
    use rusqlite::OpenFlags;
    let conn = rusqlite::Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ok()?;
    let _ = conn.busy_timeout(std::time::Duration::from_secs(30));
    Some(Db::Sqlite(conn))
}

fn open_sqlite_read_only(path: &Path) -> std::result::Result<Db, rusqlite::Error> {
    use rusqlite::OpenFlags;
    // A URI: the path's bytes that URIs reserve are percent-encoded.
    let mut uri = String::from("file:");
    for b in crate::files::absolute(path).to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    let conn = rusqlite::Connection::open_with_flags(
        uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    Ok(Db::Sqlite(conn))
}

fn failed(url: &StoreUrl, action: StoreAction, e: impl Into<db::DbError>) -> Error {
    let e = e.into();
    Error::Store {
        store: url.display(),
        action,
        message: e.message,
        out_of_space: e.out_of_space,
    }
}

/// A point from a row of the select's columns.
/// The table a condition of a filter reads.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Table {
    Runs,
    Cases,
}

/// One condition of a filter: the table it reads and its SQL, `$?` where its parameter goes.
struct Condition {
    table: Table,
    sql: String,
    param: Option<Val>,
}

/// The conditions of a filter. Only the filters given are there, so that the indexes serve them.
fn conditions(f: &Filter<'_>) -> Vec<Condition> {
    let mut out = Vec::new();
    let mut add = |table: Table, sql: &str, param: Option<Val>| {
        out.push(Condition {
            table,
            sql: sql.to_string(),
            param,
        })
    };
    for (table, column, v) in [
        (Table::Cases, "c.spec", f.spec),
        (Table::Runs, "r.device_key", f.device),
        (Table::Cases, "c.spec_sha256", f.spec_sha256),
        (Table::Runs, "r.branch", f.branch),
    ] {
        if let Some(v) = v {
            add(table, &format!("{column} = $?"), Some(Val::from(v)));
        }
    }
    // The steps of a bisection measured other commits than the branch's: kept apart unless
    // asked for by name.
    if f.branch.is_none() {
        add(
            Table::Runs,
            &format!("(r.branch IS NULL OR r.branch <> '{BISECT_BRANCH}')"),
            None,
        );
    }
    // Which runs may stand as a reference is the gate's to say (`gate::rule::standing`,
    // recorded with each case): here it is only read.
    let kept = crate::gate::rule::Standing::Kept.code();
    let regressed = crate::gate::rule::Standing::Regressed.code();
    let timed = "c.before_median_secs IS NOT NULL AND c.after_median_secs IS NOT NULL";
    if f.judged {
        add(
            Table::Cases,
            &format!("c.standing = {kept} AND {timed}"),
            None,
        );
    } else if f.level {
        add(
            Table::Cases,
            &format!("c.standing <= {regressed} AND {timed}"),
            None,
        );
    } else if f.measured {
        add(Table::Cases, timed, None);
    }
    if f.clean {
        add(Table::Runs, "r.git_dirty = 0", None);
    }
    if let Some((key, standing)) = f.counted {
        let most = match standing {
            CountedAs::History => kept,
            CountedAs::Level => regressed,
        };
        add(
            Table::Cases,
            &format!("c.counts_key = $? AND c.standing <= {most}"),
            Some(Val::from(key)),
        );
    }
    out
}

/// Conditions as a `WHERE` clause (empty for none), their parameters numbered from `$1`.
fn where_of<'a>(conditions: impl Iterator<Item = &'a Condition>) -> (String, Vec<Val>) {
    let mut params = Vec::new();
    let mut parts = Vec::new();
    for c in conditions {
        parts.push(match &c.param {
            Some(v) => {
                params.push(v.clone());
                c.sql.replace("$?", &format!("${}", params.len()))
            }
            None => c.sql.clone(),
        });
    }
    if parts.is_empty() {
        return (String::new(), params);
    }
    (format!("WHERE {}", parts.join(" AND ")), params)
}

/// Case rows fewer than this are read on one connection (see [`Store::case_rows`]).
const SPLIT_ROWS: i64 = 100_000;

/// The case table read by two readers at once (see [`Store::split`]).
struct Split {
    /// What the second reader reads from.
    second: Second,
    parts: [Part; 2],
    /// The rows each part holds, about.
    rows: [usize; 2],
}

/// Where a reader reads the case table from.
enum Source<'a> {
    /// A connection of the store's.
    Db(&'a mut Db),
    /// A PostgreSQL connection of the read's own, made with these settings.
    Pg(&'a tokio_postgres::Config),
}

/// What the second reader of a split read reads from, moved to its thread: on SQLite a
/// connection of its own (the first reads on the store's), on PostgreSQL the settings each of
/// the two readers makes its connection with.
enum Second {
    Sqlite(Db),
    Postgres(tokio_postgres::Config),
}

impl Second {
    fn source(&mut self) -> Source<'_> {
        match self {
            Second::Sqlite(db) => Source::Db(db),
            Second::Postgres(config) => Source::Pg(config),
        }
    }
}

/// A part of the case table, by place: rows a reader can walk to directly.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Part {
    /// SQLite's row ids `from..to`.
    Rowids { from: i64, to: i64 },
    /// PostgreSQL's pages `from..to` (a TID range scan).
    Pages { from: i64, to: i64 },
}

impl Part {
    /// The condition on a case row `c` that keeps this part, its values added to `params`.
    fn condition(self, params: &mut Vec<Val>) -> String {
        let (column, from, to) = match self {
            Part::Rowids { from, to } => ("c.rowid", Val::Int(from), Val::Int(to)),
            // A page's first row is at (page, 1): (page, 0) lies before every row of it.
            Part::Pages { from, to } => (
                "c.ctid",
                Val::Text(format!("({from},0)")),
                Val::Text(format!("({to},0)")),
            ),
        };
        let cast = |n: usize| match self {
            Part::Rowids { .. } => format!("${n}"),
            // The value is sent as text: cast straight to `tid`, the server would take the
            // parameter for a `tid` in its binary form.
            Part::Pages { .. } => format!("CAST(CAST(${n} AS TEXT) AS tid)"),
        };
        params.extend([from, to]);
        let n = params.len();
        format!("{column} >= {} AND {column} < {}", cast(n - 1), cast(n))
    }
}

/// The most rows a read makes room for at once (more grow the vectors as they come): row ids
/// with gaps (rows deleted) or a filter that keeps few rows would otherwise reserve memory that
/// is never used.
const MAX_ROOM: usize = 1 << 21;

/// One case's points as one reader read them.
struct CaseRead {
    name: Text,
    points: Vec<Point>,
}

/// Case rows one reader read, gathered by case as they come: put in the store's order, each
/// case is then moved once, whole, instead of half a million points being put in order one by
/// one (a permutation of large points, most of its moves cache misses: docs/history.md).
struct CaseRows {
    cases: Vec<CaseRead>,
    /// A case's place in `cases`, by name.
    index: std::collections::HashMap<Text, usize>,
    /// The room a case's vector is made with when its first row comes.
    room: usize,
}

impl CaseRows {
    fn with_room(room: usize) -> CaseRows {
        CaseRows {
            cases: Vec::new(),
            index: std::collections::HashMap::new(),
            room,
        }
    }

    /// Adds the point `make` makes (given the case's shared name) to case `spec`'s.
    fn push(&mut self, spec: &str, make: impl FnOnce(Text) -> Point) {
        let k = match self.index.get(spec) {
            Some(k) => *k,
            None => {
                let name: Text = spec.into();
                self.cases.push(CaseRead {
                    name: name.clone(),
                    points: Vec::with_capacity(self.room),
                });
                self.index.insert(name, self.cases.len() - 1);
                self.cases.len() - 1
            }
        };
        let case = &mut self.cases[k];
        let point = make(case.name.clone());
        case.points.push(point);
    }
}

/// Points in the store's order: by case, then start, then run. Each case's rows come in the
/// order read (the table's, in which a case's runs mostly come oldest first already; the first
/// reader's before the second's) and are sorted only where they are not in order yet.
fn in_case_order(parts: Vec<CaseRows>) -> Vec<Point> {
    let total = parts
        .iter()
        .flat_map(|p| &p.cases)
        .map(|c| c.points.len())
        .sum();
    let mut cases: Vec<CaseRead> = parts.into_iter().flat_map(|p| p.cases).collect();
    // By name, stably: one case's reads stay in the readers' order.
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out: Vec<Point> = Vec::with_capacity(total);
    let mut at = 0;
    while at < cases.len() {
        let start = out.len();
        let name = cases[at].name.clone();
        while let Some(case) = cases.get_mut(at).filter(|c| c.name == name) {
            out.append(&mut case.points);
            at += 1;
        }
        in_start_order(&mut out[start..]);
    }
    out
}

/// One case's points in start order, sorted only where out of it: on small keys (the start as a
/// number, its nanoseconds), the texts compared only where those tie (half a million heap texts
/// compared directly cost far more: docs/history.md).
fn in_start_order(points: &mut [Point]) {
    let tie = |a: &Point, b: &Point| {
        let (ra, rb) = (&a.run, &b.run);
        (ra.order.started, ra.order.started_ns)
            .cmp(&(rb.order.started, rb.order.started_ns))
            .then_with(|| {
                (&*ra.started_utc, &*ra.run_id, &*ra.order.key).cmp(&(
                    &*rb.started_utc,
                    &*rb.run_id,
                    &*rb.order.key,
                ))
            })
    };
    if points.is_sorted_by(|a, b| tie(a, b).is_le()) {
        return;
    }
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_unstable_by(|a, b| tie(&points[*a], &points[*b]));
    permute(points, &order);
}

/// Puts `v[order[k]]` at `k` for every `k`, in place (`order` a permutation of `v`'s indices),
/// following each cycle of the permutation with swaps.
fn permute<T>(v: &mut [T], order: &[usize]) {
    let mut done = vec![false; v.len()];
    for start in 0..v.len().min(order.len()) {
        if done[start] {
            continue;
        }
        let mut k = start;
        while order[k] != start {
            v.swap(k, order[k]);
            done[k] = true;
            k = order[k];
        }
        done[k] = true;
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` as the number YYYYMMDDHHMMSS, which orders as the text does; any
/// other text as 0 (its order is then the text's, compared where the numbers tie).
fn utc_number(utc: &str) -> u64 {
    if utc.len() != 20 {
        return 0;
    }
    let (mut n, mut digits) = (0u64, 0);
    for d in utc.bytes().filter(u8::is_ascii_digit) {
        n = n * 10 + u64::from(d - b'0');
        digits += 1;
    }
    if digits == 14 {
        n
    } else {
        0
    }
}

/// The texts of points read in one query, each distinct text held once and shared by every
/// point that has it. A column's text is first compared with that column's in the row before:
/// rows come a run's cases together, or a case's runs together, so most texts repeat it.
#[derive(Default)]
struct Texts {
    all: std::collections::HashSet<Text>,
    last: Vec<Option<Text>>,
    /// Counts engines by what names them in a row: the store's by their digests, and those of
    /// rows recorded before engines were kept apart by their JSON, each parsed once (parsed
    /// per row, it was most of the time of a counted store's every point).
    engines: std::collections::HashMap<Text, Option<Engine>>,
    last_engine: Option<(Text, Option<Engine>)>,
}

/// A counts engine that many points share.
type Engine = std::sync::Arc<crate::measure::counts::CountsEngine>;

impl Texts {
    /// Texts of a query of a store whose engines are `named` by their digests.
    fn naming(named: &Engines) -> Texts {
        Texts {
            engines: named
                .iter()
                .map(|(digest, e)| (Text::from(digest.as_str()), Some(e.clone())))
                .collect(),
            ..Texts::default()
        }
    }

    /// The counts engine an engine column names: by its digest, or (rows recorded before
    /// engines were kept apart) by its JSON; `None` where it names none.
    fn engine(&mut self, s: &str) -> Option<Engine> {
        if let Some((_, engine)) = self.last_engine.as_ref().filter(|(t, _)| **t == *s) {
            return engine.clone();
        }
        let engine = match self.engines.get(s) {
            Some(e) => e.clone(),
            None => {
                let e = s
                    .starts_with('{')
                    .then(|| serde_json::from_str(s).ok().map(std::sync::Arc::new))
                    .flatten();
                self.engines.insert(s.into(), e.clone());
                e
            }
        };
        self.last_engine = Some((s.into(), engine.clone()));
        engine
    }

    /// The shared text of column `column`.
    fn of(&mut self, column: usize, s: &str) -> Text {
        if self.last.len() <= column {
            self.last.resize(column + 1, None);
        }
        if let Some(t) = self.last[column].as_ref().filter(|t| ***t == *s) {
            return t.clone();
        }
        let t = match self.all.get(s) {
            Some(t) => t.clone(),
            None => {
                let t: Text = s.into();
                self.all.insert(t.clone());
                t
            }
        };
        self.last[column] = Some(t.clone());
        t
    }
}

/// The columns of a run that each of its cases' points holds, in this order.
const RUN_COLUMNS: &str = "r.run_id, r.started_utc, r.git_sha, r.git_dirty, r.branch, r.device_key, r.archive, r.started_ns, r.run_key";
const RUN_COLUMN_COUNT: usize = 9;

/// The columns of a case row a point is made of, in this order.
const CASE_COLUMNS: &str = "c.spec, c.verdict, c.before_median_secs, c.after_median_secs, c.ratio, c.ratio_lo, c.ratio_hi,
    c.before_ci_lo_secs, c.before_ci_hi_secs, c.after_ci_lo_secs, c.after_ci_hi_secs, c.baseline_status,
    c.counts_key, c.before_instructions, c.after_instructions, c.before_dram_bytes, c.after_dram_bytes, c.before_cycles, c.after_cycles, c.counts_engine,
    c.run_key";
const CASE_RUN_KEY: usize = 20;

/// What a run gives each of its cases' points, shared.
type Run = std::sync::Arc<PointRun>;

/// A run's fields from the values of [`RUN_COLUMNS`], its texts shared through `texts`.
fn run_fields(r: &[ValRef<'_>], texts: &mut Texts) -> Run {
    let at = |i: usize| r.get(i).copied().unwrap_or(ValRef::Null);
    let mut text = |i: usize| at(i).text().map(|s| texts.of(i, s));
    let started_utc = text(1).unwrap_or_default();
    std::sync::Arc::new(PointRun {
        run_id: text(0).unwrap_or_default(),
        git_sha: text(2).unwrap_or_default(),
        git_dirty: at(3).int().unwrap_or(0) != 0,
        branch: text(4),
        device_key: text(5).unwrap_or_default(),
        archive: text(6).unwrap_or_default(),
        order: RunOrder {
            started: utc_number(&started_utc),
            started_ns: at(7).int().unwrap_or(0),
            key: at(8).text().map(Text::from).unwrap_or_default(),
        },
        started_utc,
    })
}

/// A point of `run` from the values of [`CASE_COLUMNS`], its texts shared through `texts`.
fn point(run: &Run, c: &[ValRef<'_>], spec: Text, texts: &mut Texts) -> Point {
    let at = |i: usize| c.get(i).copied().unwrap_or(ValRef::Null);
    // Case columns are cached apart from the run's (their positions overlap).
    let verdict = at(1).text().map(|s| texts.of(101, s));
    let real = |i: usize| at(i).real();
    let count = |i: usize| at(i).int().and_then(|v| u64::try_from(v).ok());
    Point {
        run: run.clone(),
        spec,
        verdict: verdict.unwrap_or_default(),
        before_median_secs: real(2),
        after_median_secs: real(3),
        ratio: real(4),
        ratio_lo: real(5),
        ratio_hi: real(6),
        before_ci_lo_secs: real(7),
        before_ci_hi_secs: real(8),
        after_ci_lo_secs: real(9),
        after_ci_hi_secs: real(10),
        accepted: at(11).text() == Some("accepted"),
        counts: at(12).text().map(|key| {
            Box::new(PointCounts {
                key: texts.of(112, key),
                engine: at(19).text().and_then(|t| texts.engine(t)),
                before_instructions: count(13),
                after_instructions: count(14),
                before_dram_bytes: count(15),
                after_dram_bytes: count(16),
                before_cycles: count(17),
                after_cycles: count(18),
            })
        }),
    }
}

/// What names a run in the store: its random identity, or for an archive written before it had
/// one, its run id and start time.
fn run_key(run: &RunResult) -> String {
    if run.run_uid.is_empty() {
        format!("{}@{}", run.run_id, run.started_utc)
    } else {
        run.run_uid.clone()
    }
}

/// A counts engine's JSON and its SHA-256 (what a counted case row names it by).
fn engine_json(engine: &crate::measure::counts::CountsEngine) -> (String, String) {
    use sha2::Digest;
    let json = serde_json::to_string(engine).unwrap_or_default();
    (hex::encode(sha2::Sha256::digest(json.as_bytes())), json)
}

/// Inserts a case row; `engine` is its counts engine's digest, where it was counted.
fn insert_case(
    db: &mut Db,
    run_key: &str,
    run: &RunResult,
    s: &SpecResult,
    engine: Option<&str>,
) -> db::DbResult<u64> {
    let (b, a) = (s.before.summary, s.after.summary);
    // after/before from the paired saving: ratio = 1 − saving (its CI reversed).
    let ratio = s
        .time_saving
        .map(|t| (1.0 - t.point, 1.0 - t.hi, 1.0 - t.lo));
    let verdict = s.verdict().key();
    let counts = PointCounts::of(s);
    // A count past i64 cannot happen on any machine; were it to, it is stored as unknown.
    let count = |v: Option<u64>| match v.and_then(|v| i64::try_from(v).ok()) {
        Some(v) => Val::Int(v),
        None => Val::Null,
    };
    let checks = serde_json::to_string(
        &s.checks
            .iter()
            .map(|c| (&c.name, c.status))
            .collect::<Vec<_>>(),
    )
    .unwrap_or_default();
    db.execute(
        "INSERT INTO cases (run_key, spec, spec_sha256, sweep_label, verdict, before_median_secs, before_ci_lo_secs, before_ci_hi_secs, before_n, after_median_secs, after_ci_lo_secs, after_ci_hi_secs, after_n, ratio, ratio_lo, ratio_hi, gate_state, gate_ratio, checks, baseline_status, counts_key, before_instructions, after_instructions, before_dram_bytes, after_dram_bytes, before_cycles, after_cycles, counts_engine, started_utc, started_ns, run_id, standing) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32)",
        &[
            Val::from(run_key),
            Val::from(&s.name),
            Val::from(&s.spec_sha256),
            Val::from(s.sweep.as_ref().map(|p| p.label.clone())),
            Val::from(verdict),
            Val::from(b.map(|x| x.median_secs)),
            Val::from(b.map(|x| x.ci_lo_secs)),
            Val::from(b.map(|x| x.ci_hi_secs)),
            Val::from(b.map(|x| x.n as i64)),
            Val::from(a.map(|x| x.median_secs)),
            Val::from(a.map(|x| x.ci_lo_secs)),
            Val::from(a.map(|x| x.ci_hi_secs)),
            Val::from(a.map(|x| x.n as i64)),
            Val::from(ratio.map(|r| r.0)),
            Val::from(ratio.map(|r| r.1)),
            Val::from(ratio.map(|r| r.2)),
            Val::from(s.baseline.state.map(|st| st.word().to_string())),
            Val::from(s.baseline.ratio.map(|r| r.point)),
            Val::from(checks),
            Val::from(
                serde_json::to_value(s.baseline.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string)),
            ),
            Val::from(counts.as_ref().map(|c| c.key.to_string())),
            count(counts.as_ref().and_then(|c| c.before_instructions)),
            count(counts.as_ref().and_then(|c| c.after_instructions)),
            count(counts.as_ref().and_then(|c| c.before_dram_bytes)),
            count(counts.as_ref().and_then(|c| c.after_dram_bytes)),
            count(counts.as_ref().and_then(|c| c.before_cycles)),
            count(counts.as_ref().and_then(|c| c.after_cycles)),
            Val::from(engine),
            Val::from(&run.started_utc),
            Val::Int(run.started_unix_ns.unwrap_or(0)),
            Val::from(&run.run_id),
            Val::Int(crate::gate::rule::standing(&s.checks).code()),
        ],
    )
}

/// A database of its own on the test server, for the tests that read PostgreSQL.
#[cfg(test)]
#[path = "../../tests/common/postgres.rs"]
mod test_postgres;

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows in the order a table gives them — cases interleaved, a run recorded late with an
    /// older start, two runs of one second told apart by their nanoseconds, then their keys,
    /// one case read by two readers — come out by case, then start.
    #[test]
    fn points_are_put_in_case_then_start_order() {
        let read = |rows: &[(&str, &str, i64, &str)]| {
            let mut read = CaseRows::with_room(2);
            for (spec, utc, ns, key) in rows {
                let make = |spec: Text| Point {
                    spec,
                    run: std::sync::Arc::new(PointRun {
                        started_utc: (*utc).into(),
                        run_id: (*key).into(),
                        order: RunOrder {
                            started: utc_number(utc),
                            started_ns: *ns,
                            key: (*key).into(),
                        },
                        ..PointRun::default()
                    }),
                    ..Point::default()
                };
                read.push(spec, make);
            }
            read
        };
        let first = read(&[
            ("b-case", "2026-01-02T00:00:00Z", 0, "r2"),
            ("a-case", "2026-01-02T00:00:00Z", 0, "r2"),
            ("b-case", "2026-01-03T00:00:00Z", 5, "r4"),
            ("b-case", "2026-01-03T00:00:00Z", 1, "r3"),
            ("a-case", "2026-01-01T00:00:00Z", 0, "r1"),
        ]);
        let second = read(&[
            ("b-case", "2026-01-01T00:00:00Z", 0, "r1"),
            ("b-case", "2026-01-03T00:00:00Z", 5, "r5"),
            ("c-case", "2026-01-01T00:00:00Z", 0, "r1"),
        ]);
        let got: Vec<(String, String)> = in_case_order(vec![second, first])
            .iter()
            .map(|p| (p.spec.to_string(), p.run.run_id.to_string()))
            .collect();
        let want: Vec<(String, String)> = [
            ("a-case", "r1"),
            ("a-case", "r2"),
            ("b-case", "r1"),
            ("b-case", "r2"),
            ("b-case", "r3"),
            ("b-case", "r4"),
            ("b-case", "r5"),
            ("c-case", "r1"),
        ]
        .iter()
        .map(|(s, r)| (s.to_string(), r.to_string()))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_permutation_is_applied_in_place() {
        let mut v = vec!['a', 'b', 'c', 'd', 'e', 'f'];
        // out[k] = v[order[k]]: two cycles and a fixed point.
        permute(&mut v, &[2, 0, 1, 3, 5, 4]);
        assert_eq!(v, vec!['c', 'a', 'b', 'd', 'f', 'e']);
        let mut w: Vec<usize> = (0..100).collect();
        let order: Vec<usize> = (0..100).map(|i| (i * 37) % 100).collect();
        permute(&mut w, &order);
        assert_eq!(w, order);
    }

    /// A folder for an SQLite store, its URL, and the fixed archive's run to record in it.
    fn fixture_store() -> (tempfile::TempDir, StoreUrl, RunResult) {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::Sqlite(dir.path().join("h.sqlite"));
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/run-fixed/results.json"
        );
        let run = serde_json::from_slice(&std::fs::read(fixture).unwrap()).unwrap();
        (dir, url, run)
    }

    #[test]
    fn a_large_case_table_read_in_two_parts_gives_the_same_points() {
        let (dir, url, run) = fixture_store();
        two_readers_read_what_one_reads(&url, dir.path(), run);
    }

    #[test]
    fn a_large_case_table_read_in_two_parts_gives_the_same_points_on_postgres() {
        let Some(db) = super::test_postgres::postgres_store("two_parts") else {
            return;
        };
        let (dir, _, run) = fixture_store();
        let url = StoreUrl::parse(&db.url).unwrap();
        two_readers_read_what_one_reads(&url, dir.path(), run);
    }

    /// Runs out of start order on two branches, read whole by one reader and in two parts by
    /// two (SQLite's row ids, PostgreSQL's pages): the same points in the same order.
    fn two_readers_read_what_one_reads(url: &StoreUrl, dir: &Path, mut run: RunResult) {
        let mut store = Store::open(url).unwrap();
        // Enough runs that PostgreSQL's table spans pages to split.
        let hours = [5, 3, 9, 1, 7, 2, 8];
        let runs = 6 * hours.len();
        for r in 0..runs {
            run.run_uid = format!("{r:032x}");
            run.run_id = format!("run-{r}");
            run.started_utc = format!("2026-01-{:02}T{:02}:00:00Z", 1 + r / 7, hours[r % 7]);
            run.started_unix_ns = Some(r as i64);
            let branch = if r % 7 == 4 { "dev" } else { "main" };
            store
                .record(&run, &dir.join("a"), &format!("{r:064x}"), Some(branch))
                .unwrap();
        }
        let names = |points: Vec<Point>| -> Vec<(String, String)> {
            points
                .iter()
                .map(|p| (p.spec.to_string(), p.run.run_id.to_string()))
                .collect()
        };
        for q in [
            Query::default(),
            Query {
                branch: Some("main".into()),
                ..Query::default()
            },
        ] {
            store.split_rows = i64::MAX;
            let whole = names(store.series(&q).unwrap());
            store.split_rows = 1;
            let split = store.split(runs * run.specs.len(), 1).unwrap();
            assert!(split.is_some_and(|s| s.parts[0] != s.parts[1]));
            let parts = names(store.series(&q).unwrap());
            assert_eq!(whole, parts);
            let main_runs = runs - runs / 7;
            assert_eq!(
                whole.len(),
                run.specs.len() * if q.branch.is_some() { main_runs } else { runs }
            );
            // Each case oldest first: run-3 (1 January, 01:00) leads.
            assert_eq!(whole[0].1, "run-3");
        }
        // Each case's newest runs: on PostgreSQL, half of the cases read on a second
        // connection.
        let q = Query {
            last: Some(9),
            ..Query::default()
        };
        store.split_rows = i64::MAX;
        let alone = names(store.series(&q).unwrap());
        store.split_rows = 1;
        assert_eq!(
            store.second_store().is_some(),
            matches!(url, StoreUrl::Postgres(_))
        );
        assert_eq!(names(store.series(&q).unwrap()), alone);
        assert_eq!(alone.len(), 9 * run.specs.len());
        // The newest nine of the first case, oldest first: the last day's 09:00 run ends them.
        assert_eq!(alone[8].1, "run-37");
    }

    /// A counted case names its engine by digest, the engine kept once for every run; a row
    /// recorded before (the engine's JSON in the row) reads the same.
    #[test]
    fn counts_engines_are_kept_once_and_rows_naming_them_either_way_read_alike() {
        use crate::measure::counts::{
            CacheModel, Counts, CountsEngine, LedgerAgreement, SideCounts, SpecCounts,
        };
        let (dir, url, mut run) = fixture_store();
        let engine = CountsEngine {
            valgrind: "valgrind-3.19.0".into(),
            cache_model: CacheModel::default(),
            simd: "avx2".into(),
            threads: 1,
            seed: 7,
            compiler: "rustc 1".into(),
            ..CountsEngine::default()
        };
        let side = |instructions: u64| SideCounts::Counted {
            counts: Counts {
                instructions,
                dram_read_bytes: 4096,
                estimated_cycles: 3 * instructions,
                ..Counts::default()
            },
            ledger_read_bytes: 4096,
            ledger_write_bytes: 0,
            ledger_flops: 0,
            agreement: LedgerAgreement::Streaming {
                read_ratio: 1.0,
                write_ratio: 1.0,
                agrees: true,
            },
            functions: Vec::new(),
            repeat_instructions: None,
            compulsory_bytes: None,
        };
        for s in &mut run.specs {
            s.counts = Some(SpecCounts {
                name: s.name.clone(),
                engine: engine.clone(),
                before_variant: "a".into(),
                after_variant: "b".into(),
                before: side(1000),
                after: side(600),
                counted_workload: None,
            });
        }
        let mut store = Store::open(&url).unwrap();
        for r in 0..2 {
            run.run_uid = format!("{r:032x}");
            run.run_id = format!("run-{r}");
            store
                .record(
                    &run,
                    &dir.path().join("a"),
                    &format!("{r:064x}"),
                    Some("main"),
                )
                .unwrap();
        }
        let count =
            |store: &mut Store, sql: &str| store.db.query(sql, &[]).unwrap()[0][0].int().unwrap();
        assert_eq!(count(&mut store, "SELECT COUNT(*) FROM counts_engines"), 1);
        assert_eq!(
            count(
                &mut store,
                "SELECT COUNT(*) FROM cases WHERE length(counts_engine) = 64"
            ),
            2 * run.specs.len() as i64
        );
        let engines = |store: &mut Store| -> Vec<Option<CountsEngine>> {
            store
                .series(&Query::default())
                .unwrap()
                .iter()
                .map(|p| p.counts.as_ref().and_then(|c| c.engine.as_deref().cloned()))
                .collect()
        };
        let by_digest = engines(&mut store);
        assert_eq!(by_digest.len(), 2 * run.specs.len());
        assert!(by_digest.iter().all(|e| e.as_ref() == Some(&engine)));
        // One run's rows as a store recorded them before: the engine's JSON in the row.
        store
            .db
            .execute(
                "UPDATE cases SET counts_engine = $1 WHERE run_id = 'run-0'",
                &[Val::from(serde_json::to_string(&engine).unwrap())],
            )
            .unwrap();
        assert_eq!(engines(&mut store), by_digest);
        // A digest the store does not hold names no engine (opened again: a store keeps the
        // engines it read).
        store.db.execute("DELETE FROM counts_engines", &[]).unwrap();
        let mut store = Store::open(&url).unwrap();
        let left = engines(&mut store);
        assert_eq!(left.iter().filter(|e| e.is_some()).count(), run.specs.len());
    }

    /// Rows recorded before the gate's standing was stored are given theirs from the checks
    /// they kept: nothing failed, only a regression gate (time, counts, both), another check.
    #[test]
    fn rows_recorded_before_are_given_their_standing_from_their_checks() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("h.sqlite");
        let conn = rusqlite::Connection::open(&file).unwrap();
        conn.execute_batch("CREATE TABLE schema_version (version BIGINT PRIMARY KEY)")
            .unwrap();
        let before = MIGRATIONS.len() - 1;
        for (k, sql) in MIGRATIONS[..before].iter().enumerate() {
            conn.execute_batch(sql).unwrap();
            conn.execute("INSERT INTO schema_version (version) VALUES (?1)", [k + 1])
                .unwrap();
        }
        conn.execute_batch("INSERT INTO runs (run_key, run_id, manifest_sha256, started_utc, git_sha, git_dirty, device_key, backend, opledger_version, triad_bytes_per_sec, fma_flops_per_sec, verdict, archive) VALUES ('k', 'r', 'm', 't', 'abc', 0, 'd', 'cpu', '0', 1, 1, 'FAIL', 'a')").unwrap();
        let rows = [
            (
                "kept",
                "pass",
                r#"[["correctness","pass"],["regression","pass"]]"#,
                0,
            ),
            (
                "time",
                "fail",
                r#"[["correctness","pass"],["regression","fail"]]"#,
                1,
            ),
            (
                "counts",
                "fail",
                r#"[["regression","skip"],["counts_regression","fail"]]"#,
                1,
            ),
            (
                "both",
                "fail",
                r#"[["regression","fail"],["counts_regression","fail"]]"#,
                1,
            ),
            (
                "wrong",
                "fail",
                r#"[["correctness","fail"],["regression","fail"]]"#,
                2,
            ),
        ];
        for (spec, verdict, checks, _) in rows {
            conn.execute(
                "INSERT INTO cases (run_key, spec, spec_sha256, verdict, checks) VALUES ('k', ?1, 's', ?2, ?3)",
                [spec, verdict, checks],
            )
            .unwrap();
        }
        drop(conn);
        Store::open(&StoreUrl::Sqlite(file.clone())).unwrap();
        let conn = rusqlite::Connection::open(&file).unwrap();
        for (spec, _, _, want) in rows {
            let got: i64 = conn
                .query_row("SELECT standing FROM cases WHERE spec = ?1", [spec], |r| {
                    r.get(0)
                })
                .unwrap();
            assert_eq!(got, want, "{spec}");
        }
    }

    #[test]
    fn a_store_is_migrated_once_and_a_newer_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::Sqlite(dir.path().join("h.sqlite"));
        assert_eq!(
            Store::open(&url).unwrap().schema_version().unwrap(),
            MIGRATIONS.len()
        );
        // Opening again applies nothing twice.
        assert_eq!(
            Store::open(&url).unwrap().schema_version().unwrap(),
            MIGRATIONS.len()
        );
        let conn = rusqlite::Connection::open(dir.path().join("h.sqlite")).unwrap();
        conn.execute("INSERT INTO schema_version (version) VALUES (99)", [])
            .unwrap();
        drop(conn);
        let e = Store::open(&url).err().unwrap().to_string();
        assert!(e.contains("newer than this opledger"), "{e}");
    }

    #[test]
    fn urls_name_sqlite_files_and_refuse_servers_by_name() {
        assert_eq!(
            StoreUrl::parse("sqlite:/x/h.sqlite").unwrap(),
            StoreUrl::Sqlite("/x/h.sqlite".into())
        );
        assert_eq!(
            StoreUrl::parse("runs/h.sqlite").unwrap(),
            StoreUrl::Sqlite("runs/h.sqlite".into())
        );
        for keeps_nothing in ["", "sqlite:", ":memory:", "sqlite::memory:", "  "] {
            assert!(StoreUrl::parse(keeps_nothing).is_err(), "{keeps_nothing:?}");
        }
        assert_eq!(
            StoreUrl::parse("postgres://u:pw@db:5432/opledger")
                .unwrap()
                .display(),
            "postgres://u:***@db:5432/opledger"
        );
        assert!(StoreUrl::parse("mysql://db/opledger").is_err());
    }

    /// Both sets of connection settings a PostgreSQL URL is kept as print without its password.
    #[test]
    fn a_postgres_url_prints_without_its_password() {
        for text in [
            "postgres://u:hunter2@db:5432/opledger",
            "postgresql://db/opledger?user=u&password=hunter2",
        ] {
            let url = StoreUrl::parse(text).unwrap();
            let shown = format!("{url:?}");
            assert!(
                shown.contains("db") && !shown.contains("hunter2"),
                "{shown}"
            );
        }
    }
}

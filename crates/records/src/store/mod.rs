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
//!
//! One file a job: this one the types a store hands out (points, runs, counts) and opening it;
//! `url` where it is; `schema` the migrations; `write` recording a run; `query` the domain
//! queries and their filters (which runs a reference may rest on is the gate's to say, read here
//! from each case's standing); `scan` reading case rows, on two readers at once where a table is
//! large; `rows` decoding rows into points; `db` the two engines' common SQL; `series` what a
//! case's series says (its levels, the runs at a commit's ancestors).

mod db;
mod query;
mod rows;
mod scan;
mod schema;
pub mod series;
mod url;
mod write;

use query::*;
use rows::*;
use scan::*;
use schema::*;
pub use url::*;

use crate::error::{Error, Result, StoreAction, StoreUrlProblem};
use crate::results::{RunResult, SpecResult};
use db::{Db, Val, ValRef};
use std::path::{Path, PathBuf};

/// The default store's file name, inside the runs folder.
pub const DEFAULT_FILE: &str = "history.sqlite";

/// An error with its causes, one after another (`db error` alone says nothing; its cause
/// names what the server refused).
pub fn error_chain(e: &dyn std::error::Error) -> String {
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
    pub order: RunOrder,
}

/// Where a run stands in the store's order, after its start's text: the start as a number (see
/// [`utc_number`]), its start's nanoseconds, and its key in the store (what orders runs that
/// start in the same second).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunOrder {
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
            // Checked: a sum past 64 bits is no count (it is left out, not wrapped to a small one).
            before_dram_bytes: b.and_then(|x| x.dram_read_bytes.checked_add(x.dram_write_bytes)),
            after_dram_bytes: a.and_then(|x| x.dram_read_bytes.checked_add(x.dram_write_bytes)),
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
            #[cfg(not(feature = "postgres"))]
            StoreUrl::Postgres(_) => {
                return Err(Error::StoreUrl {
                    shown: url.display(),
                    problem: crate::error::StoreUrlProblem::NoPostgres,
                })
            }
            #[cfg(feature = "postgres")]
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
    // Pages read from the mapped file instead of copied in by read() calls, each query: the
    // every-point query of a 10 000-run store (344 MiB) spent a tenth of its time copying
    // pages (docs/history.md). Address space only; SQLite reads beyond it as before.
    conn.pragma_update(None, "mmap_size", MMAP_BYTES)?;
    Ok(Db::Sqlite(conn))
}

/// How much of an SQLite store is read through a memory map (SQLite caps it at its own
/// compile-time limit).
pub(super) const MMAP_BYTES: i64 = 1 << 32;

fn failed(url: &StoreUrl, action: StoreAction, e: impl Into<db::DbError>) -> Error {
    let e = e.into();
    Error::Store {
        store: url.display(),
        action,
        message: e.message,
        out_of_space: e.out_of_space,
    }
}

/// A database of its own on the test server, for the tests that read PostgreSQL.
#[cfg(test)]
#[cfg(feature = "postgres")]
#[path = "../../../../tests/common/postgres.rs"]
mod test_postgres;

#[cfg(test)]
mod tests {
    use super::*;

    /// A store's connection reads its file through a memory map (a tenth of the every-point
    /// query was copying pages in without one).
    #[test]
    fn an_sqlite_store_is_read_through_a_memory_map() {
        let dir = tempfile::tempdir().unwrap();
        // Refutable only where the build has the PostgreSQL client too.
        #[allow(irrefutable_let_patterns)]
        let Db::Sqlite(conn) = open_sqlite(&dir.path().join("h.sqlite")).unwrap() else {
            panic!("an SQLite connection");
        };
        let mapped: i64 = conn
            .pragma_query_value(None, "mmap_size", |r| r.get(0))
            .unwrap();
        assert!(mapped > 0, "mmap_size {mapped}");
    }

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
        let reads = || {
            (
                read(&[
                    ("b-case", "2026-01-02T00:00:00Z", 0, "r2"),
                    ("a-case", "2026-01-02T00:00:00Z", 0, "r2"),
                    ("b-case", "2026-01-03T00:00:00Z", 5, "r4"),
                    ("b-case", "2026-01-03T00:00:00Z", 1, "r3"),
                    ("a-case", "2026-01-01T00:00:00Z", 0, "r1"),
                ]),
                read(&[
                    ("b-case", "2026-01-01T00:00:00Z", 0, "r1"),
                    ("b-case", "2026-01-03T00:00:00Z", 5, "r5"),
                    ("c-case", "2026-01-01T00:00:00Z", 0, "r1"),
                ]),
            )
        };
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
        // As read, and with each read put in start order first (as each reader does): the two
        // reads of b-case are each in order then, and out of order where they meet.
        for each_in_order in [false, true] {
            let (mut first, mut second) = reads();
            if each_in_order {
                first.put_in_start_order();
                second.put_in_start_order();
            }
            let got: Vec<(String, String)> = in_case_order(vec![second, first])
                .iter()
                .map(|p| (p.spec.to_string(), p.run.run_id.to_string()))
                .collect();
            assert_eq!(got, want, "each read in order first: {each_in_order}");
        }
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
            "/../../tests/fixtures/run-fixed/results.json"
        );
        let run = serde_json::from_slice(&std::fs::read(fixture).unwrap()).unwrap();
        (dir, url, run)
    }

    /// The split of a large read finds the table's ends in its tree, not by walking every row
    /// (`MIN` and `MAX` in one `SELECT` scanned an index entry of every row).
    #[test]
    fn the_case_tables_ends_are_searched_not_scanned() {
        let (_dir, url, _run) = fixture_store();
        let mut store = Store::open(&url).unwrap();
        let plan = store
            .db
            .query(&format!("EXPLAIN QUERY PLAN {ROWID_ENDS_SQL}"), &[])
            .unwrap();
        let steps: Vec<String> = plan
            .iter()
            .filter_map(|row| row.last().and_then(Val::text))
            .collect();
        assert_eq!(
            steps
                .iter()
                .filter(|s| s.starts_with("SEARCH cases"))
                .count(),
            2,
            "{steps:?}"
        );
        assert!(
            !steps.iter().any(|s| s.starts_with("SCAN cases")),
            "{steps:?}"
        );
    }

    #[test]
    fn a_large_case_table_read_in_two_parts_gives_the_same_points() {
        let (dir, url, run) = fixture_store();
        two_readers_read_what_one_reads(&url, dir.path(), run);
    }

    #[test]
    #[cfg(feature = "postgres")]
    #[cfg_attr(
        not(has_postgres),
        ignore = "needs a PostgreSQL server (OPLEDGER_TEST_POSTGRES)"
    )]
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
        // A row at the largest row id SQLite allows is read by the split too.
        if matches!(url, StoreUrl::Sqlite(_)) {
            store
                .db
                .execute(
                    "UPDATE cases SET rowid = 9223372036854775807 WHERE rowid = (SELECT MAX(rowid) FROM cases)",
                    &[],
                )
                .unwrap();
            store.split_rows = i64::MAX;
            let whole = names(store.series(&Query::default()).unwrap());
            store.split_rows = 1;
            assert_eq!(names(store.series(&Query::default()).unwrap()), whole);
            assert_eq!(whole.len(), runs * run.specs.len());
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
    #[expect(
        clippy::too_many_lines,
        reason = "one store written through both row layouts and read back: the two halves compare the same rows"
    )]
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
                spec_cache_model: false,
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
        // An engine row edited after it was recorded no longer matches its digest: the read
        // says so (on a store opened again), rather than giving every run the edited engine.
        store
            .db
            .execute(
                "UPDATE counts_engines SET engine = REPLACE(engine, '\"seed\":', '\"seed\":1')",
                &[],
            )
            .unwrap();
        let mut edited = Store::open(&url).unwrap();
        let e = edited.series(&Query::default()).unwrap_err().to_string();
        assert!(e.contains("no longer has that SHA-256"), "{e}");
        store
            .db
            .execute(
                "UPDATE counts_engines SET engine = REPLACE(engine, '\"seed\":1', '\"seed\":')",
                &[],
            )
            .unwrap();
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
        #[cfg(feature = "postgres")]
        assert_eq!(
            StoreUrl::parse("postgres://u:pw@db:5432/opledger")
                .unwrap()
                .display(),
            "postgres://u:***@db:5432/opledger"
        );
        // A build without PostgreSQL refuses its URL, and says why.
        #[cfg(not(feature = "postgres"))]
        assert!(StoreUrl::parse("postgres://u:pw@db:5432/opledger")
            .unwrap_err()
            .to_string()
            .contains("built without PostgreSQL"));
        assert!(StoreUrl::parse("mysql://db/opledger").is_err());
    }

    /// Both sets of connection settings a PostgreSQL URL is kept as print without its password.
    #[test]
    #[cfg(feature = "postgres")]
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

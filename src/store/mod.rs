//! The history store: every run's cases as rows, so that a branch's past can be queried (the
//! series of a case, by device and branch). The archives stay the evidence; the store is their
//! index, rebuilt from them by `opledger ingest` (idempotent by run id and manifest digest).
//!
//! Embedded SQLite through `rusqlite` with its bundled SQLite: no system library to match, the
//! same SQL on every machine, one file beside the archives (`<runs-dir>/history.sqlite`). Many
//! writers at once are serialised by SQLite's own locking (write-ahead log, a busy timeout).
//! The schema is versioned: `schema_version` holds the migrations applied, and `open` applies
//! the missing ones in order. The tables are documented in `docs/history.md`.

use crate::error::{Error, Result, StoreAction};
use crate::results::{RunResult, RunStatus, SpecResult};
use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};

/// The migrations, in order: migration k brings the schema from version k to k + 1.
const MIGRATIONS: &[&str] = &[r#"
CREATE TABLE runs (
    run_key           TEXT PRIMARY KEY,
    run_id            TEXT NOT NULL,
    manifest_sha256   TEXT NOT NULL,
    started_utc       TEXT NOT NULL,
    git_sha           TEXT NOT NULL,
    git_dirty         INTEGER NOT NULL,
    branch            TEXT,
    device_key        TEXT NOT NULL,
    backend           TEXT NOT NULL,
    opledger_version  TEXT NOT NULL,
    triad_bytes_per_sec REAL NOT NULL,
    fma_flops_per_sec REAL NOT NULL,
    verdict           TEXT NOT NULL,
    archive           TEXT NOT NULL
);
CREATE TABLE cases (
    run_key           TEXT NOT NULL REFERENCES runs(run_key) ON DELETE CASCADE,
    spec              TEXT NOT NULL,
    spec_sha256       TEXT NOT NULL,
    sweep_label       TEXT,
    verdict           TEXT NOT NULL,
    before_median_secs REAL,
    before_ci_lo_secs REAL,
    before_ci_hi_secs REAL,
    before_n          INTEGER,
    after_median_secs REAL,
    after_ci_lo_secs  REAL,
    after_ci_hi_secs  REAL,
    after_n           INTEGER,
    ratio             REAL,
    ratio_lo          REAL,
    ratio_hi          REAL,
    gate_state        TEXT,
    gate_ratio        REAL,
    checks            TEXT NOT NULL,
    PRIMARY KEY (run_key, spec)
);
CREATE INDEX cases_by_spec ON cases (spec, run_key);
CREATE INDEX runs_by_device ON runs (device_key, branch, started_utc);
"#];

/// The default store's file name, inside the runs folder.
pub const DEFAULT_FILE: &str = "history.sqlite";

/// Where a store is: an SQLite file (`sqlite:PATH`, or a bare path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    Sqlite(PathBuf),
}

impl StoreUrl {
    /// `sqlite:PATH` or a path; a server URL this build does not speak is refused by name.
    pub fn parse(text: &str) -> Result<StoreUrl> {
        if let Some(p) = text.strip_prefix("sqlite:") {
            return Ok(StoreUrl::Sqlite(PathBuf::from(p)));
        }
        if let Some((scheme, _)) = text.split_once("://") {
            return Err(Error::Flag(format!(
                "--store {scheme}://…: this opledger keeps its history in SQLite only (`sqlite:PATH` or a path)"
            )));
        }
        Ok(StoreUrl::Sqlite(PathBuf::from(text)))
    }
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

/// One run of one case, as `history` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Point {
    pub run_id: String,
    pub started_utc: String,
    pub git_sha: String,
    pub branch: Option<String>,
    pub device_key: String,
    pub spec: String,
    pub verdict: String,
    pub before_median_secs: Option<f64>,
    pub after_median_secs: Option<f64>,
    /// after/before with its 95% CI.
    pub ratio: Option<f64>,
    pub ratio_lo: Option<f64>,
    pub ratio_hi: Option<f64>,
    /// The archive's folder, relative to the store's.
    pub archive: String,
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

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

fn failed<'a>(path: &'a Path, action: StoreAction) -> impl Fn(rusqlite::Error) -> Error + 'a {
    move |e| Error::Store {
        path: path.to_path_buf(),
        action,
        message: e.to_string(),
    }
}

impl Store {
    /// Opens (creating it when missing) the store at `url`, its schema brought up to date.
    pub fn open(url: &StoreUrl) -> Result<Store> {
        let StoreUrl::Sqlite(path) = url;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::write("creating", dir, e))?;
        }
        let conn = Connection::open(path).map_err(failed(path, StoreAction::Opening))?;
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .map_err(failed(path, StoreAction::Opening))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(failed(path, StoreAction::Opening))?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(failed(path, StoreAction::Opening))?;
        let mut store = Store {
            conn,
            path: path.clone(),
        };
        store.migrate()?;
        Ok(store)
    }

    /// The schema version this store is at.
    pub fn schema_version(&self) -> Result<usize> {
        self.conn
            .query_row("SELECT COUNT(*) FROM schema_version", [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n as usize)
            .map_err(failed(&self.path, StoreAction::Reading))
    }

    fn migrate(&mut self) -> Result<()> {
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(failed(&path, StoreAction::Migrating))?;
        tx.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY)")
            .map_err(failed(&path, StoreAction::Migrating))?;
        let at: i64 = tx
            .query_row("SELECT COUNT(*) FROM schema_version", [], |r| r.get(0))
            .map_err(failed(&path, StoreAction::Migrating))?;
        if at as usize > MIGRATIONS.len() {
            return Err(Error::Corrupt {
                path,
                message: format!(
                    "history store of schema version {at}, newer than this opledger's {}: use a newer opledger",
                    MIGRATIONS.len()
                ),
            });
        }
        for (k, sql) in MIGRATIONS.iter().enumerate().skip(at as usize) {
            tx.execute_batch(sql)
                .map_err(failed(&path, StoreAction::Migrating))?;
            tx.execute(
                "INSERT INTO schema_version (version) VALUES (?1)",
                [k as i64 + 1],
            )
            .map_err(failed(&path, StoreAction::Migrating))?;
        }
        tx.commit().map_err(failed(&path, StoreAction::Migrating))
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
        let path = self.path.clone();
        let archive_at = self.archive_path(archive);
        let key = run_key(run);
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(failed(&path, StoreAction::Writing))?;
        let stored: Option<String> = tx
            .query_row(
                "SELECT manifest_sha256 FROM runs WHERE run_key = ?1",
                [&key],
                |r| r.get(0),
            )
            .optional()
            .map_err(failed(&path, StoreAction::Reading))?;
        let outcome = match stored.as_deref() {
            Some(s) if s == manifest_sha256 => return Ok(Recorded::Same),
            Some(_) => {
                tx.execute("DELETE FROM runs WHERE run_key = ?1", [&key])
                    .map_err(failed(&path, StoreAction::Writing))?;
                Recorded::Replaced
            }
            None => Recorded::New,
        };
        tx.execute(
            "INSERT INTO runs (run_key, run_id, manifest_sha256, started_utc, git_sha, git_dirty, branch, device_key, backend, opledger_version, triad_bytes_per_sec, fma_flops_per_sec, verdict, archive) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            params![
                key,
                run.run_id,
                manifest_sha256,
                run.started_utc,
                run.git_sha,
                run.git_dirty,
                branch,
                run.device.key,
                run.backend,
                run.opledger_version,
                run.ceilings.triad_bytes_per_sec,
                run.ceilings.fma_flops_per_sec,
                run.verdict.status.to_string(),
                archive_at,
            ],
        )
        .map_err(failed(&path, StoreAction::Writing))?;
        for s in &run.specs {
            insert_case(&tx, &key, s).map_err(failed(&path, StoreAction::Writing))?;
        }
        tx.commit().map_err(failed(&path, StoreAction::Writing))?;
        Ok(outcome)
    }

    /// Where an archive is, as the store records it: relative to the store's folder (the two
    /// travel together as a CI cache or artifact), `/`-separated.
    fn archive_path(&self, archive: &Path) -> String {
        let base = crate::files::absolute(self.path.parent().unwrap_or(Path::new(".")));
        let abs = crate::files::absolute(archive);
        pathdiff::diff_paths(&abs, &base)
            .unwrap_or(abs)
            .to_string_lossy()
            .replace('\\', "/")
    }

    /// The reference a branch's history gives a case: its newest `last` runs on this device
    /// with this exact spec (by digest) that did not fail, oldest first.
    pub fn reference(
        &self,
        device_key: &str,
        spec: &str,
        spec_sha256: &str,
        branch: Option<&str>,
        last: usize,
    ) -> Result<Vec<Point>> {
        let mut st = self
            .conn
            .prepare(
                "SELECT r.run_id, r.started_utc, r.git_sha, r.branch, r.device_key, c.spec, c.verdict,
                        c.before_median_secs, c.after_median_secs, c.ratio, c.ratio_lo, c.ratio_hi, r.archive
                 FROM cases c JOIN runs r ON r.run_key = c.run_key
                 WHERE r.device_key = ?1 AND c.spec = ?2 AND c.spec_sha256 = ?3
                   AND (?4 IS NULL OR r.branch = ?4) AND c.verdict != 'fail'
                   AND c.before_median_secs IS NOT NULL AND c.after_median_secs IS NOT NULL
                 ORDER BY r.started_utc DESC, r.run_id DESC LIMIT ?5",
            )
            .map_err(failed(&self.path, StoreAction::Reading))?;
        let mut rows = st
            .query_map(
                params![device_key, spec, spec_sha256, branch, last as i64],
                point,
            )
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<Point>>>())
            .map_err(failed(&self.path, StoreAction::Reading))?;
        rows.reverse();
        Ok(rows)
    }

    /// Every case's series, oldest first within each case (cases in name order).
    pub fn series(&self, q: &Query) -> Result<Vec<Point>> {
        let mut st = self
            .conn
            .prepare(
                "SELECT r.run_id, r.started_utc, r.git_sha, r.branch, r.device_key, c.spec, c.verdict,
                        c.before_median_secs, c.after_median_secs, c.ratio, c.ratio_lo, c.ratio_hi, r.archive
                 FROM cases c JOIN runs r ON r.run_key = c.run_key
                 WHERE (?1 IS NULL OR r.device_key = ?1) AND (?2 IS NULL OR r.branch = ?2)
                 ORDER BY c.spec, r.started_utc, r.run_id, r.run_key",
            )
            .map_err(failed(&self.path, StoreAction::Reading))?;
        let rows = st
            .query_map(params![q.device, q.branch], point)
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<Point>>>())
            .map_err(failed(&self.path, StoreAction::Reading))?;
        let mut out: Vec<Point> = rows
            .into_iter()
            .filter(|p| q.specs.is_empty() || q.specs.contains(&p.spec))
            .collect();
        if let Some(n) = q.last {
            let mut kept = Vec::with_capacity(out.len());
            let mut i = 0;
            while i < out.len() {
                let j = out[i..]
                    .iter()
                    .position(|p| p.spec != out[i].spec)
                    .map_or(out.len(), |k| i + k);
                kept.extend(out[j.saturating_sub(n).max(i)..j].iter().cloned());
                i = j;
            }
            out = kept;
        }
        Ok(out)
    }
}

/// A point from a row of the series' columns.
fn point(r: &rusqlite::Row<'_>) -> rusqlite::Result<Point> {
    Ok(Point {
        run_id: r.get(0)?,
        started_utc: r.get(1)?,
        git_sha: r.get(2)?,
        branch: r.get(3)?,
        device_key: r.get(4)?,
        spec: r.get(5)?,
        verdict: r.get(6)?,
        before_median_secs: r.get(7)?,
        after_median_secs: r.get(8)?,
        ratio: r.get(9)?,
        ratio_lo: r.get(10)?,
        ratio_hi: r.get(11)?,
        archive: r.get(12)?,
    })
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

fn insert_case(
    tx: &rusqlite::Transaction<'_>,
    run_key: &str,
    s: &SpecResult,
) -> rusqlite::Result<usize> {
    let (b, a) = (s.before.summary, s.after.summary);
    // after/before from the paired saving: ratio = 1 − saving (its CI reversed).
    let ratio = s
        .time_saving
        .map(|t| (1.0 - t.point, 1.0 - t.hi, 1.0 - t.lo));
    let verdict = match s.verdict() {
        RunStatus::Pass => "pass",
        RunStatus::Fail => "fail",
        RunStatus::Inconclusive => "inconclusive",
    };
    let checks = serde_json::to_string(
        &s.checks
            .iter()
            .map(|c| (&c.name, c.status))
            .collect::<Vec<_>>(),
    )
    .unwrap_or_default();
    tx.execute(
        "INSERT INTO cases (run_key, spec, spec_sha256, sweep_label, verdict, before_median_secs, before_ci_lo_secs, before_ci_hi_secs, before_n, after_median_secs, after_ci_lo_secs, after_ci_hi_secs, after_n, ratio, ratio_lo, ratio_hi, gate_state, gate_ratio, checks) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
        params![
            run_key,
            s.name,
            s.spec_sha256,
            s.sweep.as_ref().map(|p| p.label.clone()),
            verdict,
            b.map(|x| x.median_secs),
            b.map(|x| x.ci_lo_secs),
            b.map(|x| x.ci_hi_secs),
            b.map(|x| x.n as i64),
            a.map(|x| x.median_secs),
            a.map(|x| x.ci_lo_secs),
            a.map(|x| x.ci_hi_secs),
            a.map(|x| x.n as i64),
            ratio.map(|r| r.0),
            ratio.map(|r| r.1),
            ratio.map(|r| r.2),
            s.baseline.state.map(|st| st.word().to_string()),
            s.baseline.ratio.map(|r| r.point),
            checks,
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let conn = Connection::open(dir.path().join("h.sqlite")).unwrap();
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
        assert!(StoreUrl::parse("postgres://db/opledger").is_err());
    }
}

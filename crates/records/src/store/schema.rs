//! The store's schema: its migrations in order, and their application when a store is opened
//! (one opener at a time; a store of a newer version than this opledger is refused).

use super::*;

/// The migrations, in order: migration k brings the schema from version k to k + 1.
pub(super) const MIGRATIONS: &[&str] = &[
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

impl Store {
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

    pub(super) fn migrate(&mut self) -> Result<()> {
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
}

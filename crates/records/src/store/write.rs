//! Recording a run: its row and its cases' rows in one transaction (new, the same as stored,
//! or replacing an earlier state of its archive), each counts engine once, each case's standing
//! as the gate decided it.

use super::*;

/// What names a run in the store: its random identity, or for an archive written before it had
/// one, its run id and start time.
pub(super) fn run_key(run: &RunResult) -> String {
    if run.run_uid.is_empty() {
        format!("{}@{}", run.run_id, run.started_utc)
    } else {
        run.run_uid.clone()
    }
}

/// A counts engine's JSON and its SHA-256 (what a counted case row names it by).
pub(super) fn engine_json(engine: &crate::measure::counts::CountsEngine) -> (String, String) {
    use sha2::Digest;
    let json = serde_json::to_string(engine).unwrap_or_default();
    (hex::encode(sha2::Sha256::digest(json.as_bytes())), json)
}

/// Inserts a case row; `engine` is its counts engine's digest, where it was counted.
pub(super) fn insert_case(
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

impl Store {
    /// The manifest digest `run` is recorded under, if it is recorded.
    pub fn recorded_manifest(&mut self, run: &RunResult) -> Result<Option<String>> {
        let key = run_key(run);
        let url = self.url.clone();
        Ok(self
            .db
            .query(
                "SELECT manifest_sha256 FROM runs WHERE run_key = $1",
                &[Val::from(&key)],
            )
            .map_err(|m| failed(&url, StoreAction::Reading, m))?
            .first()
            .and_then(|r| r.first())
            .and_then(Val::text))
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
    pub(super) fn archive_path(&self, archive: &Path) -> String {
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
}

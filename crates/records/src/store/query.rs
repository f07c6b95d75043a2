//! The store's domain queries (a branch's history, a case's series, the merge-base's runs,
//! counted runs) and the filters they are made of: which runs a reference may rest on is read
//! from each case's standing, which the gate decides (`gate::rule::standing`).

use super::*;

/// The rows one select reads (every filter optional).
#[derive(Debug, Clone, Default)]
pub(super) struct Filter<'a> {
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
pub(super) enum CountedAs {
    /// Those that failed nothing: what a branch's history rests on.
    History,
    /// Those whose counts are the code's level: a merge-base that regressed is still the base.
    Level,
}

/// A point from a row of the select's columns.
/// The table a condition of a filter reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Table {
    Runs,
    Cases,
}

/// One condition of a filter: the table it reads and its SQL, `$?` where its parameter goes.
pub(super) struct Condition {
    pub(super) table: Table,
    sql: String,
    param: Option<Val>,
}

/// The conditions of a filter. Only the filters given are there, so that the indexes serve them.
pub(super) fn conditions(f: &Filter<'_>) -> Vec<Condition> {
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
pub(super) fn where_of<'a>(conditions: impl Iterator<Item = &'a Condition>) -> (String, Vec<Val>) {
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

impl Store {
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

    /// The newest `last` runs of a case on this device with this exact spec on `branch` whose
    /// counts under the engine key `key` are the code's level (a regression included), oldest
    /// first: a counted series watched for new shifts.
    pub fn counted_levels(
        &mut self,
        device_key: &str,
        spec: &str,
        spec_sha256: &str,
        branch: &str,
        key: &str,
        last: usize,
    ) -> Result<Vec<Point>> {
        self.select(&Filter {
            device: Some(device_key),
            spec: Some(spec),
            spec_sha256: Some(spec_sha256),
            branch: Some(branch),
            counted: Some((key, CountedAs::Level)),
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

    /// The rows a filter selects: cases in name order, each oldest first.
    pub(super) fn select(&mut self, f: &Filter<'_>) -> Result<Vec<Point>> {
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

    pub(super) fn spec_names(&mut self) -> Result<Vec<String>> {
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

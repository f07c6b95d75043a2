//! Reading case rows: one reader, or two at once on a large table (SQLite stepped by row id
//! on a second, read-only connection; PostgreSQL split by page on two connections), each
//! reader's points made on its own core.

use super::*;

/// Opens an existing SQLite store that cannot be written, read-only and as immutable (SQLite
/// then needs no lock or journal beside it, which a read-only folder could not hold).
/// The case rows `sql` selects (its columns [`CASE_COLUMNS`]) whose run is in `runs`, as points
/// gathered by case, each case in start order; `room` points made room for at once a case.
pub(super) fn read_cases(
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
        #[cfg(feature = "postgres")]
        Source::Pg(config) => db::pg_scan(config, sql, params, on_row)?,
    }
    // Each reader puts its own cases in order (both cores at work); the cases of two readers
    // are then mostly in order one after the other.
    read.put_in_start_order();
    Ok(read)
}

/// A second connection to an SQLite store another one has open, to read only.
pub(super) fn second_sqlite(path: &Path) -> Option<Db> {
    use rusqlite::OpenFlags;
    let conn = rusqlite::Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ok()?;
    let _ = conn.busy_timeout(std::time::Duration::from_secs(30));
    // Its pages read through the map too, as the store's own connection's (`open_sqlite`).
    let _ = conn.pragma_update(None, "mmap_size", super::MMAP_BYTES);
    Some(Db::Sqlite(conn))
}

pub(super) fn open_sqlite_read_only(path: &Path) -> std::result::Result<Db, rusqlite::Error> {
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

/// Case rows fewer than this are read on one connection (see [`Store::case_rows`]).
pub(super) const SPLIT_ROWS: i64 = 100_000;

/// The case table read by two readers at once (see [`Store::split`]).
pub(super) struct Split {
    /// What the second reader reads from.
    second: Second,
    pub(super) parts: [Part; 2],
    /// The rows each part holds, about.
    rows: [usize; 2],
}

/// Where a reader reads the case table from.
pub(super) enum Source<'a> {
    /// A connection of the store's.
    Db(&'a mut Db),
    /// A PostgreSQL connection of the read's own, made with these settings.
    #[cfg(feature = "postgres")]
    Pg(&'a tokio_postgres::Config),
}

/// What the second reader of a split read reads from, moved to its thread: on SQLite a
/// connection of its own (the first reads on the store's), on PostgreSQL the settings each of
/// the two readers makes its connection with.
pub(super) enum Second {
    Sqlite(Db),
    #[cfg(feature = "postgres")]
    Postgres(tokio_postgres::Config),
}

impl Second {
    fn source(&mut self) -> Source<'_> {
        match self {
            Second::Sqlite(db) => Source::Db(db),
            #[cfg(feature = "postgres")]
            Second::Postgres(config) => Source::Pg(config),
        }
    }
}

/// A part of the case table, by place: rows a reader can walk to directly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Part {
    /// SQLite's row ids `first..=last` (inclusive: the largest row id a table can hold,
    /// `i64::MAX`, has no id after it to end a half-open range at).
    Rowids { first: i64, last: i64 },
    /// PostgreSQL's pages `from..to` (a TID range scan).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Pages { from: i64, to: i64 },
}

impl Part {
    /// The condition on a case row `c` that keeps this part, its values added to `params`.
    fn condition(self, params: &mut Vec<Val>) -> String {
        let (column, from, to) = match self {
            Part::Rowids { first, last } => ("c.rowid", Val::Int(first), Val::Int(last)),
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
        let below = if matches!(self, Part::Rowids { .. }) {
            "<="
        } else {
            "<"
        };
        format!(
            "{column} >= {} AND {column} {below} {}",
            cast(n - 1),
            cast(n)
        )
    }
}

/// A case table's first and last row ids, each end its own query: SQLite reads one end of the
/// table's tree only for a lone `MIN` or `MAX`, and for both in one `SELECT` it scanned an index
/// entry of every row (30 ms of a read of 500 000 points; docs/history.md).
pub(super) const ROWID_ENDS_SQL: &str =
    "SELECT (SELECT MIN(rowid) FROM cases), (SELECT MAX(rowid) FROM cases)";

impl Store {
    /// A second connection to this PostgreSQL store, to read from at once with this one (its
    /// schema already checked by this one); `None` on SQLite or where one cannot be opened
    /// (then this one reads alone).
    #[cfg(not(feature = "postgres"))]
    pub(super) fn second_store(&self) -> Option<Store> {
        None
    }

    /// A second connection to this PostgreSQL store, to read from at once with this one (its
    /// schema already checked by this one); `None` on SQLite or where one cannot be opened
    /// (then this one reads alone).
    #[cfg(feature = "postgres")]
    pub(super) fn second_store(&self) -> Option<Store> {
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

    /// Every case row the case conditions keep whose run is in `runs`, as a point, gathered by
    /// case in the order read (the table's), each reader's cases in start order. A table of
    /// `split_rows` rows or more is read in two parts at once (SQLite's row ids on a second
    /// connection; PostgreSQL's pages, each on a connection of the read's own): stepping
    /// through half a million rows and making their points is most of the time of every point,
    /// and a second core halves it. Rows a writer adds meanwhile belong to runs not in `runs`,
    /// and are left out as any such row is. `engines`
    /// names the store's counts engines; `cases` is how many cases the table holds where all of
    /// it is read (each case's vector is sized from it), else 0.
    pub(super) fn case_rows(
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
        #[cfg(feature = "postgres")]
        let pg = match &second {
            Second::Postgres(config) => Some(config.clone()),
            Second::Sqlite(_) => None,
        };
        #[cfg(feature = "postgres")]
        let first_source = pg.as_ref().map_or(Source::Db(&mut self.db), Source::Pg);
        #[cfg(not(feature = "postgres"))]
        let first_source = Source::Db(&mut self.db);
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
    pub(super) fn engines(&mut self) -> db::DbResult<Engines> {
        if let Some(engines) = &self.engines {
            return Ok(engines.clone());
        }
        let mut engines = std::collections::HashMap::new();
        // An engine row is named by the SHA-256 of its JSON: one edited afterwards would apply
        // to every run that names it, so it must still match its name.
        let mut forged: Option<String> = None;
        self.db.query_each(
            "SELECT engine_sha256, engine FROM counts_engines",
            &[],
            |row| {
                use sha2::Digest;
                let text = |i: usize| row.get(i).and_then(|v| v.text());
                if let (Some(digest), Some(json)) = (text(0), text(1)) {
                    if hex::encode(sha2::Sha256::digest(json.as_bytes())) != digest {
                        forged.get_or_insert_with(|| digest.to_string());
                        return;
                    }
                    if let Ok(engine) = serde_json::from_str(json) {
                        engines.insert(digest.to_string(), std::sync::Arc::new(engine));
                    }
                }
            },
        )?;
        if let Some(digest) = forged {
            return Err(db::DbError::from(format!(
                "the counts engine recorded as {digest} no longer has that SHA-256: the store's counts_engines table was edited; restore it, or rebuild the store from the archives (`opledger ingest`)"
            )));
        }
        let engines = std::sync::Arc::new(engines);
        self.engines = Some(engines.clone());
        Ok(engines)
    }

    /// Where the whole case table is read by two readers at once: a second connection and the
    /// two parts of the table (SQLite's row ids, PostgreSQL's pages), each with the rows it
    /// holds about. `None` where the table has fewer than `split_rows` rows (`most_rows` at
    /// most, which PostgreSQL is judged by), or where a second connection cannot be opened: then
    /// one reads it all.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(super) fn split(
        &mut self,
        most_rows: usize,
        split_rows: i64,
    ) -> db::DbResult<Option<Split>> {
        let enough = |rows: i64| rows >= split_rows;
        match &self.url {
            StoreUrl::Sqlite(path) => {
                // The ends of the table's tree: its first and last row ids.
                let span = self.db.query(ROWID_ENDS_SQL, &[])?;
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
                // Halves of `first..=last`, computed without overflow at either end of i64.
                let middle =
                    (i128::from(first) + (i128::from(last) - i128::from(first)) / 2) as i64;
                let rows = |from: i64, to: i64| {
                    usize::try_from(to.abs_diff(from)).map_or(usize::MAX, |n| n.saturating_add(1))
                };
                Ok(Some(Split {
                    second: Second::Sqlite(second),
                    parts: [
                        Part::Rowids {
                            first,
                            last: middle,
                        },
                        Part::Rowids {
                            first: middle + 1,
                            last,
                        },
                    ],
                    rows: [rows(first, middle), rows(middle + 1, last)],
                }))
            }
            #[cfg(not(feature = "postgres"))]
            StoreUrl::Postgres(_) => Ok(None),
            #[cfg(feature = "postgres")]
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
}

//! The two databases the history store speaks, behind one small interface: statements with
//! `$1`-style parameters (SQLite reads `$1` as a named parameter numbered in order of first use,
//! PostgreSQL as its own positional one), values of four types, transactions. The SQL itself is
//! written once, in the common subset (`TEXT`, `BIGINT`, `DOUBLE PRECISION`, `CAST`), so that
//! the schema and every query are the same on both.

#[cfg(feature = "postgres")]
use postgres::types::{IsNull, ToSql as PgToSql, Type};

/// A value bound to a statement or read from a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl Val {
    pub fn text(&self) -> Option<String> {
        match self {
            Val::Text(s) => Some(s.clone()),
            _ => None,
        }
    }

    pub fn int(&self) -> Option<i64> {
        match self {
            Val::Int(i) => Some(*i),
            _ => None,
        }
    }
}

impl From<&str> for Val {
    fn from(s: &str) -> Val {
        Val::Text(s.to_string())
    }
}
impl From<String> for Val {
    fn from(s: String) -> Val {
        Val::Text(s)
    }
}
impl From<&String> for Val {
    fn from(s: &String) -> Val {
        Val::Text(s.clone())
    }
}
impl From<f64> for Val {
    fn from(x: f64) -> Val {
        Val::Real(x)
    }
}
impl From<i64> for Val {
    fn from(i: i64) -> Val {
        Val::Int(i)
    }
}
impl<T: Into<Val>> From<Option<T>> for Val {
    fn from(v: Option<T>) -> Val {
        v.map_or(Val::Null, Into::into)
    }
}

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value};
        Ok(ToSqlOutput::Owned(match self {
            Val::Null => Value::Null,
            Val::Int(i) => Value::Integer(*i),
            Val::Real(x) => Value::Real(*x),
            Val::Text(s) => Value::Text(s.clone()),
        }))
    }
}

#[cfg(feature = "postgres")]
impl PgToSql for Val {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Val::Null => Ok(IsNull::Yes),
            // The server says which integer width the parameter has; the value is narrowed to it.
            Val::Int(i) if *ty == Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
            Val::Int(i) if *ty == Type::FLOAT8 => (*i as f64).to_sql(ty, out),
            Val::Int(i) => i.to_sql(ty, out),
            Val::Real(x) => x.to_sql(ty, out),
            Val::Text(s) => s.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

/// A connection to either database.
pub enum Db {
    Sqlite(rusqlite::Connection),
    #[cfg(feature = "postgres")]
    Postgres(Box<Pg>),
}

#[cfg(feature = "postgres")]
/// A PostgreSQL connection and the statements it has prepared: a query asked again (each case's
/// newest runs, one query a case) is planned once, not once a case.
pub struct Pg {
    client: postgres::Client,
    statements: std::collections::HashMap<String, postgres::Statement>,
}

#[cfg(feature = "postgres")]
impl Pg {
    pub fn new(client: postgres::Client) -> Self {
        Pg {
            client,
            statements: std::collections::HashMap::new(),
        }
    }

    /// `sql` prepared, once per connection.
    fn prepared(&mut self, sql: &str) -> Result<postgres::Statement, postgres::Error> {
        if let Some(st) = self.statements.get(sql) {
            return Ok(st.clone());
        }
        let st = self.client.prepare(sql)?;
        self.statements.insert(sql.to_string(), st.clone());
        Ok(st)
    }
}

/// What the databases report: their words (the caller adds the store and the action), and
/// whether the failure was a full disk — a failed write of an output (exit 4), whatever the
/// store was doing when it met it.
#[derive(Debug)]
pub struct DbError {
    pub message: String,
    pub out_of_space: bool,
}

impl From<String> for DbError {
    fn from(message: String) -> Self {
        DbError {
            message,
            out_of_space: false,
        }
    }
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ffi;
        let out_of_space = match &e {
            rusqlite::Error::SqliteFailure(f, _) => {
                f.code == rusqlite::ErrorCode::DiskFull
                    // The write-side I/O errors: what a full file system gives SQLite when its
                    // journal, WAL or shared-memory file cannot grow.
                    || [
                        ffi::SQLITE_IOERR_WRITE,
                        ffi::SQLITE_IOERR_FSYNC,
                        ffi::SQLITE_IOERR_DIR_FSYNC,
                        ffi::SQLITE_IOERR_TRUNCATE,
                        ffi::SQLITE_IOERR_SHMSIZE,
                        ffi::SQLITE_IOERR_SHMMAP,
                    ]
                    .contains(&f.extended_code)
            }
            _ => false,
        };
        DbError {
            message: e.to_string(),
            out_of_space,
        }
    }
}

/// A database's result.
pub type DbResult<T> = std::result::Result<T, DbError>;

/// A value of a row as the database hands it over, its text borrowed from the row: a long query
/// makes each row into what it needs without copying every text first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValRef<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
}

impl<'a> ValRef<'a> {
    pub fn text(self) -> Option<&'a str> {
        match self {
            ValRef::Text(s) => Some(s),
            _ => None,
        }
    }
    pub fn real(self) -> Option<f64> {
        match self {
            ValRef::Real(x) => Some(x),
            ValRef::Int(i) => Some(i as f64),
            _ => None,
        }
    }
    pub fn int(self) -> Option<i64> {
        match self {
            ValRef::Int(i) => Some(i),
            _ => None,
        }
    }
}

impl From<ValRef<'_>> for Val {
    fn from(v: ValRef<'_>) -> Val {
        match v {
            ValRef::Null => Val::Null,
            ValRef::Int(i) => Val::Int(i),
            ValRef::Real(x) => Val::Real(x),
            ValRef::Text(t) => Val::Text(t.to_string()),
        }
    }
}

fn sqlite_ref(v: rusqlite::types::ValueRef<'_>) -> ValRef<'_> {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => ValRef::Null,
        ValueRef::Integer(i) => ValRef::Int(i),
        ValueRef::Real(x) => ValRef::Real(x),
        // The store writes UTF-8 only; a text that is not (a file edited by hand) reads as none.
        ValueRef::Text(t) | ValueRef::Blob(t) => {
            std::str::from_utf8(t).map_or(ValRef::Null, ValRef::Text)
        }
    }
}

#[cfg(feature = "postgres")]
/// How a PostgreSQL column's values are read: decided once a query from its statement's column
/// types, not once a value.
#[derive(Debug, Clone, Copy)]
enum PgKind {
    Int8,
    Int4,
    Float8,
    Float4,
    Text,
}

#[cfg(feature = "postgres")]
fn pg_kinds(columns: &[postgres::Column]) -> Vec<PgKind> {
    columns
        .iter()
        .map(|c| match *c.type_() {
            Type::INT8 => PgKind::Int8,
            Type::INT4 => PgKind::Int4,
            Type::FLOAT8 => PgKind::Float8,
            Type::FLOAT4 => PgKind::Float4,
            _ => PgKind::Text,
        })
        .collect()
}

#[cfg(feature = "postgres")]
/// A PostgreSQL row's values into `out` (one a column, `kinds` its columns'), texts borrowed
/// from the row.
fn pg_row_into<'r>(
    row: &'r postgres::Row,
    kinds: &[PgKind],
    out: &mut [ValRef<'r>],
) -> DbResult<()> {
    for (i, (v, kind)) in out.iter_mut().zip(kinds).enumerate() {
        let value = match kind {
            PgKind::Int8 => row
                .try_get::<_, Option<i64>>(i)
                .map(|v| v.map_or(ValRef::Null, ValRef::Int)),
            PgKind::Int4 => row
                .try_get::<_, Option<i32>>(i)
                .map(|v| v.map_or(ValRef::Null, |x| ValRef::Int(i64::from(x)))),
            PgKind::Float8 => row
                .try_get::<_, Option<f64>>(i)
                .map(|v| v.map_or(ValRef::Null, ValRef::Real)),
            PgKind::Float4 => row
                .try_get::<_, Option<f32>>(i)
                .map(|v| v.map_or(ValRef::Null, |x| ValRef::Real(f64::from(x)))),
            PgKind::Text => row
                .try_get::<_, Option<&str>>(i)
                .map(|v| v.map_or(ValRef::Null, ValRef::Text)),
        };
        *v = value.map_err(|e| DbError::from(e.to_string()))?;
    }
    Ok(())
}

#[cfg(feature = "postgres")]
/// The rows of a query of many rows, on a PostgreSQL connection of its own made from `config`,
/// each handed to `each` as it comes: the whole read is one wait on the connection (the
/// synchronous client waits once a row, which cost more than making the points of the rows).
pub fn pg_scan(
    config: &tokio_postgres::Config,
    sql: &str,
    params: &[Val],
    mut each: impl FnMut(&[ValRef<'_>]),
) -> DbResult<()> {
    use futures_util::TryStreamExt;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| DbError::from(format!("cannot start a reader: {e}")))?;
    runtime.block_on(async {
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .map_err(pg_error)?;
        let connection = tokio::spawn(connection);
        let st = client.prepare(sql).await.map_err(pg_error)?;
        let kinds = pg_kinds(st.columns());
        let refs = params.iter().map(|p| p as &(dyn PgToSql + Sync));
        let rows = client.query_raw(&st, refs).await.map_err(pg_error)?;
        let mut rows = std::pin::pin!(rows);
        while let Some(row) = rows.try_next().await.map_err(pg_error)? {
            with_row(
                kinds.len(),
                |values| pg_row_into(&row, &kinds, values),
                &mut each,
            )?;
        }
        // The connection ends with its client.
        drop(client);
        let _ = connection.await;
        Ok(())
    })
}

/// Calls `each` with a row's values laid out by `fill` (at most 32 on the stack, more on the
/// heap): half a million rows are not half a million vectors.
fn with_row<'r, T>(
    n: usize,
    fill: impl FnOnce(&mut [ValRef<'r>]) -> DbResult<()>,
    each: impl FnOnce(&[ValRef<'r>]) -> T,
) -> DbResult<T> {
    let mut on_stack = [ValRef::Null; 32];
    let mut on_heap = Vec::new();
    let row: &mut [ValRef<'r>] = if n <= on_stack.len() {
        &mut on_stack[..n]
    } else {
        on_heap.resize(n, ValRef::Null);
        &mut on_heap
    };
    fill(row)?;
    Ok(each(row))
}

fn sqlite_val(v: rusqlite::types::ValueRef<'_>) -> Val {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => Val::Null,
        ValueRef::Integer(i) => Val::Int(i),
        ValueRef::Real(x) => Val::Real(x),
        ValueRef::Text(t) | ValueRef::Blob(t) => Val::Text(String::from_utf8_lossy(t).into_owned()),
    }
}

#[cfg(feature = "postgres")]
fn pg_row(row: &postgres::Row) -> DbResult<Vec<Val>> {
    let kinds = pg_kinds(row.columns());
    with_row(
        kinds.len(),
        |values| pg_row_into(row, &kinds, values),
        |values| values.iter().map(|&v| Val::from(v)).collect(),
    )
}

impl Db {
    /// Runs statements without parameters (a migration, transaction control).
    pub fn batch(&mut self, sql: &str) -> DbResult<()> {
        match self {
            Db::Sqlite(c) => c.execute_batch(sql).map_err(DbError::from),
            #[cfg(feature = "postgres")]
            Db::Postgres(c) => c.client.batch_execute(sql).map_err(pg_error),
        }
    }

    /// Runs one statement; the number of rows it changed.
    pub fn execute(&mut self, sql: &str, params: &[Val]) -> DbResult<u64> {
        match self {
            Db::Sqlite(c) => c
                .execute(sql, rusqlite::params_from_iter(params.iter()))
                .map(|n| n as u64)
                .map_err(DbError::from),
            #[cfg(feature = "postgres")]
            Db::Postgres(c) => {
                let refs: Vec<&(dyn PgToSql + Sync)> =
                    params.iter().map(|p| p as &(dyn PgToSql + Sync)).collect();
                c.client.execute(sql, &refs).map_err(pg_error)
            }
        }
    }

    /// The rows of a query, each made into a `T` as it is read, from its values as the database
    /// hands them over (texts borrowed): a long query never holds all its rows as values at
    /// once (half a million rows of thirty values would be half a gigabyte), nor copies a text
    /// the `T` does not keep.
    pub fn query_each<T>(
        &mut self,
        sql: &str,
        params: &[Val],
        mut each: impl FnMut(&[ValRef<'_>]) -> T,
    ) -> DbResult<Vec<T>> {
        match self {
            Db::Sqlite(c) => {
                let mut st = c.prepare_cached(sql).map_err(DbError::from)?;
                let n = st.column_count();
                let mut rows = st
                    .query(rusqlite::params_from_iter(params.iter()))
                    .map_err(DbError::from)?;
                let mut out = Vec::new();
                while let Some(r) = rows.next().map_err(DbError::from)? {
                    out.push(with_row(
                        n,
                        |row| {
                            for (i, v) in row.iter_mut().enumerate() {
                                *v = sqlite_ref(r.get_ref(i).map_err(DbError::from)?);
                            }
                            Ok(())
                        },
                        &mut each,
                    )?);
                }
                Ok(out)
            }
            #[cfg(feature = "postgres")]
            Db::Postgres(c) => {
                // The rows as the server sends them, each made into a `T` before the next.
                let refs: Vec<&(dyn PgToSql + Sync)> =
                    params.iter().map(|p| p as &(dyn PgToSql + Sync)).collect();
                let st = c.prepared(sql).map_err(pg_error)?;
                let kinds = pg_kinds(st.columns());
                let mut rows = c
                    .client
                    .query_raw(&st, refs.iter().copied())
                    .map_err(pg_error)?;
                let mut out = Vec::new();
                while let Some(row) = postgres::fallible_iterator::FallibleIterator::next(&mut rows)
                    .map_err(pg_error)?
                {
                    out.push(with_row(
                        kinds.len(),
                        |values| pg_row_into(&row, &kinds, values),
                        &mut each,
                    )?);
                }
                Ok(out)
            }
        }
    }

    pub fn query(&mut self, sql: &str, params: &[Val]) -> DbResult<Vec<Vec<Val>>> {
        match self {
            Db::Sqlite(c) => {
                let mut st = c.prepare_cached(sql).map_err(DbError::from)?;
                let n = st.column_count();
                let rows = st
                    .query_map(rusqlite::params_from_iter(params.iter()), |r| {
                        (0..n).map(|i| r.get_ref(i).map(sqlite_val)).collect()
                    })
                    .and_then(|rows| rows.collect::<rusqlite::Result<Vec<Vec<Val>>>>())
                    .map_err(DbError::from)?;
                Ok(rows)
            }
            #[cfg(feature = "postgres")]
            Db::Postgres(c) => {
                let refs: Vec<&(dyn PgToSql + Sync)> =
                    params.iter().map(|p| p as &(dyn PgToSql + Sync)).collect();
                c.client
                    .query(sql, &refs)
                    .map_err(pg_error)?
                    .iter()
                    .map(pg_row)
                    .collect()
            }
        }
    }

    /// Starts a transaction that holds the write lock from its first statement: SQLite's
    /// `IMMEDIATE` (one writer at a time, the others wait on the busy timeout); on PostgreSQL an
    /// ordinary one, the writers serialised where they must be by [`Db::lock`].
    pub fn begin(&mut self) -> DbResult<()> {
        match self {
            Db::Sqlite(_) => self.batch("BEGIN IMMEDIATE"),
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => self.batch("BEGIN"),
        }
    }

    /// Serialises the transactions that name the same `what` (PostgreSQL's transaction-scoped
    /// advisory lock; SQLite's immediate transaction already holds the whole database).
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub fn lock(&mut self, what: &str) -> DbResult<()> {
        match self {
            Db::Sqlite(_) => Ok(()),
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => self
                .query(
                    "SELECT CAST(pg_advisory_xact_lock(hashtext($1)) AS TEXT)",
                    &[Val::from(what)],
                )
                .map(drop),
        }
    }

    /// Runs `f` in a transaction: committed when it returns `Ok`, rolled back otherwise.
    pub fn transaction<T>(&mut self, f: impl FnOnce(&mut Db) -> DbResult<T>) -> DbResult<T> {
        self.begin()?;
        match f(self) {
            Ok(v) => {
                self.batch("COMMIT")?;
                Ok(v)
            }
            Err(e) => {
                // The first error is the one to report; a failed rollback adds nothing to it.
                let _ = self.batch("ROLLBACK");
                Err(e)
            }
        }
    }
}

#[cfg(feature = "postgres")]
/// A PostgreSQL error with the server's own message when it sent one.
fn pg_error(e: postgres::Error) -> DbError {
    match e.as_db_error() {
        Some(db) => DbError {
            message: format!("{}: {}", db.code().code(), db.message()),
            out_of_space: *db.code() == postgres::error::SqlState::DISK_FULL,
        },
        None => DbError::from(super::error_chain(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_numbers_dollar_parameters_by_first_use() {
        let mut db = Db::Sqlite(rusqlite::Connection::open_in_memory().unwrap());
        db.batch("CREATE TABLE t (a TEXT, b BIGINT, c DOUBLE PRECISION)")
            .unwrap();
        db.execute(
            "INSERT INTO t (a, b, c) VALUES ($1, $2, $3)",
            &["x".into(), 7i64.into(), Val::Null],
        )
        .unwrap();
        // $2 used before and after $1's second use: the same parameter each time.
        let rows = db
            .query(
                "SELECT a, b, c FROM t WHERE a = $1 AND (CAST($2 AS TEXT) IS NULL OR b = $2) AND a = $1",
                &["x".into(), 7i64.into()],
            )
            .unwrap();
        assert_eq!(rows, vec![vec![Val::from("x"), Val::Int(7), Val::Null]]);
        let none = db
            .query(
                "SELECT a FROM t WHERE (CAST($1 AS TEXT) IS NULL OR b = $1)",
                &[Val::Int(8)],
            )
            .unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn a_failed_transaction_leaves_nothing() {
        let mut db = Db::Sqlite(rusqlite::Connection::open_in_memory().unwrap());
        db.batch("CREATE TABLE t (a TEXT PRIMARY KEY)").unwrap();
        let r = db.transaction(|db| {
            db.execute("INSERT INTO t (a) VALUES ($1)", &["x".into()])?;
            db.execute("INSERT INTO t (a) VALUES ($1)", &["x".into()])
        });
        assert!(r.is_err());
        assert!(db.query("SELECT a FROM t", &[]).unwrap().is_empty());
    }
}

//! Where a store is: its URL parsed where it enters the program (an SQLite file, or a
//! PostgreSQL server whose password only the connection reads), and shown with every secret
//! masked.

use super::*;

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
    #[cfg(feature = "postgres")]
    pub(super) config: postgres::Config,
    /// The same settings for the asynchronous client (the store's long reads).
    #[cfg(feature = "postgres")]
    pub(super) scan: tokio_postgres::Config,
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
            #[cfg(not(feature = "postgres"))]
            if scheme == "postgres" || scheme == "postgresql" {
                let shown = crate::secret::redact_url(text);
                return Err(refused(shown, StoreUrlProblem::NoPostgres));
            }
            #[cfg(feature = "postgres")]
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

//! [`StoreUrl`]: which store to open (`memory`, `sqlite://PATH[?synchronous=…]`,
//! `postgres://…`), and
//! [`open_store`].

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use askloop_core::RunStore;
use askloop_core::store::MemoryStore;

use crate::error::OpenError;
use crate::options::{OpenOptions, Synchronous};
#[cfg(feature = "postgres")]
use crate::postgres::{PgStore, PgUrl};
use crate::sqlite::SqliteStore;

/// File name of the default SQLite store inside [`askloop_core::data_dir`].
pub const DEFAULT_DB_FILE: &str = "askloop.db";

/// A store location, as given by `--store` or `ASKLOOP_STORE`.
///
/// More backends may come, so matching on it needs a wildcard arm. Its `Display` (and `Debug`)
/// never shows a password: a PostgreSQL URL's password is shown as `***`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `memory`: nothing survives the process.
    Memory,
    /// `sqlite://PATH` (`sqlite:///abs/path.db`, `sqlite://relative.db`) or `sqlite:PATH`,
    /// optionally followed by `?synchronous=normal` or `?synchronous=full` (the default).
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// How durable a commit is: [`Synchronous::Full`] (the default) waits for the disk,
        /// so an announced suspension survives a power loss; `?synchronous=normal` opts out.
        synchronous: Synchronous,
    },
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAMS]` (or `postgresql://…`): a
    /// PostgreSQL database shared by any number of processes (feature `postgres`). `PARAMS` are
    /// libpq's (`sslmode`, `options`, …) plus askloop's `synchronous=normal|full` (default
    /// `full`): `normal` commits with `synchronous_commit=off`.
    #[cfg(feature = "postgres")]
    Postgres {
        /// The server, database and connection parameters (without `synchronous`).
        url: PgUrl,
        /// Whether commits wait for the server's disk ([`Synchronous::Full`], the default).
        synchronous: Synchronous,
    },
}

impl StoreUrl {
    /// A SQLite store at `path` with full durability (the default).
    pub fn sqlite(path: impl Into<PathBuf>) -> Self {
        Self::Sqlite {
            path: path.into(),
            synchronous: Synchronous::Full,
        }
    }

    /// This URL with its durability set to `synchronous` (no change for a memory store).
    #[must_use]
    pub fn with_synchronous(mut self, durability: Synchronous) -> Self {
        match &mut self {
            Self::Sqlite { synchronous, .. } => *synchronous = durability,
            #[cfg(feature = "postgres")]
            Self::Postgres { synchronous, .. } => *synchronous = durability,
            Self::Memory => {}
        }
        self
    }
}

impl FromStr for StoreUrl {
    type Err = OpenError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let invalid = || OpenError::InvalidUrl {
            url: url.to_owned(),
        };
        if url == "memory" || url == "memory://" {
            return Ok(Self::Memory);
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return parse_postgres(url);
        }
        let (path, synchronous) = crate::sqlite::url::parse(url).ok_or_else(invalid)?;
        Ok(Self::Sqlite { path, synchronous })
    }
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory => formatter.write_str("memory"),
            Self::Sqlite { path, synchronous } => {
                formatter.write_str(&crate::sqlite::url::shown(path, *synchronous))
            }
            #[cfg(feature = "postgres")]
            Self::Postgres { url, synchronous } => match synchronous {
                Synchronous::Full => write!(formatter, "{url}"),
                Synchronous::Normal => {
                    let separator = if url.has_query() { '&' } else { '?' };
                    write!(formatter, "{url}{separator}synchronous=normal")
                }
            },
        }
    }
}

/// Parses a `postgres://` or `postgresql://` URL: askloop's `synchronous` parameter, then the
/// rest as libpq's URL form.
#[cfg(feature = "postgres")]
fn parse_postgres(text: &str) -> Result<StoreUrl, OpenError> {
    let (url, synchronous) = PgUrl::parse(text)?;
    Ok(StoreUrl::Postgres { url, synchronous })
}

/// Without the `postgres` feature a PostgreSQL URL is refused as such.
#[cfg(not(feature = "postgres"))]
fn parse_postgres(text: &str) -> Result<StoreUrl, OpenError> {
    Err(OpenError::NotBuiltIn {
        url: crate::error::mask_password(text),
        feature: "postgres",
    })
}

/// The embedded default: `sqlite://<data dir>/askloop.db` (see [`askloop_core::data_dir`]), with
/// full durability.
///
/// # Errors
/// [`OpenError::NoDataDir`] when no data folder is known.
pub fn default_store_url() -> Result<StoreUrl, OpenError> {
    let dir = askloop_core::data_dir().ok_or(OpenError::NoDataDir)?;
    Ok(StoreUrl::sqlite(dir.join(DEFAULT_DB_FILE)))
}

/// Opens the store at `url`: for writing (creating it if allowed, and migrating it), or for
/// reading only (see [`OpenOptions::read_only()`]). A memory store is always new and empty.
///
/// # Errors
/// [`OpenError::NotFound`] for a missing database that may not be created;
/// [`OpenError::CreateDir`], [`OpenError::Connect`], [`OpenError::Migrate`],
/// [`OpenError::SchemaVersion`].
pub async fn open_store(
    url: &StoreUrl,
    options: &OpenOptions,
) -> Result<Arc<dyn RunStore>, OpenError> {
    match url {
        StoreUrl::Memory => Ok(Arc::new(MemoryStore::new())),
        StoreUrl::Sqlite { path, synchronous } => Ok(Arc::new(
            SqliteStore::open_with(path, *synchronous, options).await?,
        )),
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres { url, synchronous } => Ok(Arc::new(
            PgStore::open_with(url, *synchronous, options).await?,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!("memory".parse::<StoreUrl>().unwrap(), StoreUrl::Memory);
        assert_eq!(
            "sqlite:///tmp/a.db".parse::<StoreUrl>().unwrap(),
            StoreUrl::sqlite("/tmp/a.db")
        );
        assert_eq!(
            "sqlite://a.db".parse::<StoreUrl>().unwrap(),
            StoreUrl::sqlite("a.db")
        );
        assert_eq!(
            "sqlite:a.db".parse::<StoreUrl>().unwrap(),
            StoreUrl::sqlite("a.db")
        );
        assert_eq!(
            "sqlite://a.db?synchronous=full"
                .parse::<StoreUrl>()
                .unwrap(),
            StoreUrl::sqlite("a.db")
        );
        assert_eq!(
            "sqlite:///a.db?synchronous=normal"
                .parse::<StoreUrl>()
                .unwrap(),
            StoreUrl::Sqlite {
                path: "/a.db".into(),
                synchronous: Synchronous::Normal
            }
        );
        for bad in [
            "",
            "postgres-like://x",
            "mysql://x",
            "sqlite://",
            "sqlite://?synchronous=full",
            "/tmp/a.db",
            "sqlite://a.db?mode=ro",
            "sqlite://a.db?synchronous=off",
        ] {
            let error = bad.parse::<StoreUrl>().unwrap_err();
            assert!(
                error.to_string().contains("sqlite://PATH"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn display_round_trips() {
        for url in [
            StoreUrl::sqlite("/tmp/x.db"),
            StoreUrl::sqlite("/tmp/x.db").with_synchronous(Synchronous::Normal),
        ] {
            assert_eq!(url.to_string().parse::<StoreUrl>().unwrap(), url);
        }
        assert_eq!(
            StoreUrl::sqlite("/tmp/x.db").to_string(),
            "sqlite:///tmp/x.db"
        );
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_urls_parse_with_askloop_synchronous_parameter() {
        let url: StoreUrl = "postgres://app@db.example:5433/runs".parse().unwrap();
        let StoreUrl::Postgres {
            url: pg,
            synchronous,
        } = &url
        else {
            panic!("{url:?}");
        };
        assert_eq!(*synchronous, Synchronous::Full);
        assert_eq!(pg.to_string(), "postgres://app@db.example:5433/runs");
        assert_eq!(url.to_string().parse::<StoreUrl>().unwrap(), url);

        let url: StoreUrl = "postgresql://app@h/runs?sslmode=disable&synchronous=normal"
            .parse()
            .unwrap();
        let StoreUrl::Postgres {
            url: pg,
            synchronous,
        } = &url
        else {
            panic!("{url:?}");
        };
        assert_eq!(*synchronous, Synchronous::Normal);
        assert_eq!(pg.to_string(), "postgresql://app@h/runs?sslmode=disable");
        assert_eq!(
            url.to_string(),
            "postgresql://app@h/runs?sslmode=disable&synchronous=normal"
        );
        assert_eq!(url.to_string().parse::<StoreUrl>().unwrap(), url);

        for bad in [
            "postgres://h/db?synchronous=fast",
            "postgres://h:notaport/db",
            "postgres://h/db?sslmode=sometimes",
        ] {
            let error = bad.parse::<StoreUrl>().unwrap_err();
            assert!(
                matches!(error, OpenError::InvalidPostgresUrl { .. }),
                "{bad}: {error:?}"
            );
        }
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_passwords_never_show() {
        for text in [
            "postgres://app:s3cret@db/runs",
            "postgres://app@db/runs?password=s3cret",
            "postgres://app:s3cret@db/runs?synchronous=normal",
        ] {
            let url: StoreUrl = text.parse().unwrap();
            for shown in [url.to_string(), format!("{url:?}")] {
                assert!(!shown.contains("s3cret"), "{shown}");
                assert!(shown.contains("***"), "{shown}");
            }
        }
        let error = "postgres://app:s3cret@db:port/runs"
            .parse::<StoreUrl>()
            .unwrap_err();
        assert!(
            !format!("{error} {error:?}").contains("s3cret"),
            "{error:?}"
        );
    }
}

//! [`StoreUrl`]: which store to open (`memory`, `sqlite://PATH`), and [`open_store`].

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use askloop_core::RunStore;
use askloop_core::store::MemoryStore;

use crate::error::OpenError;
use crate::sqlite::{SqliteStore, Synchronous};

/// File name of the default SQLite store inside [`askloop_core::data_dir`].
pub const DEFAULT_DB_FILE: &str = "askloop.db";

/// A store location, as given by `--store` or `ASKLOOP_STORE`.
///
/// More backends (PostgreSQL) will come, so matching on it needs a wildcard arm.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `memory`: nothing survives the process.
    Memory,
    /// `sqlite://PATH` (`sqlite:///abs/path.db`, `sqlite://relative.db`) or `sqlite:PATH`.
    Sqlite(PathBuf),
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
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .ok_or_else(invalid)?;
        if path.is_empty() || path.contains('?') {
            return Err(invalid());
        }
        Ok(Self::Sqlite(PathBuf::from(path)))
    }
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory => formatter.write_str("memory"),
            Self::Sqlite(path) => write!(formatter, "sqlite://{}", path.display()),
        }
    }
}

/// The embedded default: `sqlite://<data dir>/askloop.db` (see [`askloop_core::data_dir`]).
///
/// # Errors
/// [`OpenError::NoDataDir`] when no data folder is known.
pub fn default_store_url() -> Result<StoreUrl, OpenError> {
    let dir = askloop_core::data_dir().ok_or(OpenError::NoDataDir)?;
    Ok(StoreUrl::Sqlite(dir.join(DEFAULT_DB_FILE)))
}

/// How to open a store: build one with [`OpenOptions::new`] (or `default()`) and its setters.
///
/// The defaults open for reading and writing, create the file (and its folder) when missing,
/// and commit with [`Synchronous::Normal`].
///
/// # Example
/// ```
/// use askloop_store::{OpenOptions, Synchronous};
///
/// let writer = OpenOptions::new().synchronous(Synchronous::Full);
/// let reader = OpenOptions::new().read_only(true);
/// assert!(reader.read_only && !writer.read_only);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenOptions {
    /// SQLite's `synchronous` setting; see [`OpenOptions::synchronous()`].
    pub synchronous: Synchronous,
    /// Whether to open for reading only; see [`OpenOptions::read_only()`].
    pub read_only: bool,
    /// Whether to create a missing database; see [`OpenOptions::create_if_missing()`].
    pub create_if_missing: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Normal,
            read_only: false,
            create_if_missing: true,
        }
    }
}

impl OpenOptions {
    /// The defaults: read-write, create when missing, [`Synchronous::Normal`].
    pub fn new() -> Self {
        Self::default()
    }

    /// SQLite's `synchronous` setting (default [`Synchronous::Normal`]).
    #[must_use]
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Open for reading only (default false): nothing is created, migrated or written, and a
    /// database in a read-only file or folder can still be read. A missing database is then
    /// [`OpenError::NotFound`], whatever [`OpenOptions::create_if_missing()`] says.
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Create the database (and its folder) when it does not exist (default true); when false,
    /// a missing database is [`OpenError::NotFound`].
    #[must_use]
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }
}

/// Opens the store at `url`: for writing (creating it if allowed, and migrating it), or for
/// reading only (see [`OpenOptions::read_only()`]). A memory store is always new and empty.
///
/// # Errors
/// [`OpenError::NotFound`] for a missing database that may not be created;
/// [`OpenError::CreateDir`], [`OpenError::Connect`], [`OpenError::Migrate`].
pub async fn open_store(
    url: &StoreUrl,
    options: &OpenOptions,
) -> Result<Arc<dyn RunStore>, OpenError> {
    match url {
        StoreUrl::Memory => Ok(Arc::new(MemoryStore::new())),
        StoreUrl::Sqlite(path) => Ok(Arc::new(SqliteStore::open_with(path, options).await?)),
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
            StoreUrl::Sqlite("/tmp/a.db".into())
        );
        assert_eq!(
            "sqlite://a.db".parse::<StoreUrl>().unwrap(),
            StoreUrl::Sqlite("a.db".into())
        );
        assert_eq!(
            "sqlite:a.db".parse::<StoreUrl>().unwrap(),
            StoreUrl::Sqlite("a.db".into())
        );
        for bad in [
            "",
            "postgres://x",
            "sqlite://",
            "/tmp/a.db",
            "sqlite://a.db?mode=ro",
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
        let url = StoreUrl::Sqlite("/tmp/x.db".into());
        assert_eq!(url.to_string().parse::<StoreUrl>().unwrap(), url);
    }
}

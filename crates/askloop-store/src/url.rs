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
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// How to open a store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// SQLite's `synchronous` setting (default [`Synchronous::Normal`]).
    pub synchronous: Synchronous,
}

/// Opens (creating if needed, and migrating) the store at `url`.
///
/// # Errors
/// [`OpenError::CreateDir`], [`OpenError::Connect`], [`OpenError::Migrate`].
pub async fn open_store(
    url: &StoreUrl,
    options: &OpenOptions,
) -> Result<Arc<dyn RunStore>, OpenError> {
    match url {
        StoreUrl::Memory => Ok(Arc::new(MemoryStore::new())),
        StoreUrl::Sqlite(path) => Ok(Arc::new(
            SqliteStore::open(path, options.synchronous).await?,
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

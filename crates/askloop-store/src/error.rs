//! Errors of opening a store, and the one mapping of driver errors to `StoreError` kinds.

use askloop_core::{RunId, StoreError};

/// Why a store could not be opened.
///
/// A variant's message never repeats its source's: print the whole chain (e.g. with
/// `anyhow`'s `{:#}`) to see the cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The store URL is not one askloop knows.
    #[error("invalid store URL {url:?}: expected `memory` or `sqlite://PATH`")]
    InvalidUrl {
        /// The URL given.
        url: String,
    },
    /// No data folder is known for the default store (no home folder); pass `--store`.
    #[error(
        "no data folder is known for the default store; set ASKLOOP_DATA_DIR or pass --store sqlite://PATH"
    )]
    NoDataDir,
    /// There is no database at the URL, and it was opened read-only or without
    /// `create_if_missing`.
    #[error("no database at {url}")]
    NotFound {
        /// The store URL.
        url: String,
    },
    /// The database's folder could not be created.
    #[error("cannot create folder {path}")]
    CreateDir {
        /// The folder.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The database could not be opened.
    #[error("cannot open store {url}")]
    Connect {
        /// The store URL.
        url: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The schema migrations failed (e.g. the file was written by a newer askloop).
    #[error("cannot migrate store {url}")]
    Migrate {
        /// The store URL.
        url: String,
        /// The migrator's error.
        #[source]
        source: sqlx::migrate::MigrateError,
    },
}

/// SQLite's primary result code for a write to a read-only database.
const SQLITE_READONLY: i32 = 8;

/// Maps a driver error of an operation on `run_id` to a backend-neutral [`StoreError`]:
/// unique violations become [`StoreError::AlreadyExists`], a missing row
/// [`StoreError::NotFound`], a write to a read-only database [`StoreError::ReadOnly`], everything
/// else [`StoreError::Backend`].
pub(crate) fn map_sqlx_error(run_id: &RunId, error: sqlx::Error) -> StoreError {
    match &error {
        sqlx::Error::Database(database) if database.is_unique_violation() => {
            StoreError::AlreadyExists {
                run_id: run_id.clone(),
            }
        }
        sqlx::Error::RowNotFound => StoreError::NotFound {
            run_id: run_id.clone(),
        },
        sqlx::Error::Database(database)
            if database
                .code()
                .and_then(|code| code.parse::<i32>().ok())
                .is_some_and(|code| code & 0xff == SQLITE_READONLY) =>
        {
            StoreError::ReadOnly
        }
        _ => StoreError::Backend {
            source: Box::new(error),
        },
    }
}

/// A driver error with no particular run.
pub(crate) fn backend(error: sqlx::Error) -> StoreError {
    StoreError::Backend {
        source: Box::new(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_not_found_maps_to_not_found() {
        let error = map_sqlx_error(&RunId::new("r"), sqlx::Error::RowNotFound);
        assert!(matches!(error, StoreError::NotFound { .. }), "{error:?}");
    }

    #[test]
    fn other_errors_map_to_backend() {
        let error = map_sqlx_error(&RunId::new("r"), sqlx::Error::PoolClosed);
        assert!(matches!(error, StoreError::Backend { .. }), "{error:?}");
    }
}

//! The one mapping of SQLite errors to [`StoreError`] kinds, and SQLite's open failures as
//! causes of an [`OpenError::Connect`](crate::OpenError::Connect).

use askloop_core::{RunId, StoreError};
use rusqlite::ErrorCode;

use crate::error::BoxError;

/// SQLite's refusal to open or set up a database, as a cause of [`OpenError::Connect`]: SQLite's
/// message without the database's path (the store URL before it names the file) and without
/// the driver's second copy of the same text, e.g. `unable to open database file (SQLite code
/// 14)`.
#[derive(Debug, thiserror::Error)]
#[error("{message} (SQLite code {code})")]
pub(crate) struct SqliteOpenFailure {
    message: String,
    code: i32,
}

/// The cause of an [`OpenError::Connect`] for a SQLite error while opening `path`: a
/// [`SqliteOpenFailure`] for SQLite's own failures, the driver's error otherwise.
pub(crate) fn sqlite_open_cause(error: rusqlite::Error, path: &std::path::Path) -> BoxError {
    match error {
        rusqlite::Error::SqliteFailure(failure, message) => {
            let description = failure.to_string();
            let generic = description
                .split_once(": ")
                .map_or(description.as_str(), |(_, text)| text)
                .to_owned();
            let message = message.map_or(generic, |message| {
                let shown = path.display().to_string();
                message
                    .strip_suffix(shown.as_str())
                    .map_or(message.as_str(), |rest| rest.trim_end_matches([':', ' ']))
                    .to_owned()
            });
            Box::new(SqliteOpenFailure {
                message,
                code: failure.extended_code,
            })
        }
        other => Box::new(other),
    }
}

/// SQLite's extended codes for a primary key or unique constraint violation.
const SQLITE_CONSTRAINT_PRIMARYKEY: i32 = 1555;
const SQLITE_CONSTRAINT_UNIQUE: i32 = 2067;

/// Maps a SQLite error of an operation on `run_id` to a backend-neutral [`StoreError`]: a
/// primary key or unique violation becomes [`StoreError::AlreadyExists`], a missing row
/// [`StoreError::NotFound`], a write to a read-only database [`StoreError::ReadOnly`],
/// everything else [`StoreError::Backend`].
pub(crate) fn map_sqlite_error(run_id: &RunId, error: rusqlite::Error) -> StoreError {
    match &error {
        rusqlite::Error::SqliteFailure(failure, _)
            if matches!(
                failure.extended_code,
                SQLITE_CONSTRAINT_PRIMARYKEY | SQLITE_CONSTRAINT_UNIQUE
            ) =>
        {
            StoreError::AlreadyExists {
                run_id: run_id.clone(),
            }
        }
        rusqlite::Error::QueryReturnedNoRows => StoreError::NotFound {
            run_id: run_id.clone(),
        },
        _ => backend(error),
    }
}

/// A SQLite error with no particular run: a write to a read-only database is
/// [`StoreError::ReadOnly`], everything else [`StoreError::Backend`].
pub(crate) fn backend(error: rusqlite::Error) -> StoreError {
    match error.sqlite_error_code() {
        Some(ErrorCode::ReadOnly) => StoreError::ReadOnly,
        _ => StoreError::Backend {
            source: Box::new(error),
        },
    }
}

/// Whether SQLite refused a read-only open for want of write access (`SQLITE_READONLY` or
/// `SQLITE_CANTOPEN`, with any extended code).
pub(crate) fn is_read_only_refusal(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn no_rows_maps_to_not_found() {
        let error = map_sqlite_error(&RunId::new("r"), rusqlite::Error::QueryReturnedNoRows);
        assert!(matches!(error, StoreError::NotFound { .. }), "{error:?}");
    }

    #[test]
    fn key_violations_map_to_already_exists() {
        for code in [SQLITE_CONSTRAINT_PRIMARYKEY, SQLITE_CONSTRAINT_UNIQUE] {
            let error = map_sqlite_error(&RunId::new("r"), failure(code));
            assert!(
                matches!(error, StoreError::AlreadyExists { .. }),
                "{error:?}"
            );
        }
    }

    #[test]
    fn read_only_writes_map_to_read_only() {
        // SQLITE_READONLY_DBMOVED (8 | 4 << 8) is still a read-only refusal.
        for code in [8, 8 | (4 << 8)] {
            let error = map_sqlite_error(&RunId::new("r"), failure(code));
            assert!(matches!(error, StoreError::ReadOnly), "{error:?}");
        }
    }

    #[test]
    fn other_errors_map_to_backend() {
        // SQLITE_IOERR, and a NOT NULL violation (a constraint, but not a key).
        for code in [10, 1299] {
            let error = map_sqlite_error(&RunId::new("r"), failure(code));
            assert!(matches!(error, StoreError::Backend { .. }), "{error:?}");
        }
    }
}

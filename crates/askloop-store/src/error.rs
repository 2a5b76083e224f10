//! Errors of opening a store, and the one mapping of SQLite errors to `StoreError` kinds.

use askloop_core::{RunId, StoreError};
use rusqlite::ErrorCode;

/// A driver's error, boxed so that no driver type is part of the public API.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a store could not be opened.
///
/// A variant's message never repeats its source's: print the whole chain (e.g. with
/// `anyhow`'s `{:#}`) to see the cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The store URL is not one askloop knows.
    #[error(
        "invalid store URL {url:?}: expected `memory`, `sqlite://PATH[?synchronous=normal|full]` or `postgres://…`"
    )]
    InvalidUrl {
        /// The URL given.
        url: String,
    },
    /// A `postgres://` URL that libpq's URL form or askloop's `synchronous` parameter refuses.
    #[cfg(feature = "postgres")]
    #[error("invalid PostgreSQL store URL {url}")]
    InvalidPostgresUrl {
        /// The URL given, its password shown as `***`.
        url: String,
        /// What is wrong with it.
        #[source]
        source: PgUrlError,
    },
    /// The URL names a backend this build of askloop leaves out.
    #[error("store URL {url} needs askloop built with the `{feature}` feature")]
    NotBuiltIn {
        /// The URL given, its password shown as `***`.
        url: String,
        /// The Cargo feature that adds the backend.
        feature: &'static str,
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
    /// The store's path is a folder, not a database file.
    #[error("{path} is a folder, not a database file; expected sqlite://PATH/FILE.db")]
    IsDirectory {
        /// The path.
        path: String,
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
    /// The database could not be opened or set up (journal mode, durability).
    #[error("cannot open store {url}")]
    Connect {
        /// The store URL.
        url: String,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// The database was found, but its schema could not be checked or set up (PostgreSQL: e.g.
    /// the schema in `search_path` does not exist, or the user may not create tables).
    #[error("cannot prepare store {url}")]
    Schema {
        /// The store URL (password shown as `***`).
        url: String,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// The schema migrations failed (e.g. the file was written by a newer askloop, or a
    /// format-1 database could not be upgraded).
    #[error("cannot migrate store {url}")]
    Migrate {
        /// The store URL.
        url: String,
        /// The migrator's error.
        #[source]
        source: BoxError,
    },
    /// A read-only open found a schema this build does not read as it is: an older one (open
    /// the store once for writing, e.g. with `askloop run`, to upgrade it) or a newer one
    /// (written by a newer askloop).
    #[error(
        "store {url} has schema version {found}; this build reads version {supported} (opening it for writing upgrades an older one)"
    )]
    SchemaVersion {
        /// The store URL.
        url: String,
        /// The schema version found (SQLite's `user_version`; 0 for a database of format 1).
        found: i64,
        /// The schema version this build reads and writes.
        supported: i64,
    },
}

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
/// What is wrong with a `postgres://` store URL.
#[cfg(feature = "postgres")]
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgUrlError {
    /// askloop's `synchronous` parameter is neither `normal` nor `full`.
    #[error("unknown synchronous={given:?}; expected normal or full")]
    Synchronous {
        /// The value given.
        given: String,
    },
    /// The URL itself does not parse.
    #[error("not a URL")]
    Syntax(#[source] url::ParseError),
    /// The driver refuses a connection parameter.
    #[error("a connection parameter is refused")]
    Parameter(#[source] sqlx::Error),
}

/// `text` with the password of a URL (`scheme://user:PASSWORD@host…` or a `password=`
/// parameter) replaced by `***`, for messages and logs; best effort for text that does not parse
/// as a URL (everything between the user name and the last `@` is masked).
pub(crate) fn mask_password(text: &str) -> String {
    #[cfg(feature = "postgres")]
    if let Ok(mut url) = url::Url::parse(text) {
        if url.password().is_some() {
            // Only fails for URLs that cannot have a password, and this one has one.
            let _ = url.set_password(Some("***"));
        }
        if url.query_pairs().any(|(key, _)| key == "password") {
            let pairs: Vec<(String, String)> = url
                .query_pairs()
                .map(|(key, value)| {
                    let value = if key == "password" {
                        "***".into()
                    } else {
                        value.into_owned()
                    };
                    (key.into_owned(), value)
                })
                .collect();
            url.query_pairs_mut().clear().extend_pairs(pairs);
        }
        return url.to_string();
    }
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => text.to_owned(),
        },
        None => text.to_owned(),
    }
}

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

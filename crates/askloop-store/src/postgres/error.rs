//! The one mapping of PostgreSQL driver errors to [`StoreError`] kinds.

use askloop_core::{RunId, StoreError};

/// `unique_violation`: an insert of a run id that exists.
const UNIQUE_VIOLATION: &str = "23505";

/// `read_only_sql_transaction`: a write in a read-only session (a store opened read-only, or a
/// hot standby).
const READ_ONLY_SQL_TRANSACTION: &str = "25006";

/// Maps a driver error of an operation on `run_id` to a backend-neutral [`StoreError`]:
/// `unique_violation` becomes [`StoreError::AlreadyExists`], a missing row
/// [`StoreError::NotFound`], a write in a read-only session [`StoreError::ReadOnly`], everything
/// else (connection, pool, server) [`StoreError::Backend`].
pub(crate) fn map_pg_error(run_id: &RunId, error: sqlx::Error) -> StoreError {
    let code = match &error {
        sqlx::Error::Database(database) => database.code().map(|code| code.into_owned()),
        _ => None,
    };
    match (code.as_deref(), &error) {
        (Some(UNIQUE_VIOLATION), _) => StoreError::AlreadyExists {
            run_id: run_id.clone(),
        },
        (Some(READ_ONLY_SQL_TRANSACTION), _) => StoreError::ReadOnly,
        (_, sqlx::Error::RowNotFound) => StoreError::NotFound {
            run_id: run_id.clone(),
        },
        _ => StoreError::backend(error),
    }
}

/// A driver error with no particular run: [`StoreError::Backend`].
pub(crate) fn backend(error: sqlx::Error) -> StoreError {
    StoreError::backend(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_not_found_maps_to_not_found() {
        let error = map_pg_error(&RunId::new("r"), sqlx::Error::RowNotFound);
        assert!(matches!(error, StoreError::NotFound { .. }), "{error:?}");
    }

    #[test]
    fn other_errors_map_to_backend() {
        let error = map_pg_error(&RunId::new("r"), sqlx::Error::PoolTimedOut);
        assert!(matches!(error, StoreError::Backend { .. }), "{error:?}");
    }
}

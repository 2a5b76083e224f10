//! The schema: the migrations (`migrations/postgres`, applied by sqlx, which serializes
//! concurrent migrators with a lock) and the check that a database holds askloop's tables.

use sqlx::PgConnection;

use crate::error::OpenError;
use crate::options::OpenOptions;

/// Readies the database behind `connection` (store URL `url`, as shown) as `options` say: a
/// database without askloop's tables is [`OpenError::NotFound`] unless it is opened for writing
/// with [`OpenOptions::create_if_missing()`]; opened for writing, the migrations are applied.
///
/// # Errors
/// [`OpenError::NotFound`], [`OpenError::Schema`], [`OpenError::Migrate`].
pub(crate) async fn prepare(
    connection: &mut PgConnection,
    url: &str,
    options: &OpenOptions,
) -> Result<(), OpenError> {
    let has_tables: bool = sqlx::query_scalar("SELECT to_regclass('runs') IS NOT NULL")
        .fetch_one(&mut *connection)
        .await
        .map_err(|source| OpenError::Schema {
            url: url.to_owned(),
            source: source.into(),
        })?;
    if !has_tables && (options.read_only || !options.create_if_missing) {
        return Err(OpenError::NotFound {
            url: url.to_owned(),
        });
    }
    if !options.read_only {
        sqlx::migrate!("./migrations/postgres")
            .run(&mut *connection)
            .await
            .map_err(|source| OpenError::Migrate {
                url: url.to_owned(),
                source: source.into(),
            })?;
    }
    Ok(())
}

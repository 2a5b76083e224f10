//! [`PgUrl`]: a PostgreSQL connection URL that never shows its password.

use std::fmt;

use sqlx::ConnectOptions;
use sqlx::postgres::PgConnectOptions;

use crate::error::{OpenError, PgUrlError, mask_password};
use crate::options::Synchronous;

/// askloop's own URL parameter: how commits wait for the disk.
const SYNCHRONOUS_PARAMETER: &str = "synchronous";

/// A PostgreSQL connection URL in libpq's form,
/// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAMS]` (or `postgresql://…`), checked
/// by the driver when parsed.
///
/// `Display` and `Debug` show the password (in the user part or a `password=` parameter) as
/// `***`; [`PgUrl::expose_password`] gives the URL as written.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl {
    url: url::Url,
}

impl PgUrl {
    /// Parses `text`, taking out askloop's `synchronous=normal|full` parameter (default
    /// [`Synchronous::Full`]).
    pub(crate) fn parse(text: &str) -> Result<(Self, Synchronous), OpenError> {
        let invalid = |source| OpenError::InvalidPostgresUrl {
            url: mask_password(text),
            source,
        };
        let mut url = url::Url::parse(text).map_err(|error| invalid(PgUrlError::Syntax(error)))?;
        let mut synchronous = Synchronous::Full;
        let mut others = Vec::new();
        for (key, value) in url.query_pairs() {
            if key == SYNCHRONOUS_PARAMETER {
                synchronous = value.parse().map_err(|_| {
                    invalid(PgUrlError::Synchronous {
                        given: value.clone().into_owned(),
                    })
                })?;
            } else {
                others.push((key.into_owned(), value.into_owned()));
            }
        }
        if others.is_empty() {
            url.set_query(None);
        } else if url.query_pairs().count() != others.len() {
            url.query_pairs_mut().clear().extend_pairs(others);
        }
        let parsed = Self { url };
        parsed
            .connect_options()
            .map_err(|error| invalid(PgUrlError::Parameter(error)))?;
        Ok((parsed, synchronous))
    }

    /// The driver's options for this URL (what `PGHOST` and the other libpq variables say fills
    /// in what the URL leaves out).
    pub(crate) fn connect_options(&self) -> Result<PgConnectOptions, sqlx::Error> {
        PgConnectOptions::from_url(&self.url)
    }

    /// Whether the URL has connection parameters (`?…`).
    pub fn has_query(&self) -> bool {
        self.url.query().is_some()
    }

    /// The URL as written, password included: for handing to another PostgreSQL client, never
    /// for messages or logs.
    pub fn expose_password(&self) -> &str {
        self.url.as_str()
    }
}

impl fmt::Display for PgUrl {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&mask_password(self.url.as_str()))
    }
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_tuple("PgUrl")
            .field(&self.to_string())
            .finish()
    }
}

//! Errors of opening a store, and the masking of passwords in the URLs they show.

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

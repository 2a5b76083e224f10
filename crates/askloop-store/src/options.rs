//! How to open a store, whichever backend: [`OpenOptions`] (read-only, create when missing) and
//! how durable its commits are ([`Synchronous`]).

use std::str::FromStr;

/// How durable a commit is, given as a store URL's `synchronous=normal|full` parameter: for SQLite
/// its `synchronous` setting, for PostgreSQL whether a commit waits for the server's write-ahead
/// log to reach the disk (`synchronous_commit`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// `NORMAL`: with WAL, a commit survives a process crash; the last commits before a power
    /// loss may be lost (an announced suspension may be undone), and the database stays
    /// consistent. Opt in with `?synchronous=normal`. PostgreSQL: `synchronous_commit=off`.
    Normal,
    /// `FULL` (the default): a commit waits for the disk, so it also survives a power loss.
    /// Commits of concurrent runs share one fsync (group commit). PostgreSQL: the server's
    /// `synchronous_commit` setting.
    #[default]
    Full,
}

impl FromStr for Synchronous {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "normal" => Ok(Self::Normal),
            "full" => Ok(Self::Full),
            other => Err(format!(
                "unknown sync mode {other:?}; expected normal or full"
            )),
        }
    }
}

impl Synchronous {
    /// `"normal"` or `"full"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Full => "full",
        }
    }
}

/// How to open a store: build one with [`OpenOptions::new`] (or `default()`) and its setters.
///
/// The defaults open for reading and writing and create the file (and its folder) when
/// missing. How durable commits are is part of the [`StoreUrl`](crate::StoreUrl).
///
/// # Example
/// ```
/// use askloop_store::OpenOptions;
///
/// let writer = OpenOptions::new().create_if_missing(false);
/// let reader = OpenOptions::new().read_only(true);
/// assert!(reader.read_only && !writer.read_only);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenOptions {
    /// Whether to open for reading only; see [`OpenOptions::read_only()`].
    pub read_only: bool,
    /// Whether to create a missing database; see [`OpenOptions::create_if_missing()`].
    pub create_if_missing: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            read_only: false,
            create_if_missing: true,
        }
    }
}

impl OpenOptions {
    /// The defaults: read-write, create when missing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Open for reading only (default false): nothing is created, migrated or written, and a
    /// database in a read-only file or folder can still be read. A missing database is then
    /// [`OpenError::NotFound`](crate::OpenError::NotFound), whatever [`OpenOptions::create_if_missing()`] says.
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Create the database (and its folder) when it does not exist (default true); when false,
    /// a missing database is [`OpenError::NotFound`](crate::OpenError::NotFound).
    #[must_use]
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }
}

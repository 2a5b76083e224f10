//! Durable [`RunStore`]s for askloop.
//!
//! [`SqliteStore`] keeps runs in one SQLite file (WAL journal) and is askloop's embedded
//! default: a run suspended by one process is resumed by another that opens the same file.
//! `PgStore` (feature `postgres`, on by default) keeps them in a PostgreSQL database that any
//! number of processes on any number of machines share. Both implement the contract of
//! `askloop_core::RunStore` — commit before emit, compare-and-swap on a run version, leases,
//! threads in completion order — and pass the core conformance suite.
//!
//! This crate depends on `askloop-core` only; the CLI picks a store with [`StoreUrl`] and
//! [`open_store`].
//!
//! # Example
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use askloop_store::{OpenOptions, StoreUrl, open_store};
//!
//! let url: StoreUrl = "sqlite:///tmp/askloop.db".parse()?;
//! let store = open_store(&url, &OpenOptions::default()).await?;
//! # let _ = store; Ok(()) }
//! ```
//!
//! # Features
//! | feature | default | what it adds |
//! |---|---|---|
//! | `postgres` | yes | `PgStore`, `PgUrl` and `postgres://` store URLs |

mod error;
mod known;
mod links;
mod options;
mod outbox;
#[cfg(feature = "postgres")]
mod postgres;
mod sqlite;
mod url;

pub use askloop_core::RunStore;
pub use error::OpenError;
#[cfg(feature = "postgres")]
pub use error::PgUrlError;
pub use options::{OpenOptions, Synchronous};
#[cfg(feature = "postgres")]
pub use postgres::{PgStore, PgUrl};
pub use sqlite::SqliteStore;
pub use url::{DEFAULT_DB_FILE, StoreUrl, default_store_url, open_store};

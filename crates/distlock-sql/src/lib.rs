//! The SQL backend of distlock: one row per lock name with an optimistic `version` column, on
//! MySQL/MariaDB (feature `mysql`) or SQLite (feature `sqlite`, the embedded default), via
//! sqlx with no TLS and no OpenSSL.
//!
//! - [`SqlLock`] implements [`DistributedLock`](distlock_core::DistributedLock); build it from
//!   a URL (`mysql://user:pass@host:port/db`, `sqlite://path/to/file.db`) with
//!   [`SqlLock::connect`] or [`SqlConfig`], or use [`SqlLock::embedded_default`] for a SQLite
//!   file in a per-user location ([`SqlConfig::default_sqlite_path`]).
//! - Acquire is one atomic upsert that takes the row only if it is free or expired and bumps
//!   `version`, the fencing token; release and extend are compare-and-set on the owner token.
//!   Expiry is judged by the database's clock only. See [`SqlLock`] for the row layout, the
//!   round trips of each operation, and why not `GET_LOCK` / `SELECT ... FOR UPDATE`.
//! - The backend creates its table if missing (idempotently, also when many processes start
//!   at once). Where a DBA creates tables, turn that off with
//!   [`SqlConfig::with_create_table`] and give them [`SqlConfig::ddl`]:
//!
//! ```sql
//! -- MySQL / MariaDB
//! CREATE TABLE IF NOT EXISTS `distlock_locks` (
//!   lock_key   VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
//!   lock_name  VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
//!   owner      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
//!   version    BIGINT NOT NULL,
//!   expires_at DATETIME(6) NULL,
//!   PRIMARY KEY (lock_key)
//! ) ENGINE=InnoDB;
//!
//! -- SQLite (expires_at: milliseconds since the Unix epoch)
//! CREATE TABLE IF NOT EXISTS "distlock_locks" (
//!   lock_key   TEXT NOT NULL PRIMARY KEY,
//!   lock_name  TEXT NOT NULL,
//!   owner      TEXT,
//!   version    INTEGER NOT NULL,
//!   expires_at INTEGER
//! ) WITHOUT ROWID;
//! ```
//!
//! SQLite runs in WAL mode with `synchronous = NORMAL` and a busy timeout equal to the
//! operation timeout; `database is locked` is retried inside the operation and never reaches
//! the caller (past the operation timeout it becomes
//! [`Error::Unavailable`](distlock_core::Error::Unavailable)).
//!
//! ```no_run
//! use distlock_core::LockClient;
//! use distlock_sql::SqlLock;
//!
//! # #[tokio::main] async fn main() -> distlock_core::Result<()> {
//! let client = LockClient::new(SqlLock::embedded_default().await?);
//! let guard = client.acquire("main-job").await?; // other processes on this machine wait
//! // ... the job ...
//! guard.release().await?;
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(any(feature = "mysql", feature = "sqlite")))]
compile_error!("distlock-sql needs at least one of its features `mysql` and `sqlite`");

mod config;
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
mod fs;
mod lock;
mod sql;

pub use config::{SqlConfig, DEFAULT_MAX_CONNECTIONS, DEFAULT_OPERATION_TIMEOUT, DEFAULT_TABLE};
pub use lock::SqlLock;

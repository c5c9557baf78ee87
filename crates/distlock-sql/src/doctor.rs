//! `distlock doctor` for the SQL stores: reads the settings the backend's statements rely on
//! and judges each (MySQL/MariaDB in `doctor/mysql.rs`, PostgreSQL in `doctor/postgres.rs`,
//! SQLite in `doctor/sqlite.rs`), plus the database clock against this host's. Reads only:
//! it creates no file, table or row.

#[cfg(any(feature = "mysql", feature = "postgres"))]
mod clock;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "mysql")]
mod mysql_replication;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(any(feature = "mysql", feature = "postgres"))]
use distlock_core::Error;
use distlock_core::{Finding, Result};

use crate::config::{SqlConfig, Target};

/// Judges the database `config` names, as [`build`](SqlConfig::build) would use it: on
/// MySQL/MariaDB and PostgreSQL one connection and a few round trips; on SQLite the file's
/// header and the file system it lives on (nothing is opened or created).
///
/// # Errors
/// [`Error::Unavailable`](distlock_core::Error::Unavailable) if the server cannot be reached
/// within the operation timeout, [`Error::Backend`](distlock_core::Error::Backend) if it
/// refuses the connection (bad credentials). A setting the server will not show (missing
/// privileges) is a [`Verdict::Warn`](distlock_core::Verdict::Warn) finding, not an error.
pub async fn doctor(config: &SqlConfig) -> Result<Vec<Finding>> {
    match &config.target {
        #[cfg(feature = "mysql")]
        Target::MySql { options, redacted } => {
            bounded(config, "mysql", mysql::doctor(options, redacted)).await
        }
        #[cfg(feature = "postgres")]
        Target::Postgres { options, redacted } => {
            let options = crate::pg_pool::session_options(options, config.statement_limit());
            bounded(config, "postgres", postgres::doctor(&options, redacted)).await
        }
        #[cfg(feature = "sqlite")]
        Target::Sqlite { path } => sqlite::doctor(path),
    }
}

#[cfg(any(feature = "mysql", feature = "postgres"))]
async fn bounded(
    config: &SqlConfig,
    backend: &'static str,
    work: impl std::future::Future<Output = Result<Vec<Finding>>>,
) -> Result<Vec<Finding>> {
    tokio::time::timeout(config.operation_timeout * 4, work)
        .await
        .unwrap_or_else(|_| {
            Err(Error::unavailable(
                backend,
                format!("doctor: no answer within {:?}", config.operation_timeout * 4),
            ))
        })
}

/// A connection failure is [`Error::Unavailable`], anything else [`Error::Backend`].
#[cfg(any(feature = "mysql", feature = "postgres"))]
pub(crate) fn connect_error(backend: &'static str, error: sqlx::Error) -> Error {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::PoolTimedOut => {
            Error::unavailable(backend, format!("doctor: cannot connect: {error}"))
        }
        other => Error::backend(backend, format!("doctor: {other}")),
    }
}

//! The machinery every statement of [`SqlLock`] runs through: the operation timeout, the
//! retries of what certainly changed nothing (contention) and of a broken connection, and
//! the mapping of database errors to [`Error`]. This module owns those rules; it knows no
//! statement.

use std::future::Future;
use std::time::Duration;

use distlock_core::{DistributedLock, Error, Result};
use tokio::time::Instant;

use super::SqlLock;
use crate::checkout::{Checkout, ConnectionPool};

/// The first and the longest pause between internal retries of a busy or deadlocked statement.
const RETRY_FIRST: Duration = Duration::from_millis(2);
const RETRY_MAX: Duration = Duration::from_millis(50);

impl SqlLock {
    /// Runs one statement (`op` makes a fresh attempt each call, on a connection checked out
    /// of `pool`) within the operation timeout, retrying only errors that guarantee the
    /// statement changed nothing: SQLite's `SQLITE_BUSY`/`SQLITE_LOCKED`, InnoDB's deadlock /
    /// lock-wait timeout and the server's statement time limit (the statement was rolled
    /// back). Those never reach the caller as such: when the time is up they become
    /// [`Error::Unavailable`]. A retry starts only if the database's own limit on it
    /// ([`SqlConfig::statement_limit`](crate::SqlConfig::statement_limit)) ends before the operation's deadline, so the last
    /// attempt is aborted by the database before the caller is told it failed.
    pub(super) async fn run<C, T, F, Fut>(&self, pool: &C, what: &'static str, op: F) -> Result<T>
    where
        C: ConnectionPool,
        F: FnMut(Checkout<C::Pooled>) -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        self.run_tracked(pool, what, op).await.map(|(value, _)| value)
    }

    /// [`run`](Self::run), also retrying a statement whose connection broke (a pooled
    /// connection the server closed meanwhile, after a restart), on another connection,
    /// within the operation timeout. Every statement of this backend gives the same answer
    /// when run again with the same owner token (acquire wins again if it won, extend extends
    /// again), except release, whose retry finds nothing to release if the broken attempt was
    /// applied: so the result says whether an attempt broke mid-statement (the error it
    /// broke with), and the caller decides.
    pub(super) async fn run_tracked<C, T, F, Fut>(
        &self,
        pool: &C,
        what: &'static str,
        mut op: F,
    ) -> Result<(T, Option<Error>)>
    where
        C: ConnectionPool,
        F: FnMut(Checkout<C::Pooled>) -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let timeout = self.inner.config.operation_timeout;
        let limit = self.inner.config.statement_limit();
        let deadline = Instant::now() + timeout;
        let mut pause = RETRY_FIRST;
        let mut broken: Option<Error> = None;
        // Every pooled connection may be stale after a restart; one more is a fresh one.
        let mut reconnects = self.inner.config.max_connections + 1;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = async {
                let conn = pool.checkout(deadline).await.map_err(Failure::Checkout)?;
                op(Checkout::new(conn)).await.map_err(Failure::Statement)
            };
            match tokio::time::timeout(left, attempt).await {
                Ok(Ok(value)) => return Ok((value, broken)),
                Ok(Err(Failure::Checkout(e) | Failure::Statement(e)))
                    if is_contention(&e) && Instant::now() + pause + limit < deadline =>
                {
                    tracing::trace!(error = %e, what, "distlock-sql: contention, retrying");
                    tokio::time::sleep(jittered(pause)).await;
                    pause = (pause * 2).min(RETRY_MAX);
                }
                // Only a statement's connection breaks mid-statement; a failed checkout sent
                // nothing (the pool already retried a server refusing connections).
                Ok(Err(Failure::Statement(e)))
                    if is_broken(&e) && reconnects > 0 && Instant::now() < deadline =>
                {
                    tracing::debug!(error = %e, what, "distlock-sql: connection broke, retrying on another");
                    reconnects -= 1;
                    broken.get_or_insert(map_error(self.backend(), what, e));
                }
                Ok(Err(Failure::Checkout(e) | Failure::Statement(e))) => {
                    return Err(broken.unwrap_or_else(|| map_error(self.backend(), what, e)))
                }
                Err(_) => {
                    return Err(broken.unwrap_or_else(|| {
                        Error::unavailable(
                            self.backend(),
                            format!("{what}: no answer within the operation timeout of {timeout:?}"),
                        )
                    }))
                }
            }
        }
    }
}

/// How one attempt at a statement failed.
enum Failure {
    /// No connection: the pool is closed, or connecting failed (nothing was sent).
    Checkout(sqlx::Error),
    /// The statement failed, or its connection broke while it ran.
    Statement(sqlx::Error),
}

/// Whether a connection may serve the next statement after this one's `outcome`: yes after a
/// result or an error the server answered with, unless that error ends the session; no after
/// anything else (an I/O or protocol error leaves the connection in an unknown state).
pub(super) fn reusable<T>(outcome: &Result<T, sqlx::Error>) -> bool {
    match outcome {
        Ok(_) => true,
        Err(sqlx::Error::Database(db)) => !ends_session(&**db),
        Err(_) => false,
    }
}

/// Whether a statement failed because its connection broke (and may have been applied):
/// an I/O error, or on PostgreSQL a session the server ended (a restart or an administrator's
/// `pg_terminate_backend`: `FATAL` 57P01-57P03), whose error a pooled connection reads as the
/// answer to its next statement.
fn is_broken(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) => true,
        #[cfg(feature = "postgres")]
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
            .is_some_and(|pg| matches!(pg.code(), "57P01" | "57P02" | "57P03")),
        _ => false,
    }
}

/// Errors after which the server closes the session: MySQL's ER_SERVER_SHUTDOWN,
/// ER_CONNECTION_KILLED; PostgreSQL's `FATAL`s (admin_shutdown, crash_shutdown,
/// cannot_connect_now, a terminated backend).
fn ends_session(db: &dyn sqlx::error::DatabaseError) -> bool {
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return matches!(my.number(), 1053 | 1927);
    }
    #[cfg(feature = "postgres")]
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return matches!(pg.code(), "57P01" | "57P02" | "57P03")
            || matches!(
                pg.severity(),
                sqlx::postgres::PgSeverity::Fatal | sqlx::postgres::PgSeverity::Panic
            );
    }
    let _ = db;
    false
}

/// `pause` ± 50 %, so contending retries spread out.
fn jittered(pause: Duration) -> Duration {
    let factor: f64 = rand::random_range(0.5..1.5);
    pause.mul_f64(factor)
}

/// Errors after which the statement certainly changed nothing and may simply run again.
fn is_contention(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = error else {
        return false;
    };
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        // ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT: InnoDB rolled the statement back;
        // ER_STATEMENT_TIMEOUT (MariaDB's max_statement_time), ER_QUERY_TIMEOUT (MySQL's
        // max_execution_time): the server aborted and rolled back the statement.
        return matches!(my.number(), 1213 | 1205 | 1969 | 3024);
    }
    #[cfg(feature = "postgres")]
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        // serialization_failure, deadlock_detected, lock_not_available (lock_timeout),
        // query_canceled (statement_timeout): the server rolled the statement back.
        return matches!(pg.code(), "40001" | "40P01" | "55P03" | "57014");
    }
    #[cfg(feature = "sqlite")]
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        // SQLITE_BUSY and SQLITE_LOCKED with their extended codes (low byte 5 or 6).
        let code = db.code().and_then(|c| c.parse::<i32>().ok()).unwrap_or_default();
        return matches!(code & 0xff, 5 | 6);
    }
    false
}

/// Connection failures, pool timeouts and a database that stays busy are
/// [`Error::Unavailable`]; everything else is [`Error::Backend`].
fn map_error(backend: &'static str, what: &'static str, error: sqlx::Error) -> Error {
    let unavailable = match &error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => is_contention(&error) || is_server_going_away(&**db),
        _ => false,
    };
    let source = format!("{what}: {error}");
    if unavailable {
        Error::unavailable(backend, source)
    } else {
        Error::backend(backend, source)
    }
}

/// MySQL server errors that mean "the server is going away" or "this server takes no writes
/// now" (a primary demoted by a failover, a replica), not "the statement is wrong".
fn is_server_going_away(db: &dyn sqlx::error::DatabaseError) -> bool {
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        // ER_SERVER_SHUTDOWN, ER_CON_COUNT_ERROR, ER_QUERY_INTERRUPTED, ER_CONNECTION_KILLED;
        // read-only: ER_OPTION_PREVENTS_STATEMENT (`--read-only`), ER_READ_ONLY_MODE,
        // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION, ER_INNODB_READ_ONLY.
        return matches!(my.number(), 1053 | 1040 | 1317 | 1927 | 1290 | 1836 | 1792 | 1874);
    }
    #[cfg(feature = "postgres")]
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        // Connection exceptions (08...), too_many_connections, the server shutting down or
        // starting (57P01-57P03), read_only_sql_transaction (a hot standby, or a primary
        // demoted by a failover).
        let code = pg.code();
        return code.starts_with("08") || matches!(code, "53300" | "57P01" | "57P02" | "57P03" | "25006");
    }
    let _ = db;
    false
}

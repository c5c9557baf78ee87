//! Purging idle rows (the SQL and why fencing tokens never go back: `purge_sql.rs`): the
//! callable [`SqlLock::purge_idle`] and the automatic purge each client runs in the
//! background ([`SqlConfig::with_purge_after`](crate::SqlConfig::with_purge_after)).

use std::sync::{Arc, Weak};
use std::time::Duration;

use distlock_core::{Error, Result};

#[cfg(feature = "sqlite")]
use super::{reusable, Pool};
use super::{Inner, SqlLock};
#[cfg(feature = "sqlite")]
use crate::checkout::Checkout;
use crate::config::Target;
#[cfg(feature = "mysql")]
use crate::mysql_pool::{session_limits, MySqlDial, Session};
#[cfg(feature = "postgres")]
use crate::pg_pool::PgDial;
use crate::purge_sql::{statements, BATCH};
#[cfg(any(feature = "mysql", feature = "postgres"))]
use crate::server_pool::Dial;

/// MySQL and PostgreSQL: runs `statements` on the connection of the purge's own (never one of
/// the pool's, which lock operations need; through a slow network a purge takes a while), each
/// again while it deletes a whole batch, then closes it.
#[cfg(any(feature = "mysql", feature = "postgres"))]
macro_rules! purge_on {
    ($conn:ident, $statements:ident, $op:ident, $backend:literal) => {{
        use sqlx::Connection;
        let mut conn = $conn;
        let mut purged = 0;
        let mut outcome = Ok(());
        'all: for sql in &$statements {
            for _ in 0..MAX_BATCHES {
                match within($op, $backend, sqlx::query(sql).execute(&mut conn)).await {
                    Ok(done) => {
                        purged += done.rows_affected();
                        if done.rows_affected() < BATCH {
                            break;
                        }
                    }
                    Err(e) => {
                        outcome = Err(e);
                        break 'all;
                    }
                }
            }
        }
        let _ = tokio::time::timeout($op, conn.close()).await;
        outcome.map(|()| purged)
    }};
}

/// The shortest idle time a purge accepts.
pub(crate) const MIN_IDLE: Duration = Duration::from_secs(60);
/// How often a client purges on its own.
const EVERY: Duration = Duration::from_secs(3600);
/// The most batches of one statement per purge, so that one purge ends.
const MAX_BATCHES: u32 = 1000;

impl SqlLock {
    /// Deletes the rows that the database clock proves idle for `idle_for`: lock rows free (or
    /// whose lease ended) and last taken over `idle_for` ago, holds of semaphores and
    /// read-write locks that ended over `idle_for` ago, and the objects left without holds,
    /// last taken over `idle_for` ago; on PostgreSQL also the expired entries of the queue of
    /// waiters; and the notes of mutex holds that ended (whenever they ended). A name taken again later still gets a higher fencing token than before (see
    /// the crate docs). Returns how many rows went. Each statement deletes at most 1,000 rows
    /// (**1 round trip** each, repeated while a statement deletes a whole batch). Clients run
    /// it on their own every hour ([`SqlConfig::with_purge_after`](crate::SqlConfig::with_purge_after));
    /// call it to purge at a time of your choosing.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an `idle_for` under a minute; else as any statement.
    pub async fn purge_idle(&self, idle_for: Duration) -> Result<u64> {
        if idle_for < MIN_IDLE {
            return Err(Error::invalid_config(format!(
                "purging rows idle for {idle_for:?}: at least {MIN_IDLE:?}, far longer than any statement runs"
            )));
        }
        let idle_us = i64::try_from(idle_for.as_micros()).unwrap_or(i64::MAX / 4);
        let mut statements = statements(self.dialect(), &self.inner.config.table, idle_us);
        if self.has_notes() {
            statements.push(crate::purge_sql::stale_notes(
                self.dialect(),
                &self.inner.config.table,
            ));
        }
        #[cfg(any(feature = "mysql", feature = "postgres"))]
        let (op, limit) = (
            self.inner.config.operation_timeout,
            self.inner.config.statement_limit(),
        );
        match &self.inner.config.target {
            #[cfg(feature = "mysql")]
            Target::MySql { options, .. } => {
                let dial = MySqlDial {
                    options: (**options).clone(),
                    session: Session {
                        limits: session_limits(limit),
                        warm: Vec::new(),
                    },
                };
                let conn = within(op, "mysql", dial.open()).await?;
                purge_on!(conn, statements, op, "mysql")
            }
            #[cfg(feature = "postgres")]
            Target::Postgres { options, .. } => {
                let dial = PgDial::new(options, limit, Vec::new());
                let conn = within(op, "postgres", dial.open()).await?;
                purge_on!(conn, statements, op, "postgres")
            }
            #[cfg(feature = "sqlite")]
            Target::Sqlite { .. } => {
                let mut purged = 0;
                for sql in &statements {
                    for _ in 0..MAX_BATCHES {
                        let deleted = self.purge_batch(sql).await?;
                        purged += deleted;
                        if deleted < BATCH {
                            break;
                        }
                    }
                }
                Ok(purged)
            }
        }
    }

    /// SQLite: one batch through the pool (a local file: nothing waits long for it).
    #[cfg(feature = "sqlite")]
    async fn purge_batch(&self, sql: &str) -> Result<u64> {
        match &self.inner.pool {
            Pool::Sqlite(pool) => Ok(self
                .run(
                    pool,
                    "purging idle rows",
                    on_conn!(c => sqlx::query(sql).execute(c.conn()?).await),
                )
                .await?
                .rows_affected()),
            #[allow(unreachable_patterns)] // with only the `sqlite` feature
            _ => Ok(0),
        }
    }
}

/// `future` within `op`, its errors as the backend's.
#[cfg(any(feature = "mysql", feature = "postgres"))]
async fn within<T>(
    op: Duration,
    backend: &'static str,
    future: impl std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
) -> Result<T> {
    match tokio::time::timeout(op, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Error::unavailable(backend, format!("purging idle rows: {e}"))),
        Err(_) => Err(Error::unavailable(
            backend,
            format!("purging idle rows: no answer within the operation timeout of {op:?}"),
        )),
    }
}

/// Purges `lock`'s rows idle for `idle_for` a few seconds after it opened, then every hour
/// (jittered, so that clients started together spread out), until the lock is dropped.
pub(super) fn spawn_automatic(lock: &SqlLock, idle_for: Duration) {
    let weak: Weak<Inner> = Arc::downgrade(&lock.inner);
    tokio::spawn(async move {
        let mut pause = Duration::from_millis(1000 + rand::random::<u64>() % 2000);
        loop {
            tokio::time::sleep(pause).await;
            let Some(inner) = weak.upgrade() else {
                return;
            };
            let lock = SqlLock { inner };
            match lock.purge_idle(idle_for).await {
                Ok(0) => {}
                Ok(purged) => tracing::debug!(purged, "distlock-sql: purged idle rows"),
                Err(error) => {
                    tracing::debug!(%error, "distlock-sql: purging idle rows failed; trying again later")
                }
            }
            drop(lock);
            let jitter = EVERY.as_millis() as u64 / 10;
            pause = EVERY + Duration::from_millis(rand::random::<u64>() % jitter.max(1));
        }
    });
}

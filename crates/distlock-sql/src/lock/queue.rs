//! The mutex's queue of waiters on PostgreSQL, as [`SqlLock`] runs it: a waiter's watch, its
//! attempts that queue it, and its leaving when its wait ends. The SQL lives in
//! `waiters_sql.rs`, the books of which waiters may be queued in `pg_waiters.rs`, the routing
//! of a wake to its waiter in `pg_releases.rs`.

use std::sync::{Arc, Weak};
use std::time::Duration;

use distlock_core::{LockName, OwnerToken, ReleaseWatch, Result, TryAcquire};

use super::{lock_key, reusable, Checkout, Inner, Pool, SqlLock, MAX_TTL};
use crate::pg_releases::PgReleases;
use crate::statement::{DialectPool, Values};
use crate::waiters_sql::waiter_column;

impl SqlLock {
    /// A watch of one new waiter of the mutex `name`, woken when a release (or a waiter leaving
    /// a free lock) takes it out of the queue, or when the listening connection listens again.
    /// Dropping it takes the waiter out of the queue if it may be there.
    pub(super) async fn watch_queued(&self, releases: &PgReleases, name: &LockName) -> Result<ReleaseWatch> {
        let waiter: Arc<str> = format!("{:032x}", rand::random::<u128>()).into();
        let (rx, keep) = releases.watch_waiter(&waiter).await?;
        self.inner
            .waiters
            .watching(waiter.clone(), lock_key(name).into_owned());
        let leave = Leave {
            lock: Arc::downgrade(&self.inner),
            waiter: waiter.clone(),
        };
        Ok(ReleaseWatch::for_waiter(rx, (keep, leave), waiter))
    }

    /// An attempt by `waiter`: queued for `stay` if the lock is held, out of the queue if it
    /// wins (one statement). If the waiter's watch was dropped meanwhile, the waiter leaves
    /// the queue once the attempt ended (also when this future is dropped).
    pub(super) async fn acquire_queued_as(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
        waiter: &str,
        stay: Duration,
    ) -> Result<TryAcquire> {
        let column = waiter_column(waiter);
        let stay_us = i64::try_from(stay.min(MAX_TTL).as_micros())
            .unwrap_or(i64::MAX)
            .max(1);
        let mut attempt = self.inner.waiters.attempting(&column).then(|| Attempting {
            lock: self.clone(),
            waiter: column.clone().into_owned(),
            won: false,
        });
        let outcome = self.acquire(name, owner, ttl, Some((&column, stay_us))).await;
        if let Some(attempt) = attempt.as_mut() {
            attempt.won = matches!(outcome, Ok(TryAcquire::Acquired(_)));
        }
        outcome
    }

    /// Takes `waiter` out of the queue of `key`, in the background; if the lock is free, the
    /// next waiter is woken in its place (it may have been woken, and gone without trying).
    /// **1 round trip.** Without a runtime, the entry ends with its stay.
    fn leave_in_background(&self, key: String, waiter: String) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let lock = self.clone();
        runtime.spawn(async move {
            if let Err(error) = lock.leave(&key, &waiter).await {
                tracing::debug!(%error, "distlock-sql: a waiter could not leave the queue; its entry ends with its stay");
            }
        });
    }

    /// One call of `<table>_leave`.
    #[allow(irrefutable_let_patterns)] // with only the `postgres` feature
    async fn leave(&self, key: &str, waiter: &str) -> Result<()> {
        let Pool::Postgres(pool) = &self.inner.pool else {
            return Ok(());
        };
        let statement = &self.inner.sql.waiters.leave;
        let sql = statement.as_str();
        let values = Values {
            key: Some(key),
            waiter: Some(waiter),
            ..Values::default()
        };
        let woke: i64 = self
            .run(
                pool,
                "leaving the queue of waiters",
                on_conn!(c => {
                    let args = pool.arguments(statement, &values)?;
                    sqlx::query_scalar_with(sql, args).fetch_one(c.conn()?).await
                }),
            )
            .await?;
        tracing::trace!(woke, "distlock-sql: a waiter left the queue");
        Ok(())
    }
}

/// An attempt of a tracked waiter under way; when it ends (or is dropped), the books learn
/// of it, and a waiter whose watch went meanwhile leaves the queue.
struct Attempting {
    lock: SqlLock,
    waiter: String,
    won: bool,
}

impl Drop for Attempting {
    fn drop(&mut self) {
        if let Some(key) = self.lock.inner.waiters.attempted(&self.waiter, self.won) {
            self.lock
                .leave_in_background(key, std::mem::take(&mut self.waiter));
        }
    }
}

/// Held by a waiter's watch: when the wait ends, a waiter that may be queued leaves the queue.
struct Leave {
    lock: Weak<Inner>,
    waiter: Arc<str>,
}

impl Drop for Leave {
    fn drop(&mut self) {
        let Some(inner) = self.lock.upgrade() else {
            return;
        };
        if let Some(key) = inner.waiters.left(&self.waiter) {
            SqlLock { inner }.leave_in_background(key, self.waiter.to_string());
        }
    }
}

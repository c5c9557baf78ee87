//! The mutex's attempt on [`SqlLock`]: one statement that takes the row if it is free or
//! expired (or already ours), and reading the holder's remaining time when it is not. This
//! module owns the meaning of the attempt's answer on each dialect; the statements are
//! `sql.rs`'s, the retries `run.rs`'s.

use std::time::Duration;

use distlock_core::{FencingToken, Holder, Lease, LockName, OwnerToken, Result, TryAcquire};
use tokio::time::Instant;

use super::{lock_key, reusable, Checkout, Pool, SqlLock};
#[cfg(feature = "mysql")]
use crate::sql::MYSQL_HELD;
use crate::statement::{DialectPool, Values};

impl SqlLock {
    /// One attempt at the mutex (`try_acquire`); on PostgreSQL with `waiting` (the waiter's
    /// `waiter` column and its stay in µs), the attempt of a waiter, which queues it if the
    /// lock is held (see `waiters_sql.rs`). Other dialects ignore `waiting`.
    pub(crate) async fn acquire(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
        waiting: Option<(&str, i64)>,
    ) -> Result<TryAcquire> {
        self.storable(name)?;
        #[cfg(not(feature = "postgres"))]
        let _ = waiting;
        let units = self.ttl_units(ttl)?;
        let key = lock_key(name);
        let key = key.as_ref();
        let owner_str = owner.to_string();
        #[cfg(feature = "sqlite")]
        let clock = Some(clock_micros());
        #[cfg(not(feature = "sqlite"))]
        let clock = None;
        let values = Values {
            key: Some(key),
            name: Some(name.as_str()),
            owner: Some(&owner_str),
            ttl: Some(units),
            // Only SQLite's statements name it.
            clock,
            ..Values::default()
        };
        let statement = &self.inner.sql.acquire;
        let sent = Instant::now();
        let version: Option<i64> = match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => {
                let sql = statement.as_str();
                let done = self
                    .run(
                        pool,
                        "acquiring",
                        on_conn!(c => {
                            let args = pool.arguments(statement, &values)?;
                            sqlx::query_with(sql, args).execute(c.conn()?).await
                        }),
                    )
                    .await?;
                match done.last_insert_id() {
                    id if id >= MYSQL_HELD => {
                        let left = Duration::from_micros(id - MYSQL_HELD);
                        return Ok(TryAcquire::Held(Holder::expiring_in(left)));
                    }
                    // Not reported (won or held alike): the row says which.
                    0 => return self.unreported_outcome(pool, key, name, owner, ttl, sent).await,
                    id => i64::try_from(id).ok(),
                }
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                let (statement, values) = match waiting {
                    Some((waiter, stay)) => (
                        &self.inner.sql.acquire_waiting,
                        Values {
                            waiter: Some(waiter),
                            stay: Some(stay),
                            ..values
                        },
                    ),
                    None => (statement, values),
                };
                let sql = statement.as_str();
                let rows: Vec<(Option<i64>, Option<i64>)> = self
                    .run(
                        pool,
                        "acquiring",
                        on_conn!(c => {
                            let args = pool.arguments(statement, &values)?;
                            sqlx::query_as_with(sql, args).fetch_all(c.conn()?).await
                        }),
                    )
                    .await?;
                match rows.first() {
                    Some((Some(version), _)) => Some(*version),
                    // Held: the holder's remaining time as the statement's snapshot saw it (no
                    // row: created by an attempt the snapshot missed; retry soon).
                    other => {
                        let left = other.and_then(|(_, left)| self.remaining(*left));
                        return Ok(TryAcquire::Held(Holder::expiring_in(
                            left.unwrap_or(Duration::ZERO),
                        )));
                    }
                }
            }
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                let sql = statement.as_str();
                // fetch_all steps the statement to completion, so its write commits at once.
                let rows: Vec<i64> = self
                    .run(
                        pool,
                        "acquiring",
                        on_conn!(c => {
                            let args = pool.arguments(statement, &values)?;
                            sqlx::query_scalar_with(sql, args).fetch_all(c.conn()?).await
                        }),
                    )
                    .await?;
                rows.first().copied()
            }
        };
        match version.and_then(|v| u64::try_from(v).ok()) {
            Some(version) => Ok(TryAcquire::Acquired(
                Lease::new(name.clone(), owner, ttl, sent).with_fencing(FencingToken::new(version)),
            )),
            None => Ok(TryAcquire::Held(self.holder(key).await?)),
        }
    }

    /// How long the current holder of `key` has left (round trip 2 of a failed attempt), as
    /// the waiter's wake-up hint. A row found free or expired meanwhile says "retry now".
    pub(super) async fn holder(&self, key: &str) -> Result<Holder> {
        let statement = &self.inner.sql.remaining;
        let sql = statement.as_str();
        let values = Values {
            key: Some(key),
            ..Values::default()
        };
        let left: Option<Option<i64>> = each_pool!(self, pool => {
            self.run(
                pool,
                "reading the holder's expiry",
                on_conn!(c => {
                    let args = pool.arguments(statement, &values)?;
                    sqlx::query_scalar_with(sql, args).fetch_optional(c.conn()?).await
                }),
            )
            .await?
        });
        Ok(Holder::expiring_in(
            self.remaining(left.flatten()).unwrap_or(Duration::ZERO),
        ))
    }
}

/// This machine's clock in microseconds since the Unix epoch (0 before it), the fine part of
/// a SQLite fencing token: see `sql.rs`.
#[cfg(feature = "sqlite")]
pub(super) fn clock_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

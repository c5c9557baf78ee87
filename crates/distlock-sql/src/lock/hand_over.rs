//! The mutex's hand-over on [`SqlLock`]: one `UPDATE` that releases the row and takes it for
//! the next owner, with a new fencing token. This module owns the meaning of its answer on
//! each dialect; the statement is `sql.rs`'s, the retries `run.rs`'s.

use std::time::Duration;

use distlock_core::{DistributedLock, Error, FencingToken, Lease, OwnerToken, Result};
use tokio::time::Instant;

#[cfg(feature = "sqlite")]
use super::clock_micros;
use super::{lock_key, reusable, Checkout, Pool, SqlLock};
use crate::statement::{DialectPool, Values};

impl SqlLock {
    /// Hands the mutex `lease` holds to `next` for `ttl`, where the owner is still ours (as
    /// a release judges it). **1 round trip.** `Ok(None)` if it was not ours; an error if a
    /// broken attempt may have handed it over, or if the new token went unreported.
    pub(super) async fn hand_over_mutex(
        &self,
        lease: &Lease,
        next: OwnerToken,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        let units = self.ttl_units(ttl)?;
        let key = lock_key(lease.name());
        let key = key.as_ref();
        let owner = lease.owner().to_string();
        let next_str = next.to_string();
        let values = hand_over_values(key, &owner, &next_str, units);
        let statement = &self.inner.sql.hand_over;
        let sql = statement.as_str();
        let sent = Instant::now();
        let (version, broken): (Option<i64>, _) = match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => self
                .run_tracked(
                    pool,
                    "handing over",
                    on_conn!(c => {
                        let args = pool.arguments(statement, &values)?;
                        sqlx::query_with(sql, args).execute(c.conn()?).await
                    }),
                )
                .await
                .map(|(done, broken)| {
                    // A handed-over row always reports its new version (above zero); zero
                    // would mean the server did not report it, and the token is unknown.
                    let version =
                        (done.rows_affected() > 0).then(|| i64::try_from(done.last_insert_id()).unwrap_or(0));
                    (version, broken)
                })?,
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => self
                .run_tracked(
                    pool,
                    "handing over",
                    on_conn!(c => {
                        let args = pool.arguments(statement, &values)?;
                        sqlx::query_scalar_with(sql, args).fetch_all(c.conn()?).await
                    }),
                )
                .await
                .map(|(rows, broken)| (rows.first().copied(), broken))?,
            // The caller's clock is read anew for every attempt (see `sql.rs`).
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => self
                .run_tracked(
                    pool,
                    "handing over",
                    on_conn!(c => {
                        let values = Values {
                            clock: Some(clock_micros()),
                            ..values
                        };
                        let args = pool.arguments(statement, &values)?;
                        sqlx::query_scalar_with(sql, args).fetch_all(c.conn()?).await
                    }),
                )
                .await
                .map(|(rows, broken)| (rows.first().copied(), broken))?,
        };
        match (version.map(|v| u64::try_from(v).unwrap_or(0)), broken) {
            (Some(0), _) => Err(Error::backend(
                self.backend(),
                "handing over: the database did not report the new fencing token",
            )),
            (Some(version), _) => Ok(Some(
                Lease::new(lease.name().clone(), next, ttl, sent).with_fencing(FencingToken::new(version)),
            )),
            // An attempt broke mid-statement and the retry found the lock not ours: the broken
            // attempt may have handed it over. Unknown, so an error.
            (None, Some(error)) => Err(error),
            (None, None) => Ok(None),
        }
    }
}

/// The hand-over's values: the row's key, the owner it must still have, the next owner and
/// its TTL in the dialect's unit. SQLite's statement also names the caller's clock, set per
/// attempt.
pub(super) fn hand_over_values<'a>(key: &'a str, owner: &'a str, next: &'a str, ttl: i64) -> Values<'a> {
    Values {
        key: Some(key),
        owner: Some(owner),
        next: Some(next),
        ttl: Some(ttl),
        ..Values::default()
    }
}

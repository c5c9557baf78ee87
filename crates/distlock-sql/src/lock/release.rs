//! The mutex's release on [`SqlLock`]: clear the row's owner and expiry where the owner is
//! still ours, and what an answer after a broken connection means. This module owns the
//! meaning of the release's answer on each dialect; the statement is `sql.rs`'s (on
//! PostgreSQL `waiters_sql.rs`'s, which also wakes the first queued waiter), the retries
//! `run.rs`'s.

use distlock_core::{Error, Lease, Result};

use super::{lock_key, reusable, Checkout, Pool, SqlLock};
use crate::statement::{DialectPool, Statement, Values};

impl SqlLock {
    /// Releases the mutex `lease` holds, by name and owner only. **1 round trip.** `Ok(false)`
    /// if it was not ours (or expired); an error if a broken attempt may have released it.
    pub(super) async fn release_mutex(&self, lease: &Lease) -> Result<bool> {
        let key = lock_key(lease.name());
        let key = key.as_ref();
        let owner = lease.owner().to_string();
        let values = release_values(key, &owner);
        let statement = &self.inner.sql.release;
        let (affected, broken) = self.run_release(statement, &values).await?;
        match broken {
            // An attempt broke mid-statement and the retry found nothing to release: the broken
            // attempt may have released it, or it was not ours. Unknown, so an error.
            Some(error) if affected == 0 => Err(error),
            _ => {
                #[cfg(feature = "sqlite")]
                if affected > 0 {
                    if let Some(host) = &self.inner.host {
                        host.released(key);
                    }
                }
                Ok(affected > 0)
            }
        }
    }

    /// Runs a release statement (the mutex's or a hold's) with `values`: how many rows it
    /// released, and the error of an attempt that broke mid-statement before the retry that
    /// answered (see `run_tracked`). MySQL and SQLite count the rows the statement affected;
    /// PostgreSQL's release statements answer with that count (their `NOTIFY` is in them).
    pub(super) async fn run_release(
        &self,
        statement: &Statement,
        values: &Values<'_>,
    ) -> Result<(u64, Option<Error>)> {
        let sql = statement.as_str();
        Ok(match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => self
                .run_tracked(
                    pool,
                    "releasing",
                    on_conn!(c => {
                        let args = pool.arguments(statement, values)?;
                        sqlx::query_with(sql, args).execute(c.conn()?).await
                    }),
                )
                .await
                .map(|(done, broken)| (done.rows_affected(), broken))?,
            // PostgreSQL's release statements answer with the count of rows they released.
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => self
                .run_tracked(
                    pool,
                    "releasing",
                    on_conn!(c => {
                        let args = pool.arguments(statement, values)?;
                        sqlx::query_scalar_with::<_, i64, _>(sql, args).fetch_one(c.conn()?).await
                    }),
                )
                .await
                .map(|(count, broken)| (u64::try_from(count).unwrap_or(0), broken))?,
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => self
                .run_tracked(
                    pool,
                    "releasing",
                    on_conn!(c => {
                        let args = pool.arguments(statement, values)?;
                        sqlx::query_with(sql, args).execute(c.conn()?).await
                    }),
                )
                .await
                .map(|(done, broken)| (done.rows_affected(), broken))?,
        })
    }
}

/// The release's values: the row's key and the owner it must still have.
pub(super) fn release_values<'a>(key: &'a str, owner: &'a str) -> Values<'a> {
    Values {
        key: Some(key),
        owner: Some(owner),
        ..Values::default()
    }
}

//! MySQL: an acquire whose OK packet reports no `last_insert_id` (0). MySQL and MariaDB always
//! report the `LAST_INSERT_ID(expr)` of the statement, but some MySQL-compatible services and
//! proxies do not pass it on; the outcome is then read from the row, by its owner, instead of
//! being taken for a hold (which, when the attempt had won, would leave the lock held until
//! its TTL by an owner that does not know it holds it).

use std::time::Duration;

use distlock_core::{FencingToken, Holder, Lease, LockName, OwnerToken, Result, TryAcquire};
use tokio::time::Instant;

use super::{reusable, SqlLock};
use crate::checkout::Checkout;
use crate::mysql_pool::MySqlConnections;
use crate::statement::{DialectPool, Values};

impl SqlLock {
    /// The outcome of an acquire of `key` by `owner` whose version went unreported: won if the
    /// row's owner is `owner` with a live lease (its version is the token), else held.
    /// **1 round trip** (the `inspect` read).
    #[allow(clippy::too_many_arguments)] // the acquire's own values, passed through
    pub(super) async fn unreported_outcome(
        &self,
        pool: &MySqlConnections,
        key: &str,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
        sent: Instant,
    ) -> Result<TryAcquire> {
        let statement = &self.inner.sql.inspect;
        let sql = statement.as_str();
        let values = Values {
            key: Some(key),
            ..Values::default()
        };
        let row: Option<(Option<String>, i64, Option<i64>)> = self
            .run(
                pool,
                "reading an acquire's outcome",
                on_conn!(c => {
                    let args = pool.arguments(statement, &values)?;
                    sqlx::query_as_with(sql, args).fetch_optional(c.conn()?).await
                }),
            )
            .await?;
        let owner_str = owner.to_string();
        match row {
            Some((Some(holder), version, Some(left))) if holder == owner_str && left > 0 && version > 0 => {
                let token = FencingToken::new(u64::try_from(version).unwrap_or(0));
                Ok(TryAcquire::Acquired(
                    Lease::new(name.clone(), owner, ttl, sent).with_fencing(token),
                ))
            }
            Some((Some(_), _, Some(left))) => Ok(TryAcquire::Held(Holder::expiring_in(
                Duration::from_micros(u64::try_from(left).unwrap_or(0)),
            ))),
            // Free or expired meanwhile: not ours; the caller tries again.
            _ => Ok(TryAcquire::Held(Holder::expiring_in(Duration::ZERO))),
        }
    }
}

//! Renewing leases on [`SqlLock`]: which path a batch takes (PostgreSQL's one statement for
//! all, `renew_many.rs`; MySQL's and SQLite's one statement per 500 leases of one table and
//! TTL, `renew_batch.rs`) and a lease's single extend. This
//! module owns the meaning of the extend's answer; the statement is `sql.rs`'s, a hold's
//! extend `holds.rs`'s.

use distlock_core::{Lease, LockKind, Result};
use tokio::time::Instant;

use super::{lock_key, reusable, Checkout, Pool, SqlLock};
use crate::statement::{DialectPool, Values};

impl SqlLock {
    /// Renews every lease by its own TTL: PostgreSQL in one statement, elsewhere in one
    /// statement per 500 leases of one table and TTL (a lease alone of its table and TTL by
    /// [`extend_lease`](Self::extend_lease)).
    #[allow(irrefutable_let_patterns)] // with only the `postgres` feature
    pub(super) async fn renew_leases(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        #[cfg(feature = "postgres")]
        if let Pool::Postgres(pool) = &self.inner.pool {
            return self.extend_many_pg(pool, leases).await;
        }
        self.extend_many_batched(leases).await
    }

    /// Moves the lease's expiry to the database's now + its TTL where the owner is still ours
    /// and the hold has not expired. **1 round trip.** `Ok(None)` if it was not ours (or
    /// expired).
    pub(super) async fn extend_lease(&self, lease: &Lease) -> Result<Option<Lease>> {
        let ttl = lease.ttl();
        if lease.kind() != LockKind::Exclusive {
            return self.extend_hold(lease, ttl).await;
        }
        let units = self.ttl_units(ttl)?;
        let key = lock_key(lease.name());
        let owner = lease.owner().to_string();
        let values = extend_values(&key, &owner, units);
        let statement = &self.inner.sql.extend;
        let sql = statement.as_str();
        let sent = Instant::now();
        let affected = each_pool!(self, pool => {
            self.run(
                pool,
                "extending",
                on_conn!(c => {
                    let args = pool.arguments(statement, &values)?;
                    sqlx::query_with(sql, args).execute(c.conn()?).await
                }),
            )
            .await?
            .rows_affected()
        });
        Ok((affected > 0).then(|| lease.renewed(ttl, sent)))
    }
}

/// The extend's values: the row's key, the owner it must still have, and the new TTL in the
/// dialect's unit.
pub(super) fn extend_values<'a>(key: &'a str, owner: &'a str, ttl: i64) -> Values<'a> {
    Values {
        key: Some(key),
        owner: Some(owner),
        ttl: Some(ttl),
        ..Values::default()
    }
}

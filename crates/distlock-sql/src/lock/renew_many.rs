//! PostgreSQL's `extend_many`: every lease renewed by one statement (one `UPDATE ... FROM
//! unnest(...)` per table). This module owns the batching and the meaning of its answer; the
//! statement is `sql.rs`'s, bound by name like every other (its arrays through
//! `statement::BindArrays`).

use std::collections::{HashMap, HashSet};

use distlock_core::{Lease, Result};
use tokio::time::Instant;

use super::{lock_key, reusable, SqlLock};
use crate::checkout::Checkout;
use crate::holds_sql::kind_column;
use crate::pg_pool::PgConnections;
use crate::statement::{DialectPool, Values};

/// The bound columns of one batch: the mutex leases', then the holds'.
#[derive(Debug, Default)]
pub(super) struct Batch {
    mutex_index: Vec<i32>,
    mutex_key: Vec<String>,
    mutex_owner: Vec<String>,
    mutex_ttl: Vec<i64>,
    hold_index: Vec<i32>,
    hold_primitive: Vec<String>,
    hold_key: Vec<String>,
    hold_owner: Vec<String>,
    hold_kind: Vec<String>,
    hold_ttl: Vec<i64>,
}

impl Batch {
    /// The statement's values: each column by its name.
    pub(super) fn values(&self) -> Values<'_> {
        Values {
            indexes: Some(&self.mutex_index),
            keys: Some(&self.mutex_key),
            owners: Some(&self.mutex_owner),
            ttls: Some(&self.mutex_ttl),
            hold_indexes: Some(&self.hold_index),
            primitives: Some(&self.hold_primitive),
            hold_keys: Some(&self.hold_key),
            holders: Some(&self.hold_owner),
            kinds: Some(&self.hold_kind),
            hold_ttls: Some(&self.hold_ttl),
            ..Values::default()
        }
    }
}

impl SqlLock {
    /// Renews `leases` (each by its own TTL) in one round trip. A lease listed twice is sent
    /// once and both get its answer; a lease with a TTL out of range gets its error and the
    /// others are still renewed.
    pub(super) async fn extend_many_pg(
        &self,
        pool: &PgConnections,
        leases: &[Lease],
    ) -> Vec<Result<Option<Lease>>> {
        // For each lease, the index of the first lease with the same identity (sent for both),
        // or the error of its TTL.
        let mut first_of: Vec<Result<usize>> = Vec::with_capacity(leases.len());
        let mut seen = HashMap::new();
        let mut batch = Batch::default();
        for (i, lease) in leases.iter().enumerate() {
            let units = match self.ttl_units(lease.ttl()) {
                Ok(units) => units,
                Err(e) => {
                    first_of.push(Err(e));
                    continue;
                }
            };
            let key = lock_key(lease.name()).into_owned();
            let owner = lease.owner().to_string();
            let kind = kind_column(lease.kind());
            let identity = (lease.kind().primitive(), kind, key.clone(), owner.clone());
            let first = *seen.entry(identity).or_insert(i);
            first_of.push(Ok(first));
            if first != i {
                continue;
            }
            let index = i32::try_from(i).unwrap_or(i32::MAX);
            match kind {
                None => {
                    batch.mutex_index.push(index);
                    batch.mutex_key.push(key);
                    batch.mutex_owner.push(owner);
                    batch.mutex_ttl.push(units);
                }
                Some(kind) => {
                    batch.hold_index.push(index);
                    batch
                        .hold_primitive
                        .push(lease.kind().primitive().as_str().to_owned());
                    batch.hold_key.push(key);
                    batch.hold_owner.push(owner);
                    batch.hold_kind.push(kind.to_owned());
                    batch.hold_ttl.push(units);
                }
            }
        }
        let sent = Instant::now();
        let renewed: Result<HashSet<usize>> = if batch.mutex_index.is_empty() && batch.hold_index.is_empty() {
            Ok(HashSet::new())
        } else {
            let statement = &self.inner.sql.extend_many;
            let sql = statement.as_str();
            let values = batch.values();
            self.run(
                pool,
                "extending",
                on_conn!(c => {
                    let args = pool.arguments(statement, &values)?;
                    sqlx::query_scalar_with::<_, i32, _>(sql, args).fetch_all(c.conn()?).await
                }),
            )
            .await
            .map(|indexes| {
                indexes
                    .into_iter()
                    .filter_map(|i| usize::try_from(i).ok())
                    .collect()
            })
        };
        leases
            .iter()
            .zip(first_of)
            .map(|(lease, first)| {
                let first = first?;
                match &renewed {
                    Ok(renewed) => Ok(renewed.contains(&first).then(|| lease.renewed(lease.ttl(), sent))),
                    Err(e) => Err(e.duplicate()),
                }
            })
            .collect()
    }
}

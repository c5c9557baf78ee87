//! MySQL's and SQLite's batched renewal: the mutex leases of a batch renewed by one statement
//! per [`PER_STATEMENT`] (500) leases of one TTL, instead of one statement each (PostgreSQL's is
//! `renew_many.rs`). This module owns the grouping and the meaning of the answer; semaphore
//! permits and read-write holds are still renewed one by one (`holds.rs`).
//!
//! The statement moves `expires_at` to the database's now + TTL on every row whose key and
//! owner are a lease's and that has not expired, exactly as the single extend does for one.
//! Which rows it renewed: SQLite's `RETURNING`; on MySQL, a `SELECT` in the same text query
//! (one round trip) of the rows that are ours and unexpired just after the `UPDATE`: only we
//! write a row whose owner is our token, so an unexpired one was unexpired when the `UPDATE`
//! ran, and renewed by it.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use distlock_core::{renew_each, DistributedLock, Error, Lease, LockKind, Result};
use futures::future::join_all;
use tokio::time::Instant;

use super::{lock_key, reusable, Checkout, Pool, SqlLock};

/// Mutex leases per statement: bounds a statement's text (about 150 bytes a lease) far below
/// MySQL's `max_allowed_packet` and SQLite's statement length, and keeps its `IN` lists under
/// MariaDB's `in_predicate_conversion_threshold` (1,000), past which MariaDB plans them as a
/// join with a table of the values instead of lookups by primary key (with statements of
/// 1,000 leases, one run of the benchmark lost all of 40,000 locks held on MariaDB 10.11:
/// its renewal batches came late).
pub(crate) const PER_STATEMENT: usize = 500;

/// The `(key, owner)` pairs a statement found renewed, and when it was sent.
type Renewed = (Result<HashSet<(String, String)>>, Instant);

impl SqlLock {
    /// Renews every lease by its own TTL: the mutex leases **1 round trip per 500 leases of
    /// one TTL** (sent at once, over the pool's connections); the other holds, and a mutex
    /// lease alone of its TTL, each by its own extend (up to 32 at once). A lease listed twice
    /// gets the same answer.
    pub(super) async fn extend_many_batched(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        let mut results: Vec<Option<Result<Option<Lease>>>> = leases.iter().map(|_| None).collect();
        let mut by_ttl: HashMap<i64, Vec<usize>> = HashMap::new();
        // Renewed one by one: holds, and a lease alone of its TTL (a manual extend's batch of
        // one), whose prepared single extend costs the server less than a batch's text query.
        let mut alone = Vec::new();
        for (i, lease) in leases.iter().enumerate() {
            if lease.kind() != LockKind::Exclusive {
                alone.push(i);
                continue;
            }
            match self.ttl_units(lease.ttl()) {
                Ok(units) => by_ttl.entry(units).or_default().push(i),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        by_ttl.retain(|_, indices| match indices.as_slice() {
            [i] => {
                alone.push(*i);
                false
            }
            _ => true,
        });
        let chunks: Vec<(i64, &[usize])> = by_ttl
            .iter()
            .flat_map(|(units, indices)| indices.chunks(PER_STATEMENT).map(move |c| (*units, c)))
            .collect();
        let alone_leases: Vec<Lease> = alone.iter().map(|&i| leases[i].clone()).collect();
        let (renewed, one_by_one) = futures::join!(
            join_all(
                chunks
                    .iter()
                    .map(|(units, chunk)| self.extend_chunk(leases, *units, chunk))
            ),
            renew_each(
                &alone_leases,
                |lease| async move { self.extend_lease(&lease).await }
            ),
        );
        for ((_, chunk), (found, sent)) in chunks.iter().zip(renewed) {
            for &i in *chunk {
                let lease = &leases[i];
                results[i] = Some(match &found {
                    Ok(found) => {
                        let pair = (lock_key(lease.name()).into_owned(), lease.owner().to_string());
                        Ok(found.contains(&pair).then(|| lease.renewed(lease.ttl(), sent)))
                    }
                    Err(e) => Err(e.duplicate()),
                });
            }
        }
        for (i, outcome) in alone.into_iter().zip(one_by_one) {
            results[i] = Some(outcome);
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::backend(self.backend(), "a renewal got no result"))))
            .collect()
    }

    /// One statement renewing the mutex leases `chunk` of `leases`, all of TTL `units`.
    async fn extend_chunk(&self, leases: &[Lease], units: i64, chunk: &[usize]) -> Renewed {
        let pairs: Vec<(String, String)> = chunk
            .iter()
            .map(|&i| {
                (
                    lock_key(leases[i].name()).into_owned(),
                    leases[i].owner().to_string(),
                )
            })
            .collect();
        let table = &self.inner.config.table;
        let sent = Instant::now();
        let found = match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => {
                let query = mysql_extend_many(table, units, &pairs);
                let query = query.as_str();
                self.run(
                    pool,
                    "extending",
                    in_transaction!(c => {
                        use sqlx::{Executor, FromRow};
                        // A bare string runs as a text query: both statements, one round trip.
                        let rows = c.conn()?.fetch_all(query).await?;
                        rows.iter().map(<(String, String)>::from_row).collect::<Result<HashSet<_>, _>>()
                    }),
                )
                .await
            }
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                let query = sqlite_extend_many(table, units, &pairs);
                let query = query.as_str();
                self.run(
                    pool,
                    "extending",
                    on_conn!(c => {
                        // Not kept in the statement cache: each batch's text is its own.
                        sqlx::query_as::<_, (String, String)>(query)
                            .persistent(false)
                            .fetch_all(c.conn()?)
                            .await
                            .map(|rows| rows.into_iter().collect::<HashSet<_>>())
                    }),
                )
                .await
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(_) => Err(Error::backend(
                self.backend(),
                "PostgreSQL renews its leases by extend_many",
            )),
        };
        (found, sent)
    }
}

/// MySQL: the `UPDATE` of the leases' rows, then the `SELECT` of those ours and unexpired, as
/// one text query (values as hex literals that no `sql_mode` can misread).
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
fn mysql_extend_many(table: &str, units: i64, pairs: &[(String, String)]) -> String {
    let mut keys = String::with_capacity(pairs.len() * 80);
    let mut rows = String::with_capacity(pairs.len() * 160);
    for (n, (key, owner)) in pairs.iter().enumerate() {
        let sep = if n == 0 { "" } else { ", " };
        let key = ascii_literal(key);
        let _ = write!(keys, "{sep}{key}");
        let _ = write!(rows, "{sep}({key}, {})", ascii_literal(owner));
    }
    let ours =
        format!("lock_key IN ({keys}) AND (lock_key, owner) IN ({rows}) AND expires_at > UTC_TIMESTAMP(6)");
    format!(
        "UPDATE `{table}` SET expires_at = UTC_TIMESTAMP(6) + INTERVAL {units} MICROSECOND WHERE {ours};\n\
         SELECT CAST(lock_key AS CHAR CHARACTER SET utf8mb4), CAST(owner AS CHAR CHARACTER SET utf8mb4) \
         FROM `{table}` WHERE {ours}"
    )
}

/// SQLite: one `UPDATE ... RETURNING` of the rows it renewed.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
fn sqlite_extend_many(table: &str, units: i64, pairs: &[(String, String)]) -> String {
    let now = crate::sql::SQLITE_NOW_MS;
    let mut keys = String::with_capacity(pairs.len() * 40);
    let mut rows = String::with_capacity(pairs.len() * 80);
    for (n, (key, owner)) in pairs.iter().enumerate() {
        let sep = if n == 0 { "" } else { ", " };
        let key = sqlite_literal(key);
        let _ = write!(keys, "{sep}{key}");
        let _ = write!(rows, "{sep}({key}, {})", sqlite_literal(owner));
    }
    format!(
        "UPDATE \"{table}\" SET expires_at = {now} + {units} \
         WHERE lock_key IN ({keys}) AND (lock_key, owner) IN (VALUES {rows}) AND expires_at > {now} \
         RETURNING lock_key, owner"
    )
}

/// An ASCII string as a MySQL literal.
fn ascii_literal(s: &str) -> String {
    let mut out = String::with_capacity(10 + 2 * s.len());
    out.push_str("_ascii X'");
    for b in s.bytes() {
        let _ = write!(out, "{b:02x}");
    }
    out.push('\'');
    out
}

/// A string as a SQLite literal (SQLite reads no escapes in a literal but the doubled quote).
fn sqlite_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_literals_that_cannot_end_early() {
        let pairs = [("a'b".to_owned(), "o".to_owned())];
        let sqlite = sqlite_extend_many("t", 5, &pairs);
        assert!(sqlite.contains("('a''b', 'o')"), "{sqlite}");
        let mysql = mysql_extend_many("t", 5, &pairs);
        assert!(mysql.contains("(_ascii X'612762', _ascii X'6f')"), "{mysql}");
    }
}

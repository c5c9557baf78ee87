//! MySQL's and SQLite's batched renewal: the leases of a batch renewed by one statement per
//! [`PER_STATEMENT`] (500) leases of one table and one TTL, instead of one statement each
//! (PostgreSQL's is `renew_many.rs`): mutex leases in the mutex table, semaphore permits and
//! read-write holds in the holds table. This module owns the grouping and the meaning of the
//! answer.
//!
//! The statement moves `expires_at` to the database's now + TTL on every row that is a lease's
//! (the mutex's key and owner; a hold's primitive, key, holder and kind) and that has not
//! expired, exactly as the single extend does for one. Which rows it renewed: SQLite's
//! `RETURNING`; on MySQL, a `SELECT` in the same text query (one round trip) of the rows that
//! are ours and unexpired just after the `UPDATE`: only we write a row whose owner (holder) is
//! our token, so an unexpired one was unexpired when the `UPDATE` ran, and renewed by it.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use distlock_core::{renew_each, DistributedLock, Error, Lease, Result};
use futures::future::join_all;
use tokio::time::Instant;

use super::{lock_key, reusable, Checkout, Pool, SqlLock};
use crate::holds_sql::kind_column;

/// Mutex leases per statement: bounds a statement's text (about 150 bytes a lease) far below
/// MySQL's `max_allowed_packet` and SQLite's statement length, and keeps its `IN` lists under
/// MariaDB's `in_predicate_conversion_threshold` (1,000), past which MariaDB plans them as a
/// join with a table of the values instead of lookups by primary key (with statements of
/// 1,000 leases, one run of the benchmark lost all of 40,000 locks held on MariaDB 10.11:
/// its renewal batches came late).
pub(crate) const PER_STATEMENT: usize = 500;

/// A row as a batch names it: `(primitive, key, owner, kind)`; a mutex row's primitive and
/// kind are empty (its table holds mutexes only).
type Row = (String, String, String, String);

/// The rows a statement found renewed, and when it was sent.
type Renewed = (Result<HashSet<Row>>, Instant);

/// Which table a lease's row is in.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Table {
    /// The mutex table: mutex leases.
    Mutex,
    /// The holds table: semaphore permits and read-write holds.
    Holds,
}

/// The row of `lease`, in the table it is in.
fn row_of(lease: &Lease) -> (Table, Row) {
    let key = lock_key(lease.name()).into_owned();
    let owner = lease.owner().to_string();
    match kind_column(lease.kind()) {
        None => (Table::Mutex, (String::new(), key, owner, String::new())),
        Some(kind) => (
            Table::Holds,
            (
                lease.kind().primitive().as_str().to_owned(),
                key,
                owner,
                kind.to_owned(),
            ),
        ),
    }
}

impl SqlLock {
    /// Renews every lease by its own TTL: **1 round trip per 500 leases of one table and one
    /// TTL** (sent at once, over the pool's connections); a lease alone of its table and TTL
    /// by its own extend (up to 32 at once). A lease listed twice gets the same answer.
    pub(super) async fn extend_many_batched(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        let mut results: Vec<Option<Result<Option<Lease>>>> = leases.iter().map(|_| None).collect();
        let mut rows = Vec::with_capacity(leases.len());
        let mut by_ttl: HashMap<(Table, i64), Vec<usize>> = HashMap::new();
        // Renewed one by one: a lease alone of its table and TTL (a manual extend's batch of
        // one), whose prepared single extend costs the server less than a batch's text query.
        let mut alone = Vec::new();
        for (i, lease) in leases.iter().enumerate() {
            let (table, row) = row_of(lease);
            rows.push(row);
            match self.ttl_units(lease.ttl()) {
                Ok(units) => by_ttl.entry((table, units)).or_default().push(i),
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
        let chunks: Vec<((Table, i64), &[usize])> = by_ttl
            .iter()
            .flat_map(|(group, indices)| indices.chunks(PER_STATEMENT).map(move |c| (*group, c)))
            .collect();
        let alone_leases: Vec<Lease> = alone.iter().map(|&i| leases[i].clone()).collect();
        let (renewed, one_by_one) = futures::join!(
            join_all(
                chunks
                    .iter()
                    .map(|((table, units), chunk)| self.extend_chunk(&rows, *table, *units, chunk))
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
                    Ok(found) => Ok(found.contains(&rows[i]).then(|| lease.renewed(lease.ttl(), sent))),
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

    /// One statement renewing the rows `chunk` of `rows`, all in `table` and of TTL `units`.
    async fn extend_chunk(&self, rows: &[Row], table: Table, units: i64, chunk: &[usize]) -> Renewed {
        let rows: Vec<&Row> = chunk.iter().map(|&i| &rows[i]).collect();
        let name = match table {
            Table::Mutex => &self.inner.config.table,
            Table::Holds => &self.inner.sql.holds.table,
        };
        let sent = Instant::now();
        let found = match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => {
                let query = mysql_extend_many(name, table, units, &rows);
                let query = query.as_str();
                self.run(
                    pool,
                    "extending",
                    in_transaction!(c => {
                        use sqlx::{Executor, Row as _};
                        // A bare string runs as a text query: both statements, one round trip.
                        let found = c.conn()?.fetch_all(query).await?;
                        found.iter().map(|r| found_row(table, |i| r.try_get::<String, _>(i))).collect::<Result<HashSet<_>, _>>()
                    }),
                )
                .await
            }
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                let query = sqlite_extend_many(name, table, units, &rows);
                let query = query.as_str();
                self.run(
                    pool,
                    "extending",
                    on_conn!(c => {
                        use sqlx::Row as _;
                        // Not kept in the statement cache: each batch's text is its own.
                        let found = sqlx::query(query).persistent(false).fetch_all(c.conn()?).await?;
                        found.iter().map(|r| found_row(table, |i| r.try_get::<String, _>(i))).collect::<Result<HashSet<_>, _>>()
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

/// A renewed row as a statement returned it (its columns as [`row_of`] names them: a mutex
/// row's key and owner; a hold's primitive, key, holder and kind), by column index.
#[cfg_attr(not(any(feature = "mysql", feature = "sqlite")), allow(dead_code))]
fn found_row<E>(table: Table, column: impl Fn(usize) -> Result<String, E>) -> Result<Row, E> {
    Ok(match table {
        Table::Mutex => (String::new(), column(0)?, column(1)?, String::new()),
        Table::Holds => (column(0)?, column(1)?, column(2)?, column(3)?),
    })
}

/// The columns that name a row of `table` (as [`row_of`] does), and the condition on the
/// rows `rows` (each `(primitive, key, owner, kind)` already a literal) that are live: a
/// range of the primary key (the holds table's begins with the primitive), then the exact
/// rows. `values` is SQLite's `VALUES ` before a list of rows (MySQL takes the bare list).
#[cfg_attr(not(any(feature = "mysql", feature = "sqlite")), allow(dead_code))]
fn ours(
    table: Table,
    rows: &[(String, String, String, String)],
    now: &str,
    values: &str,
) -> (&'static str, String) {
    let mut keys = String::with_capacity(rows.len() * 80);
    let mut tuples = String::with_capacity(rows.len() * 200);
    let mut primitives: Vec<&str> = Vec::new();
    for (n, (primitive, key, owner, kind)) in rows.iter().enumerate() {
        let sep = if n == 0 { "" } else { ", " };
        let _ = write!(keys, "{sep}{key}");
        let _ = match table {
            Table::Mutex => write!(tuples, "{sep}({key}, {owner})"),
            Table::Holds => write!(tuples, "{sep}({primitive}, {key}, {owner}, {kind})"),
        };
        if !primitives.contains(&primitive.as_str()) {
            primitives.push(primitive);
        }
    }
    let (columns, primitive) = match table {
        Table::Mutex => ("lock_key, owner", String::new()),
        Table::Holds => (
            "primitive, lock_key, holder, kind",
            format!("primitive IN ({}) AND ", primitives.join(", ")),
        ),
    };
    let condition = format!(
        "{primitive}lock_key IN ({keys}) AND ({columns}) IN ({values}{tuples}) AND expires_at > {now}"
    );
    (columns, condition)
}

/// `rows` with each value made a literal by `literal`.
#[cfg_attr(not(any(feature = "mysql", feature = "sqlite")), allow(dead_code))]
fn literals(rows: &[&Row], literal: fn(&str) -> String) -> Vec<(String, String, String, String)> {
    rows.iter()
        .map(|(primitive, key, owner, kind)| {
            (literal(primitive), literal(key), literal(owner), literal(kind))
        })
        .collect()
}

/// MySQL: the `UPDATE` of the leases' rows in the table `name` (of rows of `table`), then the
/// `SELECT` of those ours and unexpired, as one text query (values as hex literals that no
/// `sql_mode` can misread).
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
fn mysql_extend_many(name: &str, table: Table, units: i64, rows: &[&Row]) -> String {
    let now = "UTC_TIMESTAMP(6)";
    let (columns, ours) = ours(table, &literals(rows, ascii_literal), now, "");
    let selected = columns
        .split(", ")
        .map(|c| format!("CAST({c} AS CHAR CHARACTER SET utf8mb4)"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "UPDATE `{name}` SET expires_at = {now} + INTERVAL {units} MICROSECOND WHERE {ours};\n\
         SELECT {selected} FROM `{name}` WHERE {ours}"
    )
}

/// SQLite: one `UPDATE ... RETURNING` of the rows it renewed in the table `name` (of rows of
/// `table`).
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
fn sqlite_extend_many(name: &str, table: Table, units: i64, rows: &[&Row]) -> String {
    let now = crate::sql::SQLITE_NOW_MS;
    let (columns, ours) = ours(table, &literals(rows, sqlite_literal), now, "VALUES ");
    format!("UPDATE \"{name}\" SET expires_at = {now} + {units} WHERE {ours} RETURNING {columns}")
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
        let row = (String::new(), "a'b".to_owned(), "o".to_owned(), String::new());
        let sqlite = sqlite_extend_many("t", Table::Mutex, 5, &[&row]);
        assert!(sqlite.contains("('a''b', 'o')"), "{sqlite}");
        let mysql = mysql_extend_many("t", Table::Mutex, 5, &[&row]);
        assert!(mysql.contains("(_ascii X'612762', _ascii X'6f')"), "{mysql}");
    }

    #[test]
    fn a_hold_is_named_by_its_primitive_key_holder_and_kind() {
        let row = (
            "semaphore".to_owned(),
            "k".to_owned(),
            "o'".to_owned(),
            "permit".to_owned(),
        );
        let sqlite = sqlite_extend_many("t_holds", Table::Holds, 5, &[&row]);
        assert!(
            sqlite.contains(
                "(primitive, lock_key, holder, kind) IN (VALUES ('semaphore', 'k', 'o''', 'permit'))"
            ) && sqlite.ends_with("RETURNING primitive, lock_key, holder, kind"),
            "{sqlite}"
        );
        let mysql = mysql_extend_many("t_holds", Table::Holds, 5, &[&row]);
        assert!(
            mysql.contains("primitive IN (_ascii X'73656d6170686f7265') AND lock_key IN (_ascii X'6b')"),
            "{mysql}"
        );
    }
}

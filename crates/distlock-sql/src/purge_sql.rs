//! The SQL that purges idle rows: lock rows, objects of semaphores and read-write locks with
//! their expired holds, the weight rows of holds that are gone, (PostgreSQL) expired entries of the queue of waiters, and the notes of
//! holds that ended ([`stale_notes`]). This module
//! owns that SQL only; `lock/purge.rs` runs it.
//!
//! # What may go, and why a fencing token never goes back
//!
//! A lock row or a hold object's row carries the version its next holder's token is computed
//! from: `GREATEST(version + 1, <database clock in µs>)`. A row is purged only if the database
//! clock proves it idle for `idle` (at least a minute): its version, the clock when it was last
//! taken, is over `idle` old, and it is free, or its lease ended over `idle` ago. A row created
//! again later gets the clock of then as its version, which is above the purged version by at
//! least `idle`, far more than any statement runs (the servers cancel them at 3/4 of the
//! operation timeout). This holds as long as the database clock does not step back by `idle`
//! (as with every row-versioned fencing). A hold object goes only with no hold row left: its
//! holds that ended over `idle` ago are purged first. Each statement deletes at most
//! [`BATCH`] rows, so none holds locks for long.

use crate::holds_sql::{holds_table, weights_table};
use crate::notes_sql::notes_table;
use crate::sql::{Dialect, MYSQL_CLOCK_US, PG_CLOCK_US, SQLITE_NOW_MS};
use crate::waiters_sql::waiters_table;

/// The most rows one purge statement deletes.
pub(crate) const BATCH: u64 = 1000;

/// The purge statements for `table` and `idle` in µs, in the order to run them; each is run
/// again while it deletes a whole [`BATCH`].
pub(crate) fn statements(dialect: Dialect, table: &str, idle_us: i64) -> Vec<String> {
    let holds = holds_table(dialect, table);
    let mut all = idle_rows(dialect, table, &holds, idle_us);
    all.push(orphan_weights(dialect, &holds, &weights_table(dialect, table)));
    all
}

/// Deletes up to [`BATCH`] weight rows whose hold row is gone (released, expired and
/// deleted, purged): a weight row is read only joined to its hold, by the hold's token, so it
/// is never read again. Its key includes the token, so a hold taken later never shares it.
fn orphan_weights(dialect: Dialect, holds: &str, weights: &str) -> String {
    let (h, w) = match dialect {
        Dialect::MySql => (format!("`{holds}`"), format!("`{weights}`")),
        Dialect::Postgres | Dialect::Sqlite => (format!("\"{holds}\""), format!("\"{weights}\"")),
    };
    let gone = |r: &str| {
        format!(
            "NOT EXISTS (SELECT 1 FROM {h} AS x WHERE x.primitive = {r}.obj_primitive AND x.lock_key = {r}.obj_key \
             AND x.holder = {r}.owner AND x.version = {r}.token)"
        )
    };
    let key = "obj_primitive, obj_key, owner, token";
    match dialect {
        // A single-table DELETE with LIMIT, whose table has no alias (MariaDB takes none).
        Dialect::MySql => format!("DELETE FROM {w} WHERE {} LIMIT {BATCH}", gone(&w)),
        Dialect::Postgres | Dialect::Sqlite => format!(
            "DELETE FROM {w} WHERE ({key}) IN (SELECT {key} FROM {w} AS o WHERE {} LIMIT {BATCH})",
            gone("o")
        ),
    }
}

/// The idle rows' statements, see [`statements`].
fn idle_rows(dialect: Dialect, table: &str, holds: &str, idle_us: i64) -> Vec<String> {
    match dialect {
        Dialect::MySql => {
            let (t, h) = (format!("`{table}`"), format!("`{holds}`"));
            let ago = format!("UTC_TIMESTAMP(6) - INTERVAL {idle_us} MICROSECOND");
            let old = format!("version < {MYSQL_CLOCK_US} - {idle_us}");
            vec![
                format!(
                    "DELETE FROM {t} WHERE {old} AND (owner IS NULL OR expires_at IS NULL OR expires_at <= {ago}) \
                     LIMIT {BATCH}"
                ),
                format!("DELETE FROM {h} WHERE kind <> 'object' AND expires_at <= {ago} LIMIT {BATCH}"),
                // MySQL cannot read the table it deletes from in a subquery: a join instead.
                format!(
                    "DELETE o FROM {h} AS o LEFT JOIN {h} AS x ON x.primitive = o.primitive \
                     AND x.lock_key = o.lock_key AND x.kind <> 'object' \
                     WHERE o.kind = 'object' AND o.{old} AND x.lock_key IS NULL"
                ),
            ]
        }
        Dialect::Postgres => {
            let (t, h) = (format!("\"{table}\""), format!("\"{holds}\""));
            let w = format!("\"{}\"", waiters_table(table));
            let ago = format!("statement_timestamp() - {idle_us} * interval '1 microsecond'");
            let old = format!("version < {PG_CLOCK_US} - {idle_us}");
            let lock_idle = format!("{old} AND (owner IS NULL OR expires_at IS NULL OR expires_at <= {ago})");
            vec![
                format!(
                    "DELETE FROM {t} WHERE lock_key IN (SELECT lock_key FROM {t} WHERE {lock_idle} \
                     LIMIT {BATCH} FOR UPDATE SKIP LOCKED) AND {lock_idle}"
                ),
                format!(
                    "DELETE FROM {h} WHERE ctid IN (SELECT ctid FROM {h} WHERE kind <> 'object' \
                     AND expires_at <= {ago} LIMIT {BATCH} FOR UPDATE SKIP LOCKED)"
                ),
                format!(
                    "DELETE FROM {h} AS o WHERE ctid IN (SELECT ctid FROM {h} AS p WHERE p.kind = 'object' \
                     AND p.{old} AND NOT EXISTS (SELECT 1 FROM {h} AS x WHERE x.primitive = p.primitive \
                     AND x.lock_key = p.lock_key AND x.kind <> 'object') LIMIT {BATCH} FOR UPDATE SKIP LOCKED) \
                     AND NOT EXISTS (SELECT 1 FROM {h} AS x WHERE x.primitive = o.primitive \
                     AND x.lock_key = o.lock_key AND x.kind <> 'object')"
                ),
                format!(
                    "DELETE FROM {w} WHERE ctid IN (SELECT ctid FROM {w} WHERE expires_at <= statement_timestamp() \
                     LIMIT {BATCH} FOR UPDATE SKIP LOCKED)"
                ),
            ]
        }
        Dialect::Sqlite => {
            let (t, h) = (format!("\"{table}\""), format!("\"{holds}\""));
            let idle_ms = idle_us / 1000;
            let ago = format!("{SQLITE_NOW_MS} - {idle_ms}");
            let old = format!("version < {SQLITE_NOW_MS} * 1000 - {idle_us}");
            vec![
                format!(
                    "DELETE FROM {t} WHERE lock_key IN (SELECT lock_key FROM {t} WHERE {old} \
                     AND (owner IS NULL OR expires_at IS NULL OR expires_at <= {ago}) LIMIT {BATCH})"
                ),
                format!(
                    "DELETE FROM {h} WHERE (primitive, lock_key, holder) IN (SELECT primitive, lock_key, holder \
                     FROM {h} WHERE kind <> 'object' AND expires_at <= {ago} LIMIT {BATCH})"
                ),
                format!(
                    "DELETE FROM {h} WHERE (primitive, lock_key, holder) IN (SELECT primitive, lock_key, holder \
                     FROM {h} AS o WHERE kind = 'object' AND {old} AND NOT EXISTS (SELECT 1 FROM {h} AS x \
                     WHERE x.primitive = o.primitive AND x.lock_key = o.lock_key AND x.kind <> 'object') \
                     LIMIT {BATCH})"
                ),
            ]
        }
    }
}

/// Deletes up to [`BATCH`] notes whose hold is no longer live (released, expired, handed
/// over, or its row purged): such a note is never read again (`notes_sql.rs`). A note of a
/// live hold is never deleted. Run after [`statements`], where the notes table exists.
pub(crate) fn stale_notes(dialect: Dialect, table: &str) -> String {
    let notes = notes_table(dialect, table);
    let (t, n, now) = match dialect {
        Dialect::MySql => (format!("`{table}`"), format!("`{notes}`"), "UTC_TIMESTAMP(6)"),
        Dialect::Postgres => (
            format!("\"{table}\""),
            format!("\"{notes}\""),
            "statement_timestamp()",
        ),
        Dialect::Sqlite => (format!("\"{table}\""), format!("\"{notes}\""), SQLITE_NOW_MS),
    };
    // MySQL: a single-table DELETE with LIMIT, whose table has no alias (MariaDB takes none).
    let r = match dialect {
        Dialect::MySql => n.clone(),
        Dialect::Postgres | Dialect::Sqlite => "n".to_owned(),
    };
    // Kept: a note of a live hold, and one whose token the statement's snapshot of the lock
    // row has not reached (a hold taken and noted while the purge ran).
    let stale = format!(
        "NOT EXISTS (SELECT 1 FROM {t} AS l WHERE l.lock_key = {r}.lock_key AND (l.version < {r}.token \
         OR (l.version = {r}.token AND l.owner = {r}.holder AND l.expires_at > {now})))"
    );
    match dialect {
        Dialect::MySql => format!("DELETE FROM {n} WHERE {stale} LIMIT {BATCH}"),
        Dialect::Postgres | Dialect::Sqlite => format!(
            "DELETE FROM {n} WHERE lock_key IN (SELECT lock_key FROM {n} AS n WHERE {stale} LIMIT {BATCH})"
        ),
    }
}

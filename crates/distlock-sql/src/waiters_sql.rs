//! PostgreSQL's queue of waiters of a mutex: the table's layout, and the SQL text that queues,
//! wakes and withdraws waiters. This module owns that SQL only; it runs nothing (see
//! `lock.rs` and `pg_waiters.rs`).
//!
//! # Layout
//!
//! One table beside the mutex table, named after it (`<table>_waiters`), with one row per
//! waiter that found a lock held; primary key `(lock_key, waiter)`:
//!
//! | column       | type                    | meaning |
//! |--------------|-------------------------|---------|
//! | `lock_key`   | `VARCHAR(255) "C"`      | the lock's key, as in the mutex table |
//! | `waiter`     | `VARCHAR(64) "C"`       | the waiter's id ([`waiter_column`]) |
//! | `queued_at`  | `TIMESTAMPTZ`           | when it joined the queue: the first is woken first |
//! | `expires_at` | `TIMESTAMPTZ`           | the end of its stay, by the database's clock |
//!
//! # Who writes it, and why no wake is lost
//!
//! - A waiter's attempt (one statement, `acquire_waiting` in `sql.rs`) that finds the lock
//!   held queues the waiter (or renews its stay, keeping its place); one that wins takes the
//!   waiter out, with the key's entries whose stay ended.
//! - A release (one call of `<table>_release`) frees the lock, then takes the first live
//!   waiter out of the queue and wakes it alone: `pg_notify('<table>', 'wake:<waiter>')`.
//! - A waiter whose wait ends while it may be queued leaves (one call of `<table>_leave`);
//!   if the lock is free then, it may have been woken and gone without trying, so the next
//!   waiter is woken in its place.
//!
//! All three take the lock's row first (the upsert's `ON CONFLICT` locks it even when it
//! does not update it; the release's `UPDATE`; the leave's `FOR UPDATE`), so the writes of
//! one lock's queue take turns. The release and the leave read the queue in a statement of
//! their own inside a `VOLATILE` function, whose snapshot is taken after the row was taken:
//! a waiter queued by an attempt that held the row just before is seen. (One plain statement
//! could not: its snapshot is older than its wait for the row.) An attempt that waited for a
//! release's row lock reads the row as the release left it, free, and wins.

use crate::holds_sql::identifier;
use crate::sql::{Dialect, KEY_LEN, PG_NOW};
use crate::statement::Statement;

/// The longest `waiter` value: a SHA-256 in hex.
pub(crate) const WAITER_LEN: usize = 64;

/// The prefix of a notification's payload that wakes one waiter (its id follows).
pub(crate) const WAKE_PREFIX: &str = "wake:";

/// The queue's table for the mutex table `table`: `<table>_waiters`, shortened as the holds
/// table's name is.
pub(crate) fn waiters_table(table: &str) -> String {
    identifier(Dialect::Postgres, table, "_waiters")
}

/// The `waiter` value of the waiter `id`: the id itself when it is a short plain token (as the
/// backend's own ids are), else its SHA-256 in hex, so any id fits the column.
pub(crate) fn waiter_column(id: &str) -> std::borrow::Cow<'_, str> {
    let plain = !id.is_empty()
        && id.len() <= WAITER_LEN
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if plain {
        return id.into();
    }
    use sha2::{Digest, Sha256};
    Sha256::digest(id.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .into()
}

/// The queue's statements on PostgreSQL.
#[derive(Debug, Clone, Default)]
pub(crate) struct WaiterStatements {
    /// The table's name, unquoted.
    pub(crate) table: String,
    pub(crate) create_table: String,
    /// Creates (or replaces) `<table>_release`.
    pub(crate) create_release: String,
    /// Creates (or replaces) `<table>_leave`.
    pub(crate) create_leave: String,
    /// Releases the mutex and wakes its first waiter. Yields 1 if
    /// released, else 0.
    pub(crate) release: Statement,
    /// The waiter leaves the lock's queue. Yields whether it woke the next
    /// waiter (1 or 0).
    pub(crate) leave: Statement,
}

impl WaiterStatements {
    /// The statements for the mutex table `mutex_table`, whose table's channel carries the
    /// wakes.
    pub(crate) fn postgres(mutex_table: &str) -> Self {
        let table = waiters_table(mutex_table);
        let t = format!("\"{mutex_table}\"");
        let w = format!("\"{table}\"");
        let release_fn = identifier(Dialect::Postgres, mutex_table, "_release");
        let leave_fn = identifier(Dialect::Postgres, mutex_table, "_leave");
        // Drops the entries whose stay ended, takes the first live waiter out and wakes it.
        let wake_next = format!(
            "DELETE FROM {w} WHERE lock_key = p_key AND expires_at <= v_now;\n  \
             DELETE FROM {w} WHERE lock_key = p_key AND waiter = (SELECT waiter FROM {w} \
             WHERE lock_key = p_key ORDER BY queued_at, waiter LIMIT 1) RETURNING waiter INTO v_first;\n  \
             IF v_first IS NOT NULL THEN\n    \
             PERFORM pg_notify('{mutex_table}', '{WAKE_PREFIX}' || v_first);\n  END IF;\n"
        );
        Self {
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {w} (\n  \
                 lock_key   VARCHAR({KEY_LEN}) COLLATE \"C\" NOT NULL,\n  \
                 waiter     VARCHAR({WAITER_LEN}) COLLATE \"C\" NOT NULL,\n  \
                 queued_at  TIMESTAMPTZ NOT NULL,\n  \
                 expires_at TIMESTAMPTZ NOT NULL,\n  \
                 PRIMARY KEY (lock_key, waiter)\n\
                 )"
            ),
            create_release: format!(
                "CREATE OR REPLACE FUNCTION \"{release_fn}\"(p_key text, p_owner text) RETURNS bigint\n\
                 LANGUAGE plpgsql VOLATILE AS $distlock$\n\
                 DECLARE\n  v_now timestamptz := {PG_NOW};\n  v_first text;\n\
                 BEGIN\n  \
                 UPDATE {t} SET owner = NULL, expires_at = NULL WHERE lock_key = p_key AND owner = p_owner \
                 AND (expires_at IS NULL OR expires_at > v_now);\n  \
                 IF NOT FOUND THEN\n    RETURN 0;\n  END IF;\n  \
                 {wake_next}  \
                 RETURN 1;\n\
                 END\n\
                 $distlock$"
            ),
            create_leave: format!(
                "CREATE OR REPLACE FUNCTION \"{leave_fn}\"(p_key text, p_waiter text) RETURNS bigint\n\
                 LANGUAGE plpgsql VOLATILE AS $distlock$\n\
                 DECLARE\n  v_now timestamptz := {PG_NOW};\n  v_first text;\n\
                 BEGIN\n  \
                 PERFORM 1 FROM {t} WHERE lock_key = p_key FOR UPDATE;\n  \
                 DELETE FROM {w} WHERE lock_key = p_key AND waiter = p_waiter;\n  \
                 IF EXISTS (SELECT 1 FROM {t} WHERE lock_key = p_key AND owner IS NOT NULL \
                 AND expires_at > v_now) THEN\n    RETURN 0;\n  END IF;\n  \
                 {wake_next}  \
                 RETURN CASE WHEN v_first IS NULL THEN 0 ELSE 1 END;\n\
                 END\n\
                 $distlock$"
            ),
            release: Statement::new(
                Dialect::Postgres,
                &format!("SELECT \"{release_fn}\"(:key, :owner)"),
            ),
            leave: Statement::new(
                Dialect::Postgres,
                &format!("SELECT \"{leave_fn}\"(:key, :waiter)"),
            ),
            table,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiter_ids_fit_the_column() {
        assert_eq!(waiter_column("0123abcd"), "0123abcd");
        let long = "x".repeat(65);
        assert_eq!(waiter_column(&long).len(), WAITER_LEN);
        assert_ne!(waiter_column("a b"), "a b");
        assert_eq!(waiter_column("").len(), WAITER_LEN);
    }

    #[test]
    fn names_stay_within_postgres_identifiers() {
        let statements = WaiterStatements::postgres(&"x".repeat(63));
        assert!(statements.table.len() <= 63);
        assert!(statements.release.as_str().len() < 100);
    }
}

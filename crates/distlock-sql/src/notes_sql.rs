//! The SQL text of the notes table, per dialect: the note a mutex holder leaves beside its
//! hold ([`DistributedLock::set_note`](distlock_core::DistributedLock::set_note), what leader
//! election publishes). This module owns that table's layout and its statements only; it runs
//! nothing (see `lock/notes.rs`).
//!
//! # Layout
//!
//! One table beside the mutex table, named after it (`<table>_notes`), one row per name whose
//! holder left a note:
//!
//! | column     | meaning |
//! |------------|---------|
//! | `lock_key` | the mutex row's key (primary key) |
//! | `holder`   | the owner token of the hold the note belongs to |
//! | `token`    | that hold's `version` (its fencing token) |
//! | `note`     | the note (MySQL: `TEXT` in utf8mb4, up to [`MAX_NOTE_BYTES`]) |
//!
//! A note counts only while its `holder` and `token` are the mutex row's `owner` and
//! `version` and the hold is live: every acquisition and hand-over gives the row a new
//! `version`, so a later holder (or the same owner holding again) never shows an earlier
//! hold's note, whatever became of it (released, expired, handed over), and no statement of
//! the mutex (acquire, release, renew, hand-over) has to touch this table. Renewals keep the
//! `version`, so a note survives them. A note whose hold ended is replaced by the next
//! holder's note, or deleted by the purge (`purge_sql.rs`).
//!
//! The table was added after the first schema version: a client that may create the schema
//! creates it (`CREATE TABLE IF NOT EXISTS`, nothing else touched), and one that may not (a
//! DBA's schema, [`SqlConfig::with_create_table`](crate::SqlConfig::with_create_table)`(false)`)
//! looks for it at start and, without it, declares no notes and inspects as before.

use crate::holds_sql::identifier;
use crate::sql::{Dialect, KEY_LEN, PG_LEFT_US, PG_NOW, SQLITE_NOW_MS};
use crate::statement::Statement;

/// The longest note, in bytes (what MySQL's `TEXT` holds).
pub(crate) const MAX_NOTE_BYTES: usize = 65_535;

/// The notes table's name for the mutex table `table`: `<table>_notes`, shortened as the holds
/// table's name is.
pub(crate) fn notes_table(dialect: Dialect, table: &str) -> String {
    identifier(dialect, table, "_notes")
}

/// The statements of the notes table, for one dialect.
#[derive(Debug, Clone)]
pub(crate) struct NoteStatements {
    pub(crate) create_table: String,
    /// Stores `:note` for the live hold of `:owner` on `:key` (tagged with that hold's
    /// `version`), replacing any earlier note. One affected row iff stored.
    pub(crate) set: Statement,
    /// As the mutex's `inspect` (owner, version, remaining time), with the note of the hold
    /// last: `NULL` unless the row's owner and version left it.
    pub(crate) inspect: Statement,
    /// Does nothing but fails where the table is missing (the look at start).
    pub(crate) probe: String,
}

impl NoteStatements {
    /// The statements for the notes table of the mutex table `table`.
    pub(crate) fn new(dialect: Dialect, table: &str) -> Self {
        let notes = notes_table(dialect, table);
        match dialect {
            Dialect::MySql => Self::mysql(table, &notes),
            Dialect::Postgres => Self::postgres(table, &notes),
            Dialect::Sqlite => Self::sqlite(table, &notes),
        }
    }

    fn mysql(table: &str, notes: &str) -> Self {
        let (t, n) = (format!("`{table}`"), format!("`{notes}`"));
        let now = "UTC_TIMESTAMP(6)";
        Self {
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {n} (\n  \
                 lock_key VARCHAR({KEY_LEN}) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n  \
                 holder   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n  \
                 token    BIGINT NOT NULL,\n  \
                 note     TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n  \
                 PRIMARY KEY (lock_key)\n\
                 ) ENGINE=InnoDB"
            ),
            // The update reads the selected row's columns only (never the notes row's own),
            // so MariaDB's SIMULTANEOUS_ASSIGNMENT changes nothing.
            set: Statement::new(
                Dialect::MySql,
                &format!(
                    "INSERT INTO {n} (lock_key, holder, token, note) \
                     SELECT l.lock_key, l.owner, l.version, :note FROM {t} AS l \
                     WHERE l.lock_key = :key AND l.owner = :owner AND l.expires_at > {now} \
                     ON DUPLICATE KEY UPDATE holder = l.owner, token = l.version, note = :note"
                ),
            ),
            inspect: Statement::new(
                Dialect::MySql,
                &format!(
                    "SELECT CAST(l.owner AS CHAR CHARACTER SET utf8mb4), l.version, \
                     TIMESTAMPDIFF(MICROSECOND, {now}, l.expires_at), \
                     CAST(n.note AS CHAR CHARACTER SET utf8mb4) FROM {t} AS l \
                     LEFT JOIN {n} AS n ON n.lock_key = l.lock_key AND n.holder = l.owner \
                     AND n.token = l.version WHERE l.lock_key = :key"
                ),
            ),
            probe: format!("SELECT 1 FROM {n} WHERE 1 = 0"),
        }
    }

    fn postgres(table: &str, notes: &str) -> Self {
        let (t, n) = (format!("\"{table}\""), format!("\"{notes}\""));
        let now = PG_NOW;
        let left = PG_LEFT_US.replace("expires_at", "l.expires_at");
        Self {
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {n} (\n  \
                 lock_key VARCHAR({KEY_LEN}) COLLATE \"C\" NOT NULL PRIMARY KEY,\n  \
                 holder   VARCHAR(64) COLLATE \"C\" NOT NULL,\n  \
                 token    BIGINT NOT NULL,\n  \
                 note     TEXT NOT NULL\n\
                 )"
            ),
            set: Statement::new(
                Dialect::Postgres,
                &format!(
                    "INSERT INTO {n} (lock_key, holder, token, note) \
                     SELECT l.lock_key, l.owner, l.version, :note::text FROM {t} AS l \
                     WHERE l.lock_key = :key AND l.owner = :owner AND l.expires_at > {now} \
                     ON CONFLICT (lock_key) DO UPDATE SET holder = EXCLUDED.holder, \
                     token = EXCLUDED.token, note = EXCLUDED.note"
                ),
            ),
            inspect: Statement::new(
                Dialect::Postgres,
                &format!(
                    "SELECT l.owner::text, l.version, {left}, n.note FROM {t} AS l \
                     LEFT JOIN {n} AS n ON n.lock_key = l.lock_key AND n.holder = l.owner \
                     AND n.token = l.version WHERE l.lock_key = :key"
                ),
            ),
            probe: format!("SELECT 1 FROM {n} WHERE 1 = 0"),
        }
    }

    fn sqlite(table: &str, notes: &str) -> Self {
        let (t, n) = (format!("\"{table}\""), format!("\"{notes}\""));
        let now = SQLITE_NOW_MS;
        Self {
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {n} (\n  \
                 lock_key TEXT NOT NULL PRIMARY KEY,\n  \
                 holder   TEXT NOT NULL,\n  \
                 token    INTEGER NOT NULL,\n  \
                 note     TEXT NOT NULL\n\
                 ) WITHOUT ROWID"
            ),
            // The `WHERE` before `ON CONFLICT` also keeps SQLite from reading the upsert as
            // a join.
            set: Statement::new(
                Dialect::Sqlite,
                &format!(
                    "INSERT INTO {n} (lock_key, holder, token, note) \
                     SELECT lock_key, owner, version, :note FROM {t} \
                     WHERE lock_key = :key AND owner = :owner AND expires_at > {now} \
                     ON CONFLICT (lock_key) DO UPDATE SET holder = excluded.holder, \
                     token = excluded.token, note = excluded.note"
                ),
            ),
            inspect: Statement::new(
                Dialect::Sqlite,
                &format!(
                    "SELECT l.owner, l.version, l.expires_at - {now}, n.note FROM {t} AS l \
                     LEFT JOIN {n} AS n ON n.lock_key = l.lock_key AND n.holder = l.owner \
                     AND n.token = l.version WHERE l.lock_key = :key"
                ),
            ),
            probe: format!("SELECT 1 FROM {n} WHERE 1 = 0"),
        }
    }
}

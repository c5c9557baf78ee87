//! The SQL text of every statement, per dialect. This module owns the row layout and the
//! statements only; it runs nothing (see `lock.rs`). Statements name their parameters
//! (`:key`, `:owner`, `:ttl`, ...: see `statement.rs`), and are bound by those names.
//!
//! Every dialect stores the same row (see the crate docs for the layout) and judges expiry with
//! the database's clock only: MySQL's `UTC_TIMESTAMP(6)` (fixed for one statement, and
//! independent of the session's `time_zone`, unlike `NOW()`), PostgreSQL's
//! `statement_timestamp()` (fixed for one statement; `expires_at` is a `timestamptz`),
//! SQLite's `julianday('now')` (fixed for one statement) as integer milliseconds since the
//! Unix epoch.
//!
//! `version`, the fencing token, starts at the clock in microseconds and every acquisition
//! sets it to `max(version + 1, clock)`. So it grows by at least one per acquisition, and a
//! row deleted by hand (an operator's "force unlock") and created again still starts above
//! every token issued before: the clock runs far ahead of `version + 1` unless a name were
//! acquired more than once per microsecond. That last step assumes the clock never went back
//! since the old tokens were issued, and, across a failover or between Galera nodes, that the
//! servers' clocks agree.
//!
//! MySQL's clock is the server's `UTC_TIMESTAMP(6)`, PostgreSQL's its `statement_timestamp()`. SQLite's own clock counts milliseconds
//! only, and a hot name is acquired, deleted and created again within one millisecond (a
//! token would repeat), so a SQLite acquisition binds the caller's clock in microseconds too
//! and takes the larger of both. The caller shares the database's machine, and so its clock.
//! It reads it before the statement takes the write lock; a statement that waited for the
//! lock runs at least a millisecond after the one it waited for (SQLite's busy handler sleeps
//! whole milliseconds), so the millisecond clock orders those. What remains: two acquisitions
//! of one name within one millisecond that reach the database in the opposite order of their
//! clock readings, with the row deleted by hand between them.

use crate::holds_sql::HoldStatements;
use crate::notes_sql::NoteStatements;
use crate::statement::Statement;
use crate::waiters_sql::WaiterStatements;

/// The SQL dialect of a database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    not(all(feature = "mysql", feature = "postgres", feature = "sqlite")),
    allow(dead_code)
)]
pub(crate) enum Dialect {
    /// MySQL 5.7+/8.x and MariaDB 10.3+.
    MySql,
    /// PostgreSQL 12+.
    Postgres,
    /// SQLite 3.35+ (for `RETURNING`); the bundled one is newer.
    Sqlite,
}

/// The longest lock key: names that do not fit (after escaping) are cut and suffixed with
/// their SHA-256, see [`distlock_core::LockName::encode`].
pub(crate) const KEY_LEN: usize = 255;

/// Whether `c` may appear unescaped in a key. Printable ASCII without space: the key column is
/// ASCII with a binary collation, and leaving spaces out avoids MySQL's PAD SPACE comparison
/// (where `'a'` equals `'a '`).
pub(crate) fn key_char(c: char) -> bool {
    c.is_ascii_graphic()
}

/// MySQL's clock in microseconds since the Unix epoch, from UTC only (no time zone involved).
pub(crate) const MYSQL_CLOCK_US: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

/// Added to the holder's remaining time (µs) in the `last_insert_id` of an acquire that found
/// the row held. Versions stay far below it (the clock in µs is about 2^51 this century).
pub(crate) const MYSQL_HELD: u64 = 1 << 62;

/// Whether the acquiring owner (the bound parameter) wins the row: it is ours already (a
/// retried attempt), free, or expired. A row with an owner but no expiry counts as free.
const MYSQL_WON: &str =
    "(owner <=> :owner OR owner IS NULL OR expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6))";

/// PostgreSQL's clock for every decision of a statement: the time the server received it
/// (`statement_timestamp()`, fixed for the statement and independent of the session's
/// `TimeZone`). A statement that waited for a row lock decides with the time it arrived,
/// which errs on the side of holds lasting longer; a new hold's end is at least the time the
/// request was sent plus its TTL, as the client counts it.
pub(crate) const PG_NOW: &str = "statement_timestamp()";

/// PostgreSQL's clock in microseconds since the Unix epoch.
pub(crate) const PG_CLOCK_US: &str = "(extract(epoch FROM statement_timestamp()) * 1000000)::bigint";

/// The microseconds from PostgreSQL's clock to `expires_at`.
pub(crate) const PG_LEFT_US: &str =
    "(extract(epoch FROM (expires_at - statement_timestamp())) * 1000000)::bigint";

/// A bound parameter `$n` holding microseconds (`int8`), as an interval. The first cast names
/// the parameter's type for the server, also for a statement prepared before anything was
/// bound to it (`PgDial`'s warm-up), whose parameters the server infers from the text alone.
pub(crate) fn pg_micros(param: &str) -> String {
    format!("({param}::int8::float8 * interval '1 microsecond')")
}

/// SQLite's clock in integer milliseconds since the Unix epoch. `'now'` is the same for every
/// use within one statement.
pub(crate) const SQLITE_NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

/// The statements of one dialect, with the table name spliced in (it was validated as a
/// plain identifier by `SqlConfig::with_table`). Each names its parameters in its text: TTLs
/// and stays are in µs on MySQL and PostgreSQL, in ms on SQLite; `:clock` is the caller's
/// clock in µs (SQLite, see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) create_table: String,
    /// MySQL: the fencing token comes back as `last_insert_id`; held: [`MYSQL_HELD`] + the
    /// holder's remaining µs. SQLite: `RETURNING version` yields a row iff acquired.
    /// PostgreSQL: yields one row: the new version if acquired, else the holder's remaining
    /// µs (read from the statement's snapshot).
    pub(crate) acquire: Statement,
    /// PostgreSQL: an attempt by a waiter, which also queues the waiter if the lock is held
    /// (renewing its stay if queued already) and takes it out of the queue if it wins (see
    /// `waiters_sql.rs`). Yields as `acquire`. Empty on the other dialects.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) acquire_waiting: Statement,
    /// Yields the holder's remaining time (µs on MySQL, ms on SQLite), if held.
    pub(crate) remaining: Statement,
    /// One affected row iff released (PostgreSQL: yields the count, and
    /// wakes the first queued waiter in the same statement: see `waiters_sql.rs`).
    pub(crate) release: Statement,
    /// Releases and takes the row for the next owner in one statement, where the owner is
    /// still ours, as `release` judges it. MySQL: one affected row iff handed over, the new
    /// version as `last_insert_id`. SQLite and PostgreSQL: `RETURNING version` yields a row
    /// iff handed over.
    pub(crate) hand_over: Statement,
    /// One affected row iff extended (MySQL counts matched rows: sqlx sets
    /// `CLIENT_FOUND_ROWS`).
    pub(crate) extend: Statement,
    /// Yields owner, version, remaining time (µs / ms).
    pub(crate) inspect: Statement,
    /// PostgreSQL: renews many leases of both tables in one statement. Binds arrays: the
    /// mutex leases' `:indexes` (`int4[]`), `:keys`, `:owners` and `:ttls` in µs (`int8[]`),
    /// and the holds' `:hold_indexes`, `:primitives`, `:hold_keys`, `:holders`, `:kinds` and
    /// `:hold_ttls`. Yields the index of every lease renewed. Empty on the other dialects.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) extend_many: Statement,
    /// The holds table's statements (semaphores and read-write locks), see `holds_sql.rs`.
    pub(crate) holds: HoldStatements,
    /// The notes table's statements (a mutex holder's note), see `notes_sql.rs`.
    pub(crate) notes: NoteStatements,
    /// PostgreSQL: the mutex's queue of waiters, see `waiters_sql.rs`. Empty elsewhere.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) waiters: WaiterStatements,
}

impl Statements {
    pub(crate) fn new(dialect: Dialect, table: &str) -> Self {
        match dialect {
            Dialect::MySql => Self::mysql(table),
            Dialect::Postgres => Self::postgres(table),
            Dialect::Sqlite => Self::sqlite(table),
        }
    }

    /// Every statement that creates the schema of `table`, in the order to run them: the
    /// mutex table, the holds table, the weights table, the notes table, on PostgreSQL the mutex's queue of waiters, the version
    /// table (`schema.rs`), on PostgreSQL the functions of an attempt at a hold, of a release
    /// and of a waiter leaving the queue, and last the version's record. With `on_start`, the
    /// functions are replaced only where the recorded version is older (a client's start);
    /// without, always (a DBA's script for this version).
    pub(crate) fn create_schema(&self, dialect: Dialect, table: &str, on_start: bool) -> Vec<String> {
        let mut all = vec![
            self.create_table.clone(),
            self.holds.create_table.clone(),
            self.holds.create_weights.clone(),
            self.notes.create_table.clone(),
        ];
        if !self.waiters.create_table.is_empty() {
            all.push(self.waiters.create_table.clone());
        }
        all.push(crate::schema::create_table(dialect, table));
        let functions: Vec<&str> = [
            &self.holds.create_function,
            &self.waiters.create_release,
            &self.waiters.create_leave,
        ]
        .into_iter()
        .filter(|s| !s.is_empty())
        .map(String::as_str)
        .collect();
        if on_start && !functions.is_empty() {
            all.push(crate::schema::pg_functions_if_older(table, &functions));
        } else {
            all.extend(functions.into_iter().map(str::to_owned));
        }
        all.push(crate::schema::record(dialect, table));
        all
    }

    fn mysql(table: &str) -> Self {
        let t = format!("`{table}`");
        Self {
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {t} (\n  \
                 lock_key   VARCHAR({KEY_LEN}) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n  \
                 lock_name  VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n  \
                 owner      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,\n  \
                 version    BIGINT NOT NULL,\n  \
                 expires_at DATETIME(6) NULL,\n  \
                 PRIMARY KEY (lock_key)\n\
                 ) ENGINE=InnoDB"
            ),
            // One statement: insert the row, or take it over only if it is free or expired.
            // `LAST_INSERT_ID(expr)` puts the new version, or when the row was kept
            // MYSQL_HELD + the holder's remaining µs, into the OK packet, so the caller learns
            // whether it won and its fencing token, or how long to wait, without a second
            // round trip, independent of how affected rows are counted.
            //
            // The statement must not depend on how the assignments of ON DUPLICATE KEY UPDATE
            // see each other: by default each sees the ones before it, but under MariaDB's
            // `SIMULTANEOUS_ASSIGNMENT` (part of `sql_mode=ORACLE`) every one sees the old
            // row. So all three test the same predicate `won` over `owner` and `expires_at`,
            // `owner` is assigned first and `expires_at` last: `won` is a fixed point of the
            // owner assignment (if it held on the old row, the new owner is ours and it still
            // holds; if not, the owner is unchanged), and `expires_at` is read before it is
            // assigned in either mode. A row with an owner but no expiry (impossible through
            // this backend, but written by hand or by an older client) counts as free.
            acquire: Statement::new(Dialect::MySql, &format!(
                "INSERT INTO {t} (lock_key, lock_name, owner, version, expires_at) \
                 VALUES (:key, :name, :owner, LAST_INSERT_ID({MYSQL_CLOCK_US}), UTC_TIMESTAMP(6) + INTERVAL :ttl MICROSECOND) \
                 ON DUPLICATE KEY UPDATE \
                 owner = IF({won}, :owner, owner), \
                 version = IF({won}, LAST_INSERT_ID(GREATEST(version + 1, {MYSQL_CLOCK_US})), \
                 IF(LAST_INSERT_ID({MYSQL_HELD} + GREATEST(0, \
                 TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at))) > 0, version, version)), \
                 expires_at = IF({won}, UTC_TIMESTAMP(6) + INTERVAL :ttl MICROSECOND, expires_at)",
                won = MYSQL_WON,
            )),
            remaining: Statement::new(Dialect::MySql, &format!(
                "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM {t} \
                 WHERE lock_key = :key AND owner IS NOT NULL"
            )),
            release: Statement::new(Dialect::MySql, &format!(
                "UPDATE {t} SET owner = NULL, expires_at = NULL \
                 WHERE lock_key = :key AND owner = :owner AND (expires_at IS NULL OR expires_at > UTC_TIMESTAMP(6))"
            )),
            // Every assignment reads only the old row, so the order of assignments does not
            // matter (see `acquire` on MariaDB's SIMULTANEOUS_ASSIGNMENT).
            hand_over: Statement::new(Dialect::MySql, &format!(
                "UPDATE {t} SET owner = :next, \
                 version = LAST_INSERT_ID(GREATEST(version + 1, {MYSQL_CLOCK_US})), \
                 expires_at = UTC_TIMESTAMP(6) + INTERVAL :ttl MICROSECOND \
                 WHERE lock_key = :key AND owner = :owner AND (expires_at IS NULL OR expires_at > UTC_TIMESTAMP(6))"
            )),
            extend: Statement::new(Dialect::MySql, &format!(
                "UPDATE {t} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL :ttl MICROSECOND \
                 WHERE lock_key = :key AND owner = :owner AND expires_at > UTC_TIMESTAMP(6)"
            )),
            inspect: Statement::new(Dialect::MySql, &format!(
                "SELECT CAST(owner AS CHAR CHARACTER SET utf8mb4), version, \
                 TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM {t} WHERE lock_key = :key"
            )),
            extend_many: Statement::default(),
            holds: HoldStatements::new(Dialect::MySql, table),
            notes: NoteStatements::new(Dialect::MySql, table),
            acquire_waiting: Statement::default(),
            waiters: WaiterStatements::default(),
        }
    }

    /// PostgreSQL: the same row and the same rules as MySQL, with `INSERT ... ON CONFLICT ...
    /// DO UPDATE ... WHERE` for the acquire (it updates only a free, expired or already-ours
    /// row, and takes the row lock either way), `RETURNING` for results, and a release that
    /// wakes the first queued waiter in the same call (`waiters_sql.rs`).
    fn postgres(table: &str) -> Self {
        let t = format!("\"{table}\"");
        let now = PG_NOW;
        let clock = PG_CLOCK_US;
        let left = PG_LEFT_US;
        let ttl = pg_micros(":ttl");
        let holds = HoldStatements::new(Dialect::Postgres, table);
        let waiters = WaiterStatements::postgres(table);
        let h = format!("\"{}\"", holds.table);
        let w = format!("\"{}\"", waiters.table);
        // The upsert's DO UPDATE runs only if the row is free or expired (or already ours: a
        // retried attempt) and returns the new version; otherwise the second branch reads
        // the holder's remaining time for the waiter's hint. That read sees the statement's
        // snapshot (a hold taken while the upsert waited for the row lock is not in it): it
        // only times the wake-up, it decides nothing.
        let won = format!(
            "won AS (\
             INSERT INTO {t} AS l (lock_key, lock_name, owner, version, expires_at) \
             VALUES (:key, :name, :owner, {clock}, {now} + {ttl}) \
             ON CONFLICT (lock_key) DO UPDATE SET owner = EXCLUDED.owner, \
             version = GREATEST(l.version + 1, {clock}), expires_at = EXCLUDED.expires_at \
             WHERE l.owner IS NULL OR l.expires_at IS NULL OR l.expires_at <= {now} \
             OR l.owner = EXCLUDED.owner \
             RETURNING l.version)"
        );
        let outcome = format!(
            "SELECT version, NULL::bigint FROM won \
             UNION ALL \
             SELECT NULL::bigint, {left} FROM {t} \
             WHERE lock_key = :key AND owner IS NOT NULL AND NOT EXISTS (SELECT 1 FROM won)"
        );
        Self {
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {t} (\n  \
                 lock_key   VARCHAR({KEY_LEN}) COLLATE \"C\" NOT NULL PRIMARY KEY,\n  \
                 lock_name  TEXT NOT NULL,\n  \
                 owner      VARCHAR(64) COLLATE \"C\",\n  \
                 version    BIGINT NOT NULL,\n  \
                 expires_at TIMESTAMPTZ\n\
                 )"
            ),
            acquire: Statement::new(Dialect::Postgres, &format!("WITH {won} {outcome}")),
            // As `acquire`; held, the waiter joins the queue at the back (its entry renewed,
            // keeping its place, if queued and live; requeued at the back if its stay had
            // ended); won, it leaves, and the entries of the lock whose stay ended go too.
            // The queue's writes come after the upsert took the lock's row (they read `won`).
            acquire_waiting: Statement::new(Dialect::Postgres, &format!(
                "WITH {won}, \
                 queued AS (INSERT INTO {w} AS q (lock_key, waiter, queued_at, expires_at) \
                 SELECT :key, :waiter, {now}, {now} + {stay} WHERE NOT EXISTS (SELECT 1 FROM won) \
                 ON CONFLICT (lock_key, waiter) DO UPDATE SET expires_at = EXCLUDED.expires_at, \
                 queued_at = CASE WHEN q.expires_at <= {now} THEN EXCLUDED.queued_at ELSE q.queued_at END \
                 RETURNING 1), \
                 dequeued AS (DELETE FROM {w} WHERE lock_key = :key AND (waiter = :waiter OR expires_at <= {now}) \
                 AND EXISTS (SELECT 1 FROM won) RETURNING 1) \
                 {outcome}",
                stay = pg_micros(":stay"),
            )),
            remaining: Statement::new(Dialect::Postgres, &format!("SELECT {left} FROM {t} WHERE lock_key = :key AND owner IS NOT NULL")),
            release: waiters.release.clone(),
            hand_over: Statement::new(Dialect::Postgres, &format!(
                "UPDATE {t} SET owner = :next, version = GREATEST(version + 1, {clock}), \
                 expires_at = {now} + {ttl} \
                 WHERE lock_key = :key AND owner = :owner AND (expires_at IS NULL OR expires_at > {now}) \
                 RETURNING version"
            )),
            extend: Statement::new(Dialect::Postgres, &format!(
                "UPDATE {t} SET expires_at = {now} + {ttl} \
                 WHERE lock_key = :key AND owner = :owner AND expires_at > {now}"
            )),
            inspect: Statement::new(Dialect::Postgres, &format!("SELECT owner::text, version, {left} FROM {t} WHERE lock_key = :key")),
            extend_many: Statement::new(Dialect::Postgres, &format!(
                "WITH m AS (UPDATE {t} AS l SET expires_at = {now} + {mttl} \
                 FROM unnest(:indexes::int4[], :keys::text[], :owners::text[], :ttls::int8[]) AS d(i, k, o, ttl) \
                 WHERE l.lock_key = d.k AND l.owner = d.o AND l.expires_at > {now} RETURNING d.i), \
                 h AS (UPDATE {h} AS x SET expires_at = {now} + {httl} \
                 FROM unnest(:hold_indexes::int4[], :primitives::text[], :hold_keys::text[], :holders::text[], \
                 :kinds::text[], :hold_ttls::int8[]) \
                 AS d(i, p, k, o, kind, ttl) \
                 WHERE x.primitive = d.p AND x.lock_key = d.k AND x.holder = d.o AND x.kind = d.kind \
                 AND x.expires_at > {now} RETURNING d.i) \
                 SELECT i FROM m UNION ALL SELECT i FROM h",
                mttl = pg_micros("d.ttl"),
                httl = pg_micros("d.ttl"),
            )),
            holds,
            notes: NoteStatements::new(Dialect::Postgres, table),
            waiters,
        }
    }

    fn sqlite(table: &str) -> Self {
        let t = format!("\"{table}\"");
        let now = SQLITE_NOW_MS;
        Self {
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {t} (\n  \
                 lock_key   TEXT NOT NULL PRIMARY KEY,\n  \
                 lock_name  TEXT NOT NULL,\n  \
                 owner      TEXT,\n  \
                 version    INTEGER NOT NULL,\n  \
                 expires_at INTEGER\n\
                 ) WITHOUT ROWID"
            ),
            // One statement: the upsert's DO UPDATE runs only if the row is free or expired
            // (or already ours: a retried attempt), and RETURNING yields a row only if the
            // statement inserted or updated one.
            acquire: Statement::new(
                Dialect::Sqlite,
                &format!(
                    "INSERT INTO {t} (lock_key, lock_name, owner, version, expires_at) \
                 VALUES (:key, :name, :owner, MAX({now} * 1000, :clock), {now} + :ttl) \
                 ON CONFLICT (lock_key) DO UPDATE SET \
                 owner = excluded.owner, version = MAX(version + 1, {now} * 1000, :clock), \
                 expires_at = excluded.expires_at \
                 WHERE owner IS NULL OR expires_at IS NULL OR expires_at <= {now} \
                 OR owner = excluded.owner \
                 RETURNING version"
                ),
            ),
            remaining: Statement::new(
                Dialect::Sqlite,
                &format!("SELECT expires_at - {now} FROM {t} WHERE lock_key = :key AND owner IS NOT NULL"),
            ),
            release: Statement::new(
                Dialect::Sqlite,
                &format!(
                    "UPDATE {t} SET owner = NULL, expires_at = NULL \
                 WHERE lock_key = :key AND owner = :owner AND (expires_at IS NULL OR expires_at > {now})"
                ),
            ),
            hand_over: Statement::new(
                Dialect::Sqlite,
                &format!(
                    "UPDATE {t} SET owner = :next, version = MAX(version + 1, {now} * 1000, :clock), \
                 expires_at = {now} + :ttl \
                 WHERE lock_key = :key AND owner = :owner AND (expires_at IS NULL OR expires_at > {now}) \
                 RETURNING version"
                ),
            ),
            extend: Statement::new(
                Dialect::Sqlite,
                &format!(
                    "UPDATE {t} SET expires_at = {now} + :ttl \
                 WHERE lock_key = :key AND owner = :owner AND expires_at > {now}"
                ),
            ),
            inspect: Statement::new(
                Dialect::Sqlite,
                &format!("SELECT owner, version, expires_at - {now} FROM {t} WHERE lock_key = :key"),
            ),
            extend_many: Statement::default(),
            holds: HoldStatements::new(Dialect::Sqlite, table),
            notes: NoteStatements::new(Dialect::Sqlite, table),
            acquire_waiting: Statement::default(),
            waiters: WaiterStatements::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every named placeholder was recognised: none is left in any statement's text.
    #[test]
    fn no_placeholder_is_left_unbound() {
        for dialect in [Dialect::MySql, Dialect::Postgres, Dialect::Sqlite] {
            let s = Statements::new(dialect, "t");
            let h = &s.holds;
            for statement in [
                &s.acquire,
                &s.acquire_waiting,
                &s.remaining,
                &s.release,
                &s.hand_over,
                &s.extend,
                &s.inspect,
                &h.attempt,
                &h.release,
                &h.extend,
                &h.withdraw,
                &h.holders,
                &h.sqlite.purge,
                &h.sqlite.census,
                &h.sqlite.bump,
                &h.sqlite.insert,
                &h.sqlite.weigh,
                &h.sqlite.renew,
                &h.sqlite.record_waiter,
                &s.waiters.release,
                &s.waiters.leave,
                &s.extend_many,
                &s.notes.set,
                &s.notes.inspect,
            ] {
                let text = statement.as_str();
                // PostgreSQL's casts (`::type`) aside, no `:` may start a name.
                let bare = text.replace("::", "");
                let left = bare
                    .match_indices(':')
                    .any(|(i, _)| bare[i + 1..].starts_with(|c: char| c.is_ascii_lowercase()));
                assert!(!left, "{dialect:?}: {text}");
            }
        }
    }
}

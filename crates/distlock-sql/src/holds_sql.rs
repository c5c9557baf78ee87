//! The SQL text of the holds table, per dialect: the rows of semaphores and read-write locks.
//! This module owns that table's layout and its statements only; it runs nothing (see
//! `lock/holds.rs`), and the rule the statements apply is `admission.rs`'s (its copies here, in
//! MySQL's SQL and in PL/pgSQL, are checked against it by `admission_agreement.rs`).
//!
//! # Layout
//!
//! One table beside the mutex table, named after it (`<table>_holds`), with one row per
//! object, per live hold and per waiting writer; primary key `(primitive, lock_key, holder)`,
//! so every row of one object sits together in the index:
//!
//! | row            | `holder`                     | `kind`                         | `permits`          | `version`                            | `expires_at` |
//! |----------------|------------------------------|--------------------------------|--------------------|--------------------------------------|--------------|
//! | the object     | `#`                          | `object`                       | `NULL`             | the last fencing token issued        | `NULL` |
//! | a hold         | the holder's owner token     | `permit`, `read`, `write`, `uread` (upgradeable read) | the count (permit) | this hold's fencing token            | end of the hold |
//! | waiting writer | `~` + the waiter's id        | `waiter`                       | `NULL`             | 0                                    | end of the wait record |
//!
//! A hold of several permits ([`LockKind::Permit`]'s `weight` above 1) also has a row in a
//! second table, `<table>_weights`, keyed by the hold's object, holder and fencing token
//! (`obj_primitive`, `obj_key`, `owner`, `token`) with its `weight`; a hold without such a row
//! weighs 1. The census joins it on the hold's `version`, so a weight counts only beside the
//! hold it was written with (in the same transaction), and releases, renewals and the
//! cleanup by owner, which touch the hold's row only, act on the whole hold. A weight row
//! whose hold is gone is never read again; the purge deletes it.
//!
//! `primitive` is [`Primitive::as_str`](distlock_core::Primitive::as_str) (`semaphore`,
//! `rw-lock`), so the semaphore `x` and the read-write lock `x` never share a row, nor a row
//! of the mutex table. A row is live while `expires_at` is after the database's clock (the
//! same clock as the mutex's: MySQL's `UTC_TIMESTAMP(6)`, SQLite's `julianday('now')` in ms).
//! The object's row is never deleted: its `version` grows by one at least per hold, as
//! `max(version + 1, clock in µs)` (see `sql.rs` on why the clock), so tokens keep growing
//! when the object has no holder. Expired holds and waiter records are deleted by the next
//! attempt on the object.
//!
//! # An attempt
//!
//! Every attempt first takes the object: on MySQL the upsert of the object's row locks it
//! (InnoDB row lock, held to the end of the transaction), on SQLite `BEGIN IMMEDIATE` takes
//! the database's write lock. Only then does it count the live rows (the census) and insert
//! its hold, so two attempts on one object never decide on the same count: no
//! over-admission, and no reliance on `INSERT ... SELECT COUNT(*)` (whose read could miss a
//! concurrent insert). Releases, renewals and withdrawals are single statements on their own
//! row, which need not take the object: none of them can let anyone in who should not be.
//!
//! MySQL runs the whole transaction in **one round trip**: one text query of several
//! statements ([`mysql_attempt`]), deciding with session variables (`@dl_*`) by the rule of
//! `admission.rs`, and ending with a `SELECT` of the outcome. Its values are spliced in as
//! hexadecimal literals with a character set introducer (`_ascii X'6a6f6273'`), so no value
//! can change the statement's meaning, whatever the `sql_mode`. SQLite runs the census and
//! the writes as separate statements of one transaction on one connection: local calls, no
//! network, with the rule applied in Rust between them.

use std::fmt::Write as _;

use distlock_core::LockKind;

use crate::sql::{pg_micros, Dialect, KEY_LEN, MYSQL_CLOCK_US, PG_LEFT_US, PG_NOW, SQLITE_NOW_MS};
use crate::statement::Statement;

/// The longest `holder` value: `~` + a SHA-256 in hex (64), or an owner token (36).
pub(crate) const HOLDER_LEN: usize = 72;

/// The weights table's name for the mutex table `table`: `<table>_weights`, shortened as
/// [`holds_table`] does.
pub(crate) fn weights_table(dialect: Dialect, table: &str) -> String {
    identifier(dialect, table, "_weights")
}

/// The join of a hold row (the holds table's columns, unqualified) to its weight row in the
/// weights table `w` (quoted), and the hold's weight: the weights table's columns are named
/// apart from the holds table's, so no column needs its table's name.
fn weight_join(w: &str) -> String {
    format!("LEFT JOIN {w} ON obj_primitive = primitive AND obj_key = lock_key AND owner = holder AND token = version")
}

/// The holds table's name for the mutex table `table`: `<table>_holds`, or, when that would
/// pass the 64 characters of a MySQL identifier (63 on PostgreSQL), a prefix of `table`, 8
/// hex digits of its SHA-256 and `_holds` (so two long table names never share a holds table).
pub(crate) fn holds_table(dialect: Dialect, table: &str) -> String {
    identifier(dialect, table, "_holds")
}

/// PostgreSQL: the name of the function that runs an attempt at a hold, beside the mutex
/// table `table`: `<table>_holds_try`, shortened as [`holds_table`] does.
pub(crate) fn attempt_function(table: &str) -> String {
    identifier(Dialect::Postgres, table, "_holds_try")
}

/// `table` + `suffix`, or a prefix of `table`, 8 hex digits of its SHA-256 and `suffix` when
/// that would pass the dialect's longest identifier.
pub(crate) fn identifier(dialect: Dialect, table: &str, suffix: &str) -> String {
    let max = match dialect {
        Dialect::Postgres => 63,
        _ => 64,
    };
    if table.len() + suffix.len() <= max {
        return format!("{table}{suffix}");
    }
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(table.as_bytes());
    let tag = hex(&digest[..4]);
    // The table name is ASCII (checked by `SqlConfig::with_table`), so any cut is a char boundary.
    let keep = max - suffix.len() - 1 - tag.len();
    format!("{}_{tag}{suffix}", &table[..keep.min(table.len())])
}

/// The `kind` column's value for a hold of `kind`; `None` for the mutex.
pub(crate) fn kind_column(kind: LockKind) -> Option<&'static str> {
    match kind {
        LockKind::Permit { .. } => Some("permit"),
        LockKind::Read => Some("read"),
        LockKind::Write => Some("write"),
        LockKind::UpgradeableRead => Some("uread"),
        _ => None,
    }
}

/// The hold a row's `kind`, `permits` and weight describe; `None` for anything else.
pub(crate) fn kind_of_row(kind: &str, permits: Option<i64>, weight: i64) -> Option<LockKind> {
    match kind {
        "permit" => Some(LockKind::Permit {
            permits: u32::try_from(permits?).ok()?,
            weight: u32::try_from(weight).ok()?,
        }),
        "read" => Some(LockKind::Read),
        "write" => Some(LockKind::Write),
        "uread" => Some(LockKind::UpgradeableRead),
        _ => None,
    }
}

/// The `holder` value of the waiting writer `id`: `~` + the id when it is a short plain token
/// (an owner token, as `LockClient` sends), else `~` + its SHA-256 in hex, so any id fits the
/// column and never looks like an owner token.
pub(crate) fn waiter_holder(id: &str) -> String {
    let plain = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if plain {
        return format!("~{id}");
    }
    use sha2::{Digest, Sha256};
    format!("~{}", hex(&Sha256::digest(id.as_bytes())))
}

/// The statements of the holds table, for one dialect.
#[derive(Debug, Clone)]
pub(crate) struct HoldStatements {
    /// The table's name, unquoted.
    pub(crate) table: String,
    /// The weights table's name, unquoted.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) weights: String,
    pub(crate) create_table: String,
    /// Creates the weights table.
    pub(crate) create_weights: String,
    /// PostgreSQL: creates (or replaces) the function of an attempt; empty elsewhere.
    pub(crate) create_function: String,
    /// PostgreSQL: calls the function of an attempt. `:permits` is `NULL` but for a permit;
    /// `:waiter` (the waiting writer's holder value) and `:stay` are `NULL` when it leaves no
    /// record. Yields one row: won, the
    /// fencing token, then the census ([`CensusRow`](crate::admission::CensusRow)). Empty
    /// elsewhere.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) attempt: Statement,
    /// One affected row iff a live hold was released
    /// (PostgreSQL: yields the count, and announces the release with `pg_notify`).
    pub(crate) release: Statement,
    /// One affected (matched) row iff a live hold was extended.
    pub(crate) extend: Statement,
    /// Deletes a waiting writer's record (`:holder`) (PostgreSQL:
    /// yields the count, and announces the withdrawal with `pg_notify`).
    pub(crate) withdraw: Statement,
    /// Yields holder, kind, permits, version, remaining time (µs / ms) and weight
    /// of each live hold, oldest first.
    pub(crate) holders: Statement,
    /// SQLite: the statements of an attempt's transaction (MySQL builds its one query per
    /// attempt with [`mysql_attempt`]).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) sqlite: SqliteAttempt,
}

/// The statements of one SQLite attempt, run in this order inside `BEGIN IMMEDIATE` ...
/// `COMMIT` on one connection.
#[derive(Debug, Clone, Default)]
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) struct SqliteAttempt {
    /// Deletes the object's expired holds and waiter records.
    pub(crate) purge: Statement,
    /// Yields one [`CensusRow`](crate::admission::CensusRow).
    pub(crate) census: Statement,
    /// Creates the object's row or bumps its version; `RETURNING` the new version, the new
    /// hold's fencing token.
    pub(crate) bump: Statement,
    /// The new hold.
    pub(crate) insert: Statement,
    /// The new hold's weight row (a hold of several permits).
    pub(crate) weigh: Statement,
    /// An upgrade: turns the owner's upgradeable read into the write hold, with its new
    /// fencing token and TTL.
    pub(crate) upgrade: Statement,
    /// Renews the attempt's own hold (a retry).
    pub(crate) renew: Statement,
    /// Records or renews a waiting writer.
    pub(crate) record_waiter: Statement,
}

impl HoldStatements {
    /// The statements for the holds table of the mutex table `table`.
    pub(crate) fn new(dialect: Dialect, table: &str) -> Self {
        let holds = holds_table(dialect, table);
        let weights = weights_table(dialect, table);
        match dialect {
            Dialect::MySql => Self::mysql(holds, weights),
            Dialect::Postgres => Self::postgres(table, holds, weights),
            Dialect::Sqlite => Self::sqlite(holds, weights),
        }
    }

    fn mysql(table: String, weights: String) -> Self {
        let t = format!("`{table}`");
        let w = format!("`{weights}`");
        let join = weight_join(&w);
        let now = "UTC_TIMESTAMP(6)";
        let left = "TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)";
        Self {
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {t} (\n  \
                 primitive  VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n  \
                 lock_key   VARCHAR({KEY_LEN}) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n  \
                 holder     VARCHAR({HOLDER_LEN}) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n  \
                 lock_name  VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n  \
                 kind       VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n  \
                 permits    INT UNSIGNED NULL,\n  \
                 version    BIGINT NOT NULL,\n  \
                 expires_at DATETIME(6) NULL,\n  \
                 PRIMARY KEY (primitive, lock_key, holder)\n\
                 ) ENGINE=InnoDB"
            ),
            release: Statement::new(Dialect::MySql, &format!(
                "DELETE FROM {t} WHERE primitive = :primitive AND lock_key = :key AND holder = :owner AND kind = :kind \
                 AND expires_at > {now}"
            )),
            extend: Statement::new(Dialect::MySql, &format!(
                "UPDATE {t} SET expires_at = {now} + INTERVAL :ttl MICROSECOND \
                 WHERE primitive = :primitive AND lock_key = :key AND holder = :owner AND kind = :kind AND expires_at > {now}"
            )),
            withdraw: Statement::new(Dialect::MySql, &format!(
                "DELETE FROM {t} WHERE primitive = :primitive AND lock_key = :key AND holder = :holder AND kind = 'waiter'"
            )),
            holders: Statement::new(Dialect::MySql, &format!(
                "SELECT CAST(holder AS CHAR CHARACTER SET utf8mb4), CAST(kind AS CHAR CHARACTER SET utf8mb4), \
                 CAST(permits AS SIGNED), version, {left}, CAST(COALESCE(weight, 1) AS SIGNED) FROM {t} {join} \
                 WHERE primitive = :primitive AND lock_key = :key AND kind IN ('permit', 'read', 'write', 'uread') \
                 AND expires_at > {now} ORDER BY version"
            )),
            create_weights: format!(
                "CREATE TABLE IF NOT EXISTS {w} (\n  \
                 obj_primitive VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n  \
                 obj_key       VARCHAR({KEY_LEN}) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n  \
                 owner         VARCHAR({HOLDER_LEN}) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n  \
                 token         BIGINT NOT NULL,\n  \
                 weight        INT UNSIGNED NOT NULL,\n  \
                 PRIMARY KEY (obj_primitive, obj_key, owner, token)\n\
                 ) ENGINE=InnoDB"
            ),
            sqlite: SqliteAttempt::default(),
            create_function: String::new(),
            attempt: Statement::default(),
            table,
            weights,
        }
    }

    /// PostgreSQL: the layout of MySQL's table, and an attempt as one call of a PL/pgSQL
    /// function (one round trip, its values bound as parameters). Releases and withdrawals
    /// `pg_notify` the mutex table's channel (`mutex_table`) with `<primitive>:<key>`.
    fn postgres(mutex_table: &str, table: String, weights: String) -> Self {
        let t = format!("\"{table}\"");
        let w = format!("\"{weights}\"");
        let join = weight_join(&w);
        let now = PG_NOW;
        let left = PG_LEFT_US;
        let function = attempt_function(mutex_table);
        let notify = format!("pg_notify('{mutex_table}', primitive || ':' || lock_key) IS NOT NULL");
        Self {
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {t} (\n  \
                 primitive  VARCHAR(16) COLLATE \"C\" NOT NULL,\n  \
                 lock_key   VARCHAR({KEY_LEN}) COLLATE \"C\" NOT NULL,\n  \
                 holder     VARCHAR({HOLDER_LEN}) COLLATE \"C\" NOT NULL,\n  \
                 lock_name  TEXT NOT NULL,\n  \
                 kind       VARCHAR(8) COLLATE \"C\" NOT NULL,\n  \
                 permits    INTEGER,\n  \
                 version    BIGINT NOT NULL,\n  \
                 expires_at TIMESTAMPTZ,\n  \
                 PRIMARY KEY (primitive, lock_key, holder)\n\
                 )"
            ),
            create_weights: format!(
                "CREATE TABLE IF NOT EXISTS {w} (\n  \
                 obj_primitive VARCHAR(16) COLLATE \"C\" NOT NULL,\n  \
                 obj_key       VARCHAR({KEY_LEN}) COLLATE \"C\" NOT NULL,\n  \
                 owner         VARCHAR({HOLDER_LEN}) COLLATE \"C\" NOT NULL,\n  \
                 token         BIGINT NOT NULL,\n  \
                 weight        INTEGER NOT NULL,\n  \
                 PRIMARY KEY (obj_primitive, obj_key, owner, token)\n\
                 )"
            ),
            create_function: pg_attempt_function(&t, &w, &function),
            attempt: Statement::new(Dialect::Postgres, &format!(
                "SELECT * FROM \"{function}\"(:primitive, :key, :name, :owner, :kind, :permits, :ttl, :waiter, :stay, \
                 :weight::int4)"
            )),
            release: Statement::new(Dialect::Postgres, &format!(
                "WITH gone AS (DELETE FROM {t} WHERE primitive = :primitive AND lock_key = :key AND holder = :owner \
                 AND kind = :kind AND expires_at > {now} RETURNING primitive, lock_key) \
                 SELECT count(*) FROM gone WHERE {notify}"
            )),
            extend: Statement::new(Dialect::Postgres, &format!(
                "UPDATE {t} SET expires_at = {now} + {ttl} \
                 WHERE primitive = :primitive AND lock_key = :key AND holder = :owner AND kind = :kind AND expires_at > {now}",
                ttl = pg_micros(":ttl"),
            )),
            withdraw: Statement::new(Dialect::Postgres, &format!(
                "WITH gone AS (DELETE FROM {t} WHERE primitive = :primitive AND lock_key = :key AND holder = :holder \
                 AND kind = 'waiter' RETURNING primitive, lock_key) \
                 SELECT count(*) FROM gone WHERE {notify}"
            )),
            holders: Statement::new(Dialect::Postgres, &format!(
                "SELECT holder::text, kind::text, permits::int8, version, {left}, COALESCE(weight, 1)::int8 \
                 FROM {t} {join} \
                 WHERE primitive = :primitive AND lock_key = :key AND kind IN ('permit', 'read', 'write', 'uread') \
                 AND expires_at > {now} ORDER BY version"
            )),
            sqlite: SqliteAttempt::default(),
            table,
            weights,
        }
    }

    fn sqlite(table: String, weights: String) -> Self {
        let t = format!("\"{table}\"");
        let w = format!("\"{weights}\"");
        let join = weight_join(&w);
        let now = SQLITE_NOW_MS;
        let left = format!("expires_at - {now}");
        let columns = "(primitive, lock_key, holder, lock_name, kind, permits, version, expires_at)";
        Self {
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {t} (\n  \
                 primitive  TEXT NOT NULL,\n  \
                 lock_key   TEXT NOT NULL,\n  \
                 holder     TEXT NOT NULL,\n  \
                 lock_name  TEXT NOT NULL,\n  \
                 kind       TEXT NOT NULL,\n  \
                 permits    INTEGER,\n  \
                 version    INTEGER NOT NULL,\n  \
                 expires_at INTEGER,\n  \
                 PRIMARY KEY (primitive, lock_key, holder)\n\
                 ) WITHOUT ROWID"
            ),
            release: Statement::new(Dialect::Sqlite, &format!(
                "DELETE FROM {t} WHERE primitive = :primitive AND lock_key = :key AND holder = :owner AND kind = :kind \
                 AND expires_at > {now}"
            )),
            extend: Statement::new(Dialect::Sqlite, &format!(
                "UPDATE {t} SET expires_at = {now} + :ttl \
                 WHERE primitive = :primitive AND lock_key = :key AND holder = :owner AND kind = :kind AND expires_at > {now}"
            )),
            withdraw: Statement::new(Dialect::Sqlite, &format!(
                "DELETE FROM {t} WHERE primitive = :primitive AND lock_key = :key AND holder = :holder AND kind = 'waiter'"
            )),
            holders: Statement::new(Dialect::Sqlite, &format!(
                "SELECT holder, kind, permits, version, {left}, COALESCE(weight, 1) FROM {t} {join} \
                 WHERE primitive = :primitive AND lock_key = :key AND kind IN ('permit', 'read', 'write', 'uread') \
                 AND expires_at > {now} ORDER BY version"
            )),
            create_weights: format!(
                "CREATE TABLE IF NOT EXISTS {w} (\n  \
                 obj_primitive TEXT NOT NULL,\n  \
                 obj_key       TEXT NOT NULL,\n  \
                 owner         TEXT NOT NULL,\n  \
                 token         INTEGER NOT NULL,\n  \
                 weight        INTEGER NOT NULL,\n  \
                 PRIMARY KEY (obj_primitive, obj_key, owner, token)\n\
                 ) WITHOUT ROWID"
            ),
            sqlite: SqliteAttempt {
                purge: Statement::new(
                    Dialect::Sqlite,
                    &format!(
                        "DELETE FROM {t} WHERE primitive = :primitive AND lock_key = :key AND kind <> 'object' \
                         AND expires_at <= {now}"
                    ),
                ),
                census: Statement::new(
                    Dialect::Sqlite,
                    &format!(
                        "SELECT {} FROM {t} {join} WHERE primitive = :primitive AND lock_key = :key \
                         AND kind <> 'object' AND expires_at > {now}",
                        census_columns(":owner", ":kind", &left)
                    ),
                ),
                bump: Statement::new(
                    Dialect::Sqlite,
                    &format!(
                        "INSERT INTO {t} {columns} VALUES (:primitive, :key, '#', :name, 'object', NULL, \
                         MAX({now} * 1000, :clock), NULL) \
                         ON CONFLICT (primitive, lock_key, holder) DO UPDATE SET \
                         version = MAX(version + 1, {now} * 1000, :clock) \
                         RETURNING version"
                    ),
                ),
                insert: Statement::new(
                    Dialect::Sqlite,
                    &format!(
                        "INSERT INTO {t} {columns} \
                         VALUES (:primitive, :key, :owner, :name, :kind, :permits, :token, {now} + :ttl)"
                    ),
                ),
                upgrade: Statement::new(
                    Dialect::Sqlite,
                    &format!(
                        "UPDATE {t} SET kind = 'write', version = :token, expires_at = {now} + :ttl \
                         WHERE primitive = :primitive AND lock_key = :key AND holder = :owner AND kind = 'uread'"
                    ),
                ),
                weigh: Statement::new(
                    Dialect::Sqlite,
                    &format!(
                        "INSERT INTO {w} (obj_primitive, obj_key, owner, token, weight) \
                         VALUES (:primitive, :key, :owner, :token, :weight)"
                    ),
                ),
                renew: Statement::new(
                    Dialect::Sqlite,
                    &format!(
                        "UPDATE {t} SET expires_at = {now} + :ttl \
                         WHERE primitive = :primitive AND lock_key = :key AND holder = :owner AND kind = :kind"
                    ),
                ),
                record_waiter: Statement::new(
                    Dialect::Sqlite,
                    &format!(
                        "INSERT INTO {t} {columns} VALUES (:primitive, :key, :holder, :name, 'waiter', NULL, 0, {now} + :stay) \
                         ON CONFLICT (primitive, lock_key, holder) DO UPDATE SET expires_at = excluded.expires_at"
                    ),
                ),
            },
            create_function: String::new(),
            attempt: Statement::default(),
            table,
            weights,
        }
    }
}

/// The census's columns over one object's live rows, each joined to its weight row (a
/// [`CensusRow`](crate::admission::CensusRow)): the permits the holds take (each hold its
/// weight), readers, writers, waiting writers, the permit count of live permits, the token of
/// the attempt's own hold (`owner` of `kind`), the remaining times of the first permit,
/// the last reader and the writer (`left` computes a row's remaining time), the upgradeable
/// readers, and the token of `owner`'s upgradeable read.
fn census_columns(owner: &str, kind: &str, left: &str) -> String {
    format!(
        "COALESCE(SUM(CASE WHEN kind = 'waiter' THEN 0 ELSE COALESCE(weight, 1) END), 0), \
         COALESCE(SUM(kind = 'read'), 0), \
         COALESCE(SUM(kind = 'write'), 0), COALESCE(SUM(kind = 'waiter'), 0), \
         MIN(CASE WHEN kind = 'permit' THEN permits END), \
         MAX(CASE WHEN holder = {owner} AND kind = {kind} THEN version END), \
         MIN(CASE WHEN kind = 'permit' THEN {left} END), \
         MAX(CASE WHEN kind = 'read' THEN {left} END), \
         MAX(CASE WHEN kind = 'write' THEN {left} END), \
         COALESCE(SUM(kind = 'uread'), 0), \
         MAX(CASE WHEN holder = {owner} AND kind = 'uread' THEN version END)"
    )
}

/// PostgreSQL: `CREATE OR REPLACE FUNCTION` of an attempt on the holds table `t` (quoted).
/// One call is one statement, so one transaction: it takes the object (creating its row if
/// missing, then `FOR UPDATE` on it: every attempt on the object waits here for the one
/// before to commit), deletes the object's expired rows, takes the census of the live ones
/// (each statement of a `VOLATILE` function sees what committed before it started, so the
/// census sees every hold committed before the object was taken), decides by
/// `admission.rs`'s rule, and then either bumps the object's version and inserts the hold or
/// renews the attempt's own hold (a retry); a writer removes its waiting record when it wins
/// and records or renews it when it loses. Its clock is read once the object is taken.
///
/// A hold of several permits (`p_weight` above 1) also writes its weight row in the weights
/// table `w` (quoted), and the census counts each hold by its weight. The function takes
/// `p_weight` last: an overload beside the one of schema version 1 (nine parameters), which
/// clients of that version still call.
fn pg_attempt_function(t: &str, w: &str, function: &str) -> String {
    let columns = "(primitive, lock_key, holder, lock_name, kind, permits, version, expires_at)";
    let object = "primitive = p_primitive AND lock_key = p_key";
    let ttl = "v_now + p_ttl_us::float8 * interval '1 microsecond'";
    let stay = "v_now + p_stay_us::float8 * interval '1 microsecond'";
    let join = weight_join(w);
    format!(
        "CREATE OR REPLACE FUNCTION \"{function}\"(p_primitive text, p_key text, p_name text, \
         p_holder text, p_kind text, p_permits integer, p_ttl_us bigint, p_waiter text, p_stay_us bigint, \
         p_weight integer)\n\
         RETURNS TABLE (o_won boolean, o_token bigint, o_holds bigint, o_readers bigint, \
         o_writers bigint, o_waiting bigint, o_stored bigint, o_mine bigint, o_first_permit bigint, \
         o_last_reader bigint, o_writer bigint)\n\
         LANGUAGE plpgsql VOLATILE AS $distlock$\n\
         DECLARE\n  v_now timestamptz;\n  v_won boolean;\n  v_token bigint;\n  c record;\n\
         BEGIN\n  \
         INSERT INTO {t} {columns} VALUES (p_primitive, p_key, '#', p_name, 'object', NULL, 0, NULL) \
         ON CONFLICT (primitive, lock_key, holder) DO NOTHING;\n  \
         PERFORM 1 FROM {t} WHERE {object} AND holder = '#' FOR UPDATE;\n  \
         v_now := clock_timestamp();\n  \
         DELETE FROM {t} WHERE {object} AND kind <> 'object' AND expires_at <= v_now;\n  \
         SELECT coalesce(sum(weight) FILTER (WHERE kind <> 'waiter'), 0)::bigint AS holds,\n    \
         count(*) FILTER (WHERE kind = 'read') AS readers,\n    \
         count(*) FILTER (WHERE kind = 'write') AS writers,\n    \
         count(*) FILTER (WHERE kind = 'waiter') AS waiting,\n    \
         (min(permits) FILTER (WHERE kind = 'permit'))::bigint AS stored,\n    \
         max(version) FILTER (WHERE holder = p_holder AND kind = p_kind) AS mine,\n    \
         min(left_us) FILTER (WHERE kind = 'permit') AS first_permit,\n    \
         max(left_us) FILTER (WHERE kind = 'read') AS last_reader,\n    \
         max(left_us) FILTER (WHERE kind = 'write') AS writer,\n    \
         count(*) FILTER (WHERE kind = 'uread') AS upgraders,\n    \
         max(version) FILTER (WHERE holder = p_holder AND kind = 'uread') AS my_upgradeable\n  \
         INTO c FROM (SELECT kind, holder, permits, version, COALESCE(weight, 1) AS weight, \
         (extract(epoch FROM (expires_at - v_now)) * 1000000)::bigint AS left_us \
         FROM {t} {join} WHERE {object} AND kind <> 'object' AND expires_at > v_now) AS live;\n  \
         v_won := c.mine IS NOT NULL OR CASE p_kind \
         WHEN 'permit' THEN (c.stored IS NULL OR c.stored = p_permits) AND c.holds + p_weight <= p_permits \
         WHEN 'read' THEN c.writers = 0 AND c.waiting = 0 \
         WHEN 'uread' THEN c.writers = 0 AND c.upgraders = 0 AND c.waiting = 0 \
         WHEN 'write' THEN c.holds = 0 OR (c.my_upgradeable IS NOT NULL AND c.holds = 1) \
         ELSE c.holds = 0 END;\n  \
         IF c.mine IS NOT NULL THEN\n    \
         v_token := c.mine;\n    \
         UPDATE {t} SET expires_at = {ttl} WHERE {object} AND holder = p_holder AND kind = p_kind;\n  \
         ELSIF v_won THEN\n    \
         UPDATE {t} SET version = GREATEST(version + 1, (extract(epoch FROM v_now) * 1000000)::bigint) \
         WHERE {object} AND holder = '#' RETURNING version INTO v_token;\n    \
         IF p_kind = 'write' AND c.my_upgradeable IS NOT NULL THEN\n      \
         UPDATE {t} SET kind = 'write', version = v_token, expires_at = {ttl} \
         WHERE {object} AND holder = p_holder AND kind = 'uread';\n    \
         ELSE\n      \
         INSERT INTO {t} {columns} VALUES (p_primitive, p_key, p_holder, p_name, p_kind, \
         CASE WHEN p_kind = 'permit' THEN p_permits END, v_token, {ttl});\n    \
         END IF;\n    \
         IF p_weight > 1 THEN\n      \
         INSERT INTO {w} (obj_primitive, obj_key, owner, token, weight) \
         VALUES (p_primitive, p_key, p_holder, v_token, p_weight);\n    \
         END IF;\n  \
         END IF;\n  \
         IF p_waiter IS NOT NULL THEN\n    \
         IF v_won THEN\n      \
         DELETE FROM {t} WHERE {object} AND holder = p_waiter AND kind = 'waiter';\n    \
         ELSE\n      \
         INSERT INTO {t} {columns} VALUES (p_primitive, p_key, p_waiter, p_name, 'waiter', NULL, 0, {stay}) \
         ON CONFLICT (primitive, lock_key, holder) DO UPDATE SET expires_at = EXCLUDED.expires_at;\n    \
         END IF;\n  \
         END IF;\n  \
         RETURN QUERY SELECT v_won, v_token, c.holds, c.readers, c.writers, c.waiting, c.stored, \
         c.mine, c.first_permit, c.last_reader, c.writer;\n\
         END\n\
         $distlock$"
    )
}

/// The values of one attempt.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) struct AttemptValues<'a> {
    pub(crate) primitive: &'static str,
    pub(crate) key: &'a str,
    pub(crate) name: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) kind: LockKind,
    /// The hold's TTL in µs.
    pub(crate) ttl: i64,
    /// A waiting writer's `holder` value and how long its record lives (µs).
    pub(crate) waiter: Option<(&'a str, i64)>,
}

/// MySQL: one attempt as one text query (one round trip). In one transaction: lock the
/// object's row (creating it if missing), delete its expired rows, take the census of the
/// live rows with `FOR UPDATE`, decide by `admission.rs`'s rule, then either bump the object's
/// version and insert the hold, or renew the attempt's own hold (a retry); a writer removes
/// its waiting record when it wins and records or renews it when it loses. The final
/// `SELECT` yields `won`, the fencing token, then the census's columns.
///
/// A statement that fails stops the query with the transaction open: the caller must close
/// the connection then (which rolls it back), never return it to the pool.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) fn mysql_attempt(table: &str, weights: &str, v: &AttemptValues<'_>) -> String {
    let t = format!("`{table}`");
    let w = format!("`{weights}`");
    let join = weight_join(&w);
    let weight = v.kind.weight();
    let p = ascii_literal(v.primitive);
    let k = ascii_literal(v.key);
    let n = text_literal(v.name);
    let o = ascii_literal(v.owner);
    let kind = kind_column(v.kind).unwrap_or("object");
    let kind_lit = format!("'{kind}'");
    let (permits, won) = match v.kind {
        LockKind::Permit { permits, .. } => (
            permits.to_string(),
            format!(
                "@dl_mine IS NOT NULL OR ((@dl_stored IS NULL OR @dl_stored = {permits}) \
                 AND @dl_holds + {weight} <= {permits})"
            ),
        ),
        LockKind::Read => (
            "NULL".to_owned(),
            "@dl_mine IS NOT NULL OR (@dl_writers = 0 AND @dl_waiting = 0)".to_owned(),
        ),
        LockKind::UpgradeableRead => (
            "NULL".to_owned(),
            "@dl_mine IS NOT NULL OR (@dl_writers = 0 AND @dl_upgraders = 0 AND @dl_waiting = 0)".to_owned(),
        ),
        // A writer only when nothing is held, or its owner's upgradeable read alone (its
        // upgrade); anything else (which never reaches here) only when nothing is held.
        _ => (
            "NULL".to_owned(),
            "@dl_mine IS NOT NULL OR @dl_holds = 0 OR (@dl_my_upgradeable IS NOT NULL AND @dl_holds = 1)"
                .to_owned(),
        ),
    };
    // An upgrade turns the owner's upgradeable read into the write hold instead of inserting
    // one (it has the same key).
    let (fresh, upgrade) = match v.kind {
        LockKind::Write => (" AND @dl_my_upgradeable IS NULL", true),
        _ => ("", false),
    };
    let ttl = v.ttl;
    let object = format!("primitive = {p} AND lock_key = {k}");
    let columns = "(primitive, lock_key, holder, lock_name, kind, permits, version, expires_at)";
    let left = "TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)";
    let mut q = String::with_capacity(4096);
    // `write!` to a String cannot fail.
    let _ = write!(
        q,
        "START TRANSACTION;\n\
         INSERT INTO {t} {columns} VALUES ({p}, {k}, '#', {n}, 'object', NULL, 0, NULL) \
         ON DUPLICATE KEY UPDATE version = version;\n\
         DELETE FROM {t} WHERE {object} AND kind <> 'object' AND expires_at <= UTC_TIMESTAMP(6);\n\
         SELECT {census} INTO @dl_holds, @dl_readers, @dl_writers, @dl_waiting, @dl_stored, @dl_mine, \
         @dl_first_permit, @dl_last_reader, @dl_writer, @dl_upgraders, @dl_my_upgradeable \
         FROM {t} {join} WHERE {object} AND kind <> 'object' AND expires_at > UTC_TIMESTAMP(6) FOR UPDATE;\n\
         SET @dl_won = ({won});\n\
         UPDATE {t} SET version = LAST_INSERT_ID(GREATEST(version + 1, {MYSQL_CLOCK_US})) \
         WHERE {object} AND holder = '#' AND @dl_won AND @dl_mine IS NULL;\n\
         SET @dl_token = CASE WHEN NOT @dl_won THEN NULL WHEN @dl_mine IS NOT NULL THEN @dl_mine \
         ELSE LAST_INSERT_ID() END;\n\
         INSERT INTO {t} {columns} SELECT {p}, {k}, {o}, {n}, {kind_lit}, {permits}, @dl_token, \
         UTC_TIMESTAMP(6) + INTERVAL {ttl} MICROSECOND FROM DUAL WHERE @dl_won AND @dl_mine IS NULL{fresh};\n\
         UPDATE {t} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL {ttl} MICROSECOND \
         WHERE {object} AND holder = {o} AND kind = {kind_lit} AND @dl_mine IS NOT NULL;\n",
        census = census_columns(&o, &kind_lit, left),
    );
    if upgrade {
        let _ = writeln!(
            q,
            "UPDATE {t} SET kind = 'write', version = @dl_token, \
             expires_at = UTC_TIMESTAMP(6) + INTERVAL {ttl} MICROSECOND \
             WHERE {object} AND holder = {o} AND kind = 'uread' AND @dl_won AND @dl_mine IS NULL \
             AND @dl_my_upgradeable IS NOT NULL;"
        );
    }
    if weight > 1 {
        let _ = writeln!(
            q,
            "INSERT INTO {w} (obj_primitive, obj_key, owner, token, weight) SELECT {p}, {k}, {o}, @dl_token, {weight} \
             FROM DUAL WHERE @dl_won AND @dl_mine IS NULL;"
        );
    }
    if let Some((waiter, stay)) = v.waiter {
        let w = ascii_literal(waiter);
        let _ = write!(
            q,
            "DELETE FROM {t} WHERE {object} AND holder = {w} AND kind = 'waiter' AND @dl_won;\n\
             INSERT INTO {t} {columns} SELECT {p}, {k}, {w}, {n}, 'waiter', NULL, 0, \
             UTC_TIMESTAMP(6) + INTERVAL {stay} MICROSECOND FROM DUAL WHERE NOT @dl_won \
             ON DUPLICATE KEY UPDATE expires_at = UTC_TIMESTAMP(6) + INTERVAL {stay} MICROSECOND;\n"
        );
    }
    q.push_str(
        "COMMIT;\n\
         SELECT CAST(@dl_won AS SIGNED), CAST(@dl_token AS SIGNED), CAST(@dl_holds AS SIGNED), \
         CAST(@dl_readers AS SIGNED), CAST(@dl_writers AS SIGNED), CAST(@dl_waiting AS SIGNED), \
         CAST(@dl_stored AS SIGNED), CAST(@dl_mine AS SIGNED), CAST(@dl_first_permit AS SIGNED), \
         CAST(@dl_last_reader AS SIGNED), CAST(@dl_writer AS SIGNED), CAST(@dl_upgraders AS SIGNED), \
         CAST(@dl_my_upgradeable AS SIGNED)",
    );
    q
}

/// An ASCII string as a MySQL literal that no `sql_mode` or content can misread.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
fn ascii_literal(s: &str) -> String {
    format!("_ascii X'{}'", hex(s.as_bytes()))
}

/// A UTF-8 string as a MySQL literal that no `sql_mode` or content can misread.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
fn text_literal(s: &str) -> String {
    format!("_utf8mb4 X'{}'", hex(s.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_tables_fit_an_identifier_and_stay_apart() {
        assert_eq!(
            holds_table(Dialect::MySql, "distlock_locks"),
            "distlock_locks_holds"
        );
        let long_a = format!("{}a", "x".repeat(63));
        let long_b = format!("{}b", "x".repeat(63));
        let (a, b) = (
            holds_table(Dialect::MySql, &long_a),
            holds_table(Dialect::MySql, &long_b),
        );
        assert!(a.len() <= 64 && b.len() <= 64, "{a} {b}");
        assert_ne!(a, b);
        assert!(a.ends_with("_holds"));
        let pg = holds_table(Dialect::Postgres, &"x".repeat(58));
        assert!(pg.len() <= 63 && pg.ends_with("_holds"), "{pg}");
        let function = attempt_function(&"x".repeat(62));
        assert!(
            function.len() <= 63 && function.ends_with("_holds_try"),
            "{function}"
        );
    }

    #[test]
    fn waiter_ids_fit_and_never_look_like_owners() {
        assert_eq!(waiter_holder("ab-12"), "~ab-12");
        let odd = waiter_holder("it's a 'quoted' id");
        assert!(odd.starts_with('~') && odd.len() == 65, "{odd}");
        let long = waiter_holder(&"x".repeat(200));
        assert!(long.len() <= HOLDER_LEN);
        assert_ne!(waiter_holder(""), "~");
    }

    #[test]
    fn literals_carry_no_quotes_of_their_own() {
        assert_eq!(ascii_literal("a'b"), "_ascii X'612762'");
        assert_eq!(text_literal("é"), "_utf8mb4 X'c3a9'");
    }
}

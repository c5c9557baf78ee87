//! The schema's version: one row in `<table>_schema` beside the lock table, the version of the
//! tables and (on PostgreSQL) the functions that this backend created. This module owns that
//! table's SQL and the version rule; `lock.rs` runs it when a client starts.
//!
//! A client creates what is missing and records its version, but replaces PostgreSQL's
//! functions only where the recorded version is older than its own (or absent: a schema from
//! before versions), in the same transaction that reads it, so that in a fleet of mixed
//! versions the last process to start does not decide the function bodies of all. A client
//! that finds a newer version refuses to start ([`check`]), as does one that may not create
//! the schema ([`SqlConfig::with_create_table`](crate::SqlConfig::with_create_table)`(false)`)
//! and finds none or an older one. The version goes up only when the tables or the
//! functions change in a way older clients cannot work with.

use distlock_core::{Error, Result};

use crate::holds_sql::identifier;
use crate::sql::Dialect;

/// The version of the schema this backend creates and works with.
///
/// 2: the weights table (`<table>_weights`) and the attempt's function that counts holds by
/// their weight (an overload with `p_weight`): a client of version 1 would count a hold of
/// several permits as one.
///
/// 3: upgradeable reads: hold rows of kind `uread`, and PostgreSQL's attempt function that
/// admits them and turns one into the write hold on its owner's upgrade (the same signature
/// as version 2's, so the new version is what makes starting clients replace its body).
pub(crate) const SCHEMA_VERSION: i64 = 3;

/// `<table>_schema`, shortened as the holds table's name is.
pub(crate) fn schema_table(dialect: Dialect, table: &str) -> String {
    identifier(dialect, table, "_schema")
}

fn quoted(dialect: Dialect, name: &str) -> String {
    match dialect {
        Dialect::MySql => format!("`{name}`"),
        _ => format!("\"{name}\""),
    }
}

/// `CREATE TABLE IF NOT EXISTS` of the version table: one row, `id` 1.
pub(crate) fn create_table(dialect: Dialect, table: &str) -> String {
    let t = quoted(dialect, &schema_table(dialect, table));
    match dialect {
        Dialect::MySql => format!(
            "CREATE TABLE IF NOT EXISTS {t} (\n  id      TINYINT NOT NULL PRIMARY KEY,\n  \
             version BIGINT NOT NULL\n) ENGINE=InnoDB"
        ),
        Dialect::Postgres => format!(
            "CREATE TABLE IF NOT EXISTS {t} (\n  id      SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),\n  \
             version BIGINT NOT NULL\n)"
        ),
        Dialect::Sqlite => format!(
            "CREATE TABLE IF NOT EXISTS {t} (\n  id      INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),\n  \
             version INTEGER NOT NULL\n)"
        ),
    }
}

/// Records [`SCHEMA_VERSION`], never lowering a newer one.
pub(crate) fn record(dialect: Dialect, table: &str) -> String {
    let t = quoted(dialect, &schema_table(dialect, table));
    let v = SCHEMA_VERSION;
    match dialect {
        Dialect::MySql => format!(
            "INSERT INTO {t} (id, version) VALUES (1, {v}) ON DUPLICATE KEY UPDATE version = GREATEST(version, {v})"
        ),
        Dialect::Postgres => format!(
            "INSERT INTO {t} AS s (id, version) VALUES (1, {v}) \
             ON CONFLICT (id) DO UPDATE SET version = GREATEST(s.version, {v})"
        ),
        Dialect::Sqlite => format!(
            "INSERT INTO {t} (id, version) VALUES (1, {v}) \
             ON CONFLICT (id) DO UPDATE SET version = MAX(version, excluded.version)"
        ),
    }
}

/// Reads the recorded version (no row: `None`).
pub(crate) fn read(dialect: Dialect, table: &str) -> String {
    let t = quoted(dialect, &schema_table(dialect, table));
    format!("SELECT version FROM {t} WHERE id = 1")
}

/// PostgreSQL: runs the `CREATE OR REPLACE FUNCTION` statements `functions` only where the
/// recorded version is older than [`SCHEMA_VERSION`] or absent, in one `DO` block (each
/// function's text dollar-quoted with a tag of its own).
pub(crate) fn pg_functions_if_older(table: &str, functions: &[&str]) -> String {
    let t = quoted(Dialect::Postgres, &schema_table(Dialect::Postgres, table));
    let mut sql = format!(
        "DO $distlock_schema$\nBEGIN\n  IF COALESCE((SELECT version FROM {t} WHERE id = 1), 0) < {SCHEMA_VERSION} THEN\n"
    );
    for (i, function) in functions.iter().enumerate() {
        sql.push_str(&format!(
            "    EXECUTE $distlock_f{i}${function}$distlock_f{i}$;\n"
        ));
    }
    sql.push_str("  END IF;\nEND\n$distlock_schema$");
    sql
}

/// Whether a client of [`SCHEMA_VERSION`] may work with the schema at `found` (read from
/// `table`'s version table; `Err` with the database's message if it could not be read).
///
/// # Errors
/// [`Error::InvalidConfig`] for a schema that is missing, older (where this client may not
/// upgrade it) or newer.
pub(crate) fn check(
    found: std::result::Result<Option<i64>, String>,
    table: &str,
    may_create: bool,
) -> Result<()> {
    let fix = "have a DBA run the DDL of this version (`distlock schema <url>`, or \
               `SqlConfig::ddl()`), or let the client create it (`SqlConfig::with_create_table(true)`)";
    match found {
        Ok(Some(v)) if v == SCHEMA_VERSION => Ok(()),
        Ok(Some(v)) if v > SCHEMA_VERSION => Err(Error::invalid_config(format!(
            "the lock table {table:?} has schema version {v}, newer than this client's \
             {SCHEMA_VERSION}: upgrade this client (an older one could break the newer clients)"
        ))),
        Ok(Some(v)) if !may_create => Err(Error::invalid_config(format!(
            "the lock table {table:?} has schema version {v}, older than this client's \
             {SCHEMA_VERSION}: {fix}"
        ))),
        Ok(_) if !may_create => Err(Error::invalid_config(format!(
            "the lock table {table:?} has no schema version: {fix}"
        ))),
        Err(message) if !may_create => Err(Error::invalid_config(format!(
            "the schema version of the lock table {table:?} cannot be read ({message}): {fix}"
        ))),
        // Created just now: recorded, unless another client raced it lower (impossible: the
        // version only goes up) or the database refused.
        Ok(v) => Err(Error::invalid_config(format!(
            "the lock table {table:?} has schema version {v:?} after it was created; expected {SCHEMA_VERSION}"
        ))),
        Err(message) => Err(Error::invalid_config(format!(
            "the schema version of the lock table {table:?} cannot be read after creating it: {message}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_rule() {
        assert!(check(Ok(Some(SCHEMA_VERSION)), "t", false).is_ok());
        assert!(check(Ok(Some(SCHEMA_VERSION + 1)), "t", true).is_err());
        assert!(check(Ok(Some(SCHEMA_VERSION - 1)), "t", false).is_err());
        assert!(check(Ok(None), "t", false).is_err());
        assert!(check(Err("no table".into()), "t", false).is_err());
    }

    #[test]
    fn functions_are_quoted_apart() {
        let sql = pg_functions_if_older("t", &["CREATE FUNCTION a() AS $distlock$ x $distlock$"]);
        assert!(sql.contains("$distlock_f0$CREATE FUNCTION"));
        assert!(sql.ends_with("$distlock_schema$"));
    }
}

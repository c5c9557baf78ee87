//! The tests of the SQL backends beside the conformance suites, one module per area, in one
//! test binary (one link instead of one per area).

#[path = "support/dialects.rs"]
mod dialects;
// Each store's fixture has a module of its own for the promoted replica, as in the conformance
// binaries, which load one fixture each.
#[allow(clippy::duplicate_mod)]
#[path = "support/mysql.rs"]
mod mysql_support;
#[allow(clippy::duplicate_mod)]
#[path = "support/postgres.rs"]
mod postgres_support;

mod doctor;
mod mariadb_failover;
mod mysql_clock;
mod mysql_fencing;
mod mysql_insert_id;
mod mysql_lock_wait;
mod mysql_many_held;
mod mysql_outage;
mod mysql_pool;
mod mysql_read_only;
mod mysql_round_trips;
mod mysql_sql_mode;
mod notes;
mod postgres_failover;
mod postgres_isolation;
mod postgres_many_held;
mod postgres_notify;
mod postgres_round_trips;
mod postgres_schema;
mod primitives;
mod purge_servers;
mod release_by_owner;
mod renew_batch;
mod schema_ddl;
mod sql_tls;
mod sqlite_api;
mod sqlite_busy;
mod sqlite_default_path;
mod sqlite_host_wake;
mod sqlite_kind_wake;
mod sqlite_long_path;
mod sqlite_private_dir;
mod sqlite_processes;
mod sqlite_purge;
mod sqlite_waiters_dir;
mod statement_binds;
mod upgradeable_reads;
mod weighted_permits;

/// The name libtest gives the test `name` of the module at `module_path` (the module path
/// less this binary's name), for a test that runs another of its module's tests in a child
/// process.
fn test_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    }
}

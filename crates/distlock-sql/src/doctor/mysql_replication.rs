//! MySQL/MariaDB: what the primary's replication promises a failover. Semi-synchronous
//! replication waiting `AFTER_SYNC` keeps every lock granted (a commit returns once a replica
//! has it); asynchronous replication, or semi-synchronous replication that fell back to
//! asynchronous (no replica acknowledged within its timeout), can lose the last ones.
//! MySQL 8.0.26+ names the settings `rpl_semi_sync_source_*`, MariaDB and older MySQL
//! `rpl_semi_sync_master_*`; both are read.

use std::collections::HashMap;

use distlock_core::{Finding, Verdict};
use sqlx::MySqlConnection;

/// The semi-synchronous settings and status of the primary, by their `master` names in lower
/// case (`rpl_semi_sync_master_enabled`, `rpl_semi_sync_master_status`, ...).
#[derive(Debug, Default)]
pub(super) struct SemiSync(HashMap<String, String>);

impl SemiSync {
    /// Reads the variables and status (readable by any user; empty where the server has no
    /// semi-synchronous replication built in or loaded). 2 round trips.
    pub(super) async fn read(conn: &mut MySqlConnection) -> Self {
        let mut found = HashMap::new();
        for query in [
            "SHOW GLOBAL VARIABLES LIKE 'rpl\\_semi\\_sync\\_%'",
            "SHOW GLOBAL STATUS LIKE 'Rpl\\_semi\\_sync\\_%'",
        ] {
            let rows: Vec<(String, String)> = sqlx::query_as(query)
                .fetch_all(&mut *conn)
                .await
                .unwrap_or_default();
            found.extend(
                rows.into_iter()
                    .map(|(name, value)| (name.to_ascii_lowercase().replace("_source_", "_master_"), value)),
            );
        }
        Self(found)
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    fn on(&self, name: &str) -> bool {
        self.get(name)
            .is_some_and(|v| v.eq_ignore_ascii_case("ON") || v == "1")
    }
}

/// The `replication` finding: with no binary log nothing follows this server; else the
/// semi-synchronous state decides.
pub(super) fn replication(log_bin: bool, semi: &SemiSync, at: &str) -> Finding {
    if !log_bin {
        return Finding::new("replication", Verdict::Ok, "none (no binary log)")
            .at(at)
            .because("no replica follows this server");
    }
    if !semi.on("rpl_semi_sync_master_enabled") {
        return Finding::new("replication", Verdict::Warn, "asynchronous (log_bin ON)")
            .at(at)
            .because("a replica gets each commit after the client was told: a failover to it can lose the last locks granted and hand them out again")
            .fix("on the primary and every replica that may be promoted: SET GLOBAL rpl_semi_sync_master_enabled = ON, rpl_semi_sync_slave_enabled = ON, rpl_semi_sync_master_wait_point = 'AFTER_SYNC' (MySQL 8.0.26+: rpl_semi_sync_source_*, rpl_semi_sync_replica_*), and in the servers' configuration");
    }
    let wait_point = semi.get("rpl_semi_sync_master_wait_point").unwrap_or("?");
    let timeout_ms = semi.get("rpl_semi_sync_master_timeout").unwrap_or("?");
    let clients = semi.get("rpl_semi_sync_master_clients").unwrap_or("?");
    // With no replica connected, the next commit returns without one (with
    // `rpl_semi_sync_master_wait_no_slave` OFF at once; ON, after the timeout), and the status
    // turns OFF only then.
    if !semi.on("rpl_semi_sync_master_status") || clients == "0" {
        return Finding::new(
            "replication",
            Verdict::Warn,
            format!("semi-synchronous, {wait_point}, but off now: asynchronous ({clients} replicas acknowledging)"),
        )
        .at(at)
        .because("no replica acknowledged within rpl_semi_sync_master_timeout, or none is connected: commits return without a replica, and a failover now can lose the last locks granted")
        .fix("bring a semi-synchronous replica back (the primary switches back once it has caught up)");
    }
    Finding::new(
        "replication",
        Verdict::Ok,
        format!("semi-synchronous, {wait_point}, {clients} replicas acknowledging, timeout {timeout_ms} ms"),
    )
    .at(at)
    .because("a commit returns once a replica has it, so a failover to that replica keeps every lock; after the timeout without an acknowledgement the primary goes asynchronous (and says so here)")
}

//! MySQL/MariaDB: the server's role (`read_only`, a replica), privileges that bypass
//! `read_only`, the isolation level and MariaDB's `SIMULTANEOUS_ASSIGNMENT` (which the
//! statements are written not to depend on), the binary log's format, the replication a
//! failover relies on (`doctor/mysql_replication.rs`), and the clock. One
//! connection, one round trip per query.

use std::collections::HashMap;

use distlock_core::{Finding, Result, Verdict};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::Connection;

use super::clock::{clock, now_us};
use super::connect_error;
use super::mysql_replication::{replication, SemiSync};

const BACKEND: &str = "mysql";

pub(super) async fn doctor(options: &MySqlConnectOptions, at: &str) -> Result<Vec<Finding>> {
    let mut conn = MySqlConnection::connect_with(options)
        .await
        .map_err(|e| connect_error(BACKEND, e))?;
    let vars: HashMap<String, String> = sqlx::query_as::<_, (String, String)>(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('read_only', 'super_read_only', \
         'transaction_isolation', 'tx_isolation', 'sql_mode', 'log_bin', 'binlog_format', 'version')",
    )
    .fetch_all(&mut conn)
    .await
    .map_err(|e| connect_error(BACKEND, e))?
    .into_iter()
    .map(|(name, value)| (name.to_ascii_lowercase(), value))
    .collect();
    // Needs REPLICATION CLIENT (MariaDB: SLAVE MONITOR); `None` when refused. `SHOW REPLICA
    // STATUS` on MySQL 8.0.22+ and MariaDB 10.5+, the older name before (MySQL 8.4 dropped it).
    let mut replica = None;
    for query in ["SHOW REPLICA STATUS", "SHOW SLAVE STATUS"] {
        if let Ok(rows) = sqlx::query(query).fetch_all(&mut conn).await {
            replica = Some(!rows.is_empty());
            break;
        }
    }
    let semi_sync = SemiSync::read(&mut conn).await;
    let grants: Vec<String> = sqlx::query_scalar("SHOW GRANTS")
        .fetch_all(&mut conn)
        .await
        .unwrap_or_default();
    let sent = now_us();
    let server_us: i64 = sqlx::query_scalar(
        "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) AS SIGNED)",
    )
    .fetch_one(&mut conn)
    .await
    .map_err(|e| connect_error(BACKEND, e))?;
    let received = now_us();
    let _ = conn.close().await;
    let var = |name: &str| vars.get(name).map(String::as_str);
    Ok(vec![
        role(var("read_only"), var("super_read_only"), replica, at),
        privileges(&grants, at),
        isolation(var("transaction_isolation").or(var("tx_isolation")), at),
        sql_mode(var("sql_mode"), var("version"), at),
        binlog(var("log_bin"), var("binlog_format"), at),
        replication(on(var("log_bin")), &semi_sync, at),
        clock(server_us, sent, received, at),
    ])
}

fn on(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.eq_ignore_ascii_case("on") || v == "1")
}

fn role(read_only: Option<&str>, super_read_only: Option<&str>, replica: Option<bool>, at: &str) -> Finding {
    let found = format!(
        "read_only {}, {}",
        read_only.unwrap_or("?"),
        match replica {
            Some(true) => "a replica",
            Some(false) => "not a replica",
            None => "replica status not shown",
        }
    );
    let finding = Finding::new("role", Verdict::Ok, found).at(at);
    if replica == Some(true) || on(read_only) || on(super_read_only) {
        return finding
            .with_verdict(Verdict::Unsafe)
            .because("a read-only server or replica: it refuses lock writes (or, for a user that bypasses read_only, takes them where its primary and other clients never see them)")
            .fix("point the URL at the primary");
    }
    if replica.is_none() {
        return finding
            .with_verdict(Verdict::Warn)
            .because("writable, but whether it replicates from another server could not be read")
            .fix("GRANT REPLICATION CLIENT (MariaDB: SLAVE MONITOR) to the lock's user, or check SHOW SLAVE STATUS by hand");
    }
    finding.because("a writable primary")
}

fn privileges(grants: &[String], at: &str) -> Finding {
    let bypass = grants.iter().find(|grant| {
        let grant = grant.to_ascii_uppercase();
        let global = grant.contains(" ON *.*");
        global
            && (grant.contains("ALL PRIVILEGES")
                || grant.contains("SUPER")
                || grant.contains("READ_ONLY ADMIN"))
    });
    if grants.is_empty() {
        return Finding::new("privileges", Verdict::Warn, "SHOW GRANTS refused")
            .at(at)
            .because("whether the lock's user can write to a read-only server could not be read")
            .fix("check that the lock's user has neither SUPER nor READ_ONLY ADMIN");
    }
    match bypass {
        Some(grant) => Finding::new("privileges", Verdict::Warn, without_password(grant))
            .at(at)
            .because("this user writes even when the server is read_only: after a failover it would keep taking locks on the demoted primary, beside the clients of the new one")
            .fix("run the locks as a user with SELECT, INSERT, UPDATE, DELETE (and CREATE) on the lock tables only"),
        None => Finding::new("privileges", Verdict::Ok, "no SUPER or READ_ONLY ADMIN")
            .at(at)
            .because("a read-only server refuses this user's writes"),
    }
}

/// A grant as `SHOW GRANTS` prints it, without its `IDENTIFIED BY PASSWORD '<hash>'` tail.
fn without_password(grant: &str) -> String {
    let cut = grant
        .to_ascii_uppercase()
        .find(" IDENTIFIED")
        .unwrap_or(grant.len());
    grant[..cut].to_owned()
}

fn isolation(level: Option<&str>, at: &str) -> Finding {
    Finding::new("transaction isolation", Verdict::Ok, level.unwrap_or("?"))
        .at(at)
        .because("every statement that decides is a locking read or runs after taking the object's row lock, so every level gives the same answers")
}

fn sql_mode(mode: Option<&str>, version: Option<&str>, at: &str) -> Finding {
    let mode = mode.unwrap_or("?");
    let simultaneous = mode
        .split(',')
        .any(|m| m.eq_ignore_ascii_case("SIMULTANEOUS_ASSIGNMENT") || m.eq_ignore_ascii_case("ORACLE"));
    let mariadb = version.is_some_and(|v| v.to_ascii_lowercase().contains("mariadb"));
    let reason = if simultaneous {
        "SIMULTANEOUS_ASSIGNMENT is on: the acquire's ON DUPLICATE KEY UPDATE is written so that its assignments give the same row either way"
    } else if mariadb {
        "SIMULTANEOUS_ASSIGNMENT is off; the statements give the same rows with it on"
    } else {
        "no mode changes the statements' meaning: their values are bound or hexadecimal literals"
    };
    Finding::new("sql_mode", Verdict::Ok, if mode.is_empty() { "''" } else { mode })
        .at(at)
        .because(reason)
}

fn binlog(log_bin: Option<&str>, format: Option<&str>, at: &str) -> Finding {
    let format = format.unwrap_or("?");
    if !on(log_bin) {
        return Finding::new("binlog_format", Verdict::Ok, format!("log_bin OFF ({format})"))
            .at(at)
            .because("no binary log: no replica follows this server");
    }
    let finding = Finding::new("binlog_format", Verdict::Ok, format!("log_bin ON, {format}")).at(at);
    if format.eq_ignore_ascii_case("STATEMENT") {
        return finding
            .with_verdict(Verdict::Warn)
            .because("replicas run the statements again instead of copying rows: the acquire's LAST_INSERT_ID(expr) and session variables are replayed from context, and a replica that diverges holds other locks and tokens than its primary when promoted")
            .fix("SET GLOBAL binlog_format = 'ROW' (and in the server's configuration)");
    }
    finding.because("replicas copy the rows the primary wrote (a failover to an asynchronous replica can still lose the last locks: use semi-synchronous replication or Galera)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_is_shown_without_its_password_hash() {
        let grant = "GRANT ALL PRIVILEGES ON *.* TO `app`@`%` IDENTIFIED BY PASSWORD '*A4B6157319038724E3560894F7F932C8886EBFCF' WITH GRANT OPTION";
        let finding = privileges(&[grant.to_owned()], "db");
        assert_eq!(finding.verdict, Verdict::Warn);
        assert_eq!(finding.found, "GRANT ALL PRIVILEGES ON *.* TO `app`@`%`");
    }
}

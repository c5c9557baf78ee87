//! PostgreSQL: the server's role (a standby), the isolation the backend's sessions get, and
//! durability (`synchronous_commit`, `synchronous_standby_names` against the standbys
//! streaming), plus the clock. One connection with the backend's own session options, one
//! round trip per query.

use distlock_core::{Finding, Result, Verdict};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, Row};

use super::clock::{clock, now_us};
use super::connect_error;

const BACKEND: &str = "postgres";

pub(super) async fn doctor(options: &PgConnectOptions, at: &str) -> Result<Vec<Finding>> {
    let mut conn = PgConnection::connect_with(options)
        .await
        .map_err(|e| connect_error(BACKEND, e))?;
    let sent = now_us();
    let row = sqlx::query(
        "SELECT pg_is_in_recovery(), current_setting('default_transaction_isolation'), \
         current_setting('synchronous_commit'), current_setting('synchronous_standby_names'), \
         (SELECT count(*) FROM pg_stat_replication), \
         (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
    )
    .fetch_one(&mut conn)
    .await
    .map_err(|e| connect_error(BACKEND, e))?;
    let received = now_us();
    let _ = conn.close().await;
    let get = |i: usize| row.try_get::<String, _>(i).unwrap_or_default();
    let in_recovery: bool = row.try_get(0).unwrap_or(false);
    let standbys: i64 = row.try_get(4).unwrap_or(0);
    let server_us: i64 = row.try_get(5).unwrap_or(sent);
    Ok(vec![
        role(in_recovery, at),
        isolation(&get(1), at),
        durability(&get(2), &get(3), standbys, at),
        clock(server_us, sent, received, at),
    ])
}

fn role(in_recovery: bool, at: &str) -> Finding {
    if in_recovery {
        return Finding::new("role", Verdict::Unsafe, "standby (pg_is_in_recovery)")
            .at(at)
            .because("a standby refuses every write, and what it shows of the lock table lags its primary")
            .fix("point the URL at the primary");
    }
    Finding::new("role", Verdict::Ok, "primary")
        .at(at)
        .because("locks are written on the primary")
}

fn isolation(level: &str, at: &str) -> Finding {
    let finding = Finding::new("default_transaction_isolation", Verdict::Ok, level).at(at);
    if level == "read committed" {
        return finding.because("the backend's sessions ask for READ COMMITTED in their startup packet, over the database's and role's defaults");
    }
    finding
        .with_verdict(Verdict::Unsafe)
        .because("the backend's sessions asked for READ COMMITTED in their startup packet but run another level (a pooler dropped the startup options?): a release reads the queue of waiters, and an attempt counts the holds, in a snapshot taken before they waited for the lock's row")
        .fix("connect directly or through a pooler that passes startup options (PgBouncer: ignore_startup_parameters must not drop options)")
}

fn durability(commit: &str, standby_names: &str, standbys: i64, at: &str) -> Finding {
    let names = if standby_names.is_empty() {
        "''"
    } else {
        standby_names
    };
    let found = format!(
        "synchronous_commit {commit}, synchronous_standby_names {names}, {standbys} standby(s) streaming"
    );
    let finding = Finding::new("durability", Verdict::Ok, found).at(at);
    if commit == "off" {
        return finding
            .with_verdict(Verdict::Warn)
            .because("a commit is acknowledged before it is on disk: a crash loses the last commits, freeing locks whose holders work on")
            .fix("ALTER SYSTEM SET synchronous_commit = on; SELECT pg_reload_conf()");
    }
    let synchronous = !standby_names.is_empty() && commit != "local";
    if standbys > 0 && !synchronous {
        return finding
            .with_verdict(Verdict::Warn)
            .because("standbys replicate asynchronously: a failover to one that missed the last commits frees locks whose holders work on, and can repeat fencing tokens")
            .fix("name the standbys in synchronous_standby_names (with synchronous_commit on or remote_apply) where a failover must keep locks");
    }
    if standbys == 0 && !standby_names.is_empty() && commit != "local" {
        return finding
            .with_verdict(Verdict::Warn)
            .because("synchronous standbys are named but none is streaming: every commit waits for one, so no lock can be taken")
            .fix("start the standbys, or empty synchronous_standby_names");
    }
    finding.because("a commit survives a crash (and, with synchronous standbys, a failover to one)")
}

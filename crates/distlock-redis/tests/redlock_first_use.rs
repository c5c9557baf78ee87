//! Redlock's first acquisitions on fresh connections: many at once name each master's
//! connection (`CLIENT SETNAME`, `INFO server`) and load the acquire script (`EVAL`) once, not
//! once per acquisition, so that a burst on a new client is not queued behind hundreds of
//! `INFO` replies and 6 KB `EVAL`s on every master.

mod support;

use std::time::Duration;

use distlock_core::{DistributedLockExt, LockName, OwnerToken, TryAcquire};
use distlock_redis::{Redlock, RedlockConfig};
use distlock_testkit::RedisServer;

/// How many acquisitions start at once.
const BURST: usize = 200;

/// How many `INFO` and `EVAL` calls a master may see for the whole burst: one naming of
/// the connection (`CLIENT SETNAME`, `INFO server` and the script by `EVAL`), and one more if
/// that first naming's pipeline is sent again (`EVALSHA` first, then `EVAL` on `NOSCRIPT`).
const AT_MOST: u64 = 2;

/// Calls of `command` the server at `url` ran so far (`INFO commandstats`).
async fn calls(url: &str, command: &str) -> u64 {
    let mut raw = support::raw(url).await.expect("raw connection");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// `BURST` acquisitions at once on `redlock`, of distinct free names labelled `label`: all
/// acquired.
async fn burst(redlock: &Redlock, label: &str) {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let names: Vec<LockName> = (0..BURST)
        .map(|i| LockName::new(format!("{label}-{}-{i}", &run[..12])).expect("valid"))
        .collect();
    let attempts = names.iter().map(|name| async move {
        redlock
            .try_acquire(name, OwnerToken::new(), Duration::from_secs(30))
            .await
    });
    let outcomes = futures::future::join_all(attempts).await;
    let acquired = outcomes
        .iter()
        .filter(|o| matches!(o, Ok(TryAcquire::Acquired(_))))
        .count();
    assert_eq!(
        acquired,
        BURST,
        "every free lock is acquired; failures: {:?}",
        outcomes.iter().filter(|o| o.is_err()).take(3).collect::<Vec<_>>()
    );
}

/// A Redlock client over `servers` (a generous node timeout: the counts are what is checked).
async fn redlock(servers: &[RedisServer]) -> Redlock {
    RedlockConfig::new(servers.iter().map(RedisServer::url))
        .expect("valid")
        .with_node_timeout(Duration::from_secs(5))
        .with_restart_quarantine(Duration::ZERO)
        .build()
        .await
        .expect("builds")
}

/// `(INFO, EVAL)` calls on each of `servers`.
async fn counts(servers: &[RedisServer]) -> Vec<(u64, u64)> {
    let mut counts = Vec::new();
    for server in servers {
        let url = server.url();
        counts.push((calls(&url, "info").await, calls(&url, "eval").await));
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_first_acquisitions_names_each_connection_once() {
    let servers = support::start_servers(3).await;
    let redlock = redlock(&servers).await;
    burst(&redlock, "first").await;
    let counts = counts(&servers).await;
    assert!(
        counts
            .iter()
            .all(|&(info, eval)| info <= AT_MOST && eval <= AT_MOST),
        "(INFO, EVAL) calls per master for {BURST} first acquisitions: {counts:?}; \
         expected at most {AT_MOST} of each (the connection is named and the script loaded once)"
    );
}

/// After a master's restart (a new connection, a server without the script) a burst names the
/// new connection and loads the script once too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_after_a_restart_names_the_new_connection_once() {
    let servers = support::start_servers(3).await;
    let redlock = redlock(&servers).await;
    burst(&redlock, "before").await;
    let servers = tokio::task::spawn_blocking(move || {
        let mut servers = servers;
        servers[0].restart().expect("restarts");
        servers
    })
    .await
    .expect("joined");
    burst(&redlock, "after").await;
    let (info, eval) = counts(&servers[..1]).await[0];
    assert!(
        info <= AT_MOST && eval <= AT_MOST,
        "(INFO, EVAL) calls on the restarted master for {BURST} acquisitions: ({info}, {eval}); \
         expected at most {AT_MOST} of each (the new connection is named and the script loaded once)"
    );
}

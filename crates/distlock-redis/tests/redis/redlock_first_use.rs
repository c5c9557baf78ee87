//! Redlock's first acquisitions on fresh connections: many at once name each master's
//! connection (`CLIENT SETNAME`, `INFO server`) and load the acquire script (`EVAL`) once, not
//! once per acquisition, so that a burst on a new client is not queued behind hundreds of
//! `INFO` replies and 6 KB `EVAL`s on every master.

use crate::support;

use std::time::{Duration, Instant};

use distlock_core::{DistributedLockExt, LockName, OwnerToken, Result, TryAcquire};
use distlock_redis::{Redlock, RedlockConfig};
use distlock_testkit::{FaultProxy, RedisServer};

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

/// `count` acquisitions at once on `redlock` for `ttl`, of distinct free names labelled
/// `label`: their outcomes.
async fn at_once(redlock: &Redlock, label: &str, count: usize, ttl: Duration) -> Vec<Result<TryAcquire>> {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let names: Vec<LockName> = (0..count)
        .map(|i| LockName::new(format!("{label}-{}-{i}", &run[..12])).expect("valid"))
        .collect();
    let attempts = names
        .iter()
        .map(|name| async move { redlock.try_acquire(name, OwnerToken::new(), ttl).await });
    futures::future::join_all(attempts).await
}

/// `BURST` acquisitions at once on `redlock`, of distinct free names labelled `label`: all
/// acquired.
async fn burst(redlock: &Redlock, label: &str) {
    let outcomes = at_once(redlock, label, BURST, Duration::from_secs(30)).await;
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

/// How many acquisitions start at once while a master is silent.
const SILENT_BURST: usize = 50;

/// Three masters, the first behind a fault proxy, and a Redlock client over them (its
/// connections open, none named yet); then the proxy falls silent (nothing passes either
/// way, nothing is closed), so the first master's naming never completes.
async fn first_master_silent(node_timeout: Duration) -> (Vec<RedisServer>, FaultProxy, Redlock) {
    first_master_faulty(node_timeout, FaultProxy::blackhole).await
}

/// As [`first_master_silent`], with `fault` made on the first master's proxy instead.
async fn first_master_faulty(
    node_timeout: Duration,
    fault: impl FnOnce(&FaultProxy),
) -> (Vec<RedisServer>, FaultProxy, Redlock) {
    let servers = support::start_servers(3).await;
    let proxy = FaultProxy::start(servers[0].addr()).expect("the proxy starts");
    let urls = [
        format!("redis://{}", proxy.host_port()),
        servers[1].url(),
        servers[2].url(),
    ];
    let redlock = RedlockConfig::new(urls)
        .expect("valid")
        .with_node_timeout(node_timeout)
        .with_restart_quarantine(Duration::ZERO)
        .build()
        .await
        .expect("builds");
    fault(&proxy);
    (servers, proxy, redlock)
}

/// Every one of `outcomes` is a grant (the silent master's vote alone failed).
fn all_granted(outcomes: &[Result<TryAcquire>]) {
    let others: Vec<_> = outcomes
        .iter()
        .filter(|o| !matches!(o, Ok(TryAcquire::Acquired(_))))
        .collect();
    assert!(
        others.is_empty(),
        "the two masters that answer grant every free lock; {} of {} were not granted: {:?}",
        others.len(),
        outcomes.len(),
        &others[..others.len().min(3)]
    );
}

/// A burst of first acquisitions while a master is silent: one names that master's
/// connection, the others wait for it; the silent master costs each acquisition its vote
/// and at most the node timeout, and the other two grant every lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_silent_while_named_fails_only_its_vote_within_the_node_timeout() {
    let (_servers, proxy, redlock) = first_master_silent(Duration::from_millis(250)).await;
    let started = Instant::now();
    let outcomes = at_once(&redlock, "silent", SILENT_BURST, Duration::from_secs(30)).await;
    let elapsed = started.elapsed();
    all_granted(&outcomes);
    let bound = Duration::from_secs(5);
    assert!(
        elapsed < bound,
        "{SILENT_BURST} acquisitions with a silent master took {elapsed:?}, expected under {bound:?} \
         (the node timeout is 250 ms)"
    );
    proxy.heal();
}

/// A request waiting for another's naming of a silent master's connection gives up at its
/// own bound, not at the naming's: the naming belongs to an acquisition of a long TTL
/// (bounded by the 20 s node timeout), the waiters' TTL is 3 s (bounded by half of it), and
/// the other two masters grant every waiter's lock well within its validity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_silent_masters_naming_ends_at_the_waiters_own_bound() {
    let (_servers, proxy, redlock) = first_master_silent(Duration::from_secs(20)).await;
    let naming = tokio::spawn({
        let redlock = redlock.clone();
        async move { at_once(&redlock, "long", 1, Duration::from_secs(120)).await }
    });
    // The long acquisition is naming the silent master's connection by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let outcomes = at_once(&redlock, "short", SILENT_BURST, Duration::from_secs(3)).await;
    let elapsed = started.elapsed();
    naming.abort();
    all_granted(&outcomes);
    let bound = Duration::from_secs(10);
    assert!(
        elapsed < bound,
        "{SILENT_BURST} acquisitions of 3 s waiting for a silent master's naming took {elapsed:?}, \
         expected under {bound:?}: each gives up at half its TTL, not when the naming does (20 s)"
    );
    proxy.heal();
}

/// A master that dies as its connection is about to be named (its connections reset, new
/// ones refused) fails only its own vote, at once for every acquisition of a burst: a failed
/// naming is not taken up again by the waiting acquisitions one after another (each failing
/// in its turn after its reconnection attempt: 200 took 6.8 s so, against 0.2 s when each
/// names the connection itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_dead_while_named_fails_every_vote_of_a_burst_at_once() {
    let (_servers, proxy, redlock) = first_master_faulty(Duration::from_secs(20), |proxy| {
        proxy.refuse(true);
        proxy.reset();
    })
    .await;
    let started = Instant::now();
    let outcomes = at_once(&redlock, "dead", BURST, Duration::from_secs(30)).await;
    let elapsed = started.elapsed();
    all_granted(&outcomes);
    let bound = Duration::from_secs(3);
    assert!(
        elapsed < bound,
        "{BURST} acquisitions with a dead master took {elapsed:?}, expected under {bound:?}: \
         refused connections fail at once (the node timeout is 20 s)"
    );
    proxy.heal();
}

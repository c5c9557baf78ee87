//! One hot lock: independent [`LockClient`]s, each with its own connections, taking one mutex
//! in turn as fast as they can (acquire with a wait, release), as the peer benchmark's hot
//! lock does. What the server runs per acquisition is counted by the server itself
//! (`INFO commandstats`).

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;

use distlock_core::{AcquireOptions, LockClient};
use distlock_redis::RedisLock;

/// The clients contending.
const CLIENTS: u64 = 6;
/// Acquisitions per client.
const EACH: u64 = 25;

/// What the test itself sends to read and reset the statistics.
const THE_TEST_S_OWN: [&str; 2] = ["info", "config"];

/// Every command run on `url` since the last reset, by name (lower case), but the test's own;
/// then resets the statistics.
async fn commands_since_reset(url: &str) -> BTreeMap<String, u64> {
    let mut raw = support::raw(url).await.expect("raw connection");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .expect("INFO");
    let counts = info
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (command, rest) = line.split_once(':')?;
            let calls = rest.strip_prefix("calls=")?.split(',').next()?.parse().ok()?;
            Some((command.to_owned(), calls))
        })
        .filter(|(command, _): &(String, u64)| {
            let command = command.split('|').next().unwrap_or_default();
            !THE_TEST_S_OWN.contains(&command)
        })
        .collect();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut raw)
        .await
        .expect("CONFIG RESETSTAT");
    counts
}

/// The CPU time the server at `url` has used so far (user and system), in µs.
async fn server_cpu_us(url: &str) -> f64 {
    let mut raw = support::raw(url).await.expect("raw connection");
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(&mut raw)
        .await
        .expect("INFO");
    info.lines()
        .filter_map(|line| {
            line.strip_prefix("used_cpu_user:")
                .or_else(|| line.strip_prefix("used_cpu_sys:"))
        })
        .filter_map(|seconds| seconds.trim().parse::<f64>().ok())
        .sum::<f64>()
        * 1e6
}

/// `EACH` acquisitions of `name` by every client, each released at once.
async fn take_turns(clients: &[LockClient], name: &str) {
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait_for(Duration::from_secs(60));
    let tasks: Vec<_> = clients
        .iter()
        .map(|client| {
            let (client, opts, name) = (client.clone(), opts.clone(), name.to_owned());
            tokio::spawn(async move {
                for _ in 0..EACH {
                    let guard = client.acquire_with(name.as_str(), &opts).await.expect("acquires");
                    assert!(guard.release().await.expect("releases"));
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("joined");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_lock_subscribes_each_client_once_not_once_per_wait() {
    let server = support::start_server().await;
    let url = server.url();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(LockClient::new(RedisLock::connect(&url).await.expect("connects")));
    }
    // Warm: the scripts loaded, every client's pub/sub connection open.
    take_turns(&clients, "hot-warm").await;
    commands_since_reset(&url).await;
    let cpu_before = server_cpu_us(&url).await;

    take_turns(&clients, "hot").await;

    let cpu = server_cpu_us(&url).await - cpu_before;
    let ran = commands_since_reset(&url).await;
    let acquisitions = CLIENTS * EACH;
    eprintln!(
        "{acquisitions} acquisitions, {:.0} µs of server CPU each: {ran:?}",
        cpu / acquisitions as f64
    );
    let subscriptions = ran.get("subscribe").copied().unwrap_or_default()
        + ran.get("unsubscribe").copied().unwrap_or_default();
    // Each client's two channels of the lock (the lock's, its own beside it), once.
    assert!(
        subscriptions <= 2 * CLIENTS,
        "{subscriptions} SUBSCRIBE and UNSUBSCRIBE for {acquisitions} acquisitions by {CLIENTS} \
         clients: {ran:?}"
    );
}

/// A release hands the lock to one waiter: its grant is published where only that waiter's
/// client hears it, not to every client waiting for the lock (with many clients waiting,
/// each would receive and parse every grant). A bystander subscribed to the lock's channel,
/// as every waiting client is, hears none of a hot lock's grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_lock_s_grants_reach_only_their_waiters_clients() {
    let server = support::start_server().await;
    let url = server.url();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(LockClient::new(RedisLock::connect(&url).await.expect("connects")));
    }
    let mut bystander = redis::Client::open(url.as_str())
        .expect("valid")
        .get_async_pubsub()
        .await
        .expect("pub/sub");
    bystander
        .subscribe("distlock:released:hot-fan-out")
        .await
        .expect("subscribes");
    commands_since_reset(&url).await;

    take_turns(&clients, "hot-fan-out").await;

    let ran = commands_since_reset(&url).await;
    let grants = ran.get("publish").copied().unwrap_or_default();
    assert!(grants > 0, "no grant published: {ran:?}");
    let mut heard = 0;
    let mut messages = bystander.on_message();
    while tokio::time::timeout(Duration::from_millis(200), messages.next())
        .await
        .is_ok_and(|message| message.is_some())
    {
        heard += 1;
    }
    assert_eq!(
        heard, 0,
        "a bystander on the lock's channel heard {heard} of {grants} grants"
    );
}

/// A client whose last acquisition of a lock had to wait makes its next waiting acquisition's
/// first attempt a queued one: on a hot lock an acquisition costs the server two scripts (the
/// queued attempt that wins, the release), not three (a plain attempt that finds the lock
/// held first). The first acquisition of each client, and an attempt woken too early, may
/// cost more: on average at most 2.3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_lock_costs_two_scripts_per_acquisition() {
    let server = support::start_server().await;
    let url = server.url();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(LockClient::new(RedisLock::connect(&url).await.expect("connects")));
    }
    // Warm: the scripts loaded, every client's pub/sub connection open.
    take_turns(&clients, "hot-scripts-warm").await;
    commands_since_reset(&url).await;

    take_turns(&clients, "hot-scripts").await;

    let ran = commands_since_reset(&url).await;
    let acquisitions = CLIENTS * EACH;
    let scripts =
        ran.get("evalsha").copied().unwrap_or_default() + ran.get("eval").copied().unwrap_or_default();
    let each = scripts as f64 / acquisitions as f64;
    eprintln!("{acquisitions} acquisitions, {each:.2} scripts each: {ran:?}");
    assert!(
        each <= 2.3,
        "{scripts} scripts for {acquisitions} acquisitions ({each:.2} each): {ran:?}"
    );
}

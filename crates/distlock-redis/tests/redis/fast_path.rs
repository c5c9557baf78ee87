//! The uncontended fast path, end to end through [`LockClient`]: a fenced `try_acquire` and
//! the guard's release of a free lock with no waiter are two script calls, whose work on the
//! server is `SET NX PX` and the fencing `INCR`, then compare-and-delete (and a look at the
//! queue's key). Nothing of the waiters' machinery (the server's clock, the queue's sorted
//! set, a publish, a subscription) runs on it. Counted by the server itself
//! (`INFO commandstats`), so any command added to this path, by a script or by the client,
//! shows here.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use distlock_core::{AcquireOptions, LockClient};
use distlock_redis::RedisLock;

/// Acquire+release pairs counted.
const PAIRS: u64 = 50;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_fenced_acquire_and_release_is_two_scripts_of_set_incr_get_del() {
    let server = support::start_server().await;
    let url = server.url();
    let client = LockClient::new(RedisLock::connect(&url).await.expect("connects"));
    // As the peer benchmark asks: a TTL, and a wait that the free lock never needs.
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait_for(Duration::from_secs(60));
    // The first calls load the scripts (EVALSHA answered NOSCRIPT, then EVAL): not counted.
    let warm = client
        .try_acquire_with("fast-path-warm", &opts)
        .await
        .expect("answers")
        .expect("free");
    assert!(warm.release().await.expect("releases"));
    commands_since_reset(&url).await;

    let mut last = 0;
    for _ in 0..PAIRS {
        let guard = client
            .try_acquire_with("fast-path", &opts)
            .await
            .expect("answers")
            .expect("free");
        let token = guard.fencing_token().expect("fenced").get();
        assert!(token > last, "fencing token {token} after {last}");
        last = token;
        assert!(guard.release().await.expect("releases"));
    }

    let ran = commands_since_reset(&url).await;
    let expected: BTreeMap<String, u64> = [
        ("evalsha", 2 * PAIRS),
        ("set", PAIRS),
        ("incr", PAIRS),
        ("get", PAIRS),
        ("del", PAIRS),
        ("exists", PAIRS),
    ]
    .into_iter()
    .map(|(command, calls)| (command.to_owned(), calls))
    .collect();
    assert_eq!(
        ran, expected,
        "the commands of {PAIRS} uncontended acquire+release pairs"
    );
}

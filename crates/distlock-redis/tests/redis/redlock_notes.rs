//! A mutex holder's note and leader election on Redlock over 3 real `redis-server`s: the note
//! is stored only where the caller holds the lock, counts with a majority, is read back
//! beside the owner a majority holds for (a minority that missed it hides nothing), is never
//! shown for a later holder; a leader has no term.

use crate::support;

use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Error, LockClient, LockName, LockState, OwnerToken,
    Primitive, TryAcquire,
};
use distlock_redis::{Redlock, RedlockConfig};
use distlock_testkit::proxy::through_proxies;
use distlock_testkit::{Direction, RedisServer};
use futures::StreamExt;

fn name(label: &str) -> LockName {
    let run = uuid::Uuid::new_v4().simple().to_string();
    LockName::new(format!("rn-{}-{label}", &run[..12])).expect("valid")
}

async fn redlock(servers: &[RedisServer]) -> Redlock {
    RedlockConfig::new(servers.iter().map(RedisServer::url))
        .expect("valid")
        .with_node_timeout(Duration::from_millis(300))
        .with_connect_timeout(Duration::from_millis(300))
        // A master is restarted on purpose below; the quarantine is covered by
        // tests/redis/redlock_faults.rs.
        .with_restart_quarantine(Duration::ZERO)
        .build()
        .await
        .expect("builds")
}

async fn state(lock: &Redlock, name: &LockName) -> LockState {
    lock.inspect(name, Primitive::Mutex)
        .await
        .expect("a majority answers")
        .into_lock()
}

/// The lock key on master `url` (no prefix): who holds it there.
async fn raw_get(url: &str, key: &str) -> Option<String> {
    let mut raw = support::raw(url).await.expect("raw");
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut raw)
        .await
        .expect("GET")
}

async fn raw_set_px(url: &str, key: &str, value: &str, ms: u64) {
    let mut raw = support::raw(url).await.expect("raw");
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(ms)
        .query_async(&mut raw)
        .await
        .expect("SET");
}

async fn take(lock: &Redlock, name: &LockName) -> distlock_core::Lease {
    match lock
        .try_acquire(name, OwnerToken::new(), Duration::from_secs(20))
        .await
    {
        Ok(TryAcquire::Acquired(lease)) => lease,
        other => panic!("the lock is free on a majority: {other:?}"),
    }
}

/// Timelines of one note over 3 masters: a hold gone from one master (its TTL ran out there,
/// or it restarted), a minority that missed the note, a majority down, a later holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_counts_with_a_majority_and_is_read_beside_its_owner() {
    let mut servers = support::start_servers(3).await;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let (a, b) = (redlock(&servers).await, redlock(&servers).await);
    let lock = name("note");
    let key = lock.as_str();

    // A holds all three; its hold is gone from master 3, which therefore refuses its note:
    // two of three stored it, a majority.
    let first = take(&a, &lock).await;
    let owner = first.owner().to_string();
    support::raw_del(&urls[2], key.as_bytes()).await.expect("DEL");
    assert!(
        a.set_note(&first, "a:1").await.expect("a majority answers"),
        "a note stored on a majority of masters"
    );
    // The hold comes back on master 3 without the note: a minority missed it.
    raw_set_px(&urls[2], key, &owner, 20_000).await;
    let seen = state(&a, &lock).await;
    assert_eq!(seen.owner.as_deref(), Some(owner.as_str()));
    assert_eq!(seen.note.as_deref(), Some("a:1"), "{seen:?}");
    assert_eq!(seen.fencing, None, "Redlock issues no terms");

    // Master 1 (which has the note) dies: master 2 (the note) and master 3 (none) answer,
    // both holding for A; the minority that missed the note hides nothing.
    let servers_back = tokio::task::spawn_blocking(move || {
        servers[0].kill().expect("kill -9");
        servers
    })
    .await
    .expect("joined");
    servers = servers_back;
    let seen = state(&b, &lock).await;
    assert_eq!(seen.owner.as_deref(), Some(owner.as_str()));
    assert_eq!(seen.note.as_deref(), Some("a:1"), "{seen:?}");

    // It restarts empty: A holds masters 2 and 3, and its note is still read.
    servers = tokio::task::spawn_blocking(move || {
        servers[0].restart().expect("restarts");
        servers
    })
    .await
    .expect("joined");
    let seen = state(&b, &lock).await;
    assert_eq!(seen.note.as_deref(), Some("a:1"), "{seen:?}");

    // A's hold is gone from master 2 too: only master 3 holds for it, and a note needs a
    // majority: refused, and nothing is shown (no owner holds a majority).
    support::raw_del(&urls[1], key.as_bytes()).await.expect("DEL");
    assert!(
        !a.set_note(&first, "a:2").await.expect("answered"),
        "a note of a hold a majority no longer records"
    );
    let seen = state(&b, &lock).await;
    assert_eq!((seen.owner, seen.note), (None, None));

    // B takes the lock once master 3 is free: A's notes, still on masters 2 and 3, are never
    // shown beside B, and A can no longer leave one.
    support::raw_del(&urls[2], key.as_bytes()).await.expect("DEL");
    let second = take(&b, &lock).await;
    let seen = state(&a, &lock).await;
    assert_eq!(seen.owner, Some(second.owner().to_string()));
    assert_eq!(seen.note, None, "an earlier holder's note is never shown");
    assert!(!a.set_note(&first, "stale").await.expect("answered"));
    assert_eq!(state(&a, &lock).await.note, None);
    assert!(b.set_note(&second, "b:1").await.expect("answered"));
    assert_eq!(state(&a, &lock).await.note.as_deref(), Some("b:1"));
    for url in &urls {
        assert_eq!(
            raw_get(url, key).await,
            Some(second.owner().to_string()),
            "B holds every master"
        );
    }

    // A majority down: the outcome is unknown, an ambiguous error, not `false`.
    servers = tokio::task::spawn_blocking(move || {
        servers[0].kill().expect("kill -9");
        servers[1].kill().expect("kill -9");
        servers
    })
    .await
    .expect("joined");
    match b.set_note(&second, "b:2").await {
        Err(e @ Error::Unavailable { .. }) => assert!(e.is_ambiguous(), "{e}"),
        other => panic!("a note with a majority down: {other:?}"),
    }
    drop(servers);
}

/// An election on Redlock: one leader at a time, its value read by anyone, no term (Redlock
/// issues no fencing tokens), observers see each leader, a resigned leader is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_runs_on_redlock_without_terms() {
    let servers = support::start_servers(3).await;
    let client = LockClient::new(redlock(&servers).await)
        .with_defaults(AcquireOptions::new().ttl(Duration::from_secs(5)));
    let election = client.election(name("election")).expect("offered on Redlock");
    let mut changes = election.observe();

    let first = election.campaign("a:1").await.expect("leads");
    assert_eq!(first.term(), None, "Redlock issues no terms");
    let seen = election.leader().await.expect("answered").expect("a leader");
    assert_eq!((seen.value.as_str(), seen.term), ("a:1", None));
    assert!(election.try_campaign("b:2").await.expect("answered").is_none());
    assert_eq!(
        changes.next().await.expect("a change").expect("read").value,
        "a:1"
    );

    let waiting = {
        let election = election.clone();
        tokio::spawn(async move { election.campaign("b:2").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "a second leader beside the first");
    assert!(first.resign().await.expect("answered"));
    let second = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiting candidate leads at once")
        .expect("joined")
        .expect("leads");
    let change = tokio::time::timeout(Duration::from_secs(5), changes.next())
        .await
        .expect("the observer hears of it")
        .expect("a change")
        .expect("read");
    assert_eq!((change.value.as_str(), change.term), ("b:2", None));
    assert!(second.resign().await.expect("answered"));
    assert_eq!(election.leader().await.expect("answered"), None);
    drop(servers);
}

/// A note whose answers come back after the lease ran out does not count: every master
/// stored it (the hold was live when each ran the script), but the replies are late, so the
/// holder cannot count on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_answered_after_the_lease_ran_out_does_not_count() {
    let servers = support::start_servers(3).await;
    let mut proxies = Vec::new();
    let mut proxied = Vec::new();
    for server in &servers {
        let (url, proxy) = through_proxies(&server.url()).expect("a proxy in front of a master");
        proxied.push(url);
        proxies.push(proxy);
    }
    let lock = RedlockConfig::new(&proxied)
        .expect("valid")
        .with_node_timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("builds");
    let direct = redlock(&servers).await;
    let name = name("late");
    let ttl = Duration::from_millis(600);
    let TryAcquire::Acquired(lease) = lock
        .try_acquire(&name, OwnerToken::new(), ttl)
        .await
        .expect("answered")
    else {
        panic!("the lock is free");
    };
    // In time, and the masters know the script by now: the late note below runs at once.
    assert!(lock.set_note(&lease, "early").await.expect("answered"));
    for proxy in &proxies {
        proxy.set_latency(Direction::ToClient, ttl * 2, Duration::ZERO);
    }
    assert!(
        !lock.set_note(&lease, "late").await.expect("answered"),
        "a note counted after the lease ran out ({:?} left)",
        lease.remaining()
    );
    for proxy in &proxies {
        proxy.heal();
        proxy.set_latency(Direction::Both, Duration::ZERO, Duration::ZERO);
    }
    // The hold is gone everywhere by now: no owner, no note.
    let seen = state(&direct, &name).await;
    assert_eq!((seen.owner, seen.note), (None, None));
    drop(servers);
}

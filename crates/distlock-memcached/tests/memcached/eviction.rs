//! Eviction: memcached drops items under memory pressure, locks included, before their TTL.
//! Held guards must notice at their next renewal. And the mitigation: a server started with
//! `-M` refuses new items instead of evicting held locks.

use crate::support;

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLockExt, Error, LockClient, LockGuard, LockName, LossReason};
use distlock_testkit::MemcachedOptions;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Writes `count` items exactly the size of the lock items (`distlock:l:evict-N`: 18-byte
/// keys, 53-byte values `<36-byte owner> <16-digit token>`), so they share the lock items'
/// slab class, which is where memcached evicts from. Pipelined without replies; returns once
/// the server has read them all.
async fn fill(addr: &str, from: usize, count: usize) {
    let mut stream = BufReader::new(TcpStream::connect(addr).await.expect("connects"));
    let value = "v".repeat(LOCK_VALUE_LEN);
    for chunk in (from..from + count).collect::<Vec<_>>().chunks(1000) {
        let mut batch = String::new();
        for i in chunk {
            batch.push_str(&format!(
                "set f:{i:016} 0 0 {LOCK_VALUE_LEN} noreply\r\n{value}\r\n"
            ));
        }
        stream
            .get_mut()
            .write_all(batch.as_bytes())
            .await
            .expect("writes");
    }
    // A reply to a final command proves the server has processed everything before it.
    stream.get_mut().write_all(b"mn\r\n").await.expect("writes");
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await.expect("reads");
        match line.trim_end() {
            "MN" => return,
            "" => panic!("the server closed the connection"),
            _ => {} // a refusal that `noreply` does not silence
        }
    }
}

/// A counter from `stats`.
async fn stat(addr: &str, name: &str) -> u64 {
    let mut stream = BufReader::new(TcpStream::connect(addr).await.expect("connects"));
    stream.get_mut().write_all(b"stats\r\n").await.expect("writes");
    let mut value = 0;
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await.expect("reads");
        let line = line.trim_end();
        if line == "END" || line.is_empty() {
            return value;
        }
        if let Some(v) = line.strip_prefix(&format!("STAT {name} ")) {
            value = v.parse().unwrap_or(0);
        }
    }
}

/// The lock items' value length: a UUID, a space, a fencing token (the unix time in
/// microseconds when the counter was created, 16 digits until 2286).
const LOCK_VALUE_LEN: usize = 36 + 1 + 16;

async fn hold(client: &LockClient, count: usize, ttl: Duration) -> Vec<LockGuard> {
    let mut guards = Vec::new();
    for i in 0..count {
        let name = LockName::new(format!("evict-{i}")).expect("valid");
        let guard = client
            .acquire_with(&name, &AcquireOptions::new().ttl(ttl))
            .await
            .expect("acquired");
        let token = guard.fencing_token().expect("a token").to_string();
        assert_eq!(
            36 + 1 + token.len(),
            LOCK_VALUE_LEN,
            "the filler must match the lock items"
        );
        guards.push(guard);
    }
    guards
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicted_locks_fire_the_lost_signal_at_the_next_renewal() {
    let server = support::start_server(MemcachedOptions {
        memory_mb: 2,
        ..MemcachedOptions::default()
    })
    .await;
    let addr = server.addr().to_string();
    let client = LockClient::new(support::lock(&server.url()));
    let ttl = Duration::from_secs(3);
    let guards = hold(&client, 10, ttl).await;

    // Other data floods the tiny server (about 40 times its memory in lock-sized items).
    fill(&addr, 0, 400_000).await;
    let evictions = stat(&addr, "evictions").await;
    println!("{evictions} evictions");
    assert!(evictions > 0, "the flood must make memcached evict");

    for guard in &guards {
        let reason = tokio::time::timeout(ttl + Duration::from_secs(3), guard.lost())
            .await
            .expect("the next renewal finds the evicted item gone");
        assert_eq!(reason, LossReason::NotOwned);
    }
    // The names are free again: the locks really were gone.
    let other = LockClient::new(support::lock(&server.url()));
    for guard in guards {
        let name = guard.name();
        assert!(!guard.release().await.expect("works"));
        let again = other.try_acquire(&name).await.expect("works").expect("free");
        assert!(again.release().await.expect("works"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_with_big_m_refuses_instead_of_evicting() {
    let server = support::start_server(MemcachedOptions {
        memory_mb: 2,
        extra_args: vec!["-M".to_owned()],
        ..MemcachedOptions::default()
    })
    .await;
    let addr = server.addr().to_string();
    let lock = support::lock(&server.url());
    let client = LockClient::new(lock.clone());
    // Long enough that no watchdog renewal runs during the test.
    let ttl = Duration::from_secs(30);
    let guards = hold(&client, 10, ttl).await;

    fill(&addr, 0, 100_000).await;
    assert_eq!(stat(&addr, "evictions").await, 0, "-M never evicts");

    // A new lock is refused with a typed error (the memory is full) ...
    let refused = client.try_acquire("evict-x").await;
    assert!(
        matches!(refused, Err(Error::Backend { .. })),
        "a full -M server refuses: {refused:?}"
    );
    // ... a contender's attempt on a held lock fails without harming it (memcached's meta
    // `ms` in add mode would unlink the holder's item here) ...
    let contender = LockClient::new(support::lock(&server.url()));
    let attempt = contender.try_acquire(&guards[1].name()).await;
    println!("contender on a full -M server: {attempt:?}");
    assert!(
        matches!(attempt, Ok(None) | Err(Error::Backend { .. })),
        "{attempt:?}"
    );
    // ... a renewal needs a new item too, so it fails loudly rather than claim a loss ...
    let renewal = guards[0].extend(ttl).await;
    println!("renewal on a full -M server: {renewal:?}");
    assert!(
        matches!(renewal, Ok(true) | Err(Error::Backend { .. })),
        "{renewal:?}"
    );
    // ... and every held lock is still there, owned by its holder.
    for guard in guards {
        let state = lock.inspect_lock(&guard.name()).await.expect("works");
        assert_eq!(
            state.owner,
            Some(guard.owner().to_string()),
            "a held lock was evicted"
        );
        assert!(!guard.is_lost());
        assert!(guard.release().await.expect("works"));
    }
}

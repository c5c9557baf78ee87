//! Semaphores and read-write locks on one real `redis-server`: exact permits under
//! contention, refused permit counts, owner-checked release and renewal, expiry, readers and
//! writers with a waiting writer keeping new readers out, withdrawal, separate namespaces,
//! fencing, one round trip per operation, the reply nonce after a lost reply, and Redlock
//! offering neither.

use crate::support;
use crate::support::name;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Error, Lease, LockClient, LockKind, LockName,
    OwnerToken, Primitive, TryAcquire,
};
use distlock_redis::{RedisConfig, RedisLock};
use distlock_testkit::{shared, Direction, FaultProxy, RedisServer};
use rand::Rng;

const LONG: Duration = Duration::from_secs(30);

const fn permits(n: u32) -> LockKind {
    LockKind::Permit {
        permits: n,
        weight: 1,
    }
}

async fn shared_url() -> String {
    tokio::task::spawn_blocking(shared::redis_url)
        .await
        .expect("joined")
        .expect("the shared redis-server starts")
}

async fn connect_within(url: &str, timeout: Duration) -> RedisLock {
    RedisConfig::from_url(url)
        .expect("valid")
        .with_operation_timeout(timeout)
        .with_connect_timeout(timeout)
        .build()
        .await
        .expect("connects")
}

async fn connect(url: &str) -> RedisLock {
    connect_within(url, Duration::from_secs(1)).await
}

async fn attempt(lock: &RedisLock, name: &LockName, kind: LockKind, ttl: Duration) -> TryAcquire {
    lock.try_acquire_kind(name, kind, OwnerToken::new(), ttl, None)
        .await
        .expect("answered")
}

async fn take(lock: &RedisLock, name: &LockName, kind: LockKind, ttl: Duration) -> Lease {
    match attempt(lock, name, kind, ttl).await {
        TryAcquire::Acquired(lease) => {
            assert_eq!(lease.kind(), kind);
            lease
        }
        TryAcquire::Held(holder) => panic!("{kind} of {name} is held: {holder:?}"),
    }
}

/// The time until a hold could free, from a refused attempt.
async fn refused(lock: &RedisLock, name: &LockName, kind: LockKind) -> Option<Duration> {
    match attempt(lock, name, kind, LONG).await {
        TryAcquire::Held(holder) => holder.remaining,
        TryAcquire::Acquired(lease) => panic!("{kind} of {name} was granted: {lease:?}"),
    }
}

/// A derived key of the documented layout for a name without braces and no prefix:
/// `{<name>}` `0xFF` `<mark>` `<name>`.
fn derived_key(name: &LockName, mark: &str) -> Vec<u8> {
    [
        b"{".as_slice(),
        name.as_str().as_bytes(),
        b"}\xFF",
        mark.as_bytes(),
        name.as_str().as_bytes(),
    ]
    .concat()
}

async fn owners(lock: &RedisLock, name: &LockName, primitive: Primitive) -> Vec<(String, LockKind)> {
    let mut holders: Vec<_> = lock
        .inspect_holders(name, primitive)
        .await
        .expect("inspects")
        .into_iter()
        .map(|state| (state.owner.expect("a holder has an owner"), state.kind))
        .collect();
    holders.sort_by(|a, b| a.0.cmp(&b.0));
    holders
}

fn owner_of(lease: &Lease) -> String {
    lease.owner().to_string()
}

async fn script_calls(url: &str) -> (u64, u64) {
    let mut raw = support::raw(url).await.expect("raw");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .expect("INFO");
    let calls = |command: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (calls("evalsha"), calls("eval"))
}

mod all_kinds;
mod rw_locks;
mod semaphores;

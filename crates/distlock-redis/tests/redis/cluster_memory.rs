//! A Redis Cluster whose masters are out of memory under `maxmemory-policy noeviction` (the
//! recommended policy): holders must still release and renew, while new acquisitions are
//! refused.

use crate::support;
use crate::support::name;

use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, OwnerToken, TryAcquire};
use distlock_testkit::{RedisCluster, RedisClusterOptions};
use support::{lock_at, start_cluster};

/// Sets `maxmemory` on every master (`1`: any use is over it; `0`: no limit).
fn set_maxmemory(cluster: &RedisCluster, value: &str) {
    tokio::task::block_in_place(|| {
        for i in 0..3 {
            cluster
                .command(i, &["CONFIG", "SET", "maxmemory-policy", "noeviction"])
                .expect("CONFIG SET maxmemory-policy");
            cluster
                .command(i, &["CONFIG", "SET", "maxmemory", value])
                .expect("CONFIG SET maxmemory");
        }
    });
}

/// With every master over `maxmemory` (`noeviction`), a held lock is still renewed (`extend`,
/// `extend_many`), inspected and released: those scripts cannot grow memory. Acquisitions,
/// which can, are refused with an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_master_still_renews_and_releases_but_refuses_acquisitions() {
    let cluster = start_cluster(RedisClusterOptions::default()).await;
    let lock = lock_at(&cluster.url()).await;
    let held = name("held-when-full");
    let ttl = Duration::from_secs(30);
    let lease = match lock
        .try_acquire(&held, OwnerToken::new(), ttl)
        .await
        .expect("acquires")
    {
        TryAcquire::Acquired(lease) => lease,
        other => panic!("held: {other:?}"),
    };
    let permit = match lock
        .try_acquire_kind(
            &name("permit-when-full"),
            distlock_core::LockKind::Permit {
                permits: 2,
                weight: 1,
            },
            OwnerToken::new(),
            ttl,
            None,
        )
        .await
        .expect("acquires a permit")
    {
        TryAcquire::Acquired(lease) => lease,
        other => panic!("held: {other:?}"),
    };

    set_maxmemory(&cluster, "1");
    let refused = lock
        .try_acquire(&name("refused-when-full"), OwnerToken::new(), ttl)
        .await;
    let extended = lock.extend(&lease, ttl).await;
    let many = lock.renew(&[lease.clone(), permit.clone()]).await;
    let inspected = lock.inspect_lock(&held).await;
    let released = lock.release(&lease).await;
    let permit_released = lock.release(&permit).await;
    set_maxmemory(&cluster, "0");

    println!(
        "when full: acquire {refused:?}\nextend {extended:?}\nextend_many {many:?}\ninspect {inspected:?}\nrelease {released:?}, permit {permit_released:?}"
    );
    assert!(refused.is_err(), "an acquisition on a full master: {refused:?}");
    assert!(
        matches!(extended, Ok(Some(_))),
        "extend on a full master: {extended:?}"
    );
    assert!(
        many.iter().all(|r| matches!(r, Ok(Some(_)))),
        "extend_many on a full master: {many:?}"
    );
    assert!(
        inspected.as_ref().is_ok_and(|s| s.is_held()),
        "inspect on a full master: {inspected:?}"
    );
    assert!(
        matches!(released, Ok(true)),
        "release on a full master: {released:?}"
    );
    assert!(
        matches!(permit_released, Ok(true)),
        "a permit's release on a full master: {permit_released:?}"
    );
}

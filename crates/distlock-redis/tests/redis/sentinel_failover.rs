//! Failovers of a Redis Sentinel set (`redis+sentinel://`) under held locks: the primary is
//! killed and the Sentinels promote the replica while a client holds locks that its watchdog
//! renews. With `wait_for_replicas=1` no second client acquires a lock the first still says
//! held; without it, and with a replica behind, the failover loses the lock (the documented
//! loss of asynchronous replication).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, LockClient, LockGuard};
use distlock_redis::RedisConfig;
use distlock_testkit::RedisSentinelSet;

/// How long the Sentinels may take to promote the replica.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);

type Set = Arc<Mutex<RedisSentinelSet>>;

async fn start_set() -> Set {
    let set = tokio::task::spawn_blocking(RedisSentinelSet::start)
        .await
        .expect("joined")
        .expect("the Sentinel set starts (run scripts/install-test-deps)");
    Arc::new(Mutex::new(set))
}

/// Runs `f` on the set from a blocking thread (the testkit blocks).
async fn on_set<T: Send + 'static>(
    set: &Set,
    f: impl FnOnce(&mut RedisSentinelSet) -> T + Send + 'static,
) -> T {
    let set = set.clone();
    tokio::task::spawn_blocking(move || f(&mut set.lock().expect("the set")))
        .await
        .expect("joined")
}

async fn client(url: &str) -> LockClient {
    let lock = RedisConfig::from_url(url)
        .expect("a redis+sentinel:// URL")
        .with_operation_timeout(Duration::from_secs(1))
        .with_connect_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("connects through the Sentinels");
    LockClient::new(lock)
}

fn unique(label: &str) -> String {
    format!(
        "sentinel-{label}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Until `until`, every 100 ms: `other` tries every lock; one it acquires must have been
/// reported lost by its holder already. Returns the names `other` acquired.
async fn never_two_holders(other: &LockClient, held: &[LockGuard], until: Instant) -> Vec<String> {
    let mut taken = Vec::new();
    while Instant::now() < until {
        for guard in held {
            let name = guard.name().to_string();
            if taken.contains(&name) {
                continue;
            }
            if let Ok(Some(second)) = other.try_acquire(guard.name().clone()).await {
                assert!(
                    guard.is_lost(),
                    "{name}: a second client acquired it (fencing {:?}) while its holder (fencing {:?}) still says held",
                    second.fencing_token(),
                    guard.fencing_token()
                );
                taken.push(name);
                let _ = second.release().await;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    taken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_locks_survive_a_failover() {
    let set = start_set().await;
    let url = on_set(&set, |set| set.url(1)).await;
    let holder = client(&url).await;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(12));
    let mut held = Vec::new();
    for i in 0..3 {
        held.push(
            holder
                .acquire_with(unique(&format!("held-{i}")).as_str(), &opts)
                .await
                .expect("acquired and acknowledged by the replica"),
        );
    }
    // Renewals run (every 4 s) across the failover.
    tokio::time::sleep(Duration::from_secs(1)).await;
    on_set(&set, |set| set.kill_primary()).await.expect("kill -9");
    let promoted = on_set(&set, |set| set.wait_for_failover(FAILOVER_TIMEOUT))
        .await
        .expect("the Sentinels promote the replica");
    // Back to one replica, so that renewals can be acknowledged again.
    on_set(&set, |set| set.restart_old_primary_as_replica())
        .await
        .expect("the old primary comes back as a replica");

    let other = client(&url).await;
    let taken = never_two_holders(&other, &held, Instant::now() + Duration::from_secs(15)).await;
    assert!(
        taken.is_empty(),
        "acknowledged locks survive the failover to {promoted}: lost {taken:?}"
    );
    for guard in held {
        assert!(
            !guard.is_lost(),
            "{} still held, renewed on the new primary",
            guard.name()
        );
        let name = guard.name().clone();
        assert!(guard.release().await.expect("released on the new primary"));
        assert!(other.try_acquire(name).await.expect("answers").is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_renewal_is_a_loss_before_the_ttl_ends() {
    let set = start_set().await;
    let url = on_set(&set, |set| set.url(1)).await;
    let holder = client(&url).await;
    let ttl = Duration::from_secs(6);
    let guard = holder
        .acquire_with(unique("alone").as_str(), &AcquireOptions::new().ttl(ttl))
        .await
        .expect("acquired and acknowledged");
    let acquired = Instant::now();
    on_set(&set, |set| set.kill_primary()).await.expect("kill -9");
    on_set(&set, |set| set.wait_for_failover(FAILOVER_TIMEOUT))
        .await
        .expect("the Sentinels promote the replica");
    // The new primary has no replica: no renewal is acknowledged.
    tokio::time::timeout(ttl * 2, guard.lost())
        .await
        .expect("the holder says lost");
    assert!(
        acquired.elapsed() < ttl,
        "the holder said lost only after its TTL ended ({:?})",
        acquired.elapsed()
    );
    // The new primary still has the key (its renewals were applied, not acknowledged), and
    // no replica would acknowledge another client's lock either.
    let other = client(&url).await;
    match other.try_acquire(guard.name().clone()).await {
        Ok(None) => {}
        Err(e) => assert!(e.to_string().contains("replicas acknowledged"), "{e}"),
        Ok(Some(second)) => panic!("a second holder without a replica: {:?}", second.fencing_token()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_replicas_required_a_lagging_replica_loses_the_lock() {
    let set = start_set().await;
    let url = on_set(&set, |set| set.url(0)).await;
    let holder = client(&url).await;
    on_set(&set, |set| set.cut_replication())
        .await
        .expect("the replica falls behind");
    // Acquired on the primary only; renewed every 10 s.
    let guard = holder
        .acquire_with(
            unique("lagged").as_str(),
            &AcquireOptions::new().ttl(Duration::from_secs(30)),
        )
        .await
        .expect("acquired");
    on_set(&set, |set| set.kill_primary()).await.expect("kill -9");
    on_set(&set, |set| set.wait_for_failover(FAILOVER_TIMEOUT))
        .await
        .expect("the Sentinels promote the replica");
    let other = client(&url).await;
    let second = other
        .try_acquire(guard.name().clone())
        .await
        .expect("answers")
        .expect("the promoted replica never had the lock: a second client acquires it");
    assert!(
        !guard.is_lost(),
        "the holder still says held: two holders at once (the documented loss)"
    );
    // The holder learns at its next renewal, on the new primary.
    tokio::time::timeout(Duration::from_secs(20), guard.lost())
        .await
        .expect("the holder says lost at its next renewal");
    assert!(second.release().await.expect("released"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_primary_replaced_by_the_sentinels_grants_no_second_holder() {
    let set = start_set().await;
    let url = on_set(&set, |set| set.url(1)).await;
    let holder = client(&url).await;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(9));
    let mut held = Vec::new();
    for i in 0..2 {
        held.push(
            holder
                .acquire_with(unique(&format!("isolated-{i}")).as_str(), &opts)
                .await
                .expect("acquired and acknowledged by the replica"),
        );
    }
    // Frozen: every peer reaches an open socket that answers nothing.
    on_set(&set, |set| set.isolate_primary()).await.expect("SIGSTOP");
    on_set(&set, |set| set.wait_for_failover(FAILOVER_TIMEOUT))
        .await
        .expect("the Sentinels promote the replica");
    // Back, and still a primary until the Sentinels demote it (about 10 s): without a
    // replica of its own it acknowledges nothing.
    on_set(&set, |set| set.heal_primary()).await.expect("SIGCONT");
    let other = client(&url).await;
    never_two_holders(&other, &held, Instant::now() + Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaves_a_primary_the_sentinels_replaced_while_it_still_answered() {
    let set = start_set().await;
    let url = on_set(&set, |set| set.url(0)).await;
    // Its requests outlast the freeze: no timeout tells it that anything happened.
    let patient = LockClient::new(
        RedisConfig::from_url(&url)
            .expect("a redis+sentinel:// URL")
            .with_operation_timeout(Duration::from_secs(20))
            .build()
            .await
            .expect("connects through the Sentinels"),
    );
    let warm = unique("warm");
    let _warm = patient
        .try_acquire(warm.as_str())
        .await
        .expect("answers")
        .expect("free");
    on_set(&set, |set| set.isolate_primary()).await.expect("SIGSTOP");
    on_set(&set, |set| set.wait_for_failover(FAILOVER_TIMEOUT))
        .await
        .expect("the Sentinels promote the replica");
    // Thawed, the old primary answers as a primary until the Sentinels demote it.
    on_set(&set, |set| set.heal_primary()).await.expect("SIGCONT");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let name = unique("switched");
    let first = patient
        .try_acquire(name.as_str())
        .await
        .expect("answers")
        .expect("free");
    let other = client(&url).await;
    let second = other.try_acquire(name.as_str()).await.expect("answers");
    assert!(
        second.is_none(),
        "two holders: the first client acquired on the replaced primary (fencing {:?}), the second on the new one (fencing {:?})",
        first.fencing_token(),
        second.as_ref().and_then(LockGuard::fencing_token)
    );
}

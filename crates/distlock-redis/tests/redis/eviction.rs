//! A server whose `maxmemory-policy` evicts lock keys: a loud warning at connect (or a
//! refusal, if configured), and a guard whose key was evicted reports the loss at its next
//! renewal.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Error, LockClient};
use distlock_redis::{RedisConfig, RedlockConfig};
use distlock_testkit::{RedisOptions, RedisServer};
use tracing::field::{Field, Visit};

/// Collects the text of every `WARN` (and above) event on the thread it is set on.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl tracing::Subscriber for Warnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut text = Text(String::new());
        event.record(&mut text);
        self.0.lock().expect("not poisoned").push(text.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

async fn evicting_server() -> RedisServer {
    tokio::task::spawn_blocking(|| {
        RedisServer::start_with(RedisOptions {
            extra_args: ["--maxmemory", "2mb", "--maxmemory-policy", "volatile-lru"]
                .map(str::to_owned)
                .to_vec(),
            ..RedisOptions::default()
        })
    })
    .await
    .expect("joined")
    .expect("redis-server starts")
}

// Current-thread: the warning is emitted on this thread, where the collector is set.
#[tokio::test(flavor = "current_thread")]
async fn an_evicting_policy_warns_at_connect_and_an_evicted_guard_is_lost_at_renewal() {
    let server = evicting_server().await;
    let warnings = Warnings::default();
    let lock = {
        let _collect = tracing::subscriber::set_default(warnings.clone());
        RedisConfig::from_url(&server.url())
            .expect("valid")
            .with_operation_timeout(Duration::from_secs(1))
            .build()
            .await
            .expect("connects (with a warning)")
    };
    let seen = warnings.0.lock().expect("not poisoned").clone();
    assert!(
        seen.iter()
            .any(|w| w.contains("maxmemory-policy") && w.contains("volatile-lru")),
        "no warning about the eviction policy: {seen:?}"
    );

    let client = LockClient::new(lock);
    let guard = client
        .acquire_with("evicted", &AcquireOptions::new().ttl(Duration::from_secs(2)))
        .await
        .expect("acquires");
    // Fill the memory with keys that have a TTL (as a cache would), newer than the lock key:
    // volatile-lru evicts among keys with a TTL, the lock key included.
    let mut raw = support::raw(&server.url()).await.expect("raw");
    let filler = "x".repeat(10_000);
    let mut evicted = false;
    for i in 0..2_000 {
        let _: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("cache:{i}"))
            .arg(&filler)
            .arg("EX")
            .arg(3600)
            .query_async(&mut raw)
            .await;
        if i % 50 == 49 {
            let exists: i64 = redis::cmd("EXISTS")
                .arg("evicted")
                .query_async(&mut raw)
                .await
                .expect("EXISTS");
            if exists == 0 {
                evicted = true;
                break;
            }
        }
    }
    assert!(evicted, "the lock key was never evicted");
    let since = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the guard reports the loss at its next renewal");
    println!("lost {:?} after the eviction: {reason:?}", since.elapsed());
    assert!(guard.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_policy_can_be_refused() {
    let server = evicting_server().await;
    let refused = RedisConfig::from_url(&server.url())
        .expect("valid")
        .with_require_noeviction(true)
        .build()
        .await;
    match refused {
        Err(Error::InvalidConfig { reason }) => assert!(reason.contains("volatile-lru"), "{reason}"),
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let plain = support::start_server().await;
    RedisConfig::from_url(&plain.url())
        .expect("valid")
        .with_require_noeviction(true)
        .build()
        .await
        .expect("noeviction is accepted");
}

// Current-thread: the checks run in tasks on this thread, where the collector is set.
#[tokio::test(flavor = "current_thread")]
async fn redlock_warns_about_every_evicting_master() {
    let servers = [
        evicting_server().await,
        evicting_server().await,
        support::start_server().await,
    ];
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let warnings = Warnings::default();
    let _collect = tracing::subscriber::set_default(warnings.clone());
    let _redlock = RedlockConfig::new(&urls)
        .expect("valid")
        .build()
        .await
        .expect("builds");
    let started = Instant::now();
    loop {
        let seen = warnings.0.lock().expect("not poisoned").clone();
        let warned = seen.iter().filter(|w| w.contains("volatile-lru")).count();
        if warned == 2 {
            assert_eq!(
                seen.iter().filter(|w| w.contains("maxmemory-policy")).count(),
                2,
                "{seen:?}"
            );
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "warnings: {seen:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// On a cluster every master is checked, not the one node that happens to answer: a lock on
/// any master's slots could be evicted there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_one_evicting_master_is_refused() {
    let cluster = support::start_cluster(distlock_testkit::RedisClusterOptions::default()).await;
    let url = cluster.url();
    RedisConfig::from_url(&url)
        .expect("valid")
        .with_require_noeviction(true)
        .build()
        .await
        .expect("every master is noeviction");
    for evicting in 0..cluster.nodes().len() {
        for (i, policy) in [(evicting, "allkeys-lru")].into_iter().chain(
            (0..cluster.nodes().len())
                .filter(|i| *i != evicting)
                .map(|i| (i, "noeviction")),
        ) {
            cluster
                .command(i, &["CONFIG", "SET", "maxmemory-policy", policy])
                .expect("CONFIG SET");
        }
        // Whichever node the client asks first, the evicting master is found.
        for _ in 0..3 {
            let refused = RedisConfig::from_url(&url)
                .expect("valid")
                .with_require_noeviction(true)
                .build()
                .await;
            let master = format!("(master 127.0.0.1:{})", cluster.nodes()[evicting].port());
            match refused {
                Err(Error::InvalidConfig { reason }) => {
                    assert!(
                        reason.contains("allkeys-lru") && reason.contains(&master),
                        "{reason}"
                    );
                }
                other => panic!("master {evicting} may evict, yet the cluster was accepted: {other:?}"),
            }
        }
    }
}

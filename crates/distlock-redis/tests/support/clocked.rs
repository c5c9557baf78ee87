//! Stores of a case's own on a clock the case moves (`Fixture::store_clock`): one Redis
//! server, or Redlock's masters with the first of them on the clock (one master's clock jumps
//! at a time).

use std::sync::Arc;

use distlock_conformance::{Clocked, ClockedStore};
use distlock_core::DistributedLock;
use distlock_testkit::{RedisOptions, RedisServer, StoreClock};

/// Starts `masters` servers, the first on a fresh clock; `declared_loss` as the docs say.
async fn start(masters: usize) -> (Vec<RedisServer>, StoreClock) {
    tokio::task::spawn_blocking(move || {
        let clock = StoreClock::new().expect("libfaketime is installed (run scripts/install-test-deps)");
        let servers = (0..masters)
            .map(|i| {
                RedisServer::start_with(RedisOptions {
                    clock: (i == 0).then(|| clock.clone()),
                    ..RedisOptions::default()
                })
                .expect("redis-server starts (run scripts/install-test-deps)")
            })
            .collect();
        (servers, clock)
    })
    .await
    .expect("joined")
}

/// One Redis server on a clock.
pub async fn single(declared_loss: Option<&'static str>) -> Box<dyn ClockedStore> {
    let (servers, clock) = start(1).await;
    Box::new(Clocked {
        url: servers[0].url(),
        servers,
        clock,
        open: |url| {
            Box::pin(async move { Ok(Arc::new(super::lock_at(&url).await) as Arc<dyn DistributedLock>) })
        },
        declared_loss,
        session_lifetime: None,
    })
}

/// Redlock over `masters` servers, the first on a clock.
pub async fn redlock(masters: usize, declared_loss: Option<&'static str>) -> Box<dyn ClockedStore> {
    let (servers, clock) = start(masters).await;
    Box::new(Clocked {
        url: servers.iter().map(RedisServer::url).collect::<Vec<_>>().join(","),
        servers,
        clock,
        open: |urls| {
            Box::pin(async move {
                let urls: Vec<String> = urls.split(',').map(str::to_owned).collect();
                Ok(Arc::new(super::redlock_at(&urls).await) as Arc<dyn DistributedLock>)
            })
        },
        declared_loss,
        session_lifetime: None,
    })
}

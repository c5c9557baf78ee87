//! The conformance fixture for memcached, and helpers shared by this crate's tests.
//!
//! Servers come from a [`Site`]: cases that leave the server alone share the test binary's
//! (or `DISTLOCK_TEST_MEMCACHED_URL`'s); the outage case gets one of its own. memcached cannot list keys, so the fixture remembers every
//! name its clients tried and counts held locks by probing those names' items.
#![allow(dead_code)] // each test binary uses a different part

pub mod fake;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{Clocked, ClockedStore, Fixture, Needs, Outage, Plan, Proxied, Site};
use distlock_core::{
    Attempt, DistributedLock, DistributedLockExt, Error, Lease, LockKind, LockName, LockState, ObjectState,
    Primitive, Result, TryAcquire,
};
use distlock_memcached::{MemcachedConfig, MemcachedLock};
use distlock_testkit::{shared, MemcachedOptions, MemcachedServer, StoreClock};
use futures::stream::{self, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Starts a server from a blocking thread (the testkit API blocks).
pub async fn start_server(options: MemcachedOptions) -> MemcachedServer {
    tokio::task::spawn_blocking(move || MemcachedServer::start_with(options))
        .await
        .expect("joined")
        .expect("memcached starts (run scripts/install-test-deps)")
}

/// The shared server's URL (or `$DISTLOCK_TEST_MEMCACHED_URL`).
pub async fn shared_url() -> String {
    tokio::task::spawn_blocking(shared::memcached_url)
        .await
        .expect("joined")
        .expect("the shared memcached starts (run scripts/install-test-deps)")
}

/// A client of `url` with short timeouts, as the tests want.
/// The fixture's operation timeout.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(1);

pub fn lock(url: &str) -> MemcachedLock {
    MemcachedConfig::from_url(url)
        .expect("valid URL")
        .with_operation_timeout(OPERATION_TIMEOUT)
        .with_connect_timeout(OPERATION_TIMEOUT)
        .build()
        .expect("valid config")
}

/// Sends raw text protocol to `addr` and returns the first reply line (as an operator's
/// `nc` would).
pub async fn raw(addr: &str, command: &str) -> std::io::Result<String> {
    let mut stream = BufReader::new(TcpStream::connect(addr).await?);
    stream.get_mut().write_all(command.as_bytes()).await?;
    let mut line = String::new();
    stream.read_line(&mut line).await?;
    Ok(line.trim_end().to_owned())
}

/// One memcached under test.
pub struct MemcachedFixture {
    site: Site,
    names: Arc<Mutex<BTreeSet<LockName>>>,
}

/// The conformance fixture factory.
pub async fn fixture(needs: Needs) -> Arc<dyn Fixture> {
    let plan = Plan {
        start: |_| MemcachedServer::start(),
        shared: shared::memcached_url,
        own_for_faults: false,
    };
    Arc::new(MemcachedFixture {
        site: Site::open(needs, plan).await,
        names: Arc::default(),
    })
}

#[async_trait]
impl Fixture for MemcachedFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(Recorded {
            inner: lock(self.site.url()),
            names: self.names.clone(),
        }))
    }

    async fn proxied_backend(&self) -> Option<Result<Proxied>> {
        let (url, faults) = match self.site.proxied().await {
            Ok(pair) => pair,
            Err(e) => return Some(Err(Error::backend("memcached", e))),
        };
        Some(Ok(Proxied {
            lock: Arc::new(Recorded {
                inner: lock(&url),
                names: self.names.clone(),
            }),
            faults,
        }))
    }

    fn operation_timeout(&self) -> Duration {
        OPERATION_TIMEOUT
    }

    async fn steal(&self, name: &LockName) -> Result<()> {
        let probe = lock(self.site.url());
        let command = format!("md {}\r\n", probe.lock_key(name));
        let reply = raw(probe.server_of(name), &command)
            .await
            .map_err(|e| Error::unavailable("memcached", e))?;
        println!("steal {name:?}: md -> {reply}");
        Ok(())
    }

    async fn held_count(&self, prefix: &str) -> Result<usize> {
        let names: Vec<LockName> = {
            let names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
            names
                .iter()
                .filter(|n| n.as_str().starts_with(prefix))
                .cloned()
                .collect()
        };
        let probe = lock(self.site.url());
        let states: Vec<Result<LockState>> = stream::iter(names)
            .map(|name| {
                let probe = probe.clone();
                async move { probe.inspect_lock(&name).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        let mut held = 0;
        for state in states {
            held += usize::from(state?.is_held());
        }
        Ok(held)
    }

    /// `kill -9` of the case's own server (it comes back empty).
    async fn outage(&self) -> Option<Box<dyn Outage>> {
        Some(self.site.outage().await)
    }

    fn child_env(&self) -> Option<Vec<(String, String)>> {
        Some(self.site.child_env())
    }

    fn short_ttl(&self) -> Duration {
        Duration::from_secs(2)
    }

    async fn store_clock(&self) -> Option<Box<dyn ClockedStore>> {
        let clock = StoreClock::new().expect("libfaketime is installed (run scripts/install-test-deps)");
        let server = start_server(MemcachedOptions {
            clock: Some(clock.clone()),
            ..MemcachedOptions::default()
        })
        .await;
        Some(Box::new(Clocked {
            url: server.url(),
            servers: server,
            clock,
            open: |url| Box::pin(async move { Ok(Arc::new(lock(&url)) as Arc<dyn DistributedLock>) }),
            declared_loss: None,
            session_lifetime: None,
        }))
    }
}

/// A client that records every name it is asked about, so the fixture can count held locks
/// (memcached cannot list keys). Everything else goes straight to the real client.
#[derive(Debug)]
struct Recorded {
    inner: MemcachedLock,
    names: Arc<Mutex<BTreeSet<LockName>>>,
}

#[async_trait]
impl DistributedLock for Recorded {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn capabilities(&self) -> distlock_core::Capabilities {
        self.inner.capabilities()
    }

    fn mechanics(&self) -> distlock_core::Mechanics {
        self.inner.mechanics()
    }

    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        self.names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(attempt.name.clone());
        self.inner.attempt(attempt).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }

    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        self.inner.renew(leases).await
    }

    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool> {
        self.inner.set_note(lease, note).await
    }

    async fn watch(&self, name: &LockName, primitive: Primitive) -> Result<distlock_core::ReleaseWatch> {
        self.inner.watch(name, primitive).await
    }

    async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        self.inner.withdraw(name, kind, waiter).await
    }

    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        self.inner.inspect(name, primitive).await
    }

    fn store_identity(&self) -> Option<String> {
        self.inner.store_identity()
    }

    async fn ping(&self) -> Result<()> {
        self.inner.ping().await
    }
}

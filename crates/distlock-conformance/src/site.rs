//! [`Site`]: where a server-backed fixture's store lives for one case, and the fault hooks
//! every such fixture shares (taking the store away, fault proxies, a child process's way
//! back to the store), so that a backend's fixture states only how to open, steal and count.
//!
//! The store of a case is, in this order: the parent's, in the child process of a
//! cross-process case ([`STORE_ENV`]); servers of the case's own, when the case declares
//! [`Needs::OwnStore`] (or [`Needs::FaultProxy`] on a store whose servers announce their own
//! addresses); else the shared one (the test binary's, or the one a `DISTLOCK_TEST_*_URL`
//! names). The user's variables therefore never take a case's own servers away.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use distlock_testkit::{
    proxy, EtcdCluster, EtcdServer, FaultProxies, HarnessError, MariaDbServer, MemcachedServer,
    PostgresServer, RedisCluster, RedisServer, ServerProcess, ZooKeeperEnsemble, ZooKeeperServer,
};

use crate::{Needs, Outage};

/// The variable through which a child process of a cross-process case reaches its parent's
/// store (a URL, or a file for an embedded store). Distinct from the user's
/// `DISTLOCK_TEST_*_URL`, which name the shared store only.
pub const STORE_ENV: &str = "DISTLOCK_CONFORMANCE_STORE";

/// The parent's store, inside the child process of a cross-process case.
pub fn parent_store() -> Option<String> {
    std::env::var(STORE_ENV).ok().filter(|s| !s.is_empty())
}

/// Servers a fixture started for one case, which its outage takes away and brings back.
pub trait Servers: Send + 'static {
    /// The store's URL.
    fn url(&self) -> String;

    /// `kill -9` of what an outage takes away: every server, or a majority of a replicated
    /// store.
    fn take_away(&mut self) -> Result<(), HarnessError>;

    /// Restarts what [`Servers::take_away`] killed and waits until the store answers.
    fn bring_back(&mut self) -> Result<(), HarnessError>;

    /// The store's URL through fresh fault proxies, one in front of each server.
    fn proxied(&self) -> Result<(String, FaultProxies), HarnessError> {
        proxy::through_proxies(&self.url())
    }
}

/// Restarts `process` if it is not running (same port, same data directory).
fn revive(process: &mut ServerProcess) -> Result<(), HarnessError> {
    match process.is_running() {
        true => Ok(()),
        false => process.restart(),
    }
}

macro_rules! one_server {
    ($($server:ty),*) => {$(
        impl Servers for $server {
            fn url(&self) -> String {
                <$server>::url(self)
            }
            fn take_away(&mut self) -> Result<(), HarnessError> {
                self.process_mut().kill()
            }
            fn bring_back(&mut self) -> Result<(), HarnessError> {
                revive(self.process_mut())
            }
        }
    )*};
}

one_server!(
    RedisServer,
    MemcachedServer,
    MariaDbServer,
    ZooKeeperServer,
    EtcdServer
);

/// An outage kills the postmaster and then its backends: a backend outlives a killed
/// postmaster until it notices, and would go on answering its connection meanwhile.
impl Servers for PostgresServer {
    fn url(&self) -> String {
        PostgresServer::url(self)
    }
    fn take_away(&mut self) -> Result<(), HarnessError> {
        let backends = self.pid().map(children).unwrap_or_default();
        self.process_mut().kill()?;
        for pid in backends {
            // A backend that already exited is what we want.
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        Ok(())
    }
    fn bring_back(&mut self) -> Result<(), HarnessError> {
        revive(self.process_mut())
    }
}

/// The processes whose parent is `parent`, from `/proc`.
fn children(parent: u32) -> Vec<nix::unistd::Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            // `/proc/<pid>/stat`: `pid (comm) state ppid ...`; comm may hold spaces.
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rfind(')')
                .and_then(|end| stat[end + 1..].split_whitespace().nth(1))
                .and_then(|ppid| ppid.parse::<u32>().ok());
            ppid == Some(parent)
        })
        .map(nix::unistd::Pid::from_raw)
        .collect()
}

/// Independent Redis masters (Redlock): the URLs joined by commas; an outage kills a majority.
impl Servers for Vec<RedisServer> {
    fn url(&self) -> String {
        self.iter().map(RedisServer::url).collect::<Vec<_>>().join(",")
    }
    fn take_away(&mut self) -> Result<(), HarnessError> {
        let majority = self.len() / 2 + 1;
        self.iter_mut()
            .take(majority)
            .try_for_each(|s| s.process_mut().kill())
    }
    fn bring_back(&mut self) -> Result<(), HarnessError> {
        self.iter_mut().try_for_each(|s| revive(s.process_mut()))
    }
}

/// An outage kills every master; proxies come from the cluster, which the fixture starts
/// `proxyable` for the cases that need them, so a client stays behind them across redirects.
impl Servers for RedisCluster {
    fn url(&self) -> String {
        RedisCluster::url(self)
    }
    fn take_away(&mut self) -> Result<(), HarnessError> {
        (0..self.nodes().len()).try_for_each(|i| self.node_mut(i).process_mut().kill())
    }
    fn bring_back(&mut self) -> Result<(), HarnessError> {
        (0..self.nodes().len()).try_for_each(|i| revive(self.node_mut(i).process_mut()))?;
        self.wait_until_ok()
    }
    fn proxied(&self) -> Result<(String, FaultProxies), HarnessError> {
        self.proxies()
    }
}

/// An outage kills a majority of the members; they are back once a leader is elected.
impl Servers for ZooKeeperEnsemble {
    fn url(&self) -> String {
        ZooKeeperEnsemble::url(self)
    }
    fn take_away(&mut self) -> Result<(), HarnessError> {
        let majority = self.nodes().len() / 2 + 1;
        (0..majority).try_for_each(|i| self.node_mut(i).process_mut().kill())
    }
    fn bring_back(&mut self) -> Result<(), HarnessError> {
        (0..self.nodes().len()).try_for_each(|i| revive(self.node_mut(i).process_mut()))?;
        self.wait_for_leader(Duration::from_secs(60)).map(|_| ())
    }
}

/// An outage kills a majority of the members; they are back once every member sees a leader
/// (each restart waits for its member's `/health`, which the first restart's quorum gives).
impl Servers for EtcdCluster {
    fn url(&self) -> String {
        EtcdCluster::url(self)
    }
    fn take_away(&mut self) -> Result<(), HarnessError> {
        let majority = self.nodes().len() / 2 + 1;
        (0..majority).try_for_each(|i| self.node_mut(i).process_mut().kill())
    }
    fn bring_back(&mut self) -> Result<(), HarnessError> {
        (0..self.nodes().len()).try_for_each(|i| revive(self.node_mut(i).process_mut()))?;
        self.wait_for_leader(Duration::from_secs(60)).map(|_| ())
    }
}

/// How a fixture gets its servers.
pub struct Plan<S> {
    /// Starts servers of the case's own (blocking; called off the runtime's threads).
    pub start: fn(Needs) -> Result<S, HarnessError>,
    /// The shared store's URL (blocking): the test binary's shared server, or the one a
    /// `DISTLOCK_TEST_*_URL` names.
    pub shared: fn() -> Result<String, HarnessError>,
    /// Whether [`Needs::FaultProxy`] needs servers of the case's own too: a store whose
    /// servers announce their own addresses would lead a client around the proxies.
    pub own_for_faults: bool,
}

type Owned = Arc<Mutex<Box<dyn Servers>>>;

/// Where one case's store lives; see the module's documentation.
#[derive(Clone)]
pub struct Site {
    url: String,
    own: Option<Owned>,
}

impl Site {
    /// The store for a case that declares `needs`. Fails (panics) with the way to install the
    /// server if it cannot start.
    pub async fn open<S: Servers>(needs: Needs, plan: Plan<S>) -> Self {
        if let Some(url) = parent_store() {
            return Self { url, own: None };
        }
        let own = match needs {
            Needs::OwnStore => true,
            Needs::FaultProxy => plan.own_for_faults,
            Needs::Store => false,
        };
        if own {
            let start = plan.start;
            let servers = blocking(move || start(needs)).await.unwrap_or_else(|e| {
                panic!("the case's own servers start (run scripts/install-test-deps): {e}")
            });
            return Self {
                url: servers.url(),
                own: Some(Arc::new(Mutex::new(Box::new(servers)))),
            };
        }
        let shared = plan.shared;
        let url = blocking(shared)
            .await
            .unwrap_or_else(|e| panic!("the shared server starts (run scripts/install-test-deps): {e}"));
        Self { url, own: None }
    }

    /// A site on a store somebody else runs.
    pub fn at(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            own: None,
        }
    }

    /// The store's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Takes the store away (`kill -9`). Fails (panics) if the store is not the case's own
    /// or a kill fails: a fault that did not happen must not pass for one that did.
    pub async fn outage(&self) -> Box<dyn Outage> {
        let own = self
            .own
            .clone()
            .expect("only a case's own servers are taken away: the case must declare Needs::OwnStore");
        let killer = own.clone();
        blocking(move || killer.lock().unwrap_or_else(PoisonError::into_inner).take_away())
            .await
            .unwrap_or_else(|e| panic!("the outage could not be made: {e}"));
        Box::new(Restart(own))
    }

    /// The store's URL through fresh fault proxies.
    pub async fn proxied(&self) -> Result<(String, FaultProxies), HarnessError> {
        match self.own.clone() {
            Some(own) => blocking(move || own.lock().unwrap_or_else(PoisonError::into_inner).proxied()).await,
            None => proxy::through_proxies(&self.url),
        }
    }

    /// What a child process needs to reach this store.
    pub fn child_env(&self) -> Vec<(String, String)> {
        vec![(STORE_ENV.to_owned(), self.url.clone())]
    }
}

/// Restarts the processes an outage killed, and waits until the store answers.
struct Restart(Owned);

#[async_trait]
impl Outage for Restart {
    async fn restore(self: Box<Self>) {
        let own = self.0;
        blocking(move || own.lock().unwrap_or_else(PoisonError::into_inner).bring_back())
            .await
            .unwrap_or_else(|e| panic!("the store did not come back: {e}"));
    }
}

/// Runs blocking testkit calls off the runtime's threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("the blocking task ran")
}

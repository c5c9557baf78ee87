//! [`Fixture`]: what a backend's test gives the suite (clients of one store, fault hooks).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{DistributedLock, LockName, Result};
use distlock_testkit::FaultProxies;

use crate::{ClockedStore, Failover};

/// One store under test, as the suite sees it. Each backend's `tests/conformance.rs`
/// implements it in a few lines and calls [`conformance_tests!`](crate::conformance_tests).
#[async_trait]
pub trait Fixture: Send + Sync + 'static {
    /// A new, independent client of the store (its own connections), as a second service
    /// instance would have.
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>>;

    /// Fault hook: deletes or steals the hold on `name` behind its holder's back (as an
    /// operator or a buggy client would), so the holder's next renewal finds it gone.
    async fn steal(&self, name: &LockName) -> Result<()>;

    /// Whether [`Fixture::steal`] works; cases skip the parts that need it otherwise.
    fn can_steal(&self) -> bool {
        true
    }

    /// How many locks whose names start with `prefix` the store considers held right now.
    /// Used to prove that nothing is left behind.
    async fn held_count(&self, prefix: &str) -> Result<usize>;

    /// Fault hook: makes the store go away (kill or pause the server), for a case that
    /// declares [`Needs::OwnStore`](crate::Needs::OwnStore). `None` only if this kind of
    /// fixture has no way to (a live store under `distlock check`): the outage case then
    /// skips with [`Reason::Outage`](crate::Reason::Outage). A hook that fails panics: a
    /// fault that did not happen never passes for a skip.
    async fn outage(&self) -> Option<Box<dyn Outage>> {
        None
    }

    /// Environment variables a child process needs to reach the same store (a server-backed
    /// fixture's [`Site::child_env`](crate::Site::child_env), never the user's
    /// `DISTLOCK_TEST_*_URL`), or `None` if the store lives in this process (the
    /// cross-process cases then skip with [`Reason::ChildEnv`](crate::Reason::ChildEnv)).
    fn child_env(&self) -> Option<Vec<(String, String)>> {
        None
    }

    /// Fault hook: a NEW client of the same store whose every connection goes through fresh
    /// fault proxies, one in front of each server of the store (a ZooKeeper ensemble's
    /// members, Redlock's masters), for a case that declares
    /// [`Needs::FaultProxy`](crate::Needs::FaultProxy). `None` only if the fixture cannot (an
    /// embedded or in-process store, a live store the suite did not start): the fault cases
    /// then skip with [`Reason::FaultProxy`](crate::Reason::FaultProxy).
    async fn proxied_backend(&self) -> Option<Result<Proxied>> {
        None
    }

    /// The operation timeout the fixture's clients are built with: the bound within which
    /// every call against a silent store must return.
    fn operation_timeout(&self) -> Duration {
        Duration::from_secs(5)
    }

    /// The one-way latency of a "slow store" in the slow-store case: by default two fifths of
    /// the operation timeout (a round trip takes most of it). A session-bound store whose
    /// keep-alive tolerates less (ZooKeeper drops a connection silent for a quarter of the
    /// session timeout) returns what its session survives.
    fn slow_latency(&self) -> Duration {
        self.operation_timeout() * 2 / 5
    }

    /// How long a session-bound store keeps the locks of a client it no longer hears from
    /// (ZooKeeper's session timeout, etcd's lease TTL), if the fixture knows: the slow-store
    /// case then holds through the slow store for a few of these rather than for TTLs the
    /// store does not use. `None` (the default): two of the case's TTLs.
    fn session_lifetime(&self) -> Option<Duration> {
        None
    }

    /// The TTL the suite uses for leases meant to expire during a case. At least the
    /// backend's TTL granularity; keep it short so the suite stays fast.
    fn short_ttl(&self) -> Duration {
        Duration::from_millis(500)
    }

    /// Fault hook: a NEW store of the case's own whose server runs on a wall clock the case
    /// jumps (Redlock: one master's), for the clock-jump case. `None` if the fixture cannot
    /// start its server on a moveable clock (an embedded store runs on the client's own
    /// clock; a live store): the case then skips with
    /// [`Reason::StoreClock`](crate::Reason::StoreClock).
    async fn store_clock(&self) -> Option<Box<dyn ClockedStore>> {
        None
    }

    /// Fault hook: a NEW store of several members (a ZooKeeper ensemble) of the case's own,
    /// whose members the case can partition from each other while clients pinned to chosen
    /// members still reach them ([`Members`]). `None` if the store has no members (a single
    /// server, a store whose servers do not replicate to each other): the partition case then
    /// skips with [`Reason::Members`](crate::Reason::Members).
    async fn members(&self) -> Option<Result<Box<dyn Members>>> {
        None
    }

    /// Fault hook: a NEW replicated store of the case's own, configured so that its replica
    /// has every write the primary acknowledged, which the case fails over ([`Failover`]).
    /// `None` if the fixture has no such store (a single server, an embedded or live store, a
    /// store whose replication is asynchronous and declares the loss a failover makes): the
    /// failover case then skips with [`Reason::Failover`](crate::Reason::Failover).
    async fn failover(&self) -> Option<Result<Box<dyn Failover>>> {
        None
    }
}

/// A store made unavailable by [`Fixture::outage`]; restore it to end the outage.
#[async_trait]
pub trait Outage: Send {
    /// Brings the store back (restart or resume the server) and waits until it answers.
    async fn restore(self: Box<Self>);
}

/// A client whose connections go through fault proxies, from [`Fixture::proxied_backend`].
pub struct Proxied {
    /// The client.
    pub lock: Arc<dyn DistributedLock>,
    /// The proxies between it and the store's servers; dropping them cuts the client off.
    pub faults: FaultProxies,
}

/// A store of several members that replicate to each other, from [`Fixture::members`]; members
/// are numbered from 0. Dropping it stops the store.
#[async_trait]
pub trait Members: Send + Sync {
    /// How many members.
    fn count(&self) -> usize;

    /// The member that leads now (waits for one, within the store's own election time).
    async fn leader(&self) -> Result<usize>;

    /// A new client of the store connected to `members` only (it never moves to another).
    async fn client(&self, members: &[usize]) -> Result<Arc<dyn DistributedLock>>;

    /// Cuts `member` off from every other member, both ways, silently (nothing is closed);
    /// its clients still reach it.
    async fn isolate(&self, member: usize) -> Result<()>;

    /// Heals every partition between members.
    async fn heal(&self) -> Result<()>;
}

//! The conformance suite's hooks on a 3-member etcd cluster of a case's own:
//! [`EtcdMembers`] ([`Fixture::members`](distlock_conformance::Fixture::members): clients
//! pinned to chosen members, a member cut off from the others through the testkit's links)
//! and [`EtcdFailover`] ([`Fixture::failover`](distlock_conformance::Fixture::failover): the
//! leader killed, the others elect another). Self-contained, so a test of its own can run it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{Failover, Members};
use distlock_core::{DistributedLock, Error, Result};
use distlock_etcd::{EtcdConfig, EtcdLock};
use distlock_testkit::{EtcdCluster, EtcdOptions, HarnessError};

/// The clients' lease TTL: etcd grants no lease shorter than one and a half election
/// timeouts (1.5 s with the testkit's 1 s), and a loaded 2-core box needs some room.
pub const MEMBERS_LEASE_TTL: Duration = Duration::from_secs(3);
/// The clients' per-operation bound.
pub const MEMBERS_OPERATION_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the cluster may take to elect a leader (at its start, after a kill or a cut).
const ELECTION_LIMIT: Duration = Duration::from_secs(30);

/// A client of the cluster through the members at `addrs` only, with the lease and timeout
/// above.
async fn client_of(addrs: &[String]) -> Result<Arc<dyn DistributedLock>> {
    let config = EtcdConfig::from_url(&format!("etcd://{}", addrs.join(",")))?
        .with_lease_ttl(MEMBERS_LEASE_TTL)?
        .with_operation_timeout(MEMBERS_OPERATION_TIMEOUT)?;
    Ok(Arc::new(EtcdLock::connect(config).await?))
}

/// Starts a cluster (with links between its members when `links`) and waits for its leader,
/// off the runtime.
async fn start_cluster(links: bool) -> Result<EtcdCluster> {
    blocking(move || {
        let cluster = EtcdCluster::start_with(EtcdOptions {
            peer_links: links,
            ..EtcdOptions::default()
        })?;
        cluster.wait_for_leader(ELECTION_LIMIT)?;
        Ok(cluster)
    })
    .await
    .map_err(|e| {
        Error::backend(
            "etcd",
            format!("the etcd cluster did not start (run scripts/install-test-deps to install etcd): {e}"),
        )
    })
}

/// Runs a blocking harness call off the runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::result::Result<T, HarnessError> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::backend("etcd", e))?
        .map_err(|e| Error::backend("etcd", e))
}

/// A 3-member cluster of a case's own whose members can be partitioned. A follower cut off
/// loses its leader after an election timeout (1 s) and can then commit nothing: its clients'
/// keep-alives go unanswered, so they say suspended, then lost at their lease's TTL less the
/// safety margin, while the majority's leader expires the lease only at its TTL (an isolated
/// leader steps down after an election timeout; the new one extends every lease by the TTL
/// and an election timeout).
pub struct EtcdMembers {
    cluster: Arc<EtcdCluster>,
}

impl EtcdMembers {
    /// Starts the cluster and waits for its first leader.
    pub async fn start() -> Result<Self> {
        Ok(Self {
            cluster: Arc::new(start_cluster(true).await?),
        })
    }
}

#[async_trait]
impl Members for EtcdMembers {
    fn count(&self) -> usize {
        self.cluster.nodes().len()
    }

    async fn leader(&self) -> Result<usize> {
        let cluster = self.cluster.clone();
        blocking(move || cluster.wait_for_leader(ELECTION_LIMIT)).await
    }

    async fn client(&self, members: &[usize]) -> Result<Arc<dyn DistributedLock>> {
        let addrs = members
            .iter()
            .map(|m| {
                self.cluster
                    .nodes()
                    .get(*m)
                    .map(|node| node.addr().to_string())
                    .ok_or_else(|| Error::backend("etcd", format!("no member {m}")))
            })
            .collect::<Result<Vec<_>>>()?;
        client_of(&addrs).await
    }

    async fn isolate(&self, member: usize) -> Result<()> {
        self.cluster
            .isolate(member)
            .map_err(|e| Error::backend("etcd", e))
    }

    async fn heal(&self) -> Result<()> {
        self.cluster.heal_links().map_err(|e| Error::backend("etcd", e))
    }
}

/// A 3-member cluster whose clients are given every member. A failover is the leader's
/// `kill -9` and the two others' election of a new one: every write the old leader
/// acknowledged is on a quorum, so on one of them, and the new leader extends every lease by
/// its TTL and an election timeout, so a holder that reaches a surviving member within its
/// lease keeps its lock.
pub struct EtcdFailover {
    cluster: Arc<Mutex<EtcdCluster>>,
    addrs: Vec<String>,
}

impl EtcdFailover {
    /// Starts the cluster and waits for its first leader.
    pub async fn start() -> Result<Self> {
        let cluster = start_cluster(false).await?;
        Ok(Self {
            addrs: cluster.nodes().iter().map(|m| m.addr().to_string()).collect(),
            cluster: Arc::new(Mutex::new(cluster)),
        })
    }
}

#[async_trait]
impl Failover for EtcdFailover {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        client_of(&self.addrs).await
    }

    /// Locks live as long as their client's lease; the case's tries go on for this long
    /// after the election, long enough for a lease that ended to free its lock.
    fn ttl(&self) -> Duration {
        MEMBERS_LEASE_TTL * 3
    }

    async fn fail_over(&self) -> Result<()> {
        let cluster = self.cluster.clone();
        blocking(move || {
            let mut cluster = cluster.lock().unwrap_or_else(PoisonError::into_inner);
            let leader = cluster.wait_for_leader(ELECTION_LIMIT)?;
            cluster.node_mut(leader).kill()?;
            let next = cluster.wait_for_leader(ELECTION_LIMIT)?;
            if next == leader {
                return Err(HarnessError::Other(format!(
                    "the killed member {leader} still leads"
                )));
            }
            Ok(())
        })
        .await
    }
}

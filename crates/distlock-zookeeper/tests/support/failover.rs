//! [`ZkFailover`]: a 3-node ensemble of the failover case's own, whose leader the case kills.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::Failover;
use distlock_core::{DistributedLock, Error, Result};
use distlock_testkit::ZooKeeperEnsemble;
use distlock_zookeeper::ZooKeeperLock;

use super::{blocking, config, SESSION_TIMEOUT};

/// How long the ensemble may take to elect a leader, at its start and after the kill.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// A 3-node ensemble (`tickTime` 500 ms) whose clients are given every member. A failover is
/// the leader's `kill -9` and the two others' election of a new one: every write the old
/// leader acknowledged is on a quorum, so on one of them. Sessions survive if the clients
/// reconnect before the new leader expires them (their 3 s timeout starts again there);
/// a holder that stays cut off longer says lost by its own clock first.
pub struct ZkFailover {
    ensemble: Arc<Mutex<ZooKeeperEnsemble>>,
    url: String,
}

impl ZkFailover {
    /// Starts the ensemble and waits for its first leader.
    pub async fn start() -> Result<Self> {
        let ensemble = blocking(|| {
            let ensemble = ZooKeeperEnsemble::start()?;
            ensemble.wait_for_leader(ELECTION_TIMEOUT)?;
            Ok(ensemble)
        })
        .await
        .map_err(|e| {
            Error::backend(
                "zookeeper",
                format!(
                    "the ensemble did not start (run scripts/install-test-deps to install zookeeper): {e}"
                ),
            )
        })?;
        Ok(Self {
            url: ensemble.url(),
            ensemble: Arc::new(Mutex::new(ensemble)),
        })
    }
}

#[async_trait]
impl Failover for ZkFailover {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(ZooKeeperLock::connect(config(&self.url)).await?))
    }

    /// Locks live as long as their session; the case's tries go on for this long after the
    /// election, several session timeouts, long enough for an expired session's lock to free.
    fn ttl(&self) -> Duration {
        SESSION_TIMEOUT * 3
    }

    async fn fail_over(&self) -> Result<()> {
        let ensemble = self.ensemble.clone();
        blocking(move || {
            let mut ensemble = ensemble.lock().unwrap_or_else(PoisonError::into_inner);
            let leader = ensemble.wait_for_leader(ELECTION_TIMEOUT)?;
            ensemble.node_mut(leader).process_mut().kill()?;
            let next = ensemble.wait_for_leader(ELECTION_TIMEOUT)?;
            debug_assert_ne!(leader, next, "a killed member leads no more");
            Ok(())
        })
        .await
    }
}

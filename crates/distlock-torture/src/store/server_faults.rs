//! Faults of the servers themselves: `kill -9` and restart, SIGSTOP and SIGCONT, and a member
//! of a ZooKeeper ensemble or an etcd cluster cut off from the others.

use std::time::{Duration, Instant};

use distlock_testkit::{HarnessError, RedisCluster};

use super::{Store, PINNED_CLIENTS};
use crate::faults::FaultKind;

impl Store {
    /// `kill -9` of the server (every server of Redlock's majority or the ensemble's leader,
    /// per `kind`), then a restart on the same port and data; blocks until ready.
    pub fn kill_and_restart(&mut self, kind: FaultKind, pause: Duration) -> Result<String, HarnessError> {
        match (self, kind) {
            (Store::Redis(s), _) => {
                s.kill()?;
                std::thread::sleep(pause);
                s.restart()?;
                Ok("the server".into())
            }
            (Store::Mariadb(s), _) => {
                s.kill()?;
                std::thread::sleep(pause);
                s.restart()?;
                Ok("the server".into())
            }
            (Store::Postgres(s), _) => {
                s.kill()?;
                std::thread::sleep(pause);
                s.restart()?;
                Ok("the server".into())
            }
            (Store::Cluster(_), _) => Err(HarnessError::Other(
                "a cluster's master is killed by a failover".into(),
            )),
            (Store::MariadbPair(_), _) => Err(HarnessError::Other(
                "a replicated MariaDB's primary is killed by a failover".into(),
            )),
            (Store::PostgresPair(_), _) => Err(HarnessError::Other(
                "a replicated PostgreSQL's primary is killed by a failover".into(),
            )),
            (Store::Memcached(s), _) => {
                s.kill()?;
                std::thread::sleep(pause);
                s.restart()?;
                Ok("the server".into())
            }
            (Store::Zookeeper(s), _) => {
                s.kill()?;
                std::thread::sleep(pause);
                s.restart()?;
                Ok("the server".into())
            }
            (Store::Redlock(servers), FaultKind::MajorityKill) => {
                servers[0].kill()?;
                servers[1].kill()?;
                std::thread::sleep(pause);
                servers[0].restart()?;
                servers[1].restart()?;
                Ok("masters 0 and 1".into())
            }
            (Store::Redlock(servers), _) => {
                servers[0].kill()?;
                std::thread::sleep(pause);
                servers[0].restart()?;
                Ok("master 0".into())
            }
            (Store::Ensemble(ensemble), _) => {
                let leader = ensemble.wait_for_leader(Duration::from_secs(30))?;
                ensemble.node_mut(leader).kill()?;
                std::thread::sleep(pause);
                ensemble.node_mut(leader).restart()?;
                ensemble.wait_for_leader(Duration::from_secs(30))?;
                Ok(format!("the leader (node {leader})"))
            }
            (Store::Etcd(s), _) => {
                s.kill()?;
                std::thread::sleep(pause);
                s.restart()?;
                Ok("the server".into())
            }
            (Store::EtcdCluster(cluster), _) => {
                let leader = cluster.wait_for_leader(Duration::from_secs(30))?;
                cluster.node_mut(leader).kill()?;
                std::thread::sleep(pause);
                cluster.node_mut(leader).restart()?;
                cluster.wait_for_leader(Duration::from_secs(30))?;
                Ok(format!("the leader (member {leader})"))
            }
            (Store::Sqlite(_) | Store::Url(_), _) => Ok("nothing".into()),
            (Store::Clocked(store, ..), kind) => store.kill_and_restart(kind, pause),
            (Store::Sentinel(..), _) => Err(HarnessError::Other(
                "a Sentinel set's primary is killed by a failover".into(),
            )),
        }
    }

    /// SIGSTOP for `pause`, then SIGCONT, of the server (Redlock: one master; the ensemble:
    /// one follower; the cluster: the master serving `hot`, for less than the node timeout,
    /// so no failover).
    pub fn pause_for(&mut self, pause: Duration, hot: &str) -> Result<String, HarnessError> {
        fn hold(process: &mut distlock_testkit::ServerProcess, pause: Duration) -> Result<(), HarnessError> {
            process.pause()?;
            std::thread::sleep(pause);
            process.resume()
        }
        match self {
            Store::PostgresPair(pair) => {
                hold(pair.primary_mut().process_mut(), pause).map(|()| "the primary".into())
            }
            Store::Redis(s) => hold(s.process_mut(), pause).map(|()| "the server".into()),
            Store::Mariadb(s) => hold(s.process_mut(), pause).map(|()| "the server".into()),
            Store::Postgres(s) => hold(s.process_mut(), pause).map(|()| "the server".into()),
            Store::MariadbPair(pair) => {
                hold(pair.primary_mut().process_mut(), pause).map(|()| "the primary".into())
            }
            Store::Cluster(cluster) => {
                let master = cluster_master_of(cluster, hot)?;
                hold(cluster.node_mut(master).process_mut(), pause.min(CLUSTER_PAUSE))?;
                cluster.wait_until_ok()?;
                Ok(format!("node {master}"))
            }
            Store::Memcached(s) => hold(s.process_mut(), pause).map(|()| "the server".into()),
            Store::Zookeeper(s) => hold(s.process_mut(), pause).map(|()| "the server".into()),
            Store::Redlock(servers) => hold(servers[2].process_mut(), pause).map(|()| "master 2".into()),
            Store::Ensemble(ensemble) => {
                let leader = ensemble.leader().unwrap_or(0);
                let follower = (leader + 1) % ensemble.nodes().len();
                hold(ensemble.node_mut(follower).process_mut(), pause)
                    .map(|()| format!("follower {follower}"))
            }
            Store::Etcd(s) => hold(s.process_mut(), pause).map(|()| "the server".into()),
            Store::EtcdCluster(cluster) => {
                let leader = cluster.leader().unwrap_or(0);
                let follower = (leader + 1) % cluster.nodes().len();
                hold(cluster.node_mut(follower).process_mut(), pause).map(|()| format!("follower {follower}"))
            }
            Store::Sqlite(_) | Store::Url(_) => Ok("nothing".into()),
            Store::Clocked(store, ..) => store.pause_for(pause, hot),
            Store::Sentinel(set, _) => {
                set.isolate_primary()?;
                std::thread::sleep(pause.min(SENTINEL_PAUSE));
                set.heal_primary()?;
                Ok("the primary".into())
            }
        }
    }

    /// Cuts an ensemble's or an etcd cluster's member off from the others (silently, both
    /// ways) for `duration`, then heals and waits until every member serves again: the leader
    /// (`PartitionLeader`), or a follower (`PartitionFollower`), `prefer` if it is one (the
    /// member the hot lock's holder is pinned to). Blocks.
    pub fn partition(
        &mut self,
        kind: FaultKind,
        duration: Duration,
        prefer: Option<usize>,
    ) -> Result<String, HarnessError> {
        match self {
            Store::Ensemble(ensemble) => cut_off(
                "the ensemble did not serve again",
                ensemble.wait_for_leader(Duration::from_secs(30))?,
                ensemble.nodes().len(),
                (kind, duration, prefer),
                |member| ensemble.isolate(member),
                || ensemble.heal_links(),
                || ensemble.nodes().iter().all(|n| n.mode().is_some()) && ensemble.leader().is_some(),
            ),
            Store::EtcdCluster(cluster) => cut_off(
                "the etcd cluster did not agree on a leader",
                cluster.wait_for_leader(Duration::from_secs(30))?,
                cluster.nodes().len(),
                (kind, duration, prefer),
                |member| cluster.isolate(member),
                || cluster.heal_links(),
                || {
                    let leaders: Vec<Option<u64>> = cluster
                        .nodes()
                        .iter()
                        .map(|m| m.status().ok().map(|s| s.leader).filter(|l| *l != 0))
                        .collect();
                    leaders.iter().all(|l| l.is_some() && *l == leaders[0])
                },
            ),
            _ => Ok("nothing".into()),
        }
    }
}

/// [`Store::partition`] of a group of `size` members led by `leader`: the member chosen by
/// `kind` (the leader, or a follower: `prefer` if it is one) is cut off by `isolate` for the
/// fault's duration, then `heal` joins it again; done once `serving` says so, within 30 s
/// (else the error says `what` did not happen). Says which member it was and which clients were pinned to it.
fn cut_off(
    what: &str,
    leader: usize,
    size: usize,
    (kind, duration, prefer): (FaultKind, Duration, Option<usize>),
    isolate: impl FnOnce(usize) -> Result<(), HarnessError>,
    heal: impl FnOnce() -> Result<(), HarnessError>,
    serving: impl Fn() -> bool,
) -> Result<String, HarnessError> {
    let (member, role) = match kind {
        FaultKind::PartitionLeader => (leader, "the leader"),
        _ => (
            prefer
                .filter(|m| *m != leader && *m < size)
                .unwrap_or((leader + 1) % size),
            "follower",
        ),
    };
    isolate(member)?;
    std::thread::sleep(duration);
    heal()?;
    let healed = Instant::now();
    while !serving() {
        if healed.elapsed() > Duration::from_secs(30) {
            return Err(HarnessError::Other(format!(
                "{what} within 30 s of healing member {member}"
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let pinned: Vec<usize> = (0..PINNED_CLIENTS).filter(|c| c % size == member).collect();
    Ok(format!(
        "{role} (member {member}, clients {pinned:?} pinned to it; serving again {} ms after the heal)",
        healed.elapsed().as_millis()
    ))
}

/// The longest pause of a Sentinel set's primary: below half the Sentinels' down-after time
/// (2 s), past which a Sentinel drops its link to the primary and the reconnection can turn a
/// pause into a failover (600 ms with a 1 s down-after time did, under load: the next
/// failover found the replica promoted already).
const SENTINEL_PAUSE: Duration = Duration::from_millis(500);

/// The longest pause of a cluster's master: below the node timeout (2 s), so the pause never
/// turns into a failover (those are faults of their own).
const CLUSTER_PAUSE: Duration = Duration::from_millis(1500);

/// The node serving `key`'s slot as master.
pub(super) fn cluster_master_of(cluster: &RedisCluster, key: &str) -> Result<usize, HarnessError> {
    let slot = cluster.slot_of(key)?;
    cluster
        .node_of_slot(slot)
        .ok_or_else(|| HarnessError::Other(format!("no master serves slot {slot}")))
}

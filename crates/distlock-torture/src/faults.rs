//! The fault kinds and the schedule: a sequence of faults drawn from a seed (the same seed
//! gives the same sequence; the moment each one starts depends on the run, since the next
//! fault waits until the hot lock has been granted again after the last).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::store::Backend;

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// `kill -9` of the hot lock's holder (restarted as a new process).
    HolderKill,
    /// SIGSTOP of the hot lock's holder past its TTL (a GC pause), then SIGCONT.
    HolderPause,
    /// `kill -9` of the server, then a restart (Redlock: one master; ensemble, etcd cluster:
    /// the leader).
    ServerKill,
    /// SIGSTOP of the server, then SIGCONT (Redlock: one master; ensemble, etcd cluster: a
    /// follower).
    ServerPause,
    /// Redlock: two of three masters killed and restarted empty.
    MajorityKill,
    /// Redis Cluster: the hot lock's master killed, its replica promoted, the old master
    /// restarted as a replica. MariaDB with a replica, PostgreSQL with a standby: the primary
    /// killed, the replica (standby) promoted and the address moved to it, a fresh one started.
    /// Redis Sentinel: the primary killed, the replica promoted by the Sentinels, the old
    /// primary restarted as a replica.
    Failover,
    /// Redis Cluster: as `Failover`, after the master's replica was cut off from it for the
    /// fault's duration (writes meanwhile reach no replica: a lagging replica). MariaDB with a
    /// replica, PostgreSQL with a standby, Redis Sentinel: the same with the replication link
    /// cut.
    LaggedFailover,
    /// The holder's link black-holed (a silent partition), then healed.
    BlackholeHolder,
    /// Every client's link black-holed, then healed.
    BlackholeAll,
    /// The holder's replies dropped (requests still run), then healed.
    DropRepliesHolder,
    /// Every client's replies dropped, then healed.
    DropRepliesAll,
    /// 100 to 300 ms of latency each way on the holder's link, then healed.
    LatencyHolder,
    /// 100 to 300 ms of latency each way on every client's link, then healed.
    LatencyAll,
    /// The holder's connections reset.
    ResetHolder,
    /// Every client's connections reset.
    ResetAll,
    /// ZooKeeper ensemble, etcd cluster: a follower cut off from the other members (silently,
    /// both ways) while the clients pinned to it stay connected to it, then healed.
    PartitionFollower,
    /// ZooKeeper ensemble, etcd cluster: the leader isolated from the other members with the
    /// clients pinned to it on its side, then healed.
    PartitionLeader,
    /// The server's wall clock stepped forward by more than the TTL (Redlock: one master's),
    /// then back to the true time (a step back) after the fault's duration.
    ClockJumpForward,
    /// The server's wall clock stepped back by more than the TTL (Redlock: one master's),
    /// then forward to the true time after the fault's duration.
    ClockJumpBack,
}

impl FaultKind {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::HolderKill => "holder-kill",
            FaultKind::HolderPause => "holder-pause",
            FaultKind::ServerKill => "server-kill",
            FaultKind::ServerPause => "server-pause",
            FaultKind::MajorityKill => "majority-kill",
            FaultKind::Failover => "failover",
            FaultKind::LaggedFailover => "lagged-failover",
            FaultKind::BlackholeHolder => "blackhole-holder",
            FaultKind::BlackholeAll => "blackhole-all",
            FaultKind::DropRepliesHolder => "drop-replies-holder",
            FaultKind::DropRepliesAll => "drop-replies-all",
            FaultKind::LatencyHolder => "latency-holder",
            FaultKind::LatencyAll => "latency-all",
            FaultKind::ResetHolder => "reset-holder",
            FaultKind::ResetAll => "reset-all",
            FaultKind::PartitionFollower => "partition-follower",
            FaultKind::PartitionLeader => "partition-leader",
            FaultKind::ClockJumpForward => "clock-jump-forward",
            FaultKind::ClockJumpBack => "clock-jump-back",
        }
    }

    /// The kinds that apply to `backend` (`server`: whether the harness controls the server;
    /// `proxied`: whether clients go through fault proxies). The clock jumps apply only to a
    /// store started on a moveable clock: a run asks for them by name (`--faults`).
    pub fn applicable(backend: Backend, server: bool, proxied: bool) -> Vec<FaultKind> {
        let mut kinds = vec![FaultKind::HolderKill, FaultKind::HolderPause];
        let fails_over = matches!(
            backend,
            Backend::RedisCluster
                | Backend::MariadbSemisyncReplica
                | Backend::MariadbAsyncReplica
                | Backend::PostgresSyncStandby
                | Backend::PostgresAsyncStandby
        );
        if server && fails_over {
            // A killed master is replaced by its replica: the kill is a failover.
            kinds.extend([
                FaultKind::Failover,
                FaultKind::LaggedFailover,
                FaultKind::ServerPause,
            ]);
        } else if server {
            kinds.extend([FaultKind::ServerKill, FaultKind::ServerPause]);
            if matches!(backend, Backend::Redlock | Backend::RedlockNoDelay) {
                kinds.push(FaultKind::MajorityKill);
            }
            if matches!(backend, Backend::ZookeeperEnsemble | Backend::EtcdCluster) {
                kinds.extend([FaultKind::PartitionFollower, FaultKind::PartitionLeader]);
            }
        }
        if server && backend.clock_jumps() {
            kinds.extend([FaultKind::ClockJumpForward, FaultKind::ClockJumpBack]);
        }
        let sentinel = matches!(backend, Backend::RedisSentinel | Backend::RedisSentinelReplicas);
        if server && sentinel {
            // The Sentinels replace a killed primary: the kill is a failover.
            kinds.retain(|k| *k != FaultKind::ServerKill);
            kinds.extend([FaultKind::Failover, FaultKind::LaggedFailover]);
        }
        // A Sentinel set's clients reach the data servers at the addresses the Sentinels name,
        // around any proxy: no client-link faults.
        if proxied && !sentinel {
            kinds.extend([
                FaultKind::BlackholeHolder,
                FaultKind::BlackholeAll,
                FaultKind::DropRepliesHolder,
                FaultKind::DropRepliesAll,
                FaultKind::LatencyHolder,
                FaultKind::LatencyAll,
                FaultKind::ResetHolder,
                FaultKind::ResetAll,
            ]);
        }
        kinds
    }
}

/// One scheduled fault.
#[derive(Debug, Clone, Copy)]
pub struct Planned {
    /// What.
    pub kind: FaultKind,
    /// How long it lasts (a pause, a partition; a kill's downtime).
    pub duration: Duration,
    /// The quiet time after recovery before the next fault.
    pub gap: Duration,
}

/// The fault sequence for `seed`: rounds in which every kind of `kinds` comes once, in an
/// order shuffled by the seed (so a short run still meets every kind), with durations scaled
/// to `ttl` (pauses of the holder always outlast it).
pub fn schedule(seed: u64, kinds: &[FaultKind], ttl: Duration) -> impl Iterator<Item = Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    let kinds = kinds.to_vec();
    let mut round: Vec<FaultKind> = Vec::new();
    std::iter::from_fn(move || {
        if round.is_empty() {
            round.clone_from(&kinds);
            round.shuffle(&mut rng);
        }
        let kind = round.pop()?;
        let factor = match kind {
            FaultKind::HolderPause => rng.random_range(1.2..2.0),
            FaultKind::HolderKill | FaultKind::ResetHolder | FaultKind::ResetAll => 0.0,
            FaultKind::ServerKill | FaultKind::MajorityKill | FaultKind::Failover => {
                rng.random_range(0.0..0.5)
            }
            FaultKind::LaggedFailover => rng.random_range(0.1..0.5),
            // Past the session timeout (the TTL), often past the members' own limit
            // (`syncLimit × tickTime`, 2.5 s), so that sessions expire on the majority side
            // and, for a leader, the others elect another.
            FaultKind::PartitionFollower | FaultKind::PartitionLeader => rng.random_range(1.0..4.0),
            _ => rng.random_range(0.3..1.5),
        };
        Some(Planned {
            kind,
            duration: ttl.mul_f64(factor),
            gap: ttl.mul_f64(rng.random_range(0.2..1.0)),
        })
    })
}

impl FaultKind {
    /// Whether it steps the server's clock (run only when `--faults` names it).
    pub fn is_clock_jump(self) -> bool {
        matches!(self, FaultKind::ClockJumpForward | FaultKind::ClockJumpBack)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let kinds = FaultKind::applicable(Backend::Redis, true, true);
        let a: Vec<_> = schedule(7, &kinds, Duration::from_secs(1))
            .take(20)
            .map(|p| (p.kind, p.duration, p.gap))
            .collect();
        let b: Vec<_> = schedule(7, &kinds, Duration::from_secs(1))
            .take(20)
            .map(|p| (p.kind, p.duration, p.gap))
            .collect();
        assert_eq!(a, b);
        let c: Vec<_> = schedule(8, &kinds, Duration::from_secs(1))
            .take(20)
            .map(|p| (p.kind, p.duration, p.gap))
            .collect();
        assert_ne!(a, c);
        // Every kind comes once per round.
        let first_round: std::collections::HashSet<_> = a.iter().take(kinds.len()).map(|p| p.0).collect();
        assert_eq!(first_round.len(), kinds.len());
    }

    #[test]
    fn only_an_ensemble_or_etcd_cluster_the_harness_started_is_partitioned() {
        let partitions = [FaultKind::PartitionFollower, FaultKind::PartitionLeader];
        for backend in [Backend::ZookeeperEnsemble, Backend::EtcdCluster] {
            let kinds = FaultKind::applicable(backend, true, true);
            assert!(
                partitions.iter().all(|p| kinds.contains(p)),
                "{backend:?}: {kinds:?}"
            );
            let without_server = FaultKind::applicable(backend, false, true);
            assert!(!partitions.iter().any(|p| without_server.contains(p)));
        }
        assert_eq!(
            partitions.map(FaultKind::name),
            ["partition-follower", "partition-leader"]
        );
        let without_server = FaultKind::applicable(Backend::ZookeeperEnsemble, false, true);
        assert!(!partitions.iter().any(|p| without_server.contains(p)));
        for backend in Backend::ALL
            .into_iter()
            .filter(|b| !matches!(b, Backend::ZookeeperEnsemble | Backend::EtcdCluster))
        {
            let kinds = FaultKind::applicable(backend, true, true);
            assert!(!partitions.iter().any(|p| kinds.contains(p)), "{backend:?}");
        }
    }
}

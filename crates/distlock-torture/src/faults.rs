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
    /// `kill -9` of the server, then a restart (Redlock: one master; ensemble: the leader).
    ServerKill,
    /// SIGSTOP of the server, then SIGCONT (Redlock: one master; ensemble: a follower).
    ServerPause,
    /// Redlock: two of three masters killed and restarted empty.
    MajorityKill,
    /// Redis Cluster: the hot lock's master killed, its replica promoted, the old master
    /// restarted as a replica. Redis Sentinel: the primary killed, the replica promoted by the
    /// Sentinels, the old primary restarted as a replica.
    Failover,
    /// Redis Cluster: as `Failover`, after the master's replica was cut off from it for the
    /// fault's duration (writes meanwhile reach no replica: a lagging replica). Redis
    /// Sentinel: the same with the primary's replication link cut.
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
        }
    }

    /// The kinds that apply to `backend` (`server`: whether the harness controls the server;
    /// `proxied`: whether clients go through fault proxies).
    pub fn applicable(backend: Backend, server: bool, proxied: bool) -> Vec<FaultKind> {
        let mut kinds = vec![FaultKind::HolderKill, FaultKind::HolderPause];
        if server && backend == Backend::RedisCluster {
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
            _ => rng.random_range(0.3..1.5),
        };
        Some(Planned {
            kind,
            duration: ttl.mul_f64(factor),
            gap: ttl.mul_f64(rng.random_range(0.2..1.0)),
        })
    })
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
}

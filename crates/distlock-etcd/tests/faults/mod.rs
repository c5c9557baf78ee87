//! What the tests of faults between etcd members share: a 3-member cluster (with links its
//! test can cut), clients on chosen members, and the timeline of a holder's guard against a
//! rival's wait, all read on this process's one clock.

#![allow(dead_code)] // each test module uses part of it

use std::time::Duration;

use distlock_core::{AcquireOptions, LockClient, LockGuard};
use distlock_etcd::EtcdLock;
use distlock_testkit::{EtcdCluster, EtcdOptions};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The lease TTL of every client here: long enough that a loaded machine's late keep-alive
/// does not end a lease, short enough for a test.
pub const TTL: Duration = Duration::from_secs(6);
/// Generous bound on anything the cluster does by itself (an election, a lease's expiry).
pub const LIMIT: Duration = Duration::from_secs(40);
/// How often a timeline looks at the guard.
const TICK: Duration = Duration::from_millis(20);

/// A 3-member cluster, with links between its members when `links`; started off the runtime.
pub async fn cluster(links: bool) -> EtcdCluster {
    let options = EtcdOptions {
        peer_links: links,
        ..EtcdOptions::default()
    };
    tokio::task::spawn_blocking(move || EtcdCluster::start_with(options))
        .await
        .expect("joined")
        .expect("the etcd cluster starts (run scripts/install-test-deps)")
}

/// The cluster's leader, waited for.
pub async fn leader(cluster: &EtcdCluster) -> usize {
    tokio::task::block_in_place(|| cluster.wait_for_leader(LIMIT)).expect("a leader")
}

/// A client of the members `members` only, with the lease [`TTL`].
pub async fn client(cluster: &EtcdCluster, members: &[usize]) -> LockClient {
    let addrs: Vec<String> = members
        .iter()
        .map(|m| cluster.node(*m).addr().to_string())
        .collect();
    let url = format!("etcd://{}?lease_ttl={}s", addrs.join(","), TTL.as_secs());
    LockClient::new(EtcdLock::connect_url(&url).await.expect("the client connects"))
}

/// A wait for `name` by `client` in a task of its own; its result and when it came. An
/// answer that did not come (a member that lost its leader forwards a request into the void,
/// and the operation timeout ends it) is waited for again, as an application would.
pub fn wait_in_task(
    client: LockClient,
    name: &'static str,
) -> JoinHandle<(Instant, distlock_core::Result<LockGuard>)> {
    tokio::spawn(async move {
        let start = Instant::now();
        loop {
            let opts = AcquireOptions::new().wait_for(LIMIT.saturating_sub(start.elapsed()));
            match client.acquire_with(name, &opts).await {
                Err(e) if e.is_transient() && start.elapsed() < LIMIT => {
                    eprintln!("+{:?} the rival waits again after: {e}", start.elapsed());
                }
                result => return (Instant::now(), result),
            }
        }
    })
}

/// When a holder's guard first said suspended and lost, and when a rival's wait ended.
#[derive(Debug)]
pub struct Timeline {
    pub suspended: Option<Duration>,
    pub lost: Option<Duration>,
    pub rival: Option<Duration>,
}

/// Watches `guard` every 20 ms from `since` until `rival` ends (or [`LIMIT`] passes),
/// printing each change.
pub async fn timeline(
    since: Instant,
    guard: &LockGuard,
    rival: &mut JoinHandle<(Instant, distlock_core::Result<LockGuard>)>,
) -> (Timeline, Option<LockGuard>) {
    let mut seen = Timeline {
        suspended: None,
        lost: None,
        rival: None,
    };
    loop {
        let at = since.elapsed();
        if seen.suspended.is_none() && guard.is_suspended() {
            eprintln!("+{at:?}: the holder's guard is suspended");
            seen.suspended = Some(at);
        }
        if seen.lost.is_none() && guard.is_lost() {
            eprintln!("+{at:?}: the holder's guard is lost");
            seen.lost = Some(at);
        }
        if rival.is_finished() {
            let (when, result) = rival.await.expect("joined");
            let at = when - since;
            eprintln!(
                "+{at:?}: the rival's wait ended: {:?}",
                result.as_ref().map(|g| g.fencing_token())
            );
            seen.rival = Some(at);
            return (seen, result.ok());
        }
        assert!(at < LIMIT, "the rival still waits after {LIMIT:?}: {seen:?}");
        tokio::time::sleep(TICK).await;
    }
}

//! The etcd cluster's partition API against real etcd members (install them with
//! `scripts/install-test-deps`): what each side of a partition between members does, as each
//! member's status and `etcdctl` through it report it. Timelines are printed (`--nocapture`).

use std::thread;
use std::time::{Duration, Instant};

use distlock_testkit::{etcdctl, EtcdCluster, EtcdOptions, ETCD_CLUSTER_SIZE};

/// Generous: an election on a loaded machine (the election timeout is 1 s).
const LIMIT: Duration = Duration::from_secs(30);

fn cluster() -> EtcdCluster {
    let options = EtcdOptions {
        peer_links: true,
        ..EtcdOptions::default()
    };
    EtcdCluster::start_with(options).expect("the cluster starts with links between its members")
}

/// Which member each member names as its leader (`None`: no answer or no leader).
fn leaders(cluster: &EtcdCluster) -> Vec<Option<u64>> {
    cluster
        .nodes()
        .iter()
        .map(|m| m.status().ok().map(|s| s.leader).filter(|l| *l != 0))
        .collect()
}

fn member_id(cluster: &EtcdCluster, index: usize) -> u64 {
    cluster.node(index).status().expect("status").member_id
}

/// Polls until `done` holds, printing each change of the members' leaders.
fn watch(cluster: &EtcdCluster, since: Instant, what: &str, done: impl Fn(&EtcdCluster) -> bool) {
    let mut last = None;
    loop {
        let now = leaders(cluster);
        if last.as_ref() != Some(&now) {
            eprintln!("+{:?}: leaders {now:?}", since.elapsed());
            last = Some(now.clone());
        }
        if done(cluster) {
            return;
        }
        assert!(since.elapsed() < LIMIT, "{what}: not after {LIMIT:?} ({now:?})");
        thread::sleep(Duration::from_millis(100));
    }
}

fn put_through(cluster: &EtcdCluster, index: usize, key: &str) -> Result<String, String> {
    etcdctl(&cluster.node(index).endpoint(), &["put", key, "v"]).map_err(|e| e.to_string())
}

#[test]
fn an_isolated_leader_steps_down_and_the_majority_elects_another() {
    let cluster = cluster();
    let old = cluster.wait_for_leader(LIMIT).expect("a leader");
    let old_id = member_id(&cluster, old);
    let others: Vec<usize> = (0..ETCD_CLUSTER_SIZE).filter(|i| *i != old).collect();
    put_through(&cluster, old, "distlock/before").expect("a write before the partition");
    // Each member reaches each other one through the link of its own: every link carries
    // the members' raft traffic.
    for from in 0..ETCD_CLUSTER_SIZE {
        for to in (0..ETCD_CLUSTER_SIZE).filter(|to| *to != from) {
            let traffic = cluster.peer_link(from, to).expect("a link").proxy().traffic();
            assert!(
                traffic.to_server > 0,
                "nothing went from {from} to {to}: {traffic:?}"
            );
        }
    }

    let cut = Instant::now();
    cluster.isolate(old).expect("isolate the leader");
    watch(
        &cluster,
        cut,
        "a new leader on the majority side, the old one stepped down",
        |c| {
            let new = others
                .iter()
                .any(|i| c.node(*i).status().is_ok_and(|s| s.is_leader()));
            let stepped_down = c.node(old).status().is_ok_and(|s| s.leader != old_id);
            new && stepped_down
        },
    );
    // The majority takes writes; the isolated member cannot commit any.
    put_through(&cluster, others[0], "distlock/majority").expect("the majority takes writes");
    let refused = put_through(&cluster, old, "distlock/minority");
    assert!(
        refused.is_err(),
        "the isolated member committed a write: {refused:?}"
    );

    let healed = Instant::now();
    cluster.heal_links().expect("heal");
    watch(&cluster, healed, "one leader that every member follows", |c| {
        let now = leaders(c);
        now.iter().all(|l| l.is_some() && *l == now[0])
    });
    put_through(&cluster, old, "distlock/after").expect("the old leader serves writes again");
}

#[test]
fn a_follower_cut_off_one_way_from_its_leader_cannot_depose_it() {
    let cluster = cluster();
    let leader = cluster.wait_for_leader(LIMIT).expect("a leader");
    let leader_id = member_id(&cluster, leader);
    let deaf = (leader + 1) % ETCD_CLUSTER_SIZE;
    let other = (leader + 2) % ETCD_CLUSTER_SIZE;

    cluster.cut_one_way(leader, deaf).expect("cut leader → follower");
    // Several election timeouts: pre-vote lets the deaf follower ask, and the other
    // follower, which still hears the leader, says no.
    thread::sleep(Duration::from_secs(5));
    for index in [leader, other] {
        let status = cluster.node(index).status().expect("status");
        assert_eq!(
            status.leader, leader_id,
            "member {index} follows another leader: {status:?}"
        );
    }
    put_through(&cluster, other, "distlock/k").expect("the majority still takes writes");
    // A write through the deaf follower reaches the leader and commits, but the follower
    // never learns it: its client gets no answer.
    let unanswered = put_through(&cluster, deaf, "distlock/deaf");
    assert!(
        unanswered.is_err(),
        "the deaf follower answered a write: {unanswered:?}"
    );

    cluster.heal_links().expect("heal");
    let healed = Instant::now();
    watch(&cluster, healed, "every member follows the leader again", |c| {
        leaders(c).iter().all(|l| *l == Some(leader_id))
    });
}

#[test]
fn partitions_need_peer_links() {
    let cluster = EtcdCluster::start().expect("a cluster without links");
    let err = cluster.isolate(0).expect_err("no links to cut");
    assert!(err.to_string().contains("peer_links"), "{err}");
    assert!(cluster.split(&[]).is_err());
    assert!(cluster.peer_link(0, 1).is_none());
}

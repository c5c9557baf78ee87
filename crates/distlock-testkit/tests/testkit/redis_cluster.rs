//! The Redis Cluster of the harness (three masters, with or without replicas) against real
//! `redis-server`s (install them with `scripts/install-test-deps`).

use distlock_testkit::{ClusterRole, RedisCluster, RedisClusterOptions, CLUSTER_MASTERS};

#[test]
fn cluster_forms_loses_and_regains_a_master() {
    let mut cluster = RedisCluster::start().expect("the cluster starts (run scripts/install-test-deps)");
    assert_eq!(cluster.nodes().len(), CLUSTER_MASTERS);
    let url = cluster.url();
    assert!(url.starts_with("redis+cluster://127.0.0.1:"), "{url}");
    assert_eq!(url.matches(',').count(), CLUSTER_MASTERS - 1, "{url}");
    for i in 0..CLUSTER_MASTERS {
        let info = cluster.command(i, &["CLUSTER", "INFO"]).expect("CLUSTER INFO");
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_known_nodes:3"), "{info}");
    }
    assert_eq!(cluster.node_of_slot(0), Some(0));
    assert_eq!(cluster.node_of_slot(16383), Some(CLUSTER_MASTERS - 1));
    // `foo` hashes to slot 12182, served by the last master: the others redirect.
    let moved = cluster
        .command(0, &["SET", "foo", "1"])
        .expect_err("MOVED")
        .to_string();
    assert!(moved.starts_with("MOVED 12182 127.0.0.1:"), "{moved}");
    assert_eq!(cluster.command(2, &["SET", "foo", "1"]).expect("SET"), "OK");

    cluster.node_mut(2).kill().expect("kill -9");
    // The others keep serving their slots (no full coverage required): `b` is in slot 3300.
    assert_eq!(
        cluster
            .command(0, &["SET", "b", "1"])
            .expect("SET on a live master"),
        "OK"
    );
    cluster.node_mut(2).restart().expect("restart");
    cluster.wait_until_ok().expect("whole again");
    assert_eq!(
        cluster.node_of_slot(16383),
        Some(CLUSTER_MASTERS - 1),
        "it kept its slots"
    );
}

#[test]
fn proxies_stand_in_front_of_every_node() {
    assert!(
        RedisCluster::start().expect("starts").proxies().is_err(),
        "a cluster announcing addresses cannot be proxied"
    );
    let cluster = RedisCluster::start_with(RedisClusterOptions {
        proxyable: true,
        ..RedisClusterOptions::default()
    })
    .expect("starts");
    let (url, proxies) = cluster.proxies().expect("proxies");
    assert_eq!(proxies.0.len(), CLUSTER_MASTERS);
    for (proxy, node) in proxies.0.iter().zip(cluster.nodes()) {
        assert_eq!(proxy.addr().port(), node.port(), "same port, another address");
        assert_ne!(proxy.addr().ip(), node.addr().ip());
        assert!(url.contains(&proxy.host_port()), "{url}");
    }
    // Redirects name no host: a client stays on the address it asked.
    let moved = cluster
        .command(0, &["SET", "foo", "1"])
        .expect_err("MOVED")
        .to_string();
    assert!(moved.starts_with("MOVED 12182 :"), "{moved}");
}

/// When `start` returns, every node already knows which master serves every slot: a node can
/// list a master as connected before it has heard which slots that master serves, and a client
/// that read its slot map from such a node would miss that master (a `SCAN` of the cluster
/// would skip its keys). Started several times, since the window is short.
#[test]
fn every_node_knows_every_slot_once_started() {
    for _ in 0..4 {
        let cluster = RedisCluster::start().expect("the cluster starts");
        for i in 0..CLUSTER_MASTERS {
            let info = cluster.command(i, &["CLUSTER", "INFO"]).expect("CLUSTER INFO");
            assert!(info.contains("cluster_slots_assigned:16384"), "node {i}: {info}");
            let nodes = cluster.command(i, &["CLUSTER", "NODES"]).expect("CLUSTER NODES");
            let serving = nodes
                .lines()
                .filter(|line| line.contains("master") && line.split(' ').count() > 8)
                .count();
            assert_eq!(
                serving, CLUSTER_MASTERS,
                "node {i} knows the slots of every master:\n{nodes}"
            );
        }
    }
}

fn with_replicas() -> RedisCluster {
    RedisCluster::start_with(RedisClusterOptions {
        replicas_per_master: 1,
        ..RedisClusterOptions::default()
    })
    .expect("the cluster starts (run scripts/install-test-deps)")
}

/// Waits until replica `i` holds `foo` (slot 12182), at most 5 s.
fn replicated(cluster: &RedisCluster, i: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while cluster
        .command(i, &["CLUSTER", "COUNTKEYSINSLOT", "12182"])
        .expect("COUNTKEYSINSLOT")
        != "1"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "node {i} got the write within 5 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// A replica per master: each replicates its master, gets its writes, takes its slots (and
/// its data) over when it is killed, and the old master comes back as the new one's replica.
#[test]
fn a_replica_takes_over_a_killed_master_which_rejoins_as_its_replica() {
    let mut cluster = with_replicas();
    assert_eq!(cluster.nodes().len(), 2 * CLUSTER_MASTERS);
    for master in 0..CLUSTER_MASTERS {
        let replica = CLUSTER_MASTERS + master;
        assert_eq!(cluster.role(master).expect("role"), ClusterRole::Master);
        assert_eq!(cluster.role(replica).expect("role"), ClusterRole::Replica(master));
        assert_eq!(cluster.replica_of(master), Some(replica));
        let info = cluster.command(replica, &["INFO", "replication"]).expect("INFO");
        assert!(info.contains("master_link_status:up"), "{info}");
    }
    let info = cluster.command(0, &["CLUSTER", "INFO"]).expect("CLUSTER INFO");
    assert!(info.contains("cluster_known_nodes:6"), "{info}");
    assert_eq!(cluster.slot_of("foo").expect("KEYSLOT"), 12182);
    assert_eq!(cluster.node_of_slot(12182), Some(2));

    assert_eq!(cluster.command(2, &["SET", "foo", "1"]).expect("SET"), "OK");
    replicated(&cluster, 5);
    let started = std::time::Instant::now();
    let promoted = cluster.fail_over(2).expect("a failover");
    eprintln!("failover of node 2 to node {promoted} in {:?}", started.elapsed());
    assert_eq!(promoted, 5);
    assert_eq!(cluster.node_of_slot(12182), Some(5));
    assert_eq!(cluster.role(5).expect("role"), ClusterRole::Master);
    assert_eq!(
        cluster.command(5, &["GET", "foo"]).expect("GET"),
        "1",
        "a replicated write survives the failover"
    );
    let moved = cluster
        .command(0, &["GET", "foo"])
        .expect_err("MOVED")
        .to_string();
    assert!(
        moved.ends_with(&format!(":{}", cluster.nodes()[5].port())),
        "others redirect to the promoted node: {moved}"
    );

    cluster.rejoin(2).expect("the old master rejoins");
    assert_eq!(cluster.role(2).expect("role"), ClusterRole::Replica(5));
    assert_eq!(cluster.replica_of(5), Some(2));
    assert_eq!(
        cluster.node_of_slot(12182),
        Some(5),
        "and does not take its slots back"
    );
}

/// A write the master accepted after its replication was stalled is gone once its replica is
/// promoted: asynchronous replication, as a lagging replica would lose it.
#[test]
fn a_write_the_replica_never_got_is_lost_on_failover() {
    let mut cluster = with_replicas();
    assert_eq!(cluster.command(2, &["SET", "foo", "before"]).expect("SET"), "OK");
    replicated(&cluster, 5);
    let replica = cluster.stall_replication(2).expect("stall");
    assert_eq!(replica, 5);
    assert!(cluster.nodes()[5].process().is_paused());
    assert_eq!(cluster.command(2, &["SET", "foo", "after"]).expect("SET"), "OK");
    assert_eq!(
        cluster.command(2, &["WAIT", "1", "200"]).expect("WAIT"),
        "0",
        "no replica is connected to get it"
    );
    cluster.node_mut(2).kill().expect("kill -9");
    cluster.node_mut(5).resume().expect("SIGCONT");
    cluster.wait_for_promotion(5).expect("promoted");
    assert_eq!(
        cluster.command(5, &["GET", "foo"]).expect("GET"),
        "before",
        "the unreplicated write was lost"
    );
    cluster.rejoin(2).expect("rejoins");
    assert_eq!(cluster.role(2).expect("role"), ClusterRole::Replica(5));
}

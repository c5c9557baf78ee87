//! The three-master Redis Cluster of the harness against real `redis-server`s (install them
//! with `scripts/install-test-deps`).

use distlock_testkit::{RedisCluster, RedisClusterOptions, CLUSTER_MASTERS};

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

//! The testkit's etcd servers against the real `etcd` and `etcdctl` (install them with
//! `scripts/install-test-deps`): a single member, a three-member cluster, their controls.

use std::io;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use distlock_testkit::{
    etcd_status, etcdctl, probe, EtcdCluster, EtcdOptions, EtcdServer, HarnessError, ETCD_CLUSTER_SIZE,
};

/// Generous: the machine is shared and loaded.
const ELECTION_BOUND: Duration = Duration::from_secs(20);

fn put(endpoints: &str, key: &str, value: &str) {
    let out = etcdctl(endpoints, &["put", key, value]).expect("etcdctl put");
    assert_eq!(out.trim(), "OK", "etcdctl put answered {out:?}");
}

/// The value of `key` (a linearizable read), `None` when absent.
fn get(endpoints: &str, key: &str) -> Option<String> {
    let out = etcdctl(endpoints, &["get", key, "--print-value-only"]).expect("etcdctl get");
    let value = out.trim_end_matches('\n');
    (!value.is_empty()).then(|| value.to_owned())
}

fn assert_refused(port: u16) {
    let err = TcpStream::connect_timeout(&probe::loopback(port), Duration::from_millis(500))
        .expect_err("nothing should listen on the port any more");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
}

#[test]
fn a_single_member_keeps_its_keys_across_kill_and_restart() {
    let mut etcd = EtcdServer::start().expect("start etcd");
    let port = etcd.port();
    assert_eq!(etcd.url(), format!("etcd://127.0.0.1:{port}"));
    assert_eq!(etcd.addr(), probe::loopback(port));
    assert_ne!(etcd.peer_port(), port);
    let status = etcd_status(etcd.addr()).expect("status");
    assert!(status.is_leader(), "a single member leads itself: {status:?}");

    put(&etcd.endpoint(), "distlock/k", "v1");
    assert_eq!(get(&etcd.endpoint(), "distlock/k").as_deref(), Some("v1"));

    // Paused, it answers nothing; resumed, it serves again.
    etcd.pause().expect("pause");
    assert!(
        etcd_status(etcd.addr()).is_err(),
        "a paused member must not answer"
    );
    etcd.resume().expect("resume");
    assert_eq!(get(&etcd.endpoint(), "distlock/k").as_deref(), Some("v1"));

    etcd.kill().expect("kill -9");
    assert!(!etcd.is_running());
    assert_refused(port);
    etcd.restart().expect("restart on the same ports and data");
    assert_eq!(etcd.port(), port);
    assert_eq!(
        get(&etcd.endpoint(), "distlock/k").as_deref(),
        Some("v1"),
        "the key written before kill -9 survives the restart"
    );

    let log = std::fs::read_to_string(etcd.process().log_path()).expect("read the log");
    assert!(
        log.contains("serving client traffic"),
        "etcd logs to server.log:\n{log}"
    );
    assert!(
        log.contains(r#""pre-vote":true"#),
        "pre-vote is on by default:\n{log}"
    );
    let dir = etcd.dir().to_path_buf();
    let pid = etcd.pid().expect("running");
    drop(etcd);
    assert!(!dir.exists(), "the directory is removed on drop");
    assert!(process_gone(pid), "the process is killed on drop");
}

#[test]
fn a_missing_etcd_names_its_package_and_the_install_script() {
    let err = EtcdServer::start_with(EtcdOptions {
        binary: Some("distlock-no-such-etcd".into()),
        ..EtcdOptions::default()
    })
    .expect_err("must fail");
    let message = err.to_string();
    assert!(matches!(err, HarnessError::MissingBinary { .. }), "{message}");
    assert!(message.contains("distlock-no-such-etcd"), "{message}");
    assert!(message.contains("run scripts/install-test-deps"), "{message}");
    assert!(message.contains("apt-get install -y etcd-server"), "{message}");
}

#[test]
fn cluster_elects_a_leader_survives_its_kill_and_takes_it_back() {
    let started = Instant::now();
    let mut cluster = EtcdCluster::start().expect("start the cluster");
    eprintln!("etcd cluster start took {:?}", started.elapsed());
    let addrs: Vec<String> = cluster.nodes().iter().map(|m| m.addr().to_string()).collect();
    assert_eq!(cluster.nodes().len(), ETCD_CLUSTER_SIZE);
    assert_eq!(cluster.url(), format!("etcd://{}", addrs.join(",")));

    let old_leader = cluster.wait_for_leader(ELECTION_BOUND).expect("a leader");
    let ids: Vec<u64> = cluster
        .nodes()
        .iter()
        .map(|m| m.status().expect("every member answers").member_id)
        .collect();
    for member in cluster.nodes() {
        let status = member.status().expect("status");
        assert_eq!(
            status.leader,
            ids[old_leader],
            "{} follows the leader",
            member.name()
        );
    }
    put(&cluster.endpoints(), "distlock/k", "before");

    cluster.node_mut(old_leader).kill().expect("kill the leader");
    assert_refused(cluster.node(old_leader).port());
    let failover = Instant::now();
    let new_leader = cluster
        .wait_for_leader(ELECTION_BOUND)
        .expect("the two survivors elect a new leader");
    eprintln!("etcd failover took {:?}", failover.elapsed());
    assert_ne!(new_leader, old_leader);
    put(&cluster.endpoints(), "distlock/k", "after");

    let rejoin = Instant::now();
    cluster
        .node_mut(old_leader)
        .restart()
        .expect("restart the old leader");
    eprintln!("etcd rejoin took {:?}", rejoin.elapsed());
    let status = cluster.node(old_leader).status().expect("the old leader answers");
    assert_eq!(status.member_id, ids[old_leader], "same member, same data");
    assert!(
        status.leader != 0 && status.leader != status.member_id,
        "it follows: {status:?}"
    );
    assert_eq!(
        get(&cluster.node(old_leader).endpoint(), "distlock/k").as_deref(),
        Some("after"),
        "the old leader serves what was written while it was down"
    );

    let dir = cluster.dir().to_path_buf();
    let pids: Vec<u32> = cluster.nodes().iter().filter_map(|m| m.pid()).collect();
    assert_eq!(pids.len(), ETCD_CLUSTER_SIZE);
    drop(cluster);
    assert!(!dir.exists());
    assert!(pids.iter().all(|pid| process_gone(*pid)));
}

#[test]
fn cluster_follower_paused_then_resumed_catches_up() {
    let mut cluster = EtcdCluster::start().expect("start the cluster");
    let leader = cluster.wait_for_leader(ELECTION_BOUND).expect("a leader");
    let follower = (0..ETCD_CLUSTER_SIZE).find(|i| *i != leader).expect("a follower");

    cluster.node_mut(follower).pause().expect("pause the follower");
    assert!(
        cluster.node(follower).status().is_err(),
        "a paused member must not answer"
    );
    // The other two are a quorum: writes go on.
    let others: Vec<String> = (0..ETCD_CLUSTER_SIZE)
        .filter(|i| *i != follower)
        .map(|i| cluster.node(i).endpoint())
        .collect();
    put(&others.join(","), "distlock/k", "while-paused");
    let leader = cluster.wait_for_leader(ELECTION_BOUND).expect("a leader");
    assert_ne!(leader, follower, "a paused member cannot lead");

    cluster.node_mut(follower).resume().expect("resume the follower");
    cluster
        .node(follower)
        .process()
        .wait_ready()
        .expect("it sees a leader again");
    assert_eq!(
        get(&cluster.node(follower).endpoint(), "distlock/k").as_deref(),
        Some("while-paused"),
        "the resumed follower serves what was written while it was paused"
    );
    cluster.wait_for_leader(ELECTION_BOUND).expect("still a leader");
}

/// True once the process is gone (or a zombie nobody reaped yet).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

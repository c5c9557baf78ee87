//! The Redis Sentinel set of the harness (a primary, a replica, three Sentinels) against real
//! `redis-server`s (install them with `scripts/install-test-deps`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use distlock_testkit::{RedisSentinelSet, SENTINELS};

/// Waits until `GET key` at `addr` answers `value` (a replica catching up).
fn wait_for_value(set: &RedisSentinelSet, addr: SocketAddr, key: &str, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while set.command(addr, &["GET", key]).expect("GET") != [value] {
        assert!(Instant::now() < deadline, "{addr} never saw {key}={value}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sentinels_promote_the_replica_when_the_primary_dies() {
    let mut set = RedisSentinelSet::start().expect("the Sentinel set starts (run scripts/install-test-deps)");
    let url = set.url(1);
    assert!(url.starts_with("redis+sentinel://127.0.0.1:"), "{url}");
    assert!(url.ends_with("/distlock?wait_for_replicas=1"), "{url}");
    assert_eq!(url.matches(',').count(), SENTINELS - 1, "{url}");
    let (old, replica) = (set.primary_addr(), set.replica_addr());
    assert_eq!(set.command(old, &["ROLE"]).expect("ROLE")[0], "master");
    assert_eq!(set.command(replica, &["ROLE"]).expect("ROLE")[0], "slave");
    assert_eq!(set.command(old, &["SET", "k", "before"]).expect("SET"), ["OK"]);
    wait_for_value(&set, replica, "k", "before");

    // A write made while the link is cut does not reach the replica.
    set.cut_replication().expect("cut");
    assert_eq!(set.command(old, &["SET", "lagged", "1"]).expect("SET"), ["OK"]);
    std::thread::sleep(Duration::from_millis(500));
    assert!(set.command(replica, &["GET", "lagged"]).expect("GET").is_empty());

    set.kill_primary().expect("kill -9");
    let new = set
        .wait_for_failover(Duration::from_secs(30))
        .expect("a failover");
    assert_eq!(new, replica);
    assert_eq!(set.primary_addr(), replica);
    assert_eq!(set.command(new, &["ROLE"]).expect("ROLE")[0], "master");
    assert_eq!(
        set.command(new, &["GET", "k"]).expect("GET"),
        ["before"],
        "a replicated write is kept"
    );
    assert!(
        set.command(new, &["GET", "lagged"]).expect("GET").is_empty(),
        "the cut-off write is lost"
    );

    set.restart_old_primary_as_replica()
        .expect("the old primary restarts");
    assert_eq!(set.replica_addr(), old);
    assert_eq!(set.command(old, &["ROLE"]).expect("ROLE")[0], "slave");
    assert_eq!(set.command(new, &["SET", "k", "after"]).expect("SET"), ["OK"]);
    wait_for_value(&set, old, "k", "after");
}

#[test]
fn sentinels_promote_the_replica_when_the_primary_is_isolated() {
    let mut set = RedisSentinelSet::start().expect("the Sentinel set starts (run scripts/install-test-deps)");
    let replica = set.replica_addr();
    set.isolate_primary().expect("SIGSTOP");
    assert_eq!(
        set.wait_for_failover(Duration::from_secs(30))
            .expect("a failover"),
        replica
    );
    let old = set.replica_addr();
    set.heal_primary().expect("SIGCONT");
    // The Sentinels turn the old primary into a replica of the new one.
    let deadline = Instant::now() + Duration::from_secs(30);
    while set.command(old, &["ROLE"]).map(|r| r[0].clone()).ok().as_deref() != Some("slave") {
        assert!(
            Instant::now() < deadline,
            "the old primary was not demoted: {}",
            set.replica().log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

//! Tests of `MariaDbReplicated` against real `mariadbd` servers (install them with
//! `scripts/install-test-deps`): replication, a held-back replica, promotion and the front's
//! move, a fresh replica of the promoted one, and a semi-synchronous primary's stall.

use std::time::{Duration, Instant};

use distlock_testkit::{MariaDbReplicated, MariaDbReplicatedOptions, MariaDbReplication};

fn count(server: &distlock_testkit::MariaDbServer, table: &str) -> String {
    server
        .sql(&format!("SELECT COUNT(*) FROM {table}"))
        .expect("the server answers")
        .trim()
        .to_owned()
}

#[test]
fn async_replica_follows_is_held_behind_and_is_promoted() {
    let mut pair = MariaDbReplicated::start().expect("a primary and a replica start");
    let primary = pair.primary();
    primary
        .sql("CREATE TABLE t (id INT PRIMARY KEY); INSERT INTO t VALUES (1)")
        .expect("writes");
    assert!(pair.wait_caught_up(Duration::from_secs(10)).expect("asks"));
    let replica = pair.replica().expect("a replica");
    assert_eq!(count(replica, "t"), "1", "the replica applied the insert");
    assert_eq!(
        replica.sql("SELECT @@GLOBAL.read_only").expect("asks").trim(),
        "1",
        "a replica is read-only"
    );

    // Held behind: the primary commits alone.
    pair.link().expect("a link").blackhole();
    pair.primary()
        .sql("INSERT INTO t VALUES (2)")
        .expect("commits at once");
    assert!(!pair.wait_caught_up(Duration::from_millis(500)).expect("asks"));
    let (logged, applied) = pair.positions().expect("asks");
    assert_ne!(logged, applied, "the replica lacks the second insert");

    pair.kill_primary().expect("kill -9");
    pair.promote_replica().expect("promotes");
    assert!(pair.replica().is_none(), "no replica until add_replica");
    let promoted = pair.primary();
    assert_eq!(
        count(promoted, "t"),
        "1",
        "the insert the replica never got is lost"
    );
    assert_eq!(
        promoted.sql("SELECT @@GLOBAL.read_only").expect("asks").trim(),
        "0"
    );
    assert_eq!(pair.front().upstream(), promoted.addr(), "the front moved");
    promoted
        .sql("INSERT INTO t VALUES (3)")
        .expect("the promoted replica takes writes");

    pair.add_replica().expect("a fresh replica of the promoted one");
    assert_eq!(count(pair.replica().expect("a replica"), "t"), "2");
}

#[test]
fn semi_sync_primary_waits_for_a_held_back_replica() {
    let pair = MariaDbReplicated::start_with(MariaDbReplicatedOptions {
        replication: MariaDbReplication::SemiSynchronous,
        ..Default::default()
    })
    .expect("a semi-synchronous pair starts");
    pair.primary()
        .sql("CREATE TABLE t (id INT PRIMARY KEY)")
        .expect("writes");
    pair.link().expect("a link").blackhole();
    let started = Instant::now();
    let primary_socket = pair.primary().socket_path();
    let writer = std::thread::spawn(move || {
        std::process::Command::new("mariadb")
            .args([
                "--no-defaults",
                &format!("--socket={}", primary_socket.display()),
                "--user=root",
                "--execute",
                "INSERT INTO t VALUES (1)",
                "distlock_test",
            ])
            .status()
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !writer.is_finished(),
        "a commit waits for the replica's acknowledgement"
    );
    pair.link().expect("a link").heal();
    let status = writer
        .join()
        .expect("the writer thread")
        .expect("the client runs");
    assert!(status.success());
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert!(pair.wait_caught_up(Duration::from_secs(10)).expect("asks"));
    assert_eq!(count(pair.replica().expect("a replica"), "t"), "1");
}

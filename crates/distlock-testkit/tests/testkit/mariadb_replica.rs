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

/// A global status counter of `server`.
fn status(server: &distlock_testkit::MariaDbServer, name: &str) -> u64 {
    let row = server
        .sql(&format!("SHOW GLOBAL STATUS LIKE '{name}'"))
        .expect("the server answers");
    row.split('\t')
        .nth(1)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no status {name}: {row}"))
}

#[test]
fn a_fresh_replica_starts_from_the_primarys_data_not_its_whole_binary_log() {
    // A long run's failovers each start a fresh replica: replaying every transaction since the
    // pair started made that take longer with every failover, past any bound.
    const HISTORY: u64 = 3000;
    let mut pair = MariaDbReplicated::start().expect("a primary and a replica start");
    pair.primary()
        .sql("CREATE TABLE t (id INT PRIMARY KEY, n INT); INSERT INTO t VALUES (1, 0)")
        .expect("writes");
    // One transaction each, as a lock's acquisitions and renewals are.
    let updates = "UPDATE t SET n = n + 1;".repeat(usize::try_from(HISTORY).expect("small"));
    pair.primary().sql(&updates).expect("writes");
    assert!(pair.wait_caught_up(Duration::from_secs(30)).expect("asks"));
    pair.failover().expect("kill -9 and promotion");
    pair.add_replica().expect("a fresh replica of the promoted one");
    let replica = pair.replica().expect("a replica");
    assert_eq!(
        replica.sql("SELECT n FROM t").expect("asks").trim(),
        HISTORY.to_string(),
        "the fresh replica has the primary's data"
    );
    pair.primary()
        .sql("UPDATE t SET n = 0")
        .expect("the promoted replica takes writes");
    assert!(pair.wait_caught_up(Duration::from_secs(10)).expect("asks"));
    assert_eq!(
        replica.sql("SELECT n FROM t").expect("asks").trim(),
        "0",
        "and follows"
    );
    let replayed = status(replica, "Handler_update");
    assert!(
        replayed < HISTORY,
        "the fresh replica replayed the primary's history: {replayed} row updates for {HISTORY} transactions"
    );
}

#[test]
fn a_wait_for_the_replica_longer_than_the_clients_limit_ends_by_itself() {
    // The mariadb client is killed after 10 s; a wait may be longer (promotion and a fresh
    // replica wait up to 30 s for replication to settle).
    let pair = MariaDbReplicated::start().expect("a primary and a replica start");
    pair.link().expect("a link").blackhole();
    pair.primary()
        .sql("CREATE TABLE t (id INT PRIMARY KEY)")
        .expect("commits at once");
    let started = Instant::now();
    let caught_up = pair.wait_caught_up(Duration::from_secs(12));
    assert!(
        matches!(caught_up, Ok(false)),
        "a held-back replica does not catch up: {caught_up:?}"
    );
    assert!(started.elapsed() >= Duration::from_secs(12));
}

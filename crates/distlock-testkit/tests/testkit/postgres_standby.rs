//! Tests of [`PostgresReplicated`] against real servers (install them with
//! `scripts/install-test-deps`): what each replication mode keeps across a failover, and that
//! the front proxy follows the primary.

use std::thread;
use std::time::{Duration, Instant};

use distlock_testkit::{probe, PostgresReplicated, PostgresReplicatedOptions, PostgresServer, Replication};

fn start(replication: Replication) -> PostgresReplicated {
    PostgresReplicated::start_with(PostgresReplicatedOptions {
        replication,
        ..Default::default()
    })
    .expect("the pair starts (run scripts/install-test-deps to install postgresql)")
}

/// Answers whether `port` speaks PostgreSQL (an `SSLRequest` gets `N` or `S`).
fn speaks_postgres(port: u16) -> bool {
    let request = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    probe::exchange(
        probe::loopback(port),
        &request,
        |reply| !reply.is_empty(),
        Duration::from_secs(2),
    )
    .is_ok_and(|reply| matches!(reply.first(), Some(b'N' | b'S')))
}

/// Polls `query` on `server` until it answers `want` (generous: the machine is loaded).
fn eventually(server: &PostgresServer, query: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = server.sql(query).map(|out| out.trim().to_owned());
        if got.as_ref().is_ok_and(|got| got == want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{query} on port {} answered {got:?}, not {want:?}",
            server.port()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn synchronous_pair_keeps_every_acknowledged_commit_across_a_failover() {
    let mut pair = start(Replication::Synchronous);
    assert!(
        speaks_postgres(pair.front().addr().port()),
        "the front reaches the primary"
    );
    pair.primary()
        .sql("CREATE TABLE kept (v int); INSERT INTO kept VALUES (1)")
        .expect("writes");
    let standby = pair.standby().expect("a standby");
    eventually(standby, "SELECT count(*) FROM kept", "1");
    assert!(
        pair.standby_lag().expect("reads the lag").is_some(),
        "the standby streams"
    );

    // Cut off, the standby acknowledges nothing: a commit waits for it.
    pair.link().blackhole();
    let primary_dir = pair.primary().dir().to_path_buf();
    let port = pair.primary().port();
    let waiting = thread::spawn(move || {
        let started = Instant::now();
        let out = std::process::Command::new("psql")
            .args(["-X", "-q", "-h"])
            .arg(&primary_dir)
            .args(["-p", &port.to_string(), "-U", "distlock", "-d", "distlock_test"])
            // The wait for the standby is not the statement's: statement_timeout does not end it.
            .args([
                "-c",
                "SET statement_timeout = 500",
                "-c",
                "INSERT INTO kept VALUES (2)",
            ])
            .output();
        (started.elapsed(), out.map(|o| o.status.success()))
    });
    thread::sleep(Duration::from_secs(2));
    assert!(
        !waiting.is_finished(),
        "a commit returned while the synchronous standby was cut off"
    );
    pair.link().heal();
    let (took, ok) = waiting.join().expect("the writer");
    assert!(
        ok.is_ok_and(|ok| ok),
        "the commit completes once the standby is back"
    );
    assert!(took >= Duration::from_secs(2), "it waited: {took:?}");

    pair.failover().expect("kill -9, promote, move the front");
    assert_eq!(pair.front().upstream(), pair.primary().addr(), "the front moved");
    assert!(pair.standby().is_none(), "no standby until one is built");
    assert!(
        speaks_postgres(pair.front().addr().port()),
        "the front reaches the new primary"
    );
    assert_eq!(
        pair.primary()
            .sql("SELECT count(*) FROM kept")
            .expect("reads")
            .trim(),
        "2",
        "both acknowledged commits survive"
    );
    pair.primary()
        .sql("INSERT INTO kept VALUES (3)")
        .expect("takes writes");

    pair.add_standby().expect("a fresh standby");
    eventually(
        pair.standby().expect("a standby"),
        "SELECT count(*) FROM kept",
        "3",
    );
    pair.failover().expect("a second failover");
    assert_eq!(
        pair.primary()
            .sql("SELECT count(*) FROM kept")
            .expect("reads")
            .trim(),
        "3"
    );
}

#[test]
fn asynchronous_pair_loses_what_the_cut_off_standby_never_received() {
    let mut pair = start(Replication::Asynchronous);
    pair.primary()
        .sql("CREATE TABLE kept (v int); INSERT INTO kept VALUES (1)")
        .expect("writes");
    eventually(
        pair.standby().expect("a standby"),
        "SELECT count(*) FROM kept",
        "1",
    );

    pair.link().blackhole();
    let started = Instant::now();
    pair.primary()
        .sql("INSERT INTO kept VALUES (2)")
        .expect("commits at once");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "an asynchronous commit does not wait"
    );

    pair.failover().expect("kill -9, promote, move the front");
    assert_eq!(
        pair.primary()
            .sql("SELECT count(*) FROM kept")
            .expect("reads")
            .trim(),
        "1",
        "the commit the standby never received is gone"
    );
}

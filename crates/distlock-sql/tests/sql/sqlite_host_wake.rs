//! A SQLite release by another process of this host hands the lock over at once: the waiter,
//! whose next poll is 5 s away, holds it well within a second of the release.
//!
//! The test re-runs its own binary as the holder process (the ignored test `holder`, with
//! [`HOLDER_ENV`] set), which takes the lock, says `HELD`, holds it for a while, releases it
//! and prints the release's wall-clock time (both processes read the same clock).
#![cfg(all(feature = "sqlite", unix))]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_core::{AcquireOptions, LockClient};
use distlock_sql::SqlConfig;

/// Turns the `holder` test into the holder process: the database file.
const HOLDER_ENV: &str = "DISTLOCK_SQL_TEST_HOLDER";
const ROUNDS: usize = 3;

fn wall_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_nanos()
}

#[test]
#[ignore = "holder process of a_release_in_another_process_wakes_the_waiter: runs only as its child"]
fn holder() {
    let Ok(db) = std::env::var(HOLDER_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let client = LockClient::new(SqlConfig::sqlite(&db).build().await.expect("opens the file"));
        let opts = AcquireOptions::new().ttl(Duration::from_secs(60));
        for _ in 0..ROUNDS {
            let guard = client.acquire_with("handed-over", &opts).await.expect("acquires");
            println!("HELD");
            // Long enough for the waiter to fail its attempts and go to sleep.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let at = wall_ns();
            assert!(guard.release().await.expect("releases"));
            println!("RELEASED {at}");
            // The waiter holds it now; wait for it to let go before the next round.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
}

/// What follows `prefix` in the next line of the holder's output that has it.
async fn next_line(lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>, prefix: &str) -> String {
    loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.recv())
            .await
            .expect("the holder answers")
            .expect("the holder is running");
        // The first line also carries libtest's "test holder ... ".
        if let Some(at) = line.find(prefix) {
            return line[at + prefix.len()..].trim().to_owned();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_in_another_process_wakes_the_waiter() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("locks.db");
    let waiter = LockClient::new(SqlConfig::sqlite(&db).build().await.expect("opens the file"));
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            &crate::test_name(module_path!(), "holder"),
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOLDER_ENV, &db)
        .stdout(Stdio::piped())
        .spawn()
        .expect("starts the holder process");
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let stdout = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Polling alone would take 5 s.
    let poll = Duration::from_secs(5);
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(60))
        .wait_for(Duration::from_secs(30))
        .poll_interval(poll, poll);
    for round in 0..ROUNDS {
        next_line(&mut lines, "HELD").await;
        let guard = waiter
            .acquire_with("handed-over", &opts)
            .await
            .expect("the waiter acquires");
        let acquired = wall_ns();
        let released: u128 = next_line(&mut lines, "RELEASED").await.parse().expect("a time");
        let handoff =
            Duration::from_nanos(u64::try_from(acquired.saturating_sub(released)).unwrap_or(u64::MAX));
        println!("round {round}: handed over {handoff:?} after the other process's release");
        assert!(
            handoff < Duration::from_secs(1),
            "round {round}: the waiter took {handoff:?} after the release in another process (its next poll was 5 s away)"
        );
        assert!(guard.release().await.expect("releases"));
    }
    assert!(
        child.wait().expect("the holder exits").success(),
        "the holder process failed"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path().join("locks.db.waiters"))
        .expect("the waiters' directory")
        .map(|e| {
            let path = e.expect("entry").path();
            let inside: Vec<_> = std::fs::read_dir(&path)
                .map(|d| d.map(|e| e.map(|e| e.file_name())).collect())
                .unwrap_or_default();
            (path, inside)
        })
        .collect();
    assert!(
        left.is_empty(),
        "every waiter removed its socket, and the last one the lock's directory: {left:?}"
    );
}

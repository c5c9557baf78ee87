//! Many processes contending on one SQLite file: an exact counter, strictly increasing
//! fencing tokens, and no `database is locked` reaching any caller.
//!
//! The test re-runs its own binary as worker processes (the ignored test `worker`, with
//! [`WORKER_ENV`] set). They all start at once on a file that does not exist yet, so they
//! also race to create it, switch it to WAL and create the table.
#![cfg(feature = "sqlite")]

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, LockClient};
use distlock_sql::SqlConfig;

/// Turns the `worker` test into a worker: `<db file>|<counter file>|<rounds>`.
const WORKER_ENV: &str = "DISTLOCK_SQL_TEST_WORKER";
const PROCESSES: usize = 4;
const ROUNDS: usize = 25;

#[test]
#[ignore = "worker process of many_processes_contend_on_one_file: runs only as its child"]
fn worker() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let mut parts = spec.split('|');
    let (Some(db), Some(counter), Some(rounds)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("a malformed worker spec {spec:?}");
    };
    let rounds: usize = rounds.parse().expect("a round count");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let lock = SqlConfig::sqlite(db)
            .build()
            .await
            .expect("the worker opens the file");
        let client = LockClient::new(lock);
        let opts = AcquireOptions::new()
            .ttl(Duration::from_secs(10))
            .wait_for(Duration::from_secs(60));
        let counter = Path::new(counter);
        let log = counter.with_extension("tokens");
        for _ in 0..rounds {
            let guard = client
                .acquire_with("counter", &opts)
                .await
                .expect("the worker acquires");
            let token = guard.fencing_token().expect("SQL locks issue fencing tokens");
            // Read, sleep, write: any overlap between processes loses an increment.
            let value: u64 = std::fs::read_to_string(counter)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(2)).await;
            std::fs::write(counter, (value + 1).to_string()).expect("writes the counter");
            let mut tokens = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .expect("opens the token log");
            writeln!(tokens, "{}", token.get()).expect("logs the token");
            assert!(guard.release().await.expect("the worker releases"), "still held");
        }
    });
}

#[test]
fn many_processes_contend_on_one_file() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("nested").join("locks.db");
    let counter = dir.path().join("counter");
    let spec = format!("{}|{}|{ROUNDS}", db.display(), counter.display());
    let exe = std::env::current_exe().expect("the test binary");
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .args([
                    &crate::test_name(module_path!(), "worker"),
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(WORKER_ENV, &spec)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("a worker starts")
        })
        .collect();
    let started = Instant::now();
    for child in children {
        let pid = child.id();
        let output = std::thread::spawn(move || child.wait_with_output());
        let deadline = Instant::now() + Duration::from_secs(180);
        while !output.is_finished() {
            assert!(Instant::now() < deadline, "worker {pid} hung");
            std::thread::sleep(Duration::from_millis(20));
        }
        let output = output.join().expect("the waiter").expect("the worker's output");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "worker {pid} failed:\n{text}");
        assert!(
            !text.contains("database is locked"),
            "worker {pid} saw SQLITE_BUSY:\n{text}"
        );
    }
    let total: usize = std::fs::read_to_string(&counter)
        .expect("the counter")
        .trim()
        .parse()
        .expect("a number");
    assert_eq!(
        total,
        PROCESSES * ROUNDS,
        "increments were lost to overlapping holders"
    );
    let tokens: Vec<u64> = std::fs::read_to_string(counter.with_extension("tokens"))
        .expect("the token log")
        .lines()
        .map(|l| l.parse().expect("a token"))
        .collect();
    assert_eq!(tokens.len(), PROCESSES * ROUNDS);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens must strictly increase in hold order: {tokens:?}"
    );
    println!(
        "{PROCESSES} processes x {ROUNDS} rounds in {:?}, tokens {}..={}",
        started.elapsed(),
        tokens[0],
        tokens[tokens.len() - 1]
    );
}

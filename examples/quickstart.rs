//! The main job: several workers share one lock to update a counter without losing updates.
//!
//! Run with `cargo run --example quickstart`. It needs no server: it uses the embedded
//! default store.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{AcquireOptions, LockClient, MemoryLock};

const WORKERS: usize = 8;
const ROUNDS: usize = 25;

/// Runs the workers and checks the count (also called by the test suite).
#[tokio::main]
pub async fn main() -> distlock::Result<()> {
    let store = MemoryLock::new();
    let counter = Arc::new(AtomicU64::new(0));
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait_for(Duration::from_secs(30));
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let client = LockClient::new(store.clone());
        let (counter, opts) = (counter.clone(), opts.clone());
        workers.push(tokio::spawn(async move {
            let mut last_token = None;
            for _ in 0..ROUNDS {
                let counter = counter.clone();
                let token = client
                    .with_lock("quickstart:counter", &opts, |lock| async move {
                        // A read-modify-write that would lose updates without the lock.
                        let seen = counter.load(Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_micros(200)).await;
                        counter.store(seen + 1, Ordering::SeqCst);
                        lock.fencing_token()
                    })
                    .await?;
                assert!(token > last_token, "fencing tokens only grow");
                last_token = token;
            }
            println!("worker {worker} done, last fencing token {last_token:?}");
            Ok::<_, distlock::Error>(())
        }));
    }
    for worker in workers {
        worker.await.expect("worker task")?;
    }
    let total = counter.load(Ordering::SeqCst);
    println!(
        "{WORKERS} workers x {ROUNDS} rounds = {total} increments in {:?} (expected {})",
        started.elapsed(),
        WORKERS * ROUNDS
    );
    assert_eq!(total, (WORKERS * ROUNDS) as u64, "lost updates");
    Ok(())
}

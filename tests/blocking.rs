//! The blocking API on the embedded SQLite store, from plain threads: two clients with runtimes
//! of their own (as two programs would have) exclude each other, a dropped guard frees the
//! lock at once for the other, and with_lock counts exactly across threads of both.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use distlock::blocking::LockClient;
use distlock::{AcquireOptions, Error};

fn open(url: &str) -> LockClient {
    let url = url.to_owned();
    LockClient::open(move || async move { distlock::connect(&url).await }).expect("the SQLite store opens")
}

#[test]
fn two_blocking_clients_exclude_each_other_on_sqlite() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    let (first, second) = (open(&url), open(&url));

    let guard = first.lock("nightly").expect("free");
    let token = guard.fencing_token();
    assert!(
        second.try_lock("nightly").expect("answered").is_none(),
        "held by the first client"
    );
    let waited = second.lock_with(
        "nightly",
        &AcquireOptions::new().wait_for(Duration::from_millis(300)),
    );
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");

    // Dropped on another thread: the release is done when drop returns.
    thread::spawn(move || drop(guard)).join().expect("joined");
    let next = second
        .try_lock("nightly")
        .expect("answered")
        .expect("free once dropped");
    assert!(next.fencing_token() > token, "fencing tokens grow");
    assert!(next.release().expect("released"));
}

#[test]
fn with_lock_counts_exactly_across_threads_of_two_clients_on_sqlite() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    let clients = [open(&url), open(&url)];
    let inside = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU32::new(0));
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait_for(Duration::from_secs(60));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let client = clients[i % 2].clone();
            let (inside, count, opts) = (inside.clone(), count.clone(), opts.clone());
            thread::spawn(move || {
                for _ in 0..10 {
                    client
                        .with_lock("counter", &opts, |_guard| {
                            assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                            let n = count.load(Ordering::SeqCst);
                            thread::sleep(Duration::from_millis(1));
                            count.store(n + 1, Ordering::SeqCst);
                            inside.store(false, Ordering::SeqCst);
                        })
                        .expect("locked");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("no thread failed");
    }
    assert_eq!(count.load(Ordering::SeqCst), 40);
}

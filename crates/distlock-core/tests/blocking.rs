//! The blocking API from plain threads on the memory store: exclusion between threads, release
//! on drop, timeouts, renewal while blocking code runs, a loss reported after the work, and a
//! typed error (never a hang or a panic) inside an async runtime.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use distlock_core::blocking::LockClient;
use distlock_core::{AcquireOptions, Error, LockName, LossReason, MemoryLock};

fn name(name: &str) -> LockName {
    LockName::new(name).expect("valid")
}

#[test]
fn a_lock_excludes_other_threads_and_dropping_its_guard_releases_it_at_once() {
    let store = MemoryLock::new();
    let client = LockClient::new(store.clone()).expect("a runtime");
    let guard = client.lock("report").expect("free");
    let other = client.clone();
    let refused = thread::spawn(move || other.try_lock("report").expect("answered").is_none());
    assert!(refused.join().expect("joined"), "held by the main thread");

    // Dropped on another thread: released before drop returns.
    thread::spawn(move || drop(guard)).join().expect("joined");
    assert_eq!(store.held_count("report"), 0, "released by the drop");
    let again = client.try_lock("report").expect("answered").expect("free again");
    assert!(again.release().expect("released"), "still ours");
}

#[test]
fn with_lock_counts_exactly_across_threads() {
    let client = LockClient::new(MemoryLock::new()).expect("a runtime");
    let inside = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU32::new(0));
    let opts = AcquireOptions::new().ttl(Duration::from_secs(5));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (client, inside, count, opts) = (client.clone(), inside.clone(), count.clone(), opts.clone());
            thread::spawn(move || {
                for _ in 0..25 {
                    client
                        .with_lock("counter", &opts, |guard| {
                            assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                            assert!(guard.fencing_token().is_some());
                            let n = count.load(Ordering::SeqCst);
                            thread::yield_now();
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
    assert_eq!(count.load(Ordering::SeqCst), 100);
}

#[test]
fn a_wait_that_runs_out_is_a_timeout() {
    let client = LockClient::new(MemoryLock::new()).expect("a runtime");
    let _held = client.lock("busy").expect("free");
    let started = Instant::now();
    let waited = client.lock_with(
        "busy",
        &AcquireOptions::new().wait_for(Duration::from_millis(200)),
    );
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(200) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
}

#[test]
fn a_guard_is_renewed_while_blocking_code_runs() {
    let client = LockClient::new(MemoryLock::new()).expect("a runtime");
    let guard = client
        .lock_with("long-job", &AcquireOptions::new().ttl(Duration::from_secs(2)))
        .expect("free");
    // More than two TTLs of blocking work: the watchdog on the client's runtime thread renews.
    thread::sleep(Duration::from_millis(4500));
    assert!(!guard.is_lost(), "{:?}", guard.lost_reason());
    assert!(
        guard.extend(Duration::from_secs(2)).expect("answered"),
        "still ours"
    );
    assert!(guard.release().expect("released"), "still ours");
}

#[test]
fn a_loss_while_the_work_runs_is_reported_when_it_returns() {
    let store = MemoryLock::new();
    let client = LockClient::new(store.clone()).expect("a runtime");
    let opts = AcquireOptions::new().ttl(Duration::from_millis(600));
    let outcome = client.with_lock("stolen", &opts, |guard| {
        assert!(store.steal(&name("stolen")), "held");
        // The next renewal (at a third of the TTL) finds it not ours.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !guard.is_lost() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        "done"
    });
    match outcome {
        Err(Error::LockLost { name, reason }) => {
            assert_eq!(name, "stolen");
            assert_eq!(reason, LossReason::NotOwned);
        }
        other => panic!("expected the loss, got {other:?}"),
    }
}

#[test]
fn a_guard_outlives_its_client() {
    let store = MemoryLock::new();
    let client = LockClient::new(store.clone()).expect("a runtime");
    let guard = client.lock("orphan").expect("free");
    drop(client);
    assert_eq!(store.held_count("orphan"), 1);
    assert!(guard.release().expect("released"), "still ours");
    assert_eq!(store.held_count("orphan"), 0);
}

#[test]
fn leaking_a_guard_keeps_the_lock_held() {
    let store = MemoryLock::new();
    let client = LockClient::new(store.clone()).expect("a runtime");
    let lease = client
        .lock_with("kept", &AcquireOptions::new().ttl(Duration::from_secs(30)))
        .expect("free")
        .leak();
    assert_eq!(lease.name().as_str(), "kept");
    assert!(client.try_lock("kept").expect("answered").is_none(), "still held");
}

#[tokio::test]
async fn inside_an_async_runtime_every_call_is_a_typed_error() {
    let client = LockClient::new(MemoryLock::new()).expect("a runtime");
    assert!(matches!(client.lock("job"), Err(Error::InsideAsyncRuntime)));
    assert!(matches!(client.try_lock("job"), Err(Error::InsideAsyncRuntime)));
    let work = client.with_lock("job", &AcquireOptions::new(), |_| ());
    assert!(matches!(work, Err(Error::InsideAsyncRuntime)));
    let opened = LockClient::open(|| async { Ok(distlock_core::LockClient::new(MemoryLock::new())) });
    assert!(matches!(opened, Err(Error::InsideAsyncRuntime)));
    // A blocking closure of the runtime is inside it too.
    let other = client.clone();
    let in_blocking = tokio::task::spawn_blocking(move || other.try_lock("job").map(|g| g.is_some()))
        .await
        .expect("joined");
    assert!(matches!(in_blocking, Err(Error::InsideAsyncRuntime)));
    // The async client it wraps works here, on the blocking client's runtime.
    let async_client = client.async_client().clone();
    let held = client
        .handle()
        .spawn(async move { async_client.acquire("job").await?.release().await })
        .await
        .expect("joined");
    assert!(held.expect("acquired and released"));
    // Dropping the last client inside the runtime neither blocks nor panics.
    drop(client);
}

#[test]
fn a_guard_dropped_inside_an_async_runtime_is_released_in_the_background() {
    let store = MemoryLock::new();
    let client = LockClient::new(store.clone()).expect("a runtime");
    let guard = client.lock("moved").expect("free");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let refused = client.try_lock("moved");
        assert!(matches!(refused, Err(Error::InsideAsyncRuntime)), "{refused:?}");
        // Release refused here: the guard goes, released in the background.
        assert!(matches!(guard.release(), Err(Error::InsideAsyncRuntime)));
        let guard = client.try_lock("other");
        assert!(guard.is_err());
        drop(client);
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.held_count("moved") > 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(store.held_count("moved"), 0, "released in the background");
}

#[test]
fn a_semaphore_admits_its_permits_across_threads_and_no_more() {
    let client = LockClient::new(MemoryLock::new()).expect("a runtime");
    let exports = client.semaphore("exports", 2).expect("a semaphore");
    assert_eq!(exports.permits(), 2);
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait_for(Duration::from_secs(20));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let (exports, inside, most, opts) = (exports.clone(), inside.clone(), most.clone(), opts.clone());
            thread::spawn(move || {
                exports
                    .with_permit(&opts, |guard| {
                        assert!(!guard.is_lost());
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        thread::sleep(Duration::from_millis(30));
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                    .expect("a permit")
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("joined");
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "two permits, both used, never three"
    );

    let first = exports.acquire().expect("free");
    let second = exports.try_acquire().expect("answered").expect("a second permit");
    assert!(exports.try_acquire().expect("answered").is_none(), "both taken");
    assert_eq!(exports.holders().expect("listed").len(), 2);
    drop(first); // released before drop returns
    let third = exports
        .acquire_with(&AcquireOptions::new().wait_for(Duration::from_secs(1)))
        .expect("a permit came back");
    assert!(second.release().expect("released") && third.release().expect("released"));
    assert!(matches!(
        client.semaphore("exports", 0),
        Err(Error::InvalidOptions { .. })
    ));
}

#[test]
fn a_rw_lock_shares_reads_and_excludes_a_writer_from_plain_threads() {
    let client = LockClient::new(MemoryLock::new()).expect("a runtime");
    let prices = client.rw_lock("prices").expect("a rw lock");
    let a = prices.read().expect("read");
    let b = prices.try_read().expect("answered").expect("readers share");
    assert!(
        prices.try_write().expect("answered").is_none(),
        "readers keep the writer out"
    );
    let writer = {
        let prices = prices.clone();
        thread::spawn(move || {
            prices
                .write_with(&AcquireOptions::new().wait_for(Duration::from_secs(10)))
                .expect("the writer gets in once the readers leave")
        })
    };
    thread::sleep(Duration::from_millis(100));
    assert!(a.release().expect("released"));
    drop(b);
    let writer = writer.join().expect("joined");
    assert!(
        prices.try_read().expect("answered").is_none(),
        "the writer keeps readers out"
    );
    assert_eq!(prices.holders().expect("listed").len(), 1);
    drop(writer);
    let total = prices
        .with_write(&AcquireOptions::new(), |_| 1 + 1)
        .expect("free");
    let read = prices
        .with_read(&AcquireOptions::new(), |_| total * 2)
        .expect("free");
    assert_eq!(read, 4);
    assert!(prices.write().expect("free").release().expect("released"));
}

#[test]
fn the_primitives_refuse_to_block_inside_an_async_runtime() {
    let client = LockClient::new(MemoryLock::new()).expect("a runtime");
    let exports = client.semaphore("exports", 1).expect("a semaphore");
    let prices = client.rw_lock("prices").expect("a rw lock");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        assert!(matches!(exports.acquire(), Err(Error::InsideAsyncRuntime)));
        assert!(matches!(prices.try_read(), Err(Error::InsideAsyncRuntime)));
        assert!(matches!(prices.write(), Err(Error::InsideAsyncRuntime)));
    });
}

//! MariaDB killed with `kill -9` and restarted while locks are held and contended: errors are
//! clean (`Unavailable`, `Timeout`, `LockLost`), no lock is granted twice, fencing tokens keep
//! growing across the restart, a lock held before the crash is still held after it, and work
//! resumes once the server is back. Owns its server (it kills it).
#![cfg(feature = "mysql")]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Error, LockClient, LockName, OwnerToken, TryAcquire,
};
use distlock_sql::{SqlConfig, SqlLock};
use distlock_testkit::MariaDbServer;

const CONTENDERS: usize = 4;

async fn client(url: &str) -> SqlLock {
    SqlConfig::from_url(url)
        .expect("a valid URL")
        .with_operation_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("the server answers")
}

#[derive(Default)]
struct Record {
    /// Fencing tokens in the order the lock was granted.
    tokens: Mutex<Vec<u64>>,
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    unclean: Mutex<Vec<String>>,
    clean_errors: AtomicUsize,
}

impl Record {
    fn error(&self, e: &Error) {
        match e {
            Error::Unavailable { .. } | Error::Timeout { .. } | Error::LockLost { .. } => {
                self.clean_errors.fetch_add(1, Ordering::Relaxed);
            }
            other => self.unclean.lock().expect("not poisoned").push(other.to_string()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_restart_while_contended() {
    let mut server = tokio::task::spawn_blocking(MariaDbServer::start)
        .await
        .expect("the starter thread")
        .expect("mariadbd starts");
    let url = server.url();

    // A lock held across the crash, with a TTL far longer than the outage.
    let keeper = client(&url).await;
    let kept = LockName::new("held-across-restart").expect("valid");
    let TryAcquire::Acquired(kept_lease) = keeper
        .try_acquire(&kept, OwnerToken::new(), Duration::from_secs(60))
        .await
        .expect("works")
    else {
        panic!("a fresh name is free");
    };

    let record = Arc::new(Record::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..CONTENDERS {
        let lock = client(&url).await;
        let (record, stop) = (record.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let client = LockClient::new(lock);
            let opts = AcquireOptions::new()
                .ttl(Duration::from_secs(1))
                .wait_for(Duration::from_secs(2));
            while !stop.load(Ordering::Relaxed) {
                match client.acquire_with("contended", &opts).await {
                    Ok(guard) => {
                        if record.inside.fetch_add(1, Ordering::SeqCst) != 0 {
                            record.overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        let token = guard.fencing_token().expect("a fencing token").get();
                        record.tokens.lock().expect("not poisoned").push(token);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        record.inside.fetch_sub(1, Ordering::SeqCst);
                        if let Err(e) = guard.release().await {
                            record.error(&e);
                        }
                    }
                    Err(e) => {
                        record.error(&e);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        }));
    }

    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = record.tokens.lock().expect("not poisoned").len();
    assert!(before > 0, "the contenders make progress before the crash");

    server = tokio::task::spawn_blocking(move || {
        server.kill().expect("kill -9");
        server
    })
    .await
    .expect("the killer thread");
    let killed_at = tokio::time::Instant::now();
    let probe = keeper.ping().await;
    assert!(
        matches!(probe, Err(Error::Unavailable { .. })),
        "a dead server is Unavailable: {probe:?}"
    );
    assert!(
        killed_at.elapsed() < Duration::from_secs(5),
        "errors come in bounded time"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = record.tokens.lock().expect("not poisoned").len();

    let server = tokio::task::spawn_blocking(move || {
        server.restart().expect("mariadbd restarts");
        server
    })
    .await
    .expect("the restarter thread");
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a contender finished cleanly");
    }

    let tokens = record.tokens.lock().expect("not poisoned").clone();
    let unclean = record.unclean.lock().expect("not poisoned").clone();
    println!(
        "grants: {before} before the crash, {} during the outage, {} after; clean errors: {}",
        during - before,
        tokens.len() - during,
        record.clean_errors.load(Ordering::Relaxed)
    );
    assert!(
        unclean.is_empty(),
        "errors must be Unavailable/Timeout/LockLost: {unclean:?}"
    );
    assert_eq!(
        record.overlaps.load(Ordering::SeqCst),
        0,
        "a lock was granted twice"
    );
    assert!(tokens.len() > during, "work resumes after the restart");
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens strictly increase across the restart: {tokens:?}"
    );

    // The lock held across the crash is still held, and still ours.
    let other = client(&url).await;
    assert!(
        matches!(
            other
                .try_acquire(&kept, OwnerToken::new(), Duration::from_secs(5))
                .await
                .expect("works"),
            TryAcquire::Held(_)
        ),
        "a lock held before the crash must not be granted again after it"
    );
    assert!(keeper.release(&kept_lease).await.expect("works"));
    let TryAcquire::Acquired(next) = other
        .try_acquire(&kept, OwnerToken::new(), Duration::from_secs(5))
        .await
        .expect("works")
    else {
        panic!("released, so free");
    };
    assert!(next.fencing_token() > kept_lease.fencing_token());
    drop(server);
}

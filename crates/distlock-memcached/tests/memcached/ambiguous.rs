//! Ambiguous outcomes: a write that was applied while its reply was lost.
//!
//! - The core answers a failed `try_acquire` with an owner-checked release of a lease that
//!   has no handle (no CAS): it must free the lock exactly when the item holds that owner.
//! - The winner's second round trip (`cas`, recording the fencing token) can be applied with
//!   its reply lost; the attempt then fails and must give the lock back.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{
    DistributedLock, DistributedLockExt, Lease, LockKind, LockName, OwnerToken, Primitive, TryAcquire,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_handle_less_release_frees_only_its_owners_lock() {
    let url = support::shared_url().await;
    let lock = support::lock(&url);
    let name = LockName::new("handle-less-release").expect("valid");
    let lease = match lock
        .try_acquire(&name, OwnerToken::new(), TTL)
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("should be free: {h:?}"),
    };

    let stranger = Lease::new(name.clone(), OwnerToken::new(), TTL, Instant::now());
    assert!(
        !lock.release(&stranger).await.expect("works"),
        "another owner's handle-less release must not free the lock"
    );
    let state = lock.inspect_lock(&name).await.expect("works");
    assert_eq!(state.owner, Some(lease.owner().to_string()), "still held");

    let same_owner = Lease::new(name.clone(), lease.owner(), TTL, Instant::now());
    assert!(
        lock.release(&same_owner).await.expect("works"),
        "the owner's handle-less release frees the lock"
    );
    assert_eq!(lock.inspect_lock(&name).await.expect("works").owner, None, "free");
    assert!(
        !lock.release(&same_owner).await.expect("works"),
        "a second release finds nothing"
    );
}

/// A loopback proxy that forwards everything, except that once a connection has sent a
/// classic `cas` command, the server's replies on that connection are swallowed (the
/// command is applied, its reply lost).
async fn reply_eating_proxy(upstream: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                continue;
            };
            let eat = Arc::new(AtomicBool::new(false));
            let (mut client_rd, mut client_wr) = client.into_split();
            let (mut server_rd, mut server_wr) = server.into_split();
            let seen = eat.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = client_rd.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let chunk = &buf[..n];
                    if chunk.starts_with(b"cas ") || chunk.windows(5).any(|w| w == b"\ncas ") {
                        seen.store(true, Ordering::SeqCst);
                    }
                    if server_wr.write_all(chunk).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = server_rd.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if eat.load(Ordering::SeqCst) {
                        continue;
                    }
                    if client_wr.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    format!("memcache://{addr}")
}

#[tokio::test]
async fn a_winner_whose_token_record_reply_is_lost_gives_the_lock_back() {
    let url = support::shared_url().await;
    let direct = support::lock(&url);
    let upstream = url.trim_start_matches("memcache://").to_owned();
    let proxied = support::lock(&reply_eating_proxy(upstream).await);
    let name = LockName::new("record-token-reply-lost").expect("valid");

    let outcome = proxied.try_acquire(&name, OwnerToken::new(), TTL).await;
    assert!(
        outcome.is_err(),
        "the second round trip's reply never came: {outcome:?}"
    );
    let state = direct.inspect_lock(&name).await.expect("works");
    assert_eq!(
        state.owner, None,
        "the failed attempt must give the lock back, found {state:?}"
    );
}

#[tokio::test]
async fn an_ambiguous_weighted_attempt_cleaned_up_by_owner_frees_all_its_permits() {
    let url = support::shared_url().await;
    let direct = support::lock(&url);
    let upstream = url.trim_start_matches("memcache://").to_owned();
    let proxied = support::lock(&reply_eating_proxy(upstream).await);
    let name = LockName::new(format!("weighted-reply-lost-{}", OwnerToken::new())).expect("valid");
    let three = LockKind::permits(4, 3);
    // The item exists already, so the proxied attempt's write is a `cas`, applied with its
    // reply lost.
    let TryAcquire::Acquired(first) = direct
        .try_acquire_kind(&name, LockKind::permit(4), OwnerToken::new(), TTL, None)
        .await
        .expect("works")
    else {
        panic!("the semaphore is free");
    };
    assert!(direct.release(&first).await.expect("works"));
    let owner = OwnerToken::new();
    let outcome = proxied.try_acquire_kind(&name, three, owner, TTL, None).await;
    assert!(outcome.is_err(), "the write's reply never came: {outcome:?}");
    let holders = direct
        .inspect_holders(&name, Primitive::Semaphore)
        .await
        .expect("works");
    assert_eq!(holders.len(), 1, "the write was applied: {holders:?}");
    assert_eq!(holders[0].kind, three, "one hold of 3 permits");
    let refused = direct
        .try_acquire_kind(&name, LockKind::permits(4, 2), OwnerToken::new(), TTL, None)
        .await
        .expect("works");
    assert!(
        matches!(refused, TryAcquire::Held(_)),
        "1 of 4 is free, not 2: {refused:?}"
    );
    // The cleanup after an ambiguous attempt: the same owner and kind, no handle.
    let cleanup = Lease::new(name.clone(), owner, TTL, Instant::now()).with_kind(three);
    assert!(direct.release(&cleanup).await.expect("works"));
    assert!(direct
        .inspect_holders(&name, Primitive::Semaphore)
        .await
        .expect("works")
        .is_empty());
    let TryAcquire::Acquired(all) = direct
        .try_acquire_kind(&name, LockKind::permits(4, 4), OwnerToken::new(), TTL, None)
        .await
        .expect("works")
    else {
        panic!("all 4 permits are free again");
    };
    assert!(direct.release(&all).await.expect("works"));
}

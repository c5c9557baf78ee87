//! Semaphores and read-write locks against the shared ZooKeeper server: permits exact under
//! contention, the permit count agreement, owner-checked release, a dead session's permit
//! freed, readers together and writers alone, a waiting writer keeping later readers out,
//! dropped waits leaving no node, fencing, and the node layout Curator's recipes expect.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, Attempt, DistributedLock, DistributedLockExt, Error, Lease, LockClient, LockKind,
    LockName, LossReason, OwnerToken, Primitive, TryAcquire,
};
use distlock_testkit::proxy::through_proxies;
use distlock_zookeeper::ZooKeeperLock;
use support::ZkFixture;
use zookeeper_client as zk;

const TTL: Duration = Duration::from_secs(10);

fn unique(label: &str) -> LockName {
    let run = uuid::Uuid::new_v4().simple().to_string();
    LockName::new(format!("zk-{label}-{}", &run[..12])).expect("valid")
}

fn waiting(for_at_most: Duration) -> AcquireOptions {
    AcquireOptions::new().wait_for(for_at_most)
}

/// The children of `path` (none if it does not exist).
async fn children(raw: &zk::Client, path: &str) -> Vec<String> {
    match raw.list_children(path).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing {path}: {e}"),
    }
}

/// Polls until `check` holds for the children of `path`, for at most `within`.
async fn until_children(
    raw: &zk::Client,
    path: &str,
    within: Duration,
    check: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let now = children(raw, path).await;
        if check(&now) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{path}: still {now:?} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn acquired(attempt: distlock_core::Result<TryAcquire>) -> Lease {
    match attempt.expect("the attempt works") {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(holder) => panic!("expected a hold, found it held: {holder:?}"),
    }
}

fn held(attempt: distlock_core::Result<TryAcquire>) {
    match attempt.expect("the attempt works") {
        TryAcquire::Held(_) => {}
        TryAcquire::Acquired(lease) => panic!("expected it held, got {lease:?}"),
    }
}

/// 12 tasks on three sessions take 3 permits 36 times, two of every three by waiting in the
/// semaphore's line and one by repeated single attempts: the number of holders at once never
/// exceeds 3, and reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_admits_exactly_its_permits() {
    const PERMITS: u32 = 3;
    const TASKS: usize = 12;
    const ROUNDS: usize = 3;
    let fixture = ZkFixture::shared().await;
    let name = unique("sem-exact");
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(LockClient::new(support::connect(fixture.url()).await));
    }
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let semaphore = clients[task % 3].semaphore(&name, PERMITS).expect("a semaphore");
        let (inside, most, tokens) = (inside.clone(), most.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = if task % 3 == 2 {
                    let deadline = Instant::now() + Duration::from_secs(60);
                    loop {
                        if let Some(guard) = semaphore.try_acquire().await.expect("an attempt") {
                            break guard;
                        }
                        assert!(Instant::now() < deadline, "task {task} never got a permit");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                } else {
                    semaphore
                        .acquire_with(&waiting(Duration::from_secs(60)))
                        .await
                        .expect("a permit")
                };
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokens
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(guard.fencing_token());
                tokio::time::sleep(Duration::from_millis(30)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(
                    guard.release().await.expect("released"),
                    "task {task}: ours to release"
                );
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(90), task)
            .await
            .expect("every task finishes")
            .expect("no task panicked");
    }
    let most = most.load(Ordering::SeqCst);
    println!("{TASKS} tasks x {ROUNDS} rounds on {PERMITS} permits: at most {most} holders at once");
    assert_eq!(
        most, PERMITS as usize,
        "never more than the permits, and all of them used"
    );
    let mut tokens = tokens.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert!(tokens.iter().all(Option::is_some), "every permit is fenced");
    tokens.sort();
    tokens.dedup();
    assert_eq!(
        tokens.len(),
        TASKS * ROUNDS,
        "every permit has a token of its own"
    );

    let backend = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;
    let path = backend.semaphore_path(&name);
    assert!(children(&raw, &format!("{path}/leases")).await.is_empty());
    assert!(children(&raw, &format!("{path}/locks")).await.is_empty());
}

/// A count other than the live holders' is refused, by a single attempt (with room, and when
/// full) and by a wait, leaving nothing behind; once no holder is live, a new count is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_permit_count_is_refused() {
    let fixture = ZkFixture::shared().await;
    let name = unique("sem-mismatch");
    let first = LockClient::new(support::connect(fixture.url()).await);
    let second = LockClient::new(support::connect(fixture.url()).await);
    let raw = support::raw(fixture.url()).await;
    let path = support::connect(fixture.url()).await.semaphore_path(&name);
    let leases = format!("{path}/leases");

    let three = first.semaphore(&name, 3).expect("a semaphore");
    let five = second.semaphore(&name, 5).expect("a semaphore");
    let one = three
        .acquire_with(&waiting(Duration::from_secs(5)))
        .await
        .expect("a permit");
    fn refused<T>(outcome: &distlock_core::Result<T>) -> bool {
        matches!(
            outcome,
            Err(Error::PermitsMismatch {
                stored: 3,
                asked: 5,
                ..
            })
        )
    }
    let tried = five.try_acquire().await;
    assert!(refused(&tried), "with room: {tried:?}");
    let waited = five.acquire_with(&waiting(Duration::from_secs(2))).await;
    assert!(refused(&waited), "waiting: {:?}", waited.map(|g| g.lease()));
    assert_eq!(children(&raw, &leases).await.len(), 1, "only the holder's lease");
    assert!(children(&raw, &format!("{path}/locks")).await.is_empty());

    let two = three.try_acquire().await.expect("works").expect("room");
    let three_of_three = three.try_acquire().await.expect("works").expect("room");
    let tried = five.try_acquire().await;
    assert!(refused(&tried), "when full: {tried:?}");
    assert_eq!(children(&raw, &leases).await.len(), 3);

    for guard in [one, two, three_of_three] {
        assert!(guard.release().await.expect("released"));
    }
    let five_now = five
        .try_acquire()
        .await
        .expect("no holder is live")
        .expect("room");
    assert_eq!(
        five_now.kind(),
        LockKind::Permit {
            permits: 5,
            weight: 1
        }
    );
    let tried = three.try_acquire().await;
    assert!(
        matches!(
            tried,
            Err(Error::PermitsMismatch {
                stored: 5,
                asked: 3,
                ..
            })
        ),
        "{tried:?}"
    );
    assert!(five_now.release().await.expect("released"));
}

/// Release and renewal are owner-checked per hold: an earlier hold's lease, a stranger's
/// lease without a handle, or the same owner's lease of another kind frees and renews
/// nothing; the owner's handle-less lease (the core's cleanup) frees its own hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_frees_nothing() {
    let fixture = ZkFixture::shared().await;
    let lock = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;
    let name = unique("stale");
    let permit = LockKind::Permit {
        permits: 2,
        weight: 1,
    };
    let leases = format!("{}/leases", lock.semaphore_path(&name));

    let earlier = acquired(
        lock.try_acquire_kind(&name, permit, OwnerToken::new(), TTL, None)
            .await,
    );
    assert_eq!(earlier.kind(), permit);
    assert!(lock.release(&earlier).await.expect("released"));
    assert!(
        !lock.release(&earlier).await.expect("release"),
        "a second release frees nothing"
    );
    let current = acquired(
        lock.try_acquire_kind(&name, permit, OwnerToken::new(), TTL, None)
            .await,
    );
    assert!(!lock.release(&earlier).await.expect("release"));
    let stranger =
        Lease::new(name.clone(), OwnerToken::new(), TTL, tokio::time::Instant::now()).with_kind(permit);
    assert!(!lock.release(&stranger).await.expect("release"));
    assert!(lock.extend(&earlier, TTL).await.expect("extend").is_none());
    assert!(lock.extend(&current, TTL).await.expect("extend").is_some());
    assert_eq!(children(&raw, &leases).await.len(), 1, "the current hold stays");
    let by_owner =
        Lease::new(name.clone(), current.owner(), TTL, tokio::time::Instant::now()).with_kind(permit);
    assert!(
        lock.release(&by_owner).await.expect("release"),
        "the owner's cleanup frees it"
    );
    assert!(children(&raw, &leases).await.is_empty());

    let rw = lock.rw_lock_path(&name);
    let writer = acquired(
        lock.try_acquire_kind(&name, LockKind::Write, OwnerToken::new(), TTL, None)
            .await,
    );
    let as_reader =
        Lease::new(name.clone(), writer.owner(), TTL, tokio::time::Instant::now()).with_kind(LockKind::Read);
    assert!(
        !lock.release(&as_reader).await.expect("release"),
        "a read lease frees no write hold"
    );
    let as_mutex = Lease::new(name.clone(), writer.owner(), TTL, tokio::time::Instant::now());
    assert!(
        !lock.release(&as_mutex).await.expect("release"),
        "nor does a mutex lease"
    );
    assert_eq!(children(&raw, &rw).await.len(), 1);
    let as_writer =
        Lease::new(name.clone(), writer.owner(), TTL, tokio::time::Instant::now()).with_kind(LockKind::Write);
    assert!(lock.release(&as_writer).await.expect("release"));
    assert!(children(&raw, &rw).await.is_empty());
    assert!(
        !lock.release(&writer).await.expect("release"),
        "already released by owner"
    );
}

/// A permit whose session is closed (the client dropped) or dies (silenced until the server
/// expires it) goes back to the semaphore: a waiter gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_sessions_permit_is_freed() {
    let fixture = ZkFixture::shared().await;
    let waiter = LockClient::new(support::connect(fixture.url()).await);
    let raw = support::raw(fixture.url()).await;
    let paths = support::connect(fixture.url()).await;
    // The waiter is in line once its lease is in beside the holder's.
    let leases = |name: &LockName| format!("{}/leases", paths.semaphore_path(name));

    // Closed: the holder's client goes away without releasing.
    let name = unique("sem-closed");
    let holder = support::connect(fixture.url()).await;
    let lease = acquired(
        holder
            .try_acquire_kind(
                &name,
                LockKind::Permit {
                    permits: 1,
                    weight: 1,
                },
                OwnerToken::new(),
                TTL,
                None,
            )
            .await,
    );
    let semaphore = waiter.semaphore(&name, 1).expect("a semaphore");
    assert!(
        semaphore.try_acquire().await.expect("works").is_none(),
        "the only permit is held"
    );
    let waiting_for = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move { semaphore.acquire_with(&waiting(Duration::from_secs(20))).await })
    };
    until_children(&raw, &leases(&name), Duration::from_secs(5), |c| c.len() == 2).await;
    let closed_at = Instant::now();
    drop(lease);
    drop(holder);
    let guard = waiting_for
        .await
        .expect("joined")
        .expect("the waiter gets the permit");
    println!(
        "closed session's permit taken over after {:?}",
        closed_at.elapsed()
    );
    assert!(
        closed_at.elapsed() < support::SESSION_TIMEOUT,
        "a closed session frees at once"
    );
    assert!(guard.release().await.expect("released"));

    // Dead: the holder is cut off; the server expires its session.
    let name = unique("sem-expired");
    let (proxied, faults) = through_proxies(fixture.url()).expect("the fault proxy starts");
    let doomed = LockClient::new(support::connect(&proxied).await);
    let doomed_guard = doomed
        .semaphore(&name, 1)
        .expect("a semaphore")
        .acquire_with(&waiting(Duration::from_secs(5)))
        .await
        .expect("a permit");
    let semaphore = waiter.semaphore(&name, 1).expect("a semaphore");
    let waiting_for = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move { semaphore.acquire_with(&waiting(Duration::from_secs(30))).await })
    };
    until_children(&raw, &leases(&name), Duration::from_secs(5), |c| c.len() == 2).await;
    let cut_at = Instant::now();
    faults.blackhole();
    let reason = tokio::time::timeout(Duration::from_secs(10), doomed_guard.lost())
        .await
        .expect("the cut-off holder learns it lost the permit");
    let lost_after = cut_at.elapsed();
    let guard = waiting_for
        .await
        .expect("joined")
        .expect("the waiter gets the permit");
    let taken_after = cut_at.elapsed();
    println!("cut-off holder: lost ({reason:?}) at +{lost_after:?}, taken over at +{taken_after:?}");
    assert_eq!(reason, LossReason::SessionExpired);
    assert!(
        lost_after < taken_after,
        "the holder says lost before anyone else holds it"
    );
    assert!(taken_after < support::SESSION_TIMEOUT + Duration::from_secs(3));
    assert!(guard.release().await.expect("released"));
    faults.heal();
}

/// Readers hold together; a writer holds alone, and nobody else gets in while it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_holds_alone() {
    let fixture = ZkFixture::shared().await;
    let name = unique("rw-share");
    let one = LockClient::new(support::connect(fixture.url()).await)
        .rw_lock(&name)
        .expect("an rw lock");
    let two = LockClient::new(support::connect(fixture.url()).await)
        .rw_lock(&name)
        .expect("an rw lock");

    let first = one.try_read().await.expect("works").expect("free");
    let second = two.try_read().await.expect("works").expect("readers share");
    let third = one.try_read().await.expect("works").expect("readers share");
    assert!(
        two.try_write().await.expect("works").is_none(),
        "readers keep the writer out"
    );
    let holders = one.holders().await.expect("listed");
    assert_eq!(holders.len(), 3);
    assert!(holders.iter().all(|h| h.kind == LockKind::Read));
    let mut owners: Vec<_> = holders.iter().filter_map(|h| h.owner.clone()).collect();
    owners.sort();
    let mut expected: Vec<_> = [&first, &second, &third]
        .iter()
        .map(|g| g.owner().to_string())
        .collect();
    expected.sort();
    assert_eq!(owners, expected);
    for guard in [first, second, third] {
        assert!(guard.release().await.expect("released"));
    }

    let writer = two.try_write().await.expect("works").expect("free");
    assert!(
        one.try_read().await.expect("works").is_none(),
        "the writer keeps readers out"
    );
    assert!(
        one.try_write().await.expect("works").is_none(),
        "and other writers"
    );
    let holders = one.holders().await.expect("listed");
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].kind, LockKind::Write);
    assert_eq!(holders[0].owner, Some(writer.owner().to_string()));
    assert_eq!(holders[0].fencing, writer.fencing_token());
    assert!(writer.release().await.expect("released"));
    assert!(one.holders().await.expect("listed").is_empty());
}

/// FIFO: a writer waiting behind a reader keeps a later reader out (a single attempt is
/// refused, a wait queues behind the writer); when the first reader leaves, the writer gets in
/// first, and the later reader only after the writer has released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_keeps_later_readers_out_then_gets_in() {
    let fixture = ZkFixture::shared().await;
    let name = unique("rw-fifo");
    let raw = support::raw(fixture.url()).await;
    let path = support::connect(fixture.url()).await.rw_lock_path(&name);
    let readers = LockClient::new(support::connect(fixture.url()).await)
        .rw_lock(&name)
        .expect("an rw lock");
    let writers = LockClient::new(support::connect(fixture.url()).await)
        .rw_lock(&name)
        .expect("an rw lock");
    let order = Arc::new(Mutex::new(Vec::new()));
    let writing = Arc::new(AtomicBool::new(false));

    let first = readers.try_read().await.expect("works").expect("free");
    let writer = {
        let (writers, order, writing) = (writers.clone(), order.clone(), writing.clone());
        tokio::spawn(async move {
            let guard = writers
                .write_with(&waiting(Duration::from_secs(30)))
                .await
                .expect("the writer gets in");
            writing.store(true, Ordering::SeqCst);
            order
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push("writer");
            tokio::time::sleep(Duration::from_millis(300)).await;
            writing.store(false, Ordering::SeqCst);
            assert!(guard.release().await.expect("released"));
        })
    };
    until_children(&raw, &path, Duration::from_secs(5), |c| c.len() == 2).await;
    assert!(
        readers.try_read().await.expect("works").is_none(),
        "a new reader is refused while a writer waits"
    );
    let later = {
        let (readers, order, writing) = (readers.clone(), order.clone(), writing.clone());
        tokio::spawn(async move {
            let guard = readers
                .read_with(&waiting(Duration::from_secs(30)))
                .await
                .expect("the later reader gets in");
            assert!(
                !writing.load(Ordering::SeqCst),
                "a reader in while the writer writes"
            );
            order
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push("later reader");
            assert!(guard.release().await.expect("released"));
        })
    };
    until_children(&raw, &path, Duration::from_secs(5), |c| c.len() == 3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        order.lock().unwrap_or_else(PoisonError::into_inner).is_empty(),
        "nobody got in while the first reader held"
    );
    assert!(first.release().await.expect("released"));
    for task in [writer, later] {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("both finish")
            .expect("no panic");
    }
    let order = order.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(order, ["writer", "later reader"]);
    assert!(children(&raw, &path).await.is_empty());
}

/// A wait dropped at any point leaves no node: a writer queued behind a reader, a permit
/// waiter holding the semaphore's `locks` mutex, and one queued behind it in `locks`. The
/// line still moves afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_wait_leaves_no_node() {
    let fixture = ZkFixture::shared().await;
    let lock = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;

    let name = unique("drop-rw");
    let path = lock.rw_lock_path(&name);
    let reader = acquired(
        lock.try_acquire_kind(&name, LockKind::Read, OwnerToken::new(), TTL, None)
            .await,
    );
    let waited = tokio::time::timeout(
        Duration::from_millis(500),
        lock.wait_queued(
            &Attempt::new(name.clone(), LockKind::Write, OwnerToken::new(), TTL),
            None,
        ),
    )
    .await;
    assert!(waited.is_err(), "the writer was still waiting");
    let left = until_children(&raw, &path, Duration::from_secs(2), |c| c.len() == 1).await;
    assert!(left[0].contains("__READ__"), "{left:?}");
    assert!(lock.release(&reader).await.expect("released"));
    let writer = acquired(
        lock.try_acquire_kind(&name, LockKind::Write, OwnerToken::new(), TTL, None)
            .await,
    );
    assert!(lock.release(&writer).await.expect("released"));

    let name = unique("drop-sem");
    let semaphore = lock.semaphore_path(&name);
    let (locks, leases) = (format!("{semaphore}/locks"), format!("{semaphore}/leases"));
    let permit = LockKind::Permit {
        permits: 1,
        weight: 1,
    };
    let holder = acquired(
        lock.try_acquire_kind(&name, permit, OwnerToken::new(), TTL, None)
            .await,
    );
    let other = support::connect(fixture.url()).await;
    let first = tokio::spawn({
        let other = other.clone();
        let name = name.clone();
        async move {
            other
                .wait_queued(&Attempt::new(name.clone(), permit, OwnerToken::new(), TTL), None)
                .await
        }
    });
    // The first waiter holds `locks` and has its lease in: two leases, one `locks` node.
    until_children(&raw, &leases, Duration::from_secs(5), |c| c.len() == 2).await;
    until_children(&raw, &locks, Duration::from_secs(5), |c| c.len() == 1).await;
    let second = tokio::time::timeout(
        Duration::from_millis(500),
        lock.wait_queued(&Attempt::new(name.clone(), permit, OwnerToken::new(), TTL), None),
    )
    .await;
    assert!(second.is_err(), "the second waiter was still waiting");
    until_children(&raw, &locks, Duration::from_secs(2), |c| c.len() == 1).await;
    first.abort();
    assert!(first.await.is_err(), "aborted while waiting");
    until_children(&raw, &leases, Duration::from_secs(2), |c| c.len() == 1).await;
    until_children(&raw, &locks, Duration::from_secs(2), <[String]>::is_empty).await;

    // Through the client too: the wait's task is dropped with its caller.
    let client = LockClient::new(other.clone());
    let dropped = tokio::time::timeout(
        Duration::from_millis(500),
        client
            .semaphore(&name, 1)
            .expect("a semaphore")
            .acquire_with(&waiting(Duration::from_secs(30))),
    )
    .await;
    assert!(dropped.is_err(), "the client's wait was still waiting");
    until_children(&raw, &leases, Duration::from_secs(2), |c| c.len() == 1).await;
    until_children(&raw, &locks, Duration::from_secs(2), <[String]>::is_empty).await;

    assert!(lock.release(&holder).await.expect("released"));
    let next = acquired(
        other
            .try_acquire_kind(&name, permit, OwnerToken::new(), TTL, None)
            .await,
    );
    assert!(other.release(&next).await.expect("released"));
}

/// Every new hold of an object is fenced above every earlier one: permits taken while others
/// hold and after they left, and the write lock after readers and before later readers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_grow_with_every_hold_of_an_object() {
    let fixture = ZkFixture::shared().await;
    let client = LockClient::new(support::connect(fixture.url()).await);
    let name = unique("fencing");
    let semaphore = client.semaphore(&name, 2).expect("a semaphore");
    let mut last = None;
    let mut held = Vec::new();
    for round in 0..6 {
        if held.len() == 2 {
            let oldest: distlock_core::LockGuard = held.remove(0);
            assert!(oldest.release().await.expect("released"));
        }
        let guard = semaphore
            .acquire_with(&waiting(Duration::from_secs(5)))
            .await
            .expect("a permit");
        let token = guard.fencing_token();
        assert!(token > last, "round {round}: {token:?} after {last:?}");
        last = token;
        held.push(guard);
    }
    for guard in held {
        assert!(guard.release().await.expect("released"));
    }

    let rw = client.rw_lock(&name).expect("an rw lock");
    let r1 = rw
        .read_with(&waiting(Duration::from_secs(5)))
        .await
        .expect("read");
    let r2 = rw
        .read_with(&waiting(Duration::from_secs(5)))
        .await
        .expect("read");
    assert!(r2.fencing_token() > r1.fencing_token());
    let raw = support::raw(fixture.url()).await;
    let path = support::connect(fixture.url()).await.rw_lock_path(&name);
    let writer = tokio::spawn({
        let rw = rw.clone();
        async move { rw.write_with(&waiting(Duration::from_secs(10))).await }
    });
    until_children(&raw, &path, Duration::from_secs(5), |c| c.len() == 3).await;
    let reader = tokio::spawn({
        let rw = rw.clone();
        async move { rw.read_with(&waiting(Duration::from_secs(10))).await }
    });
    until_children(&raw, &path, Duration::from_secs(5), |c| c.len() == 4).await;
    let readers_token = r2.fencing_token();
    assert!(r1.release().await.expect("released"));
    assert!(r2.release().await.expect("released"));
    let w = writer.await.expect("joined").expect("the writer gets in");
    let writers_token = w.fencing_token();
    assert!(writers_token > readers_token);
    assert!(w.release().await.expect("released"));
    let r3 = reader.await.expect("joined").expect("the later reader gets in");
    assert!(r3.fencing_token() > writers_token);
    assert!(r3.release().await.expect("released"));
}

/// The mutex, the semaphore and the read-write lock of one name are three objects: all held
/// at once, and each still excludes by its own rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_name_three_objects() {
    let fixture = ZkFixture::shared().await;
    let client = LockClient::new(support::connect(fixture.url()).await);
    let name = unique("namespaces");
    let mutex = client.try_acquire(&name).await.expect("works").expect("free");
    let permit = client
        .semaphore(&name, 1)
        .expect("a semaphore")
        .try_acquire()
        .await
        .expect("works")
        .expect("free");
    let rw = client.rw_lock(&name).expect("an rw lock");
    let writer = rw.try_write().await.expect("works").expect("free");
    assert!(client.try_acquire(&name).await.expect("works").is_none());
    assert!(client
        .semaphore(&name, 1)
        .expect("a semaphore")
        .try_acquire()
        .await
        .expect("works")
        .is_none());
    assert!(rw.try_read().await.expect("works").is_none());
    let backend = client.backend();
    assert_eq!(
        backend
            .inspect_holders(&name, Primitive::Mutex)
            .await
            .expect("listed")
            .len(),
        1
    );
    let permits = backend
        .inspect_holders(&name, Primitive::Semaphore)
        .await
        .expect("listed");
    assert_eq!(permits.len(), 1);
    assert_eq!(
        permits[0].kind,
        LockKind::Permit {
            permits: 1,
            weight: 1
        }
    );
    assert_eq!(permits[0].owner, Some(permit.owner().to_string()));
    assert_eq!(permits[0].fencing, permit.fencing_token());
    for guard in [mutex, permit, writer] {
        assert!(guard.release().await.expect("released"));
    }
}

/// A permit's node deleted behind its holder's back fires that guard's lost signal (and only
/// its), and renewing it finds it gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_deleted_behind_our_back_is_lost() {
    let fixture = ZkFixture::shared().await;
    let client = LockClient::new(support::connect(fixture.url()).await);
    let raw = support::raw(fixture.url()).await;
    let name = unique("sem-stolen");
    let semaphore = client.semaphore(&name, 2).expect("a semaphore");
    let victim = semaphore.try_acquire().await.expect("works").expect("room");
    let bystander = semaphore.try_acquire().await.expect("works").expect("room");
    let node = victim.lease().handle().expect("the node path").to_owned();
    raw.delete(&node, None)
        .await
        .expect("deleted behind the holder's back");
    let reason = tokio::time::timeout(Duration::from_secs(2), victim.lost())
        .await
        .expect("the lost signal fires");
    assert_eq!(reason, LossReason::NotOwned);
    assert!(!bystander.is_lost());
    assert!(client
        .backend()
        .extend(&victim.lease(), TTL)
        .await
        .expect("extend")
        .is_none());
    assert!(
        !victim.release().await.expect("release"),
        "nothing left to release"
    );
    assert!(bystander.release().await.expect("released"));
}

/// The layout Curator's recipes use, so that they and this crate share one object:
/// `InterProcessSemaphoreV2` on [`ZooKeeperLock::semaphore_path`] (`locks/_c_<uuid>-lock-<seq>`,
/// `leases/_c_<uuid>-lease-<seq>`) and `InterProcessReadWriteLock` on
/// [`ZooKeeperLock::rw_lock_path`] (`_c_<uuid>-__READ__<seq>`, `_c_<uuid>-__WRIT__<seq>`);
/// Curator-shaped nodes planted by another session take part as Curator's would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_follow_curators_layout() {
    let fixture = ZkFixture::shared().await;
    let lock = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;
    let name = LockName::new(format!("{} a/b", unique("curator"))).expect("valid");
    let semaphore = lock.semaphore_path(&name);
    let rw = lock.rw_lock_path(&name);
    let mutex = lock.lock_path(&name);
    let encoded = mutex.strip_prefix("/distlock/").expect("under the root");
    assert!(encoded.ends_with("%20a%2Fb"), "{mutex}");
    assert_eq!(semaphore, format!("/distlock/semaphore:{encoded}"));
    assert_eq!(rw, format!("/distlock/rw-lock:{encoded}"));

    // A lease: leases/_c_<owner>-lease-<10 digits>, its count as data, its czxid the token.
    let owner = OwnerToken::new();
    let permit = LockKind::Permit {
        permits: 2,
        weight: 1,
    };
    let lease = acquired(lock.try_acquire_kind(&name, permit, owner, TTL, None).await);
    let node = lease.handle().expect("the node path").to_owned();
    let child = node
        .strip_prefix(&format!("{semaphore}/leases/"))
        .expect("under leases");
    let sequence = child
        .strip_prefix(&format!("_c_{owner}-lease-"))
        .expect("Curator's protected lease name");
    assert!(
        sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit()),
        "{child}"
    );
    let (data, stat) = raw.get_data(&node).await.expect("the lease exists");
    assert_eq!(data, b"permits=2");
    assert_ne!(stat.ephemeral_owner, 0, "ephemeral");
    assert_eq!(Some(stat.czxid as u64), lease.fencing_token().map(|t| t.get()));
    assert!(
        children(&raw, &format!("{semaphore}/locks")).await.is_empty(),
        "the locks mutex is let go"
    );

    // A Curator lease (its data is the client's address) counts, and carries no count.
    let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let curator_lease = format!("{semaphore}/leases/_c_{}-lease-", uuid::Uuid::new_v4());
    let (_, sequence) = raw
        .create(&curator_lease, b"10.0.0.7", &ephemeral)
        .await
        .expect("planted");
    let curator_lease = format!("{curator_lease}{sequence}");
    held(
        lock.try_acquire_kind(&name, permit, OwnerToken::new(), TTL, None)
            .await,
    );
    // A waiter takes the `locks` mutex Curator's way: locks/_c_<owner>-lock-<10 digits>.
    let waiter_owner = OwnerToken::new();
    let waiter = tokio::spawn({
        let (lock, name) = (lock.clone(), name.clone());
        async move {
            lock.wait_queued(&Attempt::new(name.clone(), permit, waiter_owner, TTL), None)
                .await
        }
    });
    let locks = until_children(&raw, &format!("{semaphore}/locks"), Duration::from_secs(5), |c| {
        c.len() == 1
    })
    .await;
    let sequence = locks[0]
        .strip_prefix(&format!("_c_{waiter_owner}-lock-"))
        .expect("Curator's protected lock name");
    assert_eq!(sequence.len(), 10, "{locks:?}");
    raw.delete(&curator_lease, None)
        .await
        .expect("the Curator lease leaves");
    let granted = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter gets in once the Curator lease leaves")
        .expect("joined")
        .expect("works")
        .expect("a permit");
    assert!(lock.release(&granted).await.expect("released"));
    assert!(lock.release(&lease).await.expect("released"));

    // A Curator client at the head of `locks` is ahead of a single attempt.
    let curator_lock = format!("{semaphore}/locks/_c_{}-lock-", uuid::Uuid::new_v4());
    let (_, sequence) = raw
        .create(&curator_lock, b"10.0.0.7", &ephemeral)
        .await
        .expect("planted");
    let curator_lock = format!("{curator_lock}{sequence}");
    held(
        lock.try_acquire_kind(&name, permit, OwnerToken::new(), TTL, None)
            .await,
    );
    let in_locks = children(&raw, &format!("{semaphore}/locks")).await;
    assert_eq!(in_locks.len(), 1, "the attempt left nothing behind: {in_locks:?}");
    assert!(curator_lock.ends_with(&in_locks[0]));
    assert!(children(&raw, &format!("{semaphore}/leases")).await.is_empty());
    raw.delete(&curator_lock, None).await.expect("deleted");

    // Read-write: _c_<owner>-__READ__<seq> and _c_<owner>-__WRIT__<seq>, the owner as data.
    let reader_owner = OwnerToken::new();
    let reader = acquired(
        lock.try_acquire_kind(&name, LockKind::Read, reader_owner, TTL, None)
            .await,
    );
    let child = reader
        .handle()
        .expect("a node")
        .strip_prefix(&format!("{rw}/"))
        .expect("under the lock")
        .to_owned();
    let sequence = child
        .strip_prefix(&format!("_c_{reader_owner}-__READ__"))
        .expect("Curator's read name");
    assert!(
        sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit()),
        "{child}"
    );
    let (data, _) = raw
        .get_data(reader.handle().expect("a node"))
        .await
        .expect("exists");
    assert_eq!(data, reader_owner.to_string().as_bytes());
    assert!(lock.release(&reader).await.expect("released"));
    let writer_owner = OwnerToken::new();
    let writer = acquired(
        lock.try_acquire_kind(&name, LockKind::Write, writer_owner, TTL, None)
            .await,
    );
    let child = writer
        .handle()
        .expect("a node")
        .strip_prefix(&format!("{rw}/"))
        .expect("under the lock")
        .to_owned();
    assert!(
        child.starts_with(&format!("_c_{writer_owner}-__WRIT__")),
        "{child}"
    );
    assert!(lock.release(&writer).await.expect("released"));

    // Curator's writer excludes our readers and writers; Curator's reader only our writers.
    let (_, sequence) = raw
        .create(
            &format!("{rw}/_c_{}-__WRIT__", uuid::Uuid::new_v4()),
            b"10.0.0.7",
            &ephemeral,
        )
        .await
        .expect("planted");
    held(
        lock.try_acquire_kind(&name, LockKind::Read, OwnerToken::new(), TTL, None)
            .await,
    );
    held(
        lock.try_acquire_kind(&name, LockKind::Write, OwnerToken::new(), TTL, None)
            .await,
    );
    let curator_writer = children(&raw, &rw).await;
    assert_eq!(
        curator_writer.len(),
        1,
        "failed attempts leave nothing: {curator_writer:?}"
    );
    assert!(curator_writer[0].ends_with(&format!("__WRIT__{sequence}")));
    raw.delete(&format!("{rw}/{}", curator_writer[0]), None)
        .await
        .expect("deleted");
    raw.create(
        &format!("{rw}/_c_{}-__READ__", uuid::Uuid::new_v4()),
        b"10.0.0.7",
        &ephemeral,
    )
    .await
    .expect("planted");
    let reader = acquired(
        lock.try_acquire_kind(&name, LockKind::Read, OwnerToken::new(), TTL, None)
            .await,
    );
    held(
        lock.try_acquire_kind(&name, LockKind::Write, OwnerToken::new(), TTL, None)
            .await,
    );
    let holders = lock
        .inspect_holders(&name, Primitive::RwLock)
        .await
        .expect("listed");
    assert_eq!(holders.len(), 2, "{holders:?}");
    assert!(holders.iter().any(|h| h.owner.as_deref() == Some("10.0.0.7")));
    assert!(lock.release(&reader).await.expect("released"));
}

/// Bad input is a typed error: a semaphore of no permits. The mutex goes through the same
/// methods as the other kinds (one `wait_queued` for every kind): it is not bad input there,
/// and waits in the mutex's own queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_kinds_are_typed_errors() {
    let fixture = ZkFixture::shared().await;
    let lock: ZooKeeperLock = support::connect(fixture.url()).await;
    let name = unique("bad");
    let zero = lock
        .try_acquire_kind(
            &name,
            LockKind::Permit {
                permits: 0,
                weight: 1,
            },
            OwnerToken::new(),
            TTL,
            None,
        )
        .await;
    assert!(matches!(zero, Err(Error::InvalidOptions { .. })), "{zero:?}");
    let mutex = lock
        .wait_queued(
            &Attempt::new(name.clone(), LockKind::Exclusive, OwnerToken::new(), TTL),
            None,
        )
        .await
        .expect("waits in the mutex's queue")
        .expect("the mutex is free");
    assert_eq!(mutex.kind(), LockKind::Exclusive);
    assert!(lock.inspect_lock(&name).await.expect("inspects").is_held());
    assert!(lock.release(&mutex).await.expect("released"));
    let caps = lock.capabilities();
    assert!(caps.offers(Primitive::Semaphore) && caps.offers(Primitive::RwLock));
}

//! Semaphores: permits exact under contention, the permit count agreement, owner-checked
//! release, a dead session's permit freed, and a permit deleted behind its holder's back.

use super::*;

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

//! Semaphores: exact permits under contention, refused permit counts, owner-checked release
//! and renewal, expiry, a retried acquisition, and a release waking one waiter.

use super::*;

async fn exists(url: &str, key: &[u8]) -> bool {
    let mut raw = support::raw(url).await.expect("raw");
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut raw)
        .await
        .expect("EXISTS");
    n == 1
}

/// Twelve clients race for a 3-permit semaphore at the same instant, ten times: exactly three
/// win each time. Then twelve tasks over four connections each take a permit four times,
/// waiting for it, and hold it a few milliseconds: never more than three hold at once, and
/// three do at some point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_admits_exactly_its_permits_under_contention() {
    let url = shared_url().await;
    let mut clients = Vec::new();
    for _ in 0..12 {
        clients.push(connect(&url).await);
    }
    for round in 0..10 {
        let sem = name(&format!("burst-{round}"));
        let start = Arc::new(tokio::sync::Barrier::new(clients.len()));
        let tasks: Vec<_> = clients
            .iter()
            .map(|lock| {
                let (lock, sem, start) = (lock.clone(), sem.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    attempt(&lock, &sem, permits(3), LONG).await
                })
            })
            .collect();
        let mut won = Vec::new();
        for task in tasks {
            if let TryAcquire::Acquired(lease) = task.await.expect("joined") {
                won.push(lease);
            }
        }
        assert_eq!(won.len(), 3, "round {round}: {} of 12 got a permit", won.len());
        let mut tokens: Vec<_> = won.iter().map(|l| l.fencing_token().expect("fenced")).collect();
        tokens.sort();
        tokens.dedup();
        assert_eq!(tokens.len(), 3, "round {round}: each permit has its own token");
        assert_eq!(owners(&clients[0], &sem, Primitive::Semaphore).await.len(), 3);
        for lease in &won {
            assert!(clients[0].release(lease).await.expect("releases"));
        }
    }

    let sem = name("waiting");
    let users: Vec<LockClient> = clients[..4].iter().cloned().map(LockClient::new).collect();
    let current = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10)).wait_for(LONG);
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let semaphore = users[i % users.len()].semaphore(&sem, 3).expect("valid");
            let (current, most, opts) = (current.clone(), most.clone(), opts.clone());
            tokio::spawn(async move {
                for _ in 0..4 {
                    let guard = semaphore.acquire_with(&opts).await.expect("a permit in the end");
                    let now = current.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    let hold = rand::rng().random_range(2..12);
                    tokio::time::sleep(Duration::from_millis(hold)).await;
                    current.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.release().await.expect("releases"), "still ours");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("joined");
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "at most three hold at once, and three did"
    );
    assert!(owners(&clients[0], &sem, Primitive::Semaphore).await.is_empty());
}

/// An attempt naming another permit count than the live holders' is refused with
/// `PermitsMismatch` and changes nothing; once no holder is live, a new count is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_permit_count_is_refused_while_holders_live() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let sem = name("mismatch");
    let first = take(&lock, &sem, permits(3), LONG).await;
    match lock
        .try_acquire_kind(&sem, permits(5), OwnerToken::new(), LONG, None)
        .await
    {
        Err(Error::PermitsMismatch { name, stored, asked }) => {
            assert_eq!((name.as_str(), stored, asked), (sem.as_str(), 3, 5));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        owners(&lock, &sem, Primitive::Semaphore).await,
        vec![(owner_of(&first), permits(3))],
        "nothing changed"
    );
    let client = LockClient::new(lock.clone());
    assert!(matches!(
        client.semaphore(&sem, 2).expect("valid").try_acquire().await,
        Err(Error::PermitsMismatch {
            stored: 3,
            asked: 2,
            ..
        })
    ));

    assert!(lock.release(&first).await.expect("releases"));
    let five = take(&lock, &sem, permits(5), LONG).await;
    assert_eq!(
        owners(&lock, &sem, Primitive::Semaphore).await,
        vec![(owner_of(&five), permits(5))]
    );
    assert!(lock.release(&five).await.expect("releases"));

    // Also once the holders have expired.
    let short = take(&lock, &sem, permits(1), Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let two = take(&lock, &sem, permits(2), LONG).await;
    assert!(!lock.release(&short).await.expect("answers"));
    assert!(lock.release(&two).await.expect("releases"));

    assert!(matches!(
        lock.try_acquire_kind(&sem, permits(0), OwnerToken::new(), LONG, None)
            .await,
        Err(Error::InvalidOptions { .. })
    ));
}

/// A permit that expired and was given to someone else: its stale owner's release and renewal
/// report "not ours" and change nothing, also while its expired member is still in the set
/// (another holder keeps the set alive); a stranger's owner token frees nothing either. The
/// same for readers and writers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_frees_and_extends_nothing() {
    let url = shared_url().await;
    let lock = connect(&url).await;

    let sem = name("stale-permit");
    let keeper = take(&lock, &sem, permits(2), LONG).await;
    let stale = take(&lock, &sem, permits(2), Duration::from_millis(100)).await;
    assert!(matches!(
        attempt(&lock, &sem, permits(2), LONG).await,
        TryAcquire::Held(_)
    ));
    tokio::time::sleep(Duration::from_millis(150)).await;
    // Expired on the server's clock, though still in the set (nothing pruned it yet).
    assert!(
        lock.extend(&stale, LONG).await.expect("answers").is_none(),
        "an expired permit came back to life"
    );
    assert!(
        !lock.release(&stale).await.expect("answers"),
        "an expired permit was released"
    );
    let fresh = take(&lock, &sem, permits(2), LONG).await;
    assert!(matches!(
        attempt(&lock, &sem, permits(2), LONG).await,
        TryAcquire::Held(_)
    ));
    assert!(!lock.release(&stale).await.expect("answers"));
    assert!(lock.extend(&stale, LONG).await.expect("answers").is_none());
    let stranger =
        Lease::new(sem.clone(), OwnerToken::new(), LONG, tokio::time::Instant::now()).with_kind(permits(2));
    assert!(!lock.release(&stranger).await.expect("answers"));
    let mut expected = vec![(owner_of(&keeper), permits(2)), (owner_of(&fresh), permits(2))];
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(owners(&lock, &sem, Primitive::Semaphore).await, expected);
    // The cleanup after an ambiguous acquisition: a bare lease, by kind, name and owner.
    let bare =
        Lease::new(sem.clone(), fresh.owner(), LONG, tokio::time::Instant::now()).with_kind(permits(2));
    assert!(lock.release(&bare).await.expect("releases"));
    assert!(lock.release(&keeper).await.expect("releases"));

    let rw = name("stale-rw");
    let keeper = take(&lock, &rw, LockKind::Read, LONG).await;
    let stale_read = take(&lock, &rw, LockKind::Read, Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        lock.extend(&stale_read, LONG).await.expect("answers").is_none(),
        "an expired read lock came back to life"
    );
    assert!(
        !lock.release(&stale_read).await.expect("answers"),
        "an expired read lock was released"
    );
    assert!(lock.release(&keeper).await.expect("releases"));
    let writer = take(&lock, &rw, LockKind::Write, Duration::from_millis(300)).await;
    assert!(!lock.release(&stale_read).await.expect("answers"));
    assert!(lock.extend(&stale_read, LONG).await.expect("answers").is_none());
    let as_writer = Lease::new(rw.clone(), stale_read.owner(), LONG, tokio::time::Instant::now())
        .with_kind(LockKind::Write);
    assert!(
        !lock.release(&as_writer).await.expect("answers"),
        "a reader's token is no writer's"
    );
    assert_eq!(
        owners(&lock, &rw, Primitive::RwLock).await,
        vec![(owner_of(&writer), LockKind::Write)]
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    let reader = take(&lock, &rw, LockKind::Read, LONG).await;
    assert!(!lock.release(&writer).await.expect("answers"));
    assert!(lock.extend(&writer, LONG).await.expect("answers").is_none());
    assert_eq!(
        owners(&lock, &rw, Primitive::RwLock).await,
        vec![(owner_of(&reader), LockKind::Read)]
    );
    assert!(lock.release(&reader).await.expect("releases"));
}

/// A permit not renewed is free once its TTL passed on the server: a refused attempt says
/// when, and the sorted set of holders expires with its last member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_frees_a_permit_and_the_holders_key() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let sem = name("expiry");
    let ttl = Duration::from_millis(300);
    let _a = take(&lock, &sem, permits(2), ttl).await;
    let b = take(&lock, &sem, permits(2), ttl + Duration::from_millis(200)).await;
    let remaining = refused(&lock, &sem, permits(2))
        .await
        .expect("the earliest expiry");
    assert!(remaining <= ttl && remaining > Duration::ZERO, "{remaining:?}");
    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    let c = take(&lock, &sem, permits(2), ttl).await;
    assert_eq!(owners(&lock, &sem, Primitive::Semaphore).await.len(), 2);
    assert!(lock
        .extend(&b, Duration::from_millis(100))
        .await
        .expect("answers")
        .is_some());
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    assert!(owners(&lock, &sem, Primitive::Semaphore).await.is_empty());
    assert!(
        !exists(&url, &derived_key(&sem, "semaphore:")).await,
        "the holders' set expired with them"
    );
    assert!(
        exists(&url, &derived_key(&sem, "semaphore-state:")).await,
        "the fencing counter stays"
    );
    drop(c);
}

/// The same acquisition sent twice (as after a broken connection: the owner token is the
/// attempt's own) is granted again, with a new token, and takes no second permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_sent_twice_takes_one_permit() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let sem = name("twice");
    let owner = OwnerToken::new();
    let mut tokens = Vec::new();
    for _ in 0..2 {
        match lock
            .try_acquire_kind(&sem, permits(2), owner, LONG, None)
            .await
            .expect("answers")
        {
            TryAcquire::Acquired(lease) => tokens.push(lease.fencing_token()),
            held => panic!("{held:?}"),
        }
    }
    assert!(tokens[1] > tokens[0]);
    assert_eq!(owners(&lock, &sem, Primitive::Semaphore).await.len(), 1);
    let other = take(&lock, &sem, permits(2), LONG).await;
    assert!(matches!(
        attempt(&lock, &sem, permits(2), LONG).await,
        TryAcquire::Held(_)
    ));
    assert!(lock.release(&other).await.expect("releases"));

    let rw = name("twice-rw");
    for kind in [LockKind::Read, LockKind::Write] {
        let owner = OwnerToken::new();
        for _ in 0..2 {
            let outcome = lock
                .try_acquire_kind(&rw, kind, owner, LONG, None)
                .await
                .expect("answers");
            assert!(matches!(outcome, TryAcquire::Acquired(_)), "{kind}: {outcome:?}");
        }
        assert_eq!(owners(&lock, &rw, Primitive::RwLock).await.len(), 1);
        let lease = Lease::new(rw.clone(), owner, LONG, tokio::time::Instant::now()).with_kind(kind);
        assert!(lock.release(&lease).await.expect("releases"));
    }
}

/// A client of its own waiting for a permit of the one-permit semaphore `sem`.
async fn spawn_permit_waiter(
    url: &str,
    sem: &LockName,
    opts: &AcquireOptions,
) -> tokio::task::JoinHandle<(distlock_core::LockGuard, Instant)> {
    let client = LockClient::new(connect(url).await);
    let (sem, opts) = (sem.clone(), opts.clone());
    tokio::spawn(async move {
        let guard = client
            .semaphore(&sem, 1)
            .expect("a semaphore")
            .acquire_with(&opts)
            .await
            .expect("the waiter gets the permit");
        (guard, Instant::now())
    })
}

/// A permit's release wakes the one waiter that can take it, not every waiter of the
/// semaphore: with six clients waiting for the one permit (their safety-net re-check 20 s
/// away), a release is followed by at most one attempt besides the winner's, and each later
/// release hands the permit on within a few seconds. No wake is lost, also not to the three
/// waiters that queued first and gave up before the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_release_wakes_one_waiter() {
    const WAITERS: usize = 6;
    let server = support::start_server().await;
    let url = server.url();
    let sem = name("wake-one");
    let holder = LockClient::new(connect(&url).await);
    let first = holder
        .semaphore(&sem, 1)
        .expect("a semaphore")
        .acquire_with(&AcquireOptions::new().ttl(LONG))
        .await
        .expect("acquired");
    let opts = AcquireOptions::new()
        .ttl(LONG)
        .wait_for(Duration::from_secs(120))
        .poll_interval(Duration::from_millis(10), Duration::from_secs(5));
    let settle = || async {
        // Every waiter asleep: no script runs for a while.
        let mut last = script_calls(&url).await.0;
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = script_calls(&url).await.0;
            if now == last {
                break;
            }
            last = now;
        }
    };
    let mut gave_up = Vec::new();
    for _ in 0..3 {
        gave_up.push(spawn_permit_waiter(&url, &sem, &opts).await);
    }
    settle().await;
    let mut waiters = Vec::new();
    for _ in 0..WAITERS {
        waiters.push(spawn_permit_waiter(&url, &sem, &opts).await);
    }
    settle().await;
    for waiter in &gave_up {
        waiter.abort();
    }
    settle().await;
    let before = script_calls(&url).await.0;
    assert!(first.release().await.expect("released"));
    let mut current = None;
    let deadline = Instant::now() + Duration::from_secs(3);
    while current.is_none() {
        assert!(
            Instant::now() < deadline,
            "no waiter got the released permit within 3 s"
        );
        if let Some(i) = waiters.iter().position(|w| w.is_finished()) {
            current = Some(waiters.swap_remove(i).await.expect("joined").0);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The release's script, the winner's attempt, and at most one more.
    let scripts = script_calls(&url).await.0 - before;
    println!("a release with {WAITERS} waiters ran {scripts} scripts (the release's included)");
    assert!(
        scripts <= 3,
        "a release with {WAITERS} waiters ran {scripts} scripts: it woke more waiters than can win"
    );
    while !waiters.is_empty() {
        let released = Instant::now();
        assert!(current.take().expect("held").release().await.expect("released"));
        loop {
            assert!(
                released.elapsed() < Duration::from_secs(3),
                "the next waiter did not get the permit within 3 s (a lost wake)"
            );
            if let Some(i) = waiters.iter().position(|w| w.is_finished()) {
                current = Some(waiters.swap_remove(i).await.expect("joined").0);
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    assert!(current.take().expect("held").release().await.expect("released"));
}

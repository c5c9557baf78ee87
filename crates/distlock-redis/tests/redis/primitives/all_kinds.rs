//! Every kind at once: separate namespaces per primitive, fencing per object, batched
//! renewal, one round trip per operation, the reply nonce after a lost reply, replicas, and
//! Redlock offering neither semaphores nor read-write locks.

use super::*;

/// The mutex, the semaphore and the read-write lock of one name are three objects: all three
/// are held at once, each lists only its own holder, and they share no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_primitives_of_one_name_do_not_collide() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let x = name("x");
    let mutex = match lock
        .try_acquire(&x, OwnerToken::new(), LONG)
        .await
        .expect("answers")
    {
        TryAcquire::Acquired(lease) => lease,
        held => panic!("{held:?}"),
    };
    let permit = take(&lock, &x, permits(1), LONG).await;
    let write = take(&lock, &x, LockKind::Write, LONG).await;
    assert_eq!(
        lock.inspect_lock(&x).await.expect("inspects").owner,
        Some(owner_of(&mutex))
    );
    assert_eq!(
        owners(&lock, &x, Primitive::Semaphore).await,
        vec![(owner_of(&permit), permits(1))]
    );
    assert_eq!(
        owners(&lock, &x, Primitive::RwLock).await,
        vec![(owner_of(&write), LockKind::Write)]
    );
    assert_eq!(
        owners(&lock, &x, Primitive::Mutex).await,
        vec![(owner_of(&mutex), LockKind::Exclusive)]
    );
    // Releasing one frees only that one.
    assert!(lock.release(&permit).await.expect("releases"));
    assert!(lock.inspect_lock(&x).await.expect("inspects").is_held());
    assert_eq!(owners(&lock, &x, Primitive::RwLock).await.len(), 1);

    let mut raw = support::raw(&url).await.expect("raw");
    let pattern = [b"*".as_slice(), x.as_str().as_bytes()].concat();
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut raw)
        .await
        .expect("KEYS");
    keys.sort();
    let mut expected = vec![
        x.as_str().as_bytes().to_vec(),
        lock.fencing_key(&x),
        derived_key(&x, "semaphore-state:"),
        derived_key(&x, "rw-writer:"),
        derived_key(&x, "rw-fence:"),
    ];
    expected.sort();
    assert_eq!(keys, expected, "one key per role, none shared");
    assert!(lock.release(&write).await.expect("releases"));
    assert!(lock.release(&mutex).await.expect("releases"));
}

/// Every hold of an object gets a token above all earlier holds of that object, also after
/// the object had no holder at all; the three objects of a name count apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_increase_per_object() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let x = name("fence");
    let mut last = None;
    for kind in [permits(2), permits(2), permits(1)] {
        let lease = take(&lock, &x, kind, LONG).await;
        assert!(lease.fencing_token() > last, "{kind}");
        last = lease.fencing_token();
        assert!(lock.release(&lease).await.expect("releases"));
    }
    let mut last = None;
    for kind in [LockKind::Read, LockKind::Read, LockKind::Write, LockKind::Read] {
        let lease = take(&lock, &x, kind, Duration::from_millis(50)).await;
        assert!(lease.fencing_token() > last, "{kind}");
        last = lease.fencing_token();
        if kind == LockKind::Write {
            tokio::time::sleep(Duration::from_millis(100)).await; // freed by expiry
        } else {
            assert!(lock.release(&lease).await.expect("releases"));
        }
    }
}

/// One `extend_many` renews holds of every kind at once; a hold that is not ours any more
/// reports `None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_many_renews_every_kind() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let x = name("many");
    let short = Duration::from_millis(400);
    let mutex = match lock
        .try_acquire(&x, OwnerToken::new(), short)
        .await
        .expect("answers")
    {
        TryAcquire::Acquired(lease) => lease,
        held => panic!("{held:?}"),
    };
    let permit = take(&lock, &x, permits(2), short).await;
    let gone = take(&lock, &x, permits(2), short).await;
    assert!(lock.release(&gone).await.expect("releases"));
    let other = name("many-rw");
    let read = take(&lock, &other, LockKind::Read, short).await;
    let write = take(&lock, &x, LockKind::Write, short).await;
    let leases = [mutex, permit, gone, read, write]
        .map(|lease| lease.renewed(Duration::from_secs(5), tokio::time::Instant::now()));
    let renewed = lock.renew(&leases).await;
    let ours: Vec<bool> = renewed
        .iter()
        .map(|r| r.as_ref().expect("answered").is_some())
        .collect();
    assert_eq!(ours, [true, true, false, true, true]);
    tokio::time::sleep(short + Duration::from_millis(200)).await;
    assert!(lock.inspect_lock(&x).await.expect("inspects").is_held());
    assert_eq!(owners(&lock, &x, Primitive::Semaphore).await.len(), 1);
    assert_eq!(owners(&lock, &x, Primitive::RwLock).await.len(), 1);
    assert_eq!(owners(&lock, &other, Primitive::RwLock).await.len(), 1);
    for lease in &leases {
        let _ = lock.release(lease).await;
    }
}

/// Each operation is one round trip: with 150 ms added to every request on its way to the
/// server, each takes at least 150 ms and less than 300 ms (two round trips), and the
/// server ran one `EVALSHA` for it (`extend_many`: one per lease, in one round trip).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_is_one_round_trip() {
    let server = support::start_server().await;
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let lock = connect_within(&format!("redis://{}", proxy.host_port()), Duration::from_secs(2)).await;
    let (sem, rw) = (name("rt-sem"), name("rt-rw"));
    let latency = Duration::from_millis(150);

    // Once without latency, so the server knows every script (no EVAL fallback below).
    for _ in 0..2 {
        let p = take(&lock, &sem, permits(1), LONG).await;
        let _ = refused(&lock, &sem, permits(1)).await;
        assert!(lock.extend(&p, LONG).await.expect("answers").is_some());
        let r = take(&lock, &rw, LockKind::Read, LONG).await;
        let _ = lock
            .try_acquire_kind(&rw, LockKind::Write, OwnerToken::new(), LONG, Some(("w", LONG)))
            .await
            .expect("answers");
        let _ = refused(&lock, &rw, LockKind::Read).await;
        lock.withdraw(&rw, LockKind::Write, "w").await.expect("withdraws");
        assert!(lock.extend(&r, LONG).await.expect("answers").is_some());
        assert!(lock.release(&r).await.expect("releases"));
        let w = take(&lock, &rw, LockKind::Write, LONG).await;
        assert!(lock.extend(&w, LONG).await.expect("answers").is_some());
        let _ = lock
            .inspect_holders(&sem, Primitive::Semaphore)
            .await
            .expect("inspects");
        let _ = lock
            .inspect_holders(&rw, Primitive::RwLock)
            .await
            .expect("inspects");
        assert!(lock.release(&w).await.expect("releases"));
        assert!(lock.release(&p).await.expect("releases"));
    }

    proxy.set_latency(Direction::ToServer, latency, Duration::ZERO);
    let url = server.url();
    let mut timings = Vec::new();
    macro_rules! one_round_trip {
        ($what:expr, $scripts:expr, $op:expr) => {{
            let before = script_calls(&url).await;
            let started = Instant::now();
            let out = $op;
            let took = started.elapsed();
            let after = script_calls(&url).await;
            assert_eq!(after.0 - before.0, $scripts, "{}: EVALSHA calls", $what);
            assert_eq!(after.1, before.1, "{}: no EVAL fallback", $what);
            assert!(
                took >= latency && took < latency * 2,
                "{}: {took:?} is not one round trip of {latency:?}",
                $what
            );
            timings.push(($what, took));
            out
        }};
    }
    let p = one_round_trip!("acquire permit", 1, take(&lock, &sem, permits(1), LONG).await);
    one_round_trip!("refused permit", 1, refused(&lock, &sem, permits(1)).await);
    let p = one_round_trip!(
        "extend permit",
        1,
        lock.extend(&p, LONG).await.expect("answers").expect("ours")
    );
    let r = one_round_trip!("acquire read", 1, take(&lock, &rw, LockKind::Read, LONG).await);
    let recorded = one_round_trip!(
        "refused write, recorded waiting",
        1,
        lock.try_acquire_kind(&rw, LockKind::Write, OwnerToken::new(), LONG, Some(("w", LONG)))
            .await
            .expect("answers")
    );
    assert!(matches!(recorded, TryAcquire::Held(_)));
    one_round_trip!("refused read", 1, refused(&lock, &rw, LockKind::Read).await);
    one_round_trip!(
        "withdraw",
        1,
        lock.withdraw(&rw, LockKind::Write, "w").await.expect("withdraws")
    );
    let r = one_round_trip!(
        "extend read",
        1,
        lock.extend(&r, LONG).await.expect("answers").expect("ours")
    );
    one_round_trip!(
        "release read",
        1,
        assert!(lock.release(&r).await.expect("releases"))
    );
    let w = one_round_trip!("acquire write", 1, take(&lock, &rw, LockKind::Write, LONG).await);
    let w = one_round_trip!(
        "extend write",
        1,
        lock.extend(&w, LONG).await.expect("answers").expect("ours")
    );
    one_round_trip!(
        "inspect holders",
        1,
        lock.inspect_holders(&rw, Primitive::RwLock)
            .await
            .expect("inspects")
    );
    let renewed = one_round_trip!(
        "extend_many of 2 kinds",
        2,
        lock.renew(&[p.clone(), w.clone()]).await
    );
    assert!(renewed.iter().all(|r| matches!(r, Ok(Some(_)))), "{renewed:?}");
    one_round_trip!(
        "release write",
        1,
        assert!(lock.release(&w).await.expect("releases"))
    );
    one_round_trip!(
        "release permit",
        1,
        assert!(lock.release(&p).await.expect("releases"))
    );
    println!("{timings:?}");
}

/// The reply to a request that ran but whose reply was lost is never taken for another
/// request's: a permit's release whose reply is dropped, then a renewal of a permit that is
/// not ours (the server says 0) and one of ours (1). Without the nonce each would read the
/// reply of the request before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_is_never_taken_for_another_requests_reply() {
    let server = support::start_server().await;
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let lock = connect_within(&format!("redis://{}", proxy.host_port()), Duration::from_secs(2)).await;
    let other = connect_within(&server.url(), Duration::from_secs(2)).await;
    let ours_a = take(&lock, &name("lost-a"), permits(2), LONG).await;
    let theirs = take(&other, &name("lost-b"), permits(2), LONG).await;
    let not_ours = Lease::new(
        theirs.name().clone(),
        OwnerToken::new(),
        LONG,
        tokio::time::Instant::now(),
    )
    .with_kind(permits(2));
    let ours_c = take(&lock, &name("lost-c"), LockKind::Read, LONG).await;

    proxy.drop_replies();
    let releasing = {
        let (lock, lease) = (lock.clone(), ours_a.clone());
        tokio::spawn(async move { lock.release(&lease).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.heal();
    let (stranger, ours) = tokio::join!(lock.extend(&not_ours, LONG), async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        lock.extend(&ours_c, LONG).await
    });
    let released = releasing.await.expect("the release task");
    println!("release: {released:?}; renewal of a permit not ours: {stranger:?}; of our read: {ours:?}");
    assert!(
        !matches!(stranger, Ok(Some(_))),
        "a renewal of someone else's permit reported success (another request's reply)"
    );
    assert!(
        !matches!(released, Ok(false)),
        "a release that was applied reported 'not owned' (another request's reply)"
    );
    assert!(
        !matches!(ours, Ok(None)),
        "a renewal of our own read lock reported 'not owned' (another request's reply)"
    );
}

/// With `WAIT` for replicas and none to acknowledge, a permit, a read and the write lock are
/// each granted by the script and given back: the attempt fails with `Unavailable` and
/// nothing stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_replicas_give_every_kind_back() {
    let url = shared_url().await;
    let acked = RedisConfig::from_url(&url)
        .expect("valid")
        .with_wait_for_replicas(1, Duration::from_millis(100))
        .build()
        .await
        .expect("connects");
    let plain = connect(&url).await;
    let x = name("replicas");
    for (kind, primitive) in [
        (permits(1), Primitive::Semaphore),
        (LockKind::Read, Primitive::RwLock),
        (LockKind::Write, Primitive::RwLock),
    ] {
        match acked
            .try_acquire_kind(&x, kind, OwnerToken::new(), LONG, None)
            .await
        {
            Err(error @ Error::Unavailable { .. }) => {
                assert!(error.to_string().contains("replicas"), "{kind}: {error}");
            }
            other => panic!("{kind}: {other:?}"),
        }
        assert!(
            owners(&plain, &x, primitive).await.is_empty(),
            "{kind} was left held"
        );
    }
}

/// The capabilities: a single server offers both; Redlock neither, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_and_redlock_offering_neither() {
    let url = shared_url().await;
    let caps = connect(&url).await.capabilities();
    assert!(caps.semaphores && caps.rw_locks);
    assert!(caps.weighted_permits && caps.upgradeable_reads);

    let servers = support::start_servers(3).await;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock = support::redlock_at(&urls).await;
    let caps = redlock.capabilities();
    assert!(!caps.semaphores && !caps.rw_locks);
    assert!(!caps.weighted_permits && !caps.upgradeable_reads);
    let x = name("redlock");
    for kind in [
        permits(2),
        LockKind::permits(2, 2),
        LockKind::Read,
        LockKind::UpgradeableRead,
        LockKind::Write,
    ] {
        assert!(
            matches!(
                redlock
                    .try_acquire_kind(&x, kind, OwnerToken::new(), LONG, None)
                    .await,
                Err(Error::NotSupported { .. })
            ),
            "{kind}"
        );
        let lease =
            Lease::new(x.clone(), OwnerToken::new(), LONG, tokio::time::Instant::now()).with_kind(kind);
        assert!(matches!(
            redlock.release(&lease).await,
            Err(Error::NotSupported { .. })
        ));
        assert!(matches!(
            redlock.extend(&lease, LONG).await,
            Err(Error::NotSupported { .. })
        ));
    }
    let client = LockClient::new(redlock);
    assert!(matches!(client.semaphore(&x, 2), Err(Error::NotSupported { .. })));
    assert!(matches!(client.rw_lock(&x), Err(Error::NotSupported { .. })));
    drop(servers);
}

//! Single-instance behaviour beyond the conformance suite: the seeds' stale-release bug,
//! lost-lock signals when the server dies, interop with plain `SET NX PX` locks, script cache
//! loss, notifications, pipelined renewals and `WAIT` for replicas.

use crate::support;
use crate::support::name;

use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, Attempt, DistributedLock, DistributedLockExt, Error, Lease, LockClient, LockName,
    LossReason, OwnerToken, Primitive, TryAcquire, WakeUp, Woke,
};
use distlock_redis::{RedisConfig, RedisLock};
use distlock_testkit::{shared, Direction, FaultProxy, RedisOptions, RedisServer};

async fn shared_url() -> String {
    tokio::task::spawn_blocking(shared::redis_url)
        .await
        .expect("joined")
        .expect("the shared redis-server starts")
}

async fn connect(url: &str) -> RedisLock {
    RedisConfig::from_url(url)
        .expect("valid")
        .with_operation_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("connects")
}

async fn take(lock: &RedisLock, name: &LockName, ttl: Duration) -> Lease {
    match lock
        .try_acquire(name, OwnerToken::new(), ttl)
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("{name:?} is held: {h:?}"),
    }
}

async fn raw_get(url: &str, key: &[u8]) -> Option<String> {
    let mut conn = support::raw(url).await.expect("raw connection");
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("GET")
}

/// The seeds' bug: A's lease expires while A still works, B takes the lock, and A's late
/// "release" (a plain `DEL` in the seeds) would free B's lock. Ours compares the owner token
/// atomically: A's release and extend report "not owned" and B keeps the lock, also when A's
/// release races B's acquisition at the moment of expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_release_racing_expiry_never_frees_the_next_holder() {
    let url = shared_url().await;
    let (a, b) = (connect(&url).await, connect(&url).await);

    // The plain sequence.
    let lock = name("stale");
    let stale = take(&a, &lock, Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let fresh = take(&b, &lock, Duration::from_secs(30)).await;
    assert!(
        !a.release(&stale).await.expect("works"),
        "a stale release reports not owned"
    );
    assert!(a
        .extend(&stale, Duration::from_secs(30))
        .await
        .expect("works")
        .is_none());
    assert_eq!(
        raw_get(&url, lock.as_str().as_bytes()).await,
        Some(fresh.owner().to_string())
    );
    assert!(b.release(&fresh).await.expect("works"));

    // The race: B spins for the lock while A releases right around its expiry.
    let mut stale_releases_that_won = 0;
    for round in 0..40u64 {
        let lock = name(&format!("race-{round}"));
        let ttl = Duration::from_millis(20);
        let lease = take(&a, &lock, ttl).await;
        let spinner = tokio::spawn({
            let (b, lock) = (b.clone(), lock.clone());
            async move {
                loop {
                    if let TryAcquire::Acquired(lease) = b
                        .try_acquire(&lock, OwnerToken::new(), Duration::from_secs(30))
                        .await
                        .expect("works")
                    {
                        return lease;
                    }
                }
            }
        });
        tokio::time::sleep(ttl + Duration::from_micros(round * 100) - Duration::from_millis(2)).await;
        if a.release(&lease).await.expect("works") {
            stale_releases_that_won += 1;
        }
        let fresh = spinner.await.expect("joined");
        assert_eq!(
            raw_get(&url, lock.as_str().as_bytes()).await,
            Some(fresh.owner().to_string()),
            "round {round}: the new holder's key survived A's release"
        );
        assert!(
            b.release(&fresh).await.expect("works"),
            "round {round}: B still owned it"
        );
    }
    println!("{stale_releases_that_won} of 40 releases came before the expiry; none freed B's lock");
}

/// A holder's lost-lock signal fires when its server is killed (renewals fail until the
/// lease runs out) and when it restarts empty (the renewal finds the key gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_signal_fires_when_the_server_dies_or_restarts_empty() {
    let mut server = support::start_server().await;
    let url = server.url();
    let client = LockClient::new(connect(&url).await);
    let ttl = Duration::from_millis(900);
    let opts = AcquireOptions::new().ttl(ttl);

    // Killed and left dead.
    let guard = client
        .acquire_with(&name("killed"), &opts)
        .await
        .expect("acquired");
    let server = tokio::task::spawn_blocking(move || {
        server.kill().expect("kill -9");
        server
    })
    .await
    .expect("joined");
    let started = Instant::now();
    let reason = tokio::time::timeout(ttl * 2 + Duration::from_secs(2), guard.lost())
        .await
        .expect("the lost signal fires while the server is dead");
    println!("dead server: lost after {:?}: {reason}", started.elapsed());
    assert!(
        matches!(reason, LossReason::RenewalFailed(_) | LossReason::Expired),
        "{reason:?}"
    );

    // Restarted without persistence: the lock really is gone, and the renewal says so.
    let mut server = tokio::task::spawn_blocking(move || {
        let mut server = server;
        server.restart().expect("restart");
        server
    })
    .await
    .expect("joined");
    let ttl = Duration::from_secs(3);
    let guard = tokio::time::timeout(
        Duration::from_secs(10),
        retry_acquire(&client, &name("restarted"), ttl),
    )
    .await
    .expect("the client reconnects");
    let server = tokio::task::spawn_blocking(move || {
        server.kill().expect("kill -9");
        server.restart().expect("restart");
        server
    })
    .await
    .expect("joined");
    let started = Instant::now();
    let reason = tokio::time::timeout(ttl + Duration::from_secs(2), guard.lost())
        .await
        .expect("the lost signal fires after an empty restart");
    println!("empty restart: lost after {:?}: {reason}", started.elapsed());
    assert_eq!(reason, LossReason::NotOwned, "the renewal found the lock gone");
    drop(server);
}

async fn retry_acquire(client: &LockClient, lock: &LockName, ttl: Duration) -> distlock_core::LockGuard {
    loop {
        match client.acquire_with(lock, &AcquireOptions::new().ttl(ttl)).await {
            Ok(guard) => return guard,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A paused (SIGSTOP) server: every operation fails with `Unavailable` within the operation
/// timeout, a waiter does not hang, and all works again after SIGCONT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_server_gives_bounded_unavailable_errors() {
    let mut server = support::start_server().await;
    let url = server.url();
    let lock = connect(&url).await;
    let held = take(&lock, &name("paused"), Duration::from_secs(30)).await;
    let mut server = tokio::task::spawn_blocking(move || {
        server.pause().expect("SIGSTOP");
        server
    })
    .await
    .expect("joined");
    let started = Instant::now();
    let outcomes = [
        lock.try_acquire(&name("p1"), OwnerToken::new(), Duration::from_secs(1))
            .await
            .err(),
        lock.extend(&held, Duration::from_secs(30)).await.err(),
        lock.release(&held).await.err(),
        lock.watch(&name("p2"), Primitive::Mutex).await.err(),
        lock.ping().await.err(),
    ];
    let elapsed = started.elapsed();
    for outcome in &outcomes {
        assert!(matches!(outcome, Some(Error::Unavailable { .. })), "{outcome:?}");
    }
    assert!(
        elapsed < Duration::from_secs(5),
        "five bounded calls took {elapsed:?}"
    );
    server = tokio::task::spawn_blocking(move || {
        server.resume().expect("SIGCONT");
        server
    })
    .await
    .expect("joined");
    tokio::time::timeout(Duration::from_secs(10), async {
        while lock.ping().await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("works again after SIGCONT");
    assert!(lock.release(&held).await.expect("works"));
    drop(server);
}

/// The key layout is the common one: a plain `SET name token NX PX` (redis-py's `Lock`,
/// redsync) excludes us, and we exclude it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_set_nx_px_clients_and_ours_exclude_each_other() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let mut raw = support::raw(&url).await.expect("raw");
    let theirs = name("theirs");
    let set: Option<String> = redis::cmd("SET")
        .arg(theirs.as_str())
        .arg("foreign-token")
        .arg("NX")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut raw)
        .await
        .expect("SET");
    assert_eq!(set.as_deref(), Some("OK"));
    match lock
        .try_acquire(&theirs, OwnerToken::new(), Duration::from_secs(5))
        .await
        .expect("works")
    {
        TryAcquire::Held(holder) => {
            let remaining = holder.remaining.expect("the holder's PTTL");
            assert!(remaining > Duration::from_secs(50), "{remaining:?}");
        }
        TryAcquire::Acquired(_) => panic!("took a lock held by a plain SET NX PX client"),
    }
    let state = lock.inspect_lock(&theirs).await.expect("inspect");
    assert_eq!(state.owner.as_deref(), Some("foreign-token"));

    let ours = name("ours");
    let lease = take(&lock, &ours, Duration::from_secs(30)).await;
    let set: Option<String> = redis::cmd("SET")
        .arg(ours.as_str())
        .arg("foreign-token")
        .arg("NX")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut raw)
        .await
        .expect("SET");
    assert_eq!(set, None, "a plain SET NX PX must not take our lock");
    assert_eq!(
        raw_get(&url, ours.as_str().as_bytes()).await,
        Some(lease.owner().to_string()),
        "the value is our owner token"
    );
    assert!(lock.release(&lease).await.expect("works"));
}

/// Fencing tokens increase across clients; `inspect` reads owner, TTL and the last token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_and_inspect() {
    let url = shared_url().await;
    let (a, b) = (connect(&url).await, connect(&url).await);
    let lock = name("{odd}}name{");
    let mut last = None;
    for round in 0..6 {
        let client = if round % 2 == 0 { &a } else { &b };
        let lease = take(client, &lock, Duration::from_secs(30)).await;
        let token = lease.fencing_token().expect("a fencing token");
        assert!(Some(token) > last, "{token} after {last:?}");
        last = Some(token);
        let state = a.inspect_lock(&lock).await.expect("inspect");
        assert_eq!(state.owner, Some(lease.owner().to_string()));
        assert_eq!(state.fencing, Some(token));
        assert!(
            state.remaining.is_some_and(|r| r > Duration::from_secs(25)),
            "{state:?}"
        );
        assert!(client.release(&lease).await.expect("works"));
    }
    let state = a.inspect_lock(&lock).await.expect("inspect");
    assert!(!state.is_held());
    assert_eq!(state.fencing, last, "the counter outlives the hold");
}

/// An acquire sent again (same owner token: the client resends after a broken connection)
/// after the lock's fencing counter vanished (a `DEL`, a `FLUSHDB` between the two sends, an
/// eviction) cannot report the token its first run drew: it must fail, not hand out token 0,
/// a token below every earlier one, and it must not leave the lock held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_sent_again_after_the_counter_vanished_is_an_error_not_token_zero() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let name = name("counter-vanished");
    let owner = OwnerToken::new();
    let ttl = Duration::from_secs(30);
    let first = match lock.try_acquire(&name, owner, ttl).await.expect("works") {
        TryAcquire::Acquired(lease) => lease,
        held => panic!("held: {held:?}"),
    };
    assert!(first.fencing_token().is_some());
    support::raw_del(&url, &lock.fencing_key(&name))
        .await
        .expect("DEL");
    let again = lock.try_acquire(&name, owner, ttl).await;
    println!("the same attempt sent again: {again:?}");
    assert!(
        matches!(&again, Err(e) if e.is_ambiguous()),
        "an acquire whose fencing token is unknown must fail: {again:?}"
    );
    let state = lock.inspect_lock(&name).await.expect("inspects");
    assert!(
        !state.is_held(),
        "the failed attempt left the lock held: {state:?}"
    );
}

/// The number of entries in the waiter queue of the lock `name` (found by `KEYS`, as an
/// operator would).
async fn queue_len(url: &str, name: &LockName) -> usize {
    let mut conn = support::raw(url).await.expect("raw connection");
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg(format!("*waiters:{name}"))
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    let mut len = 0;
    for key in keys {
        let n: usize = redis::cmd("ZCARD")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .expect("ZCARD");
        len += n;
    }
    len
}

/// Waiters that died (their stay ended without a release) leave the queue of a lock held for
/// long, at the latest when another waiter queues: they do not pile up until a release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_waiters_do_not_pile_up_in_the_queue_of_a_long_held_lock() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let name = name("long-held");
    let ttl = Duration::from_secs(30);
    let _held = take(&lock, &name, ttl).await;
    // A live waiter keeps the queue's key alive.
    let first = lock
        .attempt(
            &Attempt::mutex(name.clone(), OwnerToken::new(), ttl)
                .waiting("alive-first", Duration::from_secs(60)),
        )
        .await
        .expect("answers");
    assert!(matches!(first, TryAcquire::Held(_)), "{first:?}");
    for i in 0..20 {
        let attempt = lock
            .attempt(
                &Attempt::mutex(name.clone(), OwnerToken::new(), ttl)
                    .waiting(format!("dead-{i}"), Duration::from_millis(50)),
            )
            .await
            .expect("answers");
        assert!(matches!(attempt, TryAcquire::Held(_)), "{attempt:?}");
    }
    // Their stays end; no release comes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let attempt = lock
        .attempt(
            &Attempt::mutex(name.clone(), OwnerToken::new(), ttl).waiting("alive", Duration::from_secs(60)),
        )
        .await
        .expect("answers");
    assert!(matches!(attempt, TryAcquire::Held(_)), "{attempt:?}");
    let queued = queue_len(&url, &name).await;
    println!("queue entries after 20 dead waiters and two live ones: {queued}");
    assert_eq!(queued, 2, "dead waiters are still queued");
}

/// After `SCRIPT FLUSH` every operation still works: `EVALSHA` falls back to `EVAL`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_survive_a_script_flush() {
    let server = support::start_server().await;
    let url = server.url();
    let lock = connect(&url).await;
    let mut raw = support::raw(&url).await.expect("raw");
    let flush = || redis::cmd("SCRIPT").arg("FLUSH").to_owned();
    let lock_name = name("flushed");
    let lease = take(&lock, &lock_name, Duration::from_secs(30)).await;
    let () = flush().query_async(&mut raw).await.expect("flush");
    assert!(lock
        .extend(&lease, Duration::from_secs(30))
        .await
        .expect("works")
        .is_some());
    let () = flush().query_async(&mut raw).await.expect("flush");
    let renewed = lock.renew(std::slice::from_ref(&lease)).await;
    assert!(matches!(renewed.as_slice(), [Ok(Some(_))]), "{renewed:?}");
    let () = flush().query_async(&mut raw).await.expect("flush");
    assert!(lock.inspect_lock(&lock_name).await.expect("works").is_held());
    let () = flush().query_async(&mut raw).await.expect("flush");
    assert!(lock.release(&lease).await.expect("works"));
    let () = flush().query_async(&mut raw).await.expect("flush");
    drop(take(&lock, &lock_name, Duration::from_secs(1)).await);
}

/// A release wakes the first queued waiter only, the next release the next one; one pub/sub
/// connection serves many watches, and the channel is unsubscribed once it has lingered
/// unwatched for a while after its last watch went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_wakes_on_release_and_unsubscribes_when_dropped() {
    let url = shared_url().await;
    let (holder, waiter) = (connect(&url).await, connect(&url).await);
    assert_eq!(waiter.capabilities().wake_up, WakeUp::Notification);
    let lock = name("watched");
    let ttl = Duration::from_secs(30);
    let stay = Duration::from_secs(10);
    let lease = take(&holder, &lock, ttl).await;
    let mut watch = waiter.watch(&lock, Primitive::Mutex).await.expect("subscribes");
    let mut second = waiter.watch(&lock, Primitive::Mutex).await.expect("subscribes");
    assert!(watch.is_notified());
    let (first_id, second_id) = (
        watch.waiter().expect("a waiter's watch").clone(),
        second.waiter().expect("a waiter's watch").clone(),
    );
    assert_ne!(first_id, second_id);
    for id in [&first_id, &second_id] {
        let attempt = waiter
            .attempt(&Attempt::mutex(lock.clone(), OwnerToken::new(), ttl).waiting(id, stay))
            .await
            .expect("works");
        assert!(matches!(attempt, TryAcquire::Held(_)), "{attempt:?}");
    }
    assert_eq!(
        watch.wait(Duration::from_millis(100)).await,
        Woke::TimedOut,
        "nothing released yet"
    );
    let started = Instant::now();
    assert!(holder.release(&lease).await.expect("works"));
    assert_eq!(watch.wait(Duration::from_secs(5)).await, Woke::Released);
    println!("release heard after {:?}", started.elapsed());
    assert_eq!(
        second.wait(Duration::from_millis(300)).await,
        Woke::TimedOut,
        "a release wakes the first queued waiter only"
    );
    let won = match waiter
        .attempt(&Attempt::mutex(lock.clone(), OwnerToken::new(), ttl).waiting(&first_id, stay))
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => lease,
        held => panic!("the woken waiter finds the lock free: {held:?}"),
    };
    assert!(waiter.release(&won).await.expect("works"));
    assert_eq!(
        second.wait(Duration::from_secs(5)).await,
        Woke::Released,
        "the next release wakes the next waiter"
    );

    let mut raw = support::raw(&url).await.expect("raw");
    let channel = [b"distlock:released:".as_slice(), lock.as_str().as_bytes()].concat();
    let subscribers = |raw: &mut redis::aio::MultiplexedConnection| {
        let mut cmd = redis::cmd("PUBSUB");
        cmd.arg("NUMSUB").arg(&channel);
        let mut raw = raw.clone();
        async move {
            let (_, n): (Vec<u8>, u64) = cmd.query_async(&mut raw).await.expect("NUMSUB");
            n
        }
    };
    assert_eq!(subscribers(&mut raw).await, 1, "one connection for all watches");
    let dropped = Instant::now();
    drop(watch);
    drop(second);
    // The channel lingers for the next wait on the lock, then goes.
    let _other = waiter
        .watch(&name("other"), Primitive::Mutex)
        .await
        .expect("subscribes");
    assert_eq!(
        subscribers(&mut raw).await,
        1,
        "still subscribed right after the last watch went"
    );
    while subscribers(&mut raw).await != 0 {
        assert!(
            dropped.elapsed() < Duration::from_secs(10),
            "still subscribed 10 s after the last watch went"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        dropped.elapsed() >= Duration::from_millis(1500),
        "unsubscribed {:?} after the last watch went, before it lingered",
        dropped.elapsed()
    );
}

/// The polling configuration declares polling and hands out polling watches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_can_be_switched_off() {
    let url = shared_url().await;
    let lock = RedisConfig::from_url(&url)
        .expect("valid")
        .with_notifications(false)
        .build()
        .await
        .expect("connects");
    assert_eq!(lock.capabilities().wake_up, WakeUp::Polling);
    assert!(!lock
        .watch(&name("x"), Primitive::Mutex)
        .await
        .expect("works")
        .is_notified());
}

/// 1,000 renewals in one `extend_many` call (one pipeline); a stolen lock reports `None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_many_renews_a_thousand_locks_in_one_pipeline() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let base = name("many");
    let mut leases = Vec::new();
    for i in 0..1000 {
        let n = LockName::new(format!("{base}-{i}")).expect("valid");
        leases.push(take(&lock, &n, Duration::from_secs(5)).await);
    }
    support::raw_del(&url, leases[7].name().as_str().as_bytes())
        .await
        .expect("DEL");
    let started = Instant::now();
    let renewed = lock.renew(&leases).await;
    println!("1000 renewals in {:?}", started.elapsed());
    assert_eq!(renewed.len(), 1000);
    for (i, result) in renewed.iter().enumerate() {
        match result {
            Ok(Some(_)) => assert_ne!(i, 7),
            Ok(None) => assert_eq!(i, 7, "only the stolen lock is lost"),
            Err(e) => panic!("{i}: {e}"),
        }
    }
    assert_eq!(lock.count_held(base.as_str()).await.expect("counts"), 999);
    for lease in &leases {
        let _ = lock.release(lease).await;
    }
    assert_eq!(lock.count_held(base.as_str()).await.expect("counts"), 0);
}

/// With `WAIT` for replicas: an acquisition succeeds when enough replicas acknowledge it, also
/// when they take most of the `WAIT` timeout, and fails with `Unavailable` (leaving the lock
/// free) when too few exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_replicas_confirms_or_fails_cleanly() {
    let primary = support::start_server().await;
    // The replica replicates through a proxy, so its acknowledgements can be slowed down.
    let link = FaultProxy::start(primary.addr()).expect("proxy");
    let replica_of = vec![
        "--replicaof".to_owned(),
        "127.0.0.1".to_owned(),
        link.addr().port().to_string(),
    ];
    let replica = tokio::task::spawn_blocking(move || {
        RedisServer::start_with(RedisOptions {
            extra_args: replica_of,
            ..RedisOptions::default()
        })
    })
    .await
    .expect("joined")
    .expect("the replica starts");
    let url = primary.url();
    // Wait until the replica is in sync.
    let mut raw = support::raw(&url).await.expect("raw");
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let n: i64 = redis::cmd("WAIT")
                .arg(1)
                .arg(100)
                .query_async(&mut raw)
                .await
                .expect("WAIT");
            if n >= 1 {
                break;
            }
        }
    })
    .await
    .expect("the replica syncs");

    let one = RedisConfig::from_url(&url)
        .expect("valid")
        .with_wait_for_replicas(1, Duration::from_secs(1))
        .build()
        .await
        .expect("connects");
    let lock = name("replicated");
    let lease = take(&one, &lock, Duration::from_secs(30)).await;
    let on_replica = raw_get(&replica.url(), lock.as_str().as_bytes()).await;
    assert_eq!(on_replica, Some(lease.owner().to_string()), "the replica has it");
    assert!(one.release(&lease).await.expect("works"));

    // A replica that acknowledges after 800 ms, within a 3 s `WAIT`: the acquisition waits
    // for it and succeeds (no shorter timeout of a connection cuts it off).
    let patient = RedisConfig::from_url(&url)
        .expect("valid")
        .with_wait_for_replicas(1, Duration::from_secs(3))
        .build()
        .await
        .expect("connects");
    link.set_latency(Direction::ToServer, Duration::from_millis(800), Duration::ZERO);
    let started = Instant::now();
    let lease = take(&patient, &lock, Duration::from_secs(30)).await;
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "the acknowledgement was slowed: {:?}",
        started.elapsed()
    );
    link.set_latency(Direction::ToServer, Duration::ZERO, Duration::ZERO);
    assert!(patient.release(&lease).await.expect("works"));

    let two = RedisConfig::from_url(&url)
        .expect("valid")
        .with_wait_for_replicas(2, Duration::from_millis(200))
        .build()
        .await
        .expect("connects");
    let outcome = two
        .try_acquire(&lock, OwnerToken::new(), Duration::from_secs(30))
        .await;
    assert!(matches!(outcome, Err(Error::Unavailable { .. })), "{outcome:?}");
    assert!(
        !two.inspect_lock(&lock).await.expect("works").is_held(),
        "released again"
    );
    drop(replica);
}

/// A malformed URL is a typed error, never a panic; an unreachable server is `Unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_and_dead_servers_are_typed_errors() {
    assert!(matches!(
        RedisLock::connect("redis://[::1").await,
        Err(Error::InvalidConfig { .. })
    ));
    let port = distlock_testkit::free_port().expect("a free port");
    let started = Instant::now();
    let outcome = RedisConfig::from_url(&format!("redis://127.0.0.1:{port}"))
        .expect("valid")
        .with_connect_timeout(Duration::from_millis(300))
        .build()
        .await;
    assert!(matches!(outcome, Err(Error::Unavailable { .. })), "{outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

/// On a (single-node) Redis Cluster, every script works for names with any braces: the lock
/// key and its fencing counter always share a hash slot (else Redis answers `CROSSSLOT`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_work_on_redis_cluster_for_any_name() {
    let server = tokio::task::spawn_blocking(|| {
        RedisServer::start_with(RedisOptions {
            extra_args: vec!["--cluster-enabled".to_owned(), "yes".to_owned()],
            ..RedisOptions::default()
        })
    })
    .await
    .expect("joined")
    .expect("a cluster-enabled redis-server starts");
    let url = server.url();
    let mut raw = support::raw(&url).await.expect("raw");
    let () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query_async(&mut raw)
        .await
        .expect("this node serves every slot");
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut raw)
                .await
                .expect("INFO");
            if info.contains("cluster_state:ok") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the cluster comes up");

    let lock = RedisConfig::from_url(&url)
        .expect("valid")
        .with_prefix("app:")
        .build()
        .await
        .expect("connects");
    for suffix in [
        "plain",
        "{tag}rest",
        "a}b",
        "{}x",
        "x{}y}",
        "a}b{c",
        "{",
        "}",
        "{{}}",
        "ключ{锁}",
    ] {
        let lock_name = LockName::new(format!("{}{suffix}", name("cluster"))).expect("valid");
        let slot = |key: Vec<u8>| {
            let mut raw = raw.clone();
            async move {
                let slot: i64 = redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(key)
                    .query_async(&mut raw)
                    .await
                    .expect("KEYSLOT");
                slot
            }
        };
        assert_eq!(
            slot(lock.lock_key(&lock_name)).await,
            slot(lock.fencing_key(&lock_name)).await,
            "{suffix:?}"
        );
        let lease = take(&lock, &lock_name, Duration::from_secs(30)).await;
        assert!(lease.fencing_token().is_some());
        assert!(matches!(
            lock.try_acquire(&lock_name, OwnerToken::new(), Duration::from_secs(30))
                .await,
            Ok(TryAcquire::Held(_))
        ));
        assert!(lock
            .extend(&lease, Duration::from_secs(30))
            .await
            .expect("works")
            .is_some());
        assert!(lock.inspect_lock(&lock_name).await.expect("works").is_held());
        assert!(lock.release(&lease).await.expect("works"), "{suffix:?}");
    }
}

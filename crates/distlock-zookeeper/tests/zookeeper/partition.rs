//! A silent partition of a lock holder (its connection black-holed by a fault proxy: no RST,
//! no FIN, only its own timeouts can notice): its guard must be suspended soon and lost
//! BEFORE the server expires the session and another client acquires the lock. Also: no lease
//! of a session already declared over here, and a holder cut off from only its own ensemble
//! member keeps its lock in the same session on another member.

use crate::support;

use std::time::Duration;

use distlock_core::{AcquireOptions, Attempt, DistributedLockExt, LockClient, LossReason};
use distlock_testkit::proxy::through_proxies;
use support::ZkFixture;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_partition_loses_the_lock_before_another_client_acquires() {
    let fixture = ZkFixture::shared().await;
    let (proxied_url, faults) = through_proxies(fixture.url()).expect("the fault proxy starts");
    let holder = LockClient::new(support::connect(&proxied_url).await);
    let other = LockClient::new(support::connect(fixture.url()).await);
    let name = format!("partition-{}", uuid::Uuid::new_v4().simple());

    let guard = holder.acquire(name.as_str()).await.expect("the holder acquires");
    // Some traffic right before the cut, as a busy holder would have.
    assert!(guard.extend(Duration::from_secs(1)).await.expect("checked"));

    faults.blackhole();
    let cut = Instant::now();
    let suspended = {
        let guard = &guard;
        async move {
            while !guard.is_suspended() && !guard.is_lost() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Instant::now()
        }
    };
    let lost = async {
        let reason = guard.lost().await;
        (Instant::now(), reason)
    };
    let acquired = async {
        let opts = AcquireOptions::new().wait_for(support::SESSION_TIMEOUT * 4);
        let guard = other
            .acquire_with(name.as_str(), &opts)
            .await
            .expect("the other client acquires");
        (Instant::now(), guard)
    };
    let (suspended_at, (lost_at, reason), (acquired_at, other_guard)) =
        tokio::join!(suspended, lost, acquired);
    let t = |at: Instant| at.duration_since(cut);
    println!(
        "session timeout {:?}: suspended at +{:?}, lost ({reason:?}) at +{:?}, other acquired at +{:?}",
        support::SESSION_TIMEOUT,
        t(suspended_at),
        t(lost_at),
        t(acquired_at)
    );
    assert_eq!(reason, LossReason::SessionExpired);
    assert!(
        lost_at < acquired_at,
        "two holders: the other client acquired at +{:?}, our guard said lost only at +{:?}",
        t(acquired_at),
        t(lost_at)
    );
    assert!(
        suspended_at <= lost_at && t(suspended_at) < support::SESSION_TIMEOUT / 2,
        "suspended late: +{:?}",
        t(suspended_at)
    );
    faults.heal();
    drop(guard);
    other_guard.release().await.expect("released");
}

/// The held node's `exists` watch is set right after the lock is won, in the background. If
/// the connection drops before that `exists` is answered, the watch must be set again once
/// the same session is back, or a later deletion behind our back is never reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_node_watch_is_set_again_after_a_reconnection() {
    let fixture = ZkFixture::shared().await;
    let (proxied_url, faults) = through_proxies(fixture.url()).expect("the fault proxy starts");
    let lock = support::connect(&proxied_url).await;
    let holder = LockClient::new(lock.clone());
    let raw = support::raw(fixture.url()).await;
    let name = format!("rewatch-{}", uuid::Uuid::new_v4().simple());

    // Replies are slow, so the watch's `exists` is still unanswered when the link goes silent.
    faults.set_latency(
        distlock_testkit::Direction::ToClient,
        Duration::from_millis(200),
        Duration::ZERO,
    );
    let guard = holder.acquire(name.as_str()).await.expect("acquired");
    faults.blackhole();
    let session = lock.session_id();
    tokio::time::timeout(support::SESSION_TIMEOUT, async {
        while !guard.is_suspended() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("suspended");
    faults.heal();
    tokio::time::timeout(support::SESSION_TIMEOUT, async {
        while guard.is_suspended() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the same session is back");
    assert!(!guard.is_lost(), "the session survived");
    assert_eq!(lock.session_id(), session);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let parent = lock.lock_path(&distlock_core::LockName::new(name.as_str()).expect("valid"));
    let node = format!(
        "{parent}/{}",
        raw.list_children(&parent).await.expect("listed")[0]
    );
    raw.delete(&node, None)
        .await
        .expect("deleted behind the holder's back");
    let reason = tokio::time::timeout(Duration::from_secs(1), guard.lost())
        .await
        .expect("the lost signal fires within a second of the deletion");
    assert_eq!(reason, LossReason::NotOwned);
}

/// `release` is bounded ONCE by the operation timeout, however many steps it takes: here the
/// session ended locally during a partition, so the release must open a new session (one
/// slow round trip) and then delete (another). Each step alone fits in the operation timeout;
/// both together do not, and the call must end at the bound, not at the sum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_is_bounded_once_by_the_operation_timeout() {
    use distlock_core::{DistributedLock, LockName, OwnerToken, TryAcquire};

    // A session long enough that its connection timeout (a quarter of it) lets a slow
    // handshake through; an operation timeout that one slow round trip fits in, two do not.
    // Opening a session takes two round trips through the proxy (2.2 s, under the 3 s
    // connection timeout and the operation timeout), the delete one more (1.1 s).
    const SESSION: Duration = Duration::from_secs(12);
    const OPERATION: Duration = Duration::from_millis(2500);
    const ONE_WAY: Duration = Duration::from_millis(550);

    let fixture = ZkFixture::shared().await;
    let (proxied_url, faults) = through_proxies(fixture.url()).expect("the fault proxy starts");
    let config = support::config(&proxied_url)
        .with_session_timeout(SESSION)
        .and_then(|c| c.with_operation_timeout(OPERATION))
        .expect("valid timeouts");
    let lock = distlock_zookeeper::ZooKeeperLock::connect(config)
        .await
        .expect("connects");
    let name = LockName::new(format!("bounded-{}", uuid::Uuid::new_v4().simple())).expect("valid");
    let TryAcquire::Acquired(lease) = lock
        .try_acquire(&name, OwnerToken::new(), SESSION)
        .await
        .expect("answered")
    else {
        panic!("a fresh name is free");
    };

    // The session ends here (no contact for the session timeout less its margin).
    faults.blackhole();
    tokio::time::timeout(SESSION * 2, async {
        while lock.session_id().is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the session ends locally");
    faults.heal();
    faults.set_latency(distlock_testkit::Direction::Both, ONE_WAY, Duration::ZERO);

    let started = Instant::now();
    let outcome = lock.release(&lease).await;
    let took = started.elapsed();
    println!("release after the session ended, through {ONE_WAY:?} each way: {outcome:?} in {took:?}");
    assert!(
        took < OPERATION + Duration::from_millis(500),
        "release took {took:?}, beyond the operation timeout {OPERATION:?}: its steps were bounded one by one"
    );
    faults.heal();
}

/// A holder whose process stops running (a long GC pause, SIGSTOP, a starved host) for longer
/// than its session timeout: the server expires the session and another client acquires.
/// When the holder runs again, its guard must say lost at once, before any of its own tasks
/// (heartbeat, connection, watchdog) has had a chance to learn anything.
#[test]
fn a_paused_holder_is_lost_the_moment_it_runs_again() {
    let holder_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let name = format!("paused-{}", uuid::Uuid::new_v4().simple());
    let (url, guard) = holder_runtime.block_on(async {
        let fixture = ZkFixture::shared().await;
        let holder = LockClient::new(support::connect(fixture.url()).await);
        let guard = holder.acquire(name.as_str()).await.expect("the holder acquires");
        // Let the session's heartbeat record a contact or two.
        tokio::time::sleep(support::SESSION_TIMEOUT / 4).await;
        (fixture.url().to_owned(), guard)
    });
    assert!(!guard.is_lost());

    // The holder's runtime is not driven from here: it is paused. Another client acquires
    // once the server has expired the holder's session.
    let other = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let other = LockClient::new(support::connect(&url).await);
            let opts = AcquireOptions::new().wait_for(support::SESSION_TIMEOUT * 4);
            let guard = other
                .acquire_with(name.as_str(), &opts)
                .await
                .expect("the other client acquires");
            guard.release().await.expect("released");
        });
    });
    other.join().expect("the other client acquired and released");

    // The holder runs again: not one of its tasks has run since the pause began.
    assert!(
        guard.is_lost(),
        "two holders: another client acquired while this guard still says held"
    );
    holder_runtime.block_on(async {
        assert_eq!(guard.lost().await, LossReason::SessionExpired);
    });
}

/// A lease of a session already declared over here is never handed out. Timeline: the
/// client's replies are lost (its requests still reach the server, which keeps the session
/// alive); once the connection is suspended, a `try_acquire` and a queued acquire of free
/// locks start, and their requests wait in the driver. The session's local deadline passes
/// (the session is declared over here), then the link heals and the driver resumes the same
/// session on the server: the requests go through and both acquisitions win their nodes.
/// Both must fail with `Unavailable`, not return a lease of the ended session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lease_of_a_session_declared_over_while_acquiring() {
    use distlock_core::{DistributedLock, Error, LockName, OwnerToken, SessionState};

    let fixture = ZkFixture::shared().await;
    let (proxied_url, faults) = through_proxies(fixture.url()).expect("the fault proxy starts");
    // The acquisitions must still be waiting when the session ends here.
    let config = support::config(&proxied_url)
        .with_operation_timeout(support::SESSION_TIMEOUT * 4)
        .expect("valid");
    let lock = distlock_zookeeper::ZooKeeperLock::connect(config)
        .await
        .expect("connects");
    let mut session = lock.session().expect("session-bound");
    let name =
        |kind: &str| LockName::new(format!("ended-{kind}-{}", uuid::Uuid::new_v4().simple())).expect("valid");
    let (tried_name, queued_name) = (name("try"), name("queued"));

    faults.drop_replies();
    tokio::time::timeout(
        support::SESSION_TIMEOUT,
        session.wait_for(|s| s.state == SessionState::Suspended),
    )
    .await
    .expect("suspended in time")
    .expect("the session is published");
    let tried = tokio::spawn({
        let lock = lock.clone();
        async move {
            lock.try_acquire(&tried_name, OwnerToken::new(), support::SESSION_TIMEOUT)
                .await
        }
    });
    let queued = tokio::spawn({
        let lock = lock.clone();
        async move {
            lock.wait_queued(
                &Attempt::mutex(queued_name.clone(), OwnerToken::new(), support::SESSION_TIMEOUT),
                None,
            )
            .await
        }
    });
    tokio::time::timeout(
        support::SESSION_TIMEOUT * 2,
        session.wait_for(|s| s.state == SessionState::Expired),
    )
    .await
    .expect("the session is declared over here in time")
    .expect("the session is published");
    assert!(
        !tried.is_finished() && !queued.is_finished(),
        "the acquisitions were meant to wait for the link"
    );
    faults.heal();

    let tried = tried.await.expect("joined");
    let queued = queued.await.expect("joined");
    println!("after the session ended here: try_acquire {tried:?}, acquire_queued {queued:?}");
    assert!(
        matches!(&tried, Err(Error::Unavailable { .. })),
        "try_acquire must not hand out a lease of a session declared over: {tried:?}"
    );
    assert!(
        matches!(&queued, Err(Error::Unavailable { .. })),
        "acquire_queued must not hand out a lease of a session declared over: {queued:?}"
    );
}

/// Only the ensemble member the holder is connected to is cut off (its proxy black-holed; the
/// other two members still form a quorum). Timeline: the holder's guard is suspended within
/// half the session timeout; the driver moves the same session to another member and the
/// guard is held again, never lost, its node still its own; all the while another client
/// trying the lock never gets it; once the holder releases, it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_keeps_its_lock_when_only_its_ensemble_member_is_cut_off() {
    const SESSION: Duration = Duration::from_secs(6);

    let fixture = ZkFixture::ensemble().await;
    let (proxied_url, members) = through_proxies(fixture.url()).expect("the fault proxies start");
    let config = support::config(&proxied_url)
        .with_session_timeout(SESSION)
        .expect("valid");
    let lock = distlock_zookeeper::ZooKeeperLock::connect(config)
        .await
        .expect("connects");
    let holder = LockClient::new(lock.clone());
    let other = LockClient::new(support::connect(fixture.url()).await);
    let name = format!("member-cut-{}", uuid::Uuid::new_v4().simple());

    let guard = holder.acquire(name.as_str()).await.expect("the holder acquires");
    let session = lock.session_id();
    let serving = |members: &distlock_testkit::FaultProxies| -> Vec<usize> {
        (0..members.0.len())
            .filter(|i| members.0[*i].connections() > 0)
            .collect()
    };
    let before = serving(&members);
    assert_eq!(before.len(), 1, "the holder talks to one member at a time");
    members.0[before[0]].blackhole();
    let cut = Instant::now();

    // Another client tries the lock every 50 ms until it gets it.
    let prober = tokio::spawn({
        let name = name.clone();
        async move {
            loop {
                if let Ok(Some(guard)) = other.try_acquire(name.as_str()).await {
                    return (Instant::now(), guard);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });

    // Awaited, not polled: the driver moves to another member within milliseconds of
    // noticing the cut, so the suspension may last less than a polling interval.
    let suspended = tokio::time::timeout(SESSION / 2, guard.lost_signal().lost_or_suspended())
        .await
        .unwrap_or_else(|_| panic!("not suspended after {:?}", SESSION / 2));
    assert_eq!(suspended, LossReason::SessionSuspended, "suspended, not lost");
    let suspended_at = cut.elapsed();
    never_lost_until(&guard, SESSION, "held again", |g| !g.is_suspended()).await;
    let held_again_at = cut.elapsed();
    // The cut member's proxy still counts the old connection (nothing moves through it).
    let moved_to: Vec<usize> = serving(&members)
        .into_iter()
        .filter(|i| *i != before[0])
        .collect();
    println!(
        "session timeout {SESSION:?}: member {} cut; suspended at +{suspended_at:?}, held again at \
         +{held_again_at:?} through member {moved_to:?}",
        before[0]
    );
    assert_eq!(lock.session_id(), session, "the same session, on another member");
    assert_eq!(moved_to.len(), 1, "the holder moved to one other member");
    assert!(
        guard.extend(SESSION).await.expect("checked on the server"),
        "the node is still the holder's"
    );
    // A while longer with the other client still trying.
    tokio::time::sleep(SESSION / 2).await;
    assert!(!guard.is_lost() && !guard.is_suspended(), "still held");
    assert!(
        !prober.is_finished(),
        "the other client acquired while the holder held the lock"
    );

    let released_at = Instant::now();
    assert!(guard.release().await.expect("released"), "still the holder's");
    let (acquired_at, other_guard) = tokio::time::timeout(Duration::from_secs(10), prober)
        .await
        .expect("the other client acquires once released")
        .expect("joined");
    assert!(acquired_at >= released_at, "acquired before the release");
    assert!(other_guard.release().await.expect("released"));
    members.heal();
}

/// Waits up to `limit` for `condition` on `guard`, which must never say lost meanwhile.
async fn never_lost_until(
    guard: &distlock_core::LockGuard,
    limit: Duration,
    what: &str,
    condition: impl Fn(&distlock_core::LockGuard) -> bool,
) {
    let started = Instant::now();
    while !condition(guard) {
        assert!(!guard.is_lost(), "lost while waiting to be {what}");
        assert!(started.elapsed() < limit, "not {what} after {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

//! Network faults between a client and its store, made for real by fault proxies on loopback
//! ([`Fixture::proxied_backend`](crate::Fixture::proxied_backend)): lost replies, a slow
//! store, a silent partition of a holder, connection resets, a black hole. Each case records
//! the instants it measures with `ctx.note`.

use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Error, Expiry, LockClient, LockName, Primitive, WakeUp};
use distlock_testkit::{Direction, FaultProxies};
use futures::future::join_all;

use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::{Ctx, Needs, Proxied};

/// Slack on top of the operation timeout for "returns within the bound" checks.
const SLACK: Duration = Duration::from_secs(3);
/// A bound no single step of these cases may exceed (a hang).
pub(super) const NO_HANG: Duration = Duration::from_secs(60);

/// A client through fault proxies, or the reason to skip.
pub(super) async fn proxied(ctx: &Ctx) -> Result<(LockClient, FaultProxies), Outcome> {
    assert_eq!(
        ctx.needs(),
        Needs::FaultProxy,
        "a case that asks for a fault proxy declares `Needs::FaultProxy`"
    );
    match ctx.fixture().proxied_backend().await {
        Some(Ok(Proxied { lock, faults })) => Ok((LockClient::from_arc(lock), faults)),
        Some(Err(error)) => panic!("the fixture could not open a client through a fault proxy: {error}"),
        None => Err(ctx.skip(
            Reason::FaultProxy,
            "needs a fault proxy between client and store (not available for this store)",
        )),
    }
}

/// Makes `client` open its connections through the proxies on a healthy network, so that a
/// fault made afterwards hits the operation under test, not the client's connection setup
/// (a lazily connecting client would otherwise only time out connecting).
pub(super) async fn warm_up(ctx: &Ctx, client: &LockClient, label: &str) {
    let name = ctx.name(&format!("warm-up-{label}"));
    let opts = AcquireOptions::new().ttl(LONG_TTL).no_wait();
    let guard = within(NO_HANG, "a warm-up acquire", client.acquire_with(&name, &opts))
        .await
        .unwrap_or_else(|e| panic!("the proxied client fails on a healthy network: {e}"));
    assert!(
        guard.release().await.expect("released"),
        "the warm-up lock was ours"
    );
}

/// Case 21: An acquire whose reply is lost, or that outlives the operation timeout on a slow
/// store, fails with a typed error within the bound and leaves nothing behind: once the
/// network heals, another client gets the lock within about an operation timeout, not after
/// the TTL or session timeout.
pub async fn c21_timed_out_acquire_leaves_nothing(ctx: Ctx) -> Outcome {
    let op = ctx.fixture().operation_timeout();
    for fault in ["dropped replies", "a store slower than the operation timeout"] {
        let (client, faults) = match proxied(&ctx).await {
            Ok(pair) => pair,
            Err(skip) => return skip,
        };
        let name = ctx.name(&format!("ambiguous-{}", fault.len()));
        warm_up(&ctx, &client, &format!("c21-{}", fault.len())).await;
        let before = faults.traffic();
        match fault {
            "dropped replies" => faults.drop_replies(),
            _ => faults.set_latency(
                Direction::ToClient,
                op + Duration::from_millis(500),
                Duration::ZERO,
            ),
        }
        let started = Instant::now();
        let opts = AcquireOptions::new().ttl(LONG_TTL).no_wait();
        let outcome = within(
            NO_HANG,
            "an acquire on a faulty network",
            client.try_acquire_with(&name, &opts),
        )
        .await;
        let failed_after = started.elapsed();
        // The request reached the server (counted when delivered to it): the fault hit the
        // acquire itself, whose outcome is therefore unknown to the client.
        let during = faults.traffic();
        assert!(
            during.to_server > before.to_server,
            "{fault}: the acquire never reached the server ({before:?} -> {during:?})"
        );
        let error = match outcome {
            Err(error) => error,
            Ok(guard) => panic!("{fault}: the acquire cannot have heard an answer, got {guard:?}"),
        };
        assert!(
            error.is_ambiguous() || matches!(error, Error::Timeout { .. }),
            "{fault}: an unknown outcome must be a typed, ambiguous error, got {error}"
        );
        assert!(
            failed_after <= op + SLACK,
            "{fault}: the error came after {failed_after:?}, past the operation timeout {op:?}"
        );
        faults.heal();
        let healed = Instant::now();
        let other = ctx.client().await;
        let wait = AcquireOptions::new().ttl(LONG_TTL).wait_for(op * 3 + SLACK * 2);
        let guard = within(
            NO_HANG,
            "another client's acquire after the heal",
            other.acquire_with(&name, &wait),
        )
        .await
        .unwrap_or_else(|e| {
            panic!("{fault}: the lock stayed taken after the heal (stranded by the failed attempt): {e}")
        });
        let recovered = healed.elapsed();
        ctx.note(format!(
            "{fault}: error after {failed_after:?} ({error}); another client acquired {recovered:?} after the heal"
        ));
        assert!(
            recovered <= op * 2 + SLACK,
            "{fault}: another client waited {recovered:?} after the heal; the failed attempt's cleanup must free it within about an operation timeout"
        );
        guard.release().await.expect("released");
        drop(client);
    }
    Outcome::Passed
}

/// Case 22: A holder cut off by a silent partition (no RST, no FIN) hears that its lock is
/// lost, and `with_lock` stops its work, BEFORE any other client can acquire it.
pub async fn c22_silent_partition_of_a_holder(ctx: Ctx) -> Outcome {
    let (holder, faults) = match proxied(&ctx).await {
        Ok(pair) => pair,
        Err(skip) => return skip,
    };
    let op = ctx.fixture().operation_timeout();
    let ttl = (op * 3).max(ctx.short_ttl());
    let opts = AcquireOptions::new().ttl(ttl);
    let (held, worked) = (ctx.name("partition-guard"), ctx.name("partition-work"));
    let guard = holder.acquire_with(&held, &opts).await.expect("acquired");
    let (work_started_tx, work_started) = tokio::sync::oneshot::channel();
    // The work's end is the instant its future is dropped: no code of it runs after that.
    let (work_stopped_tx, work_stopped) = tokio::sync::oneshot::channel();
    let work = {
        let (holder, worked, opts) = (holder.clone(), worked.clone(), opts.clone());
        tokio::spawn(async move {
            holder
                .with_lock(&worked, &opts, |_| async move {
                    let _stopped = StopsAt(Some(work_stopped_tx));
                    let _ = work_started_tx.send(());
                    std::future::pending::<()>().await;
                })
                .await
        })
    };
    within(NO_HANG, "with_lock starts its work", work_started)
        .await
        .expect("the work started");

    let cut = Instant::now();
    faults.blackhole();
    let other = ctx.client().await;
    let acquire_later = |name: LockName| {
        let other = other.clone();
        let wait = AcquireOptions::new().ttl(LONG_TTL).wait_for(NO_HANG);
        tokio::spawn(async move {
            let guard = other.acquire_with(&name, &wait).await;
            (Instant::now(), guard)
        })
    };
    let (other_held, other_worked) = (acquire_later(held.clone()), acquire_later(worked.clone()));

    let lost_reason = within(NO_HANG, "the partitioned holder hears of the loss", guard.lost()).await;
    let lost_at = Instant::now();
    let aborted_at = within(NO_HANG, "with_lock stops its work", work_stopped)
        .await
        .expect("the work was dropped");
    let outcome = within(NO_HANG, "with_lock returns", work).await.expect("joined");
    assert!(
        matches!(outcome, Err(Error::LockLost { .. })),
        "with_lock must end with LockLost, got {outcome:?}"
    );
    let (acquired_held, held_guard) = within(NO_HANG, "the other client acquires", other_held)
        .await
        .expect("joined");
    let (acquired_worked, worked_guard) = within(NO_HANG, "the other client acquires", other_worked)
        .await
        .expect("joined");
    let (held_guard, worked_guard) = (
        held_guard.expect("the other client gets the lock in the end"),
        worked_guard.expect("the other client gets the lock in the end"),
    );
    ctx.note(format!(
        "partition at 0: lost signal at {:?} ({lost_reason}), other client acquired at {:?}; with_lock aborted at {:?}, other acquired at {:?}",
        lost_at - cut,
        acquired_held - cut,
        aborted_at - cut,
        acquired_worked - cut
    ));
    assert!(
        lost_at < acquired_held,
        "the lost signal fired {:?} AFTER another client acquired: two holders",
        lost_at - acquired_held
    );
    assert!(
        aborted_at < acquired_worked,
        "with_lock's work ran {:?} past another client's acquisition: two holders",
        aborted_at - acquired_worked
    );
    faults.heal();
    drop(guard);
    held_guard.release().await.expect("released");
    worked_guard.release().await.expect("released");
    Outcome::Passed
}

/// Case 42: Case 22 for the other primitives. A client holds a semaphore's only permit, a read
/// lock and a write lock, and is silently partitioned from its store; another client then waits
/// for the permit and for the write lock of each read-write lock. Each hold's lost-lock signal
/// fires before the other client gets in where it held (one watchdog batch renews all three,
/// and every kind's renewal is judged by the same clock).
pub async fn c42_silent_partition_of_a_permit_or_rw_holder(ctx: Ctx) -> Outcome {
    let caps = ctx.caps().clone();
    let kinds: Vec<&str> = [
        (Primitive::Semaphore, "permit"),
        (Primitive::RwLock, "read"),
        (Primitive::RwLock, "write"),
    ]
    .into_iter()
    .filter(|(primitive, _)| caps.offers(*primitive))
    .map(|(_, kind)| kind)
    .collect();
    if kinds.is_empty() {
        return ctx.skip(
            Reason::Primitives,
            "the backend has neither semaphores nor read-write locks",
        );
    }
    let (holder, faults) = match proxied(&ctx).await {
        Ok(pair) => pair,
        Err(skip) => return skip,
    };
    let op = ctx.fixture().operation_timeout();
    let opts = AcquireOptions::new().ttl((op * 3).max(ctx.short_ttl()));
    let names: Vec<LockName> = kinds
        .iter()
        .map(|kind| ctx.name(&format!("partition-{kind}")))
        .collect();
    let mut guards = Vec::new();
    for (kind, name) in kinds.iter().zip(&names) {
        let guard = match *kind {
            "permit" => {
                holder
                    .semaphore(name, 1)
                    .expect("a semaphore")
                    .acquire_with(&opts)
                    .await
            }
            "read" => {
                holder
                    .rw_lock(name)
                    .expect("a read-write lock")
                    .read_with(&opts)
                    .await
            }
            _ => {
                holder
                    .rw_lock(name)
                    .expect("a read-write lock")
                    .write_with(&opts)
                    .await
            }
        };
        guards.push(guard.unwrap_or_else(|e| panic!("{kind}: acquired on a healthy network: {e}")));
    }

    let cut = Instant::now();
    faults.blackhole();
    let other = ctx.client().await;
    let wait = AcquireOptions::new().ttl(LONG_TTL).wait_for(NO_HANG);
    let others: Vec<_> = kinds
        .iter()
        .zip(&names)
        .map(|(kind, name)| {
            let (other, name, wait, kind) = (other.clone(), name.clone(), wait.clone(), *kind);
            tokio::spawn(async move {
                let guard = match kind {
                    "permit" => other.semaphore(&name, 1)?.acquire_with(&wait).await,
                    _ => other.rw_lock(&name)?.write_with(&wait).await,
                };
                Ok::<_, Error>((Instant::now(), guard?))
            })
        })
        .collect();
    let lost: Vec<_> = join_all(guards.iter().map(|guard| async move {
        let reason = within(NO_HANG, "the partitioned holder hears of the loss", guard.lost()).await;
        (Instant::now(), reason)
    }))
    .await;
    let mut notes = Vec::new();
    for ((kind, other), (lost_at, reason)) in kinds.iter().zip(others).zip(lost) {
        let (acquired_at, other_guard) = within(NO_HANG, "the other client gets in", other)
            .await
            .expect("joined")
            .unwrap_or_else(|e| panic!("{kind}: the other client gets in in the end: {e}"));
        notes.push(format!(
            "{kind}: lost signal at {:?} ({reason}), the other client in at {:?}",
            lost_at - cut,
            acquired_at - cut
        ));
        assert!(
            lost_at < acquired_at,
            "{kind}: the lost signal fired {:?} AFTER another client got in: two holders",
            lost_at - acquired_at
        );
        other_guard.release().await.expect("released");
    }
    ctx.note(format!("partition at 0: {}", notes.join("; ")));
    faults.heal();
    drop(guards);
    Outcome::Passed
}

/// Records the instant it is dropped.
struct StopsAt(Option<tokio::sync::oneshot::Sender<Instant>>);

impl Drop for StopsAt {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(Instant::now());
        }
    }
}

/// Case 23: A slow store (latency near half the operation timeout each way, or what a session
/// store's keep-alive survives) never yields two holders; renewals keep the lock (through two
/// TTLs, or four sessions of a session-bound store whose fixture gives
/// [`Fixture::session_lifetime`](crate::Fixture::session_lifetime)); waits end on their
/// deadlines.
pub async fn c23_slow_store(ctx: Ctx) -> Outcome {
    let (client, faults) = match proxied(&ctx).await {
        Ok(pair) => pair,
        Err(skip) => return skip,
    };
    let op = ctx.fixture().operation_timeout();
    let one_way = ctx.fixture().slow_latency();
    let ttl = (op * 5).max(ctx.short_ttl());
    let name = ctx.name("slow");
    let guard = client
        .acquire_with(&name, &AcquireOptions::new().ttl(ttl))
        .await
        .expect("acquired on a healthy network");
    faults.set_latency(Direction::Both, one_way, one_way / 10);
    let slow_since = Instant::now();
    let prober = ctx.backend().await;
    // Longer than the lock lasts unless kept: two TTLs, or, on a session-bound store, four of
    // its sessions (its keep-alives, not the TTL asked for, keep the lock).
    let slow_for = match (ctx.caps().expiry, ctx.fixture().session_lifetime()) {
        (Expiry::Session, Some(session)) => (session * 4).min(ttl * 2),
        _ => ttl * 2,
    };
    let until = Instant::now() + slow_for;
    let mut probes = 0;
    while Instant::now() < until {
        assert!(
            super::is_held(&*prober, &name, LONG_TTL).await,
            "another client got the lock while the slow holder renews it"
        );
        if guard.is_lost() {
            let reason = guard.lost().await;
            panic!(
                "renewals through a slow store must keep the lock; lost {:?} into the slow period: {reason}",
                slow_since.elapsed()
            );
        }
        probes += 1;
        tokio::time::sleep(ttl / 10).await;
    }
    // A bounded wait through the slow store ends on its deadline.
    let wait = op * 2;
    let started = Instant::now();
    let waited = client
        .acquire_with(&name, &AcquireOptions::new().ttl(ttl).wait_for(wait))
        .await;
    let took = started.elapsed();
    // Held, so the wait times out; a store whose acquisition takes several round trips may
    // instead run out of operation time, an error that also ends the wait in time.
    match &waited {
        Err(Error::Timeout { .. }) => {}
        Err(error) if error.is_ambiguous() => ctx.note(format!("the wait ended with: {error}")),
        other => panic!("held, so the wait must time out: {other:?}"),
    }
    assert!(took <= wait + SLACK, "a {wait:?} wait took {took:?}");
    ctx.note(format!(
        "{one_way:?} each way: held for {slow_for:?} with {probes} probes seeing it held; a {wait:?} wait ended after {took:?}"
    ));
    faults.heal();
    assert!(
        guard.release().await.expect("released"),
        "still ours after the slow period"
    );
    Outcome::Passed
}

/// Case 24: Waiters survive connection resets (including the notification connection): the
/// next release still wakes them by notification, in about the normal handoff time.
///
/// The waiters' safety-net poll is set far beyond the case (40 s), so a prompt handoff can
/// only come from a notification. Two handoffs are timed: the first after the resets, the
/// second when the first winner releases at once.
pub async fn c24_waiters_survive_resets(ctx: Ctx) -> Outcome {
    if ctx.caps().wake_up != WakeUp::Notification {
        return ctx.skip(
            Reason::Notification,
            "the backend wakes waiters by polling, so there is no notification to lose",
        );
    }
    /// A handoff by notification takes milliseconds; a poll would take the safety net's 40 s.
    const PROMPT: Duration = Duration::from_millis(1000);
    let holder = ctx.client().await;
    let name = ctx.name("resets");
    let guard = holder
        .acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL))
        .await
        .expect("acquired");
    let wait = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(NO_HANG)
        .poll_interval(Duration::from_millis(100), Duration::from_secs(10));
    let mut waiters = Vec::new();
    let mut proxies = Vec::new();
    for _ in 0..2 {
        let (client, faults) = match proxied(&ctx).await {
            Ok(pair) => pair,
            Err(skip) => return skip,
        };
        proxies.push(faults);
        let (name, wait) = (name.clone(), wait.clone());
        waiters.push(tokio::spawn(async move {
            let guard = client.acquire_with(&name, &wait).await;
            (Instant::now(), guard)
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // the waiters subscribe
    let connections: usize = proxies.iter().map(FaultProxies::connections).sum();
    proxies.iter().for_each(FaultProxies::reset);
    tokio::time::sleep(Duration::from_millis(1500)).await; // and reconnect
    let released = Instant::now();
    assert!(guard.release().await.expect("released"));
    let (joined, first, mut rest) = within(
        NO_HANG,
        "a waiter wakes after the release",
        futures::future::select_all(waiters),
    )
    .await;
    let (woke, won) = joined.expect("joined");
    let won = won.unwrap_or_else(|e| panic!("a waiter must survive the resets and get the lock: {e}"));
    let handoff = woke - released;
    let released_again = Instant::now();
    assert!(won.release().await.expect("released"));
    let (woke_again, won_again) = within(NO_HANG, "the other waiter wakes", rest.remove(0))
        .await
        .expect("joined");
    let won_again =
        won_again.unwrap_or_else(|e| panic!("a waiter must survive the resets and get the lock: {e}"));
    let second_handoff = woke_again - released_again;
    ctx.note(format!(
        "{connections} connections reset; handoffs after the resets: {handoff:?} (waiter {first}), then {second_handoff:?}"
    ));
    assert!(
        handoff < PROMPT && second_handoff < PROMPT,
        "waiters woke {handoff:?} / {second_handoff:?} after the releases: not by notification (their poll is 40 s)"
    );
    won_again.release().await.expect("released");
    Outcome::Passed
}

/// Case 25: No exhaustion: 20 operations that time out against a black-holed store, then a
/// heal, leave the client healthy: 100 unrelated leases are taken, renewed past their TTL and
/// released, with no pool or connection error.
pub async fn c25_no_exhaustion_after_timeouts(ctx: Ctx) -> Outcome {
    let (client, faults) = match proxied(&ctx).await {
        Ok(pair) => pair,
        Err(skip) => return skip,
    };
    let op = ctx.fixture().operation_timeout();
    warm_up(&ctx, &client, "c25").await;
    faults.blackhole();
    let opts = AcquireOptions::new().ttl(LONG_TTL).no_wait();
    let names: Vec<_> = (0..20).map(|i| ctx.name(&format!("timeout-{i}"))).collect();
    let started = Instant::now();
    let outcomes = within(
        NO_HANG,
        "20 operations against a black hole",
        join_all(names.iter().map(|name| client.try_acquire_with(name, &opts))),
    )
    .await;
    assert!(
        outcomes.iter().all(Result::is_err),
        "nothing can be acquired through a black hole"
    );
    let failed_after = started.elapsed();
    assert!(
        failed_after <= op * 2 + SLACK,
        "20 operations took {failed_after:?} to fail"
    );
    faults.heal();

    let ttl = (op * 2).max(ctx.short_ttl());
    let session = ctx.caps().expiry == Expiry::Session;
    let opts = AcquireOptions::new().ttl(ttl).wait_for(op * 2 + SLACK);
    let names: Vec<_> = (0..100).map(|i| ctx.name(&format!("healthy-{i}"))).collect();
    let guards = within(
        NO_HANG,
        "100 acquisitions after the heal",
        join_all(names.iter().map(|name| client.acquire_with(name, &opts))),
    )
    .await;
    let guards: Vec<_> = guards
        .into_iter()
        .map(|g| g.unwrap_or_else(|e| panic!("the client is unhealthy after the heal: {e}")))
        .collect();
    tokio::time::sleep(if session { op } else { ttl * 2 }).await;
    assert!(
        guards.iter().all(|g| !g.is_lost()),
        "leases lapsed after the heal: renewals fail"
    );
    let released = join_all(guards.into_iter().map(|g| g.release())).await;
    for outcome in released {
        assert!(
            outcome.unwrap_or_else(|e| panic!("a release failed after the heal: {e}")),
            "a lease was lost"
        );
    }
    ctx.note(format!(
        "20 timeouts in {failed_after:?}; then 100 leases renewed and released"
    ));
    Outcome::Passed
}

/// Case 41: Case 21 for the other primitives: a permit of a one-permit semaphore and the write
/// lock of a read-write lock, asked for while replies are dropped, fail with a typed error
/// within the bound and strand nothing: once the network heals, another client takes the
/// permit or the write lock within about an operation timeout (the cleanup releases by owner
/// token and kind, with no handle).
pub async fn c41_timed_out_permit_or_write_leaves_nothing(ctx: Ctx) -> Outcome {
    let caps = ctx.caps().clone();
    if !caps.offers(Primitive::Semaphore) && !caps.offers(Primitive::RwLock) {
        return ctx.skip(
            Reason::Primitives,
            "the backend has neither semaphores nor read-write locks",
        );
    }
    let op = ctx.fixture().operation_timeout();
    for primitive in [Primitive::Semaphore, Primitive::RwLock] {
        if !caps.offers(primitive) {
            continue;
        }
        let (client, faults) = match proxied(&ctx).await {
            Ok(pair) => pair,
            Err(skip) => return skip,
        };
        let name = ctx.name(&format!("ambiguous-{primitive}"));
        warm_up(&ctx, &client, &format!("c41-{primitive}")).await;
        let take = |client: LockClient, opts: AcquireOptions| {
            let name = name.clone();
            async move {
                match primitive {
                    Primitive::Semaphore => client.semaphore(&name, 1)?.acquire_with(&opts).await,
                    _ => client.rw_lock(&name)?.write_with(&opts).await,
                }
            }
        };
        let before = faults.traffic();
        faults.drop_replies();
        let started = Instant::now();
        let outcome = within(
            NO_HANG,
            "an acquire on a faulty network",
            take(client.clone(), AcquireOptions::new().ttl(LONG_TTL).no_wait()),
        )
        .await;
        let failed_after = started.elapsed();
        let during = faults.traffic();
        assert!(
            during.to_server > before.to_server,
            "{primitive}: the acquire never reached the server ({before:?} -> {during:?})"
        );
        let error = match outcome {
            Err(error) => error,
            Ok(guard) => panic!("{primitive}: the acquire cannot have heard an answer, got {guard:?}"),
        };
        assert!(
            error.is_ambiguous() || matches!(error, Error::Timeout { .. }),
            "{primitive}: an unknown outcome must be a typed, ambiguous error, got {error}"
        );
        assert!(
            failed_after <= op + SLACK,
            "{primitive}: the error came after {failed_after:?}, past the operation timeout {op:?}"
        );
        faults.heal();
        let healed = Instant::now();
        let wait = AcquireOptions::new().ttl(LONG_TTL).wait_for(op * 3 + SLACK * 2);
        let guard = within(
            NO_HANG,
            "another client's acquire after the heal",
            take(ctx.client().await, wait),
        )
        .await
        .unwrap_or_else(|e| panic!("{primitive}: stranded by the failed attempt after the heal: {e}"));
        let recovered = healed.elapsed();
        ctx.note(format!(
            "{primitive}: error after {failed_after:?} ({error}); another client held it {recovered:?} after the heal"
        ));
        assert!(
            recovered <= op * 2 + SLACK,
            "{primitive}: another client waited {recovered:?} after the heal; the cleanup must free it within about an operation timeout"
        );
        guard.release().await.expect("released");
    }
    Outcome::Passed
}

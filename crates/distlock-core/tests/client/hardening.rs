//! The guard, watchdog and client under the failures that let a guard say "held" while another
//! client holds the lock: a dead watchdog task, a hanging or panicking renewal, a shortened
//! TTL, a starved runtime, an answer lost after the store applied it.
//!
//! Each test runs a fault-injecting wrapper over the memory store (whose expiry follows tokio's
//! clock, so most tests run in paused time).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    renew_each, AcquireOptions, Attempt, Capabilities, DistributedLock, DistributedLockExt, Error, HoldEnd,
    Lease, LockClient, LockName, LossReason, MemoryLock, OwnerToken, Result, TryAcquire, Wait,
};
use tokio::time::Instant;

/// A memory store with faults switched on per test.
#[derive(Debug, Default)]
struct Faulty {
    inner: MemoryLock,
    /// `extend` of names starting with `hang-` never answers.
    hang_prefix: bool,
    /// The next `extend` panics.
    panic_next_extend: AtomicBool,
    /// The next `try_acquire` is applied on the store, then reports an error (a lost reply).
    lose_next_acquire_reply: AtomicBool,
    /// The next `release` fails without being applied.
    fail_next_release: AtomicBool,
    /// Every `try_acquire` first waits this long (a slow store).
    attempt_delay: Option<Duration>,
    /// Leases carry this validity margin (Redlock's clock drift).
    margin: Option<Duration>,
    releases: AtomicUsize,
    /// Attempts made (`try_acquire` calls).
    attempts: AtomicUsize,
    /// The next `try_acquire` is applied on the store, then panics (a backend bug).
    panic_next_acquire: AtomicBool,
    /// Leases are dated this much later than the request was sent (a backend that trusts a
    /// wrong clock, or a buggy one).
    lease_skew: Option<Duration>,
}

impl Faulty {
    fn margined(&self, lease: Lease) -> Lease {
        match self.margin {
            Some(margin) => lease.with_validity_margin(margin),
            None => lease,
        }
    }
}

#[async_trait]
impl DistributedLock for Faulty {
    fn backend(&self) -> &'static str {
        "faulty"
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn mechanics(&self) -> distlock_core::Mechanics {
        self.inner.mechanics()
    }
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        let Attempt { name, owner, ttl, .. } = attempt;
        if let Some(delay) = self.attempt_delay {
            tokio::time::sleep(delay).await;
        }
        self.attempts.fetch_add(1, Ordering::SeqCst);
        let outcome = self.inner.try_acquire(name, *owner, *ttl).await?;
        if self.panic_next_acquire.swap(false, Ordering::SeqCst) {
            panic!("a backend bug in try_acquire");
        }
        if let (Some(skew), TryAcquire::Acquired(lease)) = (self.lease_skew, &outcome) {
            let fencing = lease.fencing_token().expect("memory issues tokens");
            let skewed = Lease::new(name.clone(), *owner, *ttl, Instant::now() + skew).with_fencing(fencing);
            return Ok(TryAcquire::Acquired(skewed));
        }
        if self.lose_next_acquire_reply.swap(false, Ordering::SeqCst) {
            return Err(Error::unavailable("faulty", "the reply was lost"));
        }
        Ok(match outcome {
            TryAcquire::Acquired(lease) => TryAcquire::Acquired(self.margined(lease)),
            held => held,
        })
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        if self.fail_next_release.swap(false, Ordering::SeqCst) {
            return Err(Error::unavailable("faulty", "the connection broke"));
        }
        self.inner.release(lease).await
    }
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        renew_each(leases, |lease| async move {
            if self.panic_next_extend.swap(false, Ordering::SeqCst) {
                panic!("a backend bug in extend");
            }
            if self.hang_prefix && lease.name().as_str().starts_with("hang-") {
                std::future::pending::<()>().await;
            }
            Ok(self
                .inner
                .extend(&lease, lease.ttl())
                .await?
                .map(|l| self.margined(l)))
        })
        .await
    }
    async fn ping(&self) -> Result<()> {
        Ok(())
    }
}

fn opts(ttl: Duration) -> AcquireOptions {
    AcquireOptions::new().ttl(ttl)
}

/// Whether `other` can take `name` right now.
async fn other_takes(store: &MemoryLock, name: &str) -> bool {
    let name = LockName::new(name).expect("valid");
    matches!(
        store
            .try_acquire(&name, OwnerToken::new(), Duration::from_secs(60))
            .await
            .expect("memory store works"),
        TryAcquire::Acquired(_)
    )
}

#[test]
fn a_watchdog_whose_runtime_stopped_is_replaced() {
    let store = Arc::new(Faulty::default());
    let client = LockClient::from_arc(store.clone());
    // First runtime: a guard starts the watchdog task, then the runtime shuts down under it.
    let first = tokio::runtime::Runtime::new().expect("runtime");
    let kept = first.block_on(async {
        client
            .acquire_with("first", &opts(Duration::from_secs(60)))
            .await
            .expect("acquired")
    });
    drop(first);
    let kept = kept.leak();
    let _ = kept;

    let second = tokio::runtime::Runtime::new().expect("runtime");
    second.block_on(async {
        let guard = client
            .acquire_with("second", &opts(Duration::from_millis(300)))
            .await
            .expect("acquired");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !other_takes(&store.inner, "second").await || guard.is_lost(),
            "another client holds the lock while the guard says held"
        );
        assert!(!guard.is_lost(), "a live watchdog keeps a 300 ms lock for 1 s");
    });
}

#[tokio::test(start_paused = true)]
async fn a_panicking_renewal_does_not_stop_the_watchdog() {
    let store = Arc::new(Faulty::default());
    let client = LockClient::from_arc(store.clone());
    store.panic_next_extend.store(true, Ordering::SeqCst);
    let first = client
        .acquire_with("first", &opts(Duration::from_secs(3)))
        .await
        .expect("acquired");
    tokio::time::sleep(Duration::from_secs(2)).await; // the renewal at 1 s panicked
    let second = client
        .acquire_with("second", &opts(Duration::from_secs(3)))
        .await
        .expect("acquired");
    tokio::time::sleep(Duration::from_secs(10)).await;
    for (guard, name) in [(&first, "first"), (&second, "second")] {
        let stolen = other_takes(&store.inner, name).await;
        assert!(
            !stolen || guard.is_lost(),
            "{name}: another client holds the lock while the guard says held"
        );
    }
    assert!(!second.is_lost(), "renewals go on after a panicking one");
}

#[tokio::test(start_paused = true)]
async fn extending_to_a_shorter_ttl_moves_the_renewal() {
    let store = Arc::new(Faulty::default());
    let client = LockClient::from_arc(store.clone());
    let guard = client
        .acquire_with("short", &opts(Duration::from_secs(30)))
        .await
        .expect("acquired");
    assert!(guard.extend(Duration::from_secs(1)).await.expect("extended"));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let stolen = other_takes(&store.inner, "short").await;
    assert!(
        !stolen || guard.is_lost(),
        "another client holds the lock while the guard says held"
    );
    assert!(!stolen, "the watchdog renews at the new TTL's pace");
}

#[tokio::test(start_paused = true)]
async fn a_manually_renewed_guard_is_lost_at_its_own_deadline() {
    let store = Arc::new(Faulty::default());
    let client = LockClient::from_arc(store.clone());
    let guard = client
        .acquire_with("manual", &opts(Duration::from_secs(30)).auto_renew(false))
        .await
        .expect("acquired");
    assert!(guard.extend(Duration::from_secs(1)).await.expect("extended"));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(
        other_takes(&store.inner, "manual").await,
        "the store freed it at 1 s"
    );
    assert!(
        guard.is_lost(),
        "the guard says held while another client holds the lock"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hanging_renewal_does_not_delay_other_holds() {
    let store = Arc::new(Faulty {
        hang_prefix: true,
        ..Faulty::default()
    });
    let client = LockClient::from_arc(store.clone());
    let hanging = client
        .acquire_with("hang-a", &opts(Duration::from_secs(10)))
        .await
        .expect("acquired");
    tokio::time::sleep(Duration::from_secs(4)).await; // its renewal (at 3.3 s) hangs
    let other = client
        .acquire_with("b", &opts(Duration::from_secs(3)))
        .await
        .expect("acquired");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let stolen = other_takes(&store.inner, "b").await;
    assert!(
        !stolen || other.is_lost(),
        "another client holds the lock while the guard says held"
    );
    assert!(!stolen, "b is renewed while a's renewal hangs");
    drop(hanging);
}

#[test]
fn a_guard_past_its_deadline_is_lost_even_if_the_watchdog_could_not_run() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = Arc::new(Faulty::default());
    let client = LockClient::from_arc(store.clone());
    runtime.block_on(async {
        let guard = client
            .acquire_with("blocked", &opts(Duration::from_millis(300)))
            .await
            .expect("acquired");
        // The runtime is blocked: neither the watchdog nor anything else runs.
        std::thread::sleep(Duration::from_millis(600));
        assert!(
            guard.is_lost(),
            "past its local deadline, the guard must say lost"
        );
        assert!(guard.lost_signal().is_lost());

        // with_lock: the work blocked the runtime past the deadline; its result must not be
        // reported as done under the lock.
        let outcome = client
            .with_lock("blocked-work", &opts(Duration::from_millis(300)), |_| async {
                std::thread::sleep(Duration::from_millis(600));
            })
            .await;
        assert!(
            matches!(outcome, Err(Error::LockLost { .. })),
            "work that outlived the lock must end with LockLost, got {outcome:?}"
        );
    });
}

#[tokio::test(start_paused = true)]
async fn a_manual_extend_keeps_the_backends_validity_margin() {
    let margin = Duration::from_millis(300);
    let store = Arc::new(Faulty {
        margin: Some(margin),
        ..Faulty::default()
    });
    let client = LockClient::from_arc(store.clone());
    let guard = client
        .acquire_with("margin", &opts(Duration::from_secs(3)).auto_renew(false))
        .await
        .expect("acquired");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sent = Instant::now();
    assert!(guard.extend(Duration::from_secs(3)).await.expect("extended"));
    let until = guard.lease().valid_until().expect("TTL lease");
    assert!(
        until <= sent + Duration::from_secs(3) - margin,
        "the manual extend dropped the margin: {:?} after sending",
        until - sent
    );
}

#[tokio::test(start_paused = true)]
async fn the_lost_signal_fires_a_safety_margin_before_the_store_expires_the_lock() {
    let store = Arc::new(Faulty::default());
    let client = LockClient::from_arc(store.clone());
    let ttl = Duration::from_secs(1);
    let sent = Instant::now();
    let guard = client
        .acquire_with("margin", &opts(ttl).auto_renew(false))
        .await
        .expect("acquired");
    let reason = guard.lost().await;
    let fired = Instant::now();
    assert_eq!(reason, LossReason::Expired);
    assert!(
        fired + Duration::from_millis(50) <= sent + ttl,
        "the signal must lead the store's expiry by a margin; it fired {:?} after sending",
        fired - sent
    );

    // The margin is configurable.
    let margin = Duration::from_millis(400);
    let sent = Instant::now();
    let guard = client
        .acquire_with("margin-2", &opts(ttl).auto_renew(false).safety_margin(margin))
        .await
        .expect("acquired");
    guard.lost().await;
    assert!(Instant::now() <= sent + ttl - margin);
    let refused = client
        .acquire_with("margin-3", &opts(ttl).safety_margin(ttl))
        .await;
    assert!(
        matches!(refused, Err(Error::InvalidOptions { .. })),
        "{refused:?}"
    );
}

#[test]
fn release_and_extend_run_on_the_callers_runtime() {
    let store = Arc::new(Faulty::default());
    let client = LockClient::from_arc(store.clone());
    // The guard is made on a current-thread runtime that is then no longer driven.
    let idle = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let guard = idle.block_on(async { client.acquire("elsewhere").await.expect("acquired") });
    let other = tokio::runtime::Runtime::new().expect("runtime");
    other.block_on(async {
        let extended =
            tokio::time::timeout(Duration::from_secs(2), guard.extend(Duration::from_secs(30))).await;
        assert!(
            matches!(extended, Ok(Ok(true))),
            "extend must not hang: {extended:?}"
        );
        let released = tokio::time::timeout(Duration::from_secs(2), guard.release()).await;
        assert!(
            matches!(released, Ok(Ok(true))),
            "release must not hang: {released:?}"
        );
    });
    drop(idle);
}

#[tokio::test(start_paused = true)]
async fn a_wait_ends_on_its_deadline_even_when_attempts_are_slow() {
    let store = Arc::new(Faulty {
        attempt_delay: Some(Duration::from_secs(1)),
        ..Faulty::default()
    });
    let holder = LockClient::new(store.inner.clone());
    let _held = holder.acquire("slow").await.expect("acquired");
    let client = LockClient::from_arc(store.clone());
    let started = Instant::now();
    let outcome = client
        .acquire_with(
            "slow",
            &AcquireOptions::new().wait_for(Duration::from_millis(100)),
        )
        .await;
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    assert!(
        started.elapsed() <= Duration::from_millis(200),
        "the wait overran its 100 ms deadline: {:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_lost_signal_learns_that_the_hold_ended() {
    let client = LockClient::new(MemoryLock::new());
    let guard = client.acquire("ends").await.expect("acquired");
    let signal = guard.lost_signal();
    assert!(!signal.is_ended());
    guard.release().await.expect("released");
    assert!(signal.is_ended());
    assert_eq!(signal.ended().await, HoldEnd::Released);

    let guard = client.acquire("dropped").await.expect("acquired");
    let signal = guard.lost_signal();
    let worker = tokio::spawn(async move { signal.ended().await });
    drop(guard); // the owner returned early with `?`
    let ended = tokio::time::timeout(Duration::from_secs(1), worker)
        .await
        .expect("the worker hears that the hold ended")
        .expect("joined");
    assert_eq!(ended, HoldEnd::Released);
}

#[tokio::test(start_paused = true)]
async fn the_memory_store_forgets_unique_names() {
    let store = MemoryLock::new();
    let client = LockClient::new(store.clone());
    let opts = opts(Duration::from_millis(100)).auto_renew(false);
    for i in 0..2_000 {
        let guard = client
            .acquire_with(format!("unique-{i}"), &opts)
            .await
            .expect("acquired");
        if i % 2 == 0 {
            guard.leak(); // left to expire
        } else {
            // A waiter that gives up leaves a watcher behind.
            let waited = client
                .acquire_with(
                    format!("unique-{i}"),
                    &opts.clone().wait_for(Duration::from_millis(1)),
                )
                .await;
            assert!(waited.is_err());
            guard.release().await.expect("released");
        }
    }
    // Sweeps are amortized (one every max(64, size) operations): what is left is bounded by
    // a few sweep intervals, not by the 2,000 names used.
    assert!(
        store.footprint() <= 256,
        "expired entries and idle watchers must be dropped, {} remain",
        store.footprint()
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_whose_reply_was_lost_is_cleaned_up_by_owner() {
    let store = Arc::new(Faulty::default());
    let client = LockClient::from_arc(store.clone());
    store.lose_next_acquire_reply.store(true, Ordering::SeqCst);
    let outcome = client.try_acquire("ambiguous").await;
    assert!(outcome.is_err(), "the client saw an error: {outcome:?}");
    // The store did apply it; the client must clean up with the same owner token, long
    // before the 30 s TTL frees it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        other_takes(&store.inner, "ambiguous").await,
        "an attempt with an unknown outcome left a lock nobody owns"
    );
}

#[tokio::test(start_paused = true)]
async fn a_release_that_failed_is_retried_in_the_background() {
    let store = Arc::new(Faulty::default());
    let client = LockClient::from_arc(store.clone());
    let guard = client.acquire("retry").await.expect("acquired");
    store.fail_next_release.store(true, Ordering::SeqCst);
    let released = guard.release().await;
    assert!(released.is_err(), "a failed release is never reported as success");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        other_takes(&store.inner, "retry").await,
        "the failed release was not retried; the lock waits for its TTL"
    );
}

/// The CPU time this process has used so far (every thread: the test's, the runtime's
/// workers, the watchdog's). Unlike the wall clock it does not advance while other work on a
/// loaded machine has the cores.
#[cfg(unix)]
fn cpu_time() -> Duration {
    use nix::time::{clock_gettime, ClockId};
    let now = clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID).expect("the process CPU clock");
    Duration::from(now)
}

#[cfg(not(unix))]
fn cpu_time() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

/// Registers `n` holds on a fresh client and returns the CPU time it took.
async fn time_to_acquire(n: usize) -> Duration {
    let client = LockClient::new(MemoryLock::new());
    let opts = opts(Duration::from_secs(60));
    let started = cpu_time();
    let mut guards = Vec::with_capacity(n);
    for i in 0..n {
        guards.push(
            client
                .acquire_with(format!("many-{i}"), &opts)
                .await
                .expect("acquired"),
        );
    }
    let took = cpu_time().saturating_sub(started);
    for guard in guards {
        guard.leak();
    }
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquiring_many_locks_costs_linear_time() {
    // Each registration used to wake the watchdog, which scanned every hold: O(n^2). Measured
    // in one run as a ratio, so a slow machine does not matter: 4x the holds must cost far
    // less than the 16x a quadratic scan gives. The process's CPU time is measured, not the
    // wall clock (a preemption of a few milliseconds on a loaded machine was the whole of the
    // small run), and each size is timed five times, interleaved, with the fastest of each
    // counting: what remains of other work (caches, a migration) only ever adds time, while
    // a quadratic cost shows in every run.
    let mut small = Duration::MAX;
    let mut large = Duration::MAX;
    for _ in 0..5 {
        small = small.min(time_to_acquire(1_000).await);
        large = large.min(time_to_acquire(4_000).await);
    }
    let ratio = large.as_secs_f64() / small.as_secs_f64();
    println!("1,000 holds: {small:?}; 4,000 holds: {large:?}; ratio {ratio:.1}");
    assert!(
        ratio < 8.0,
        "4x the holds cost {ratio:.1}x the time: registration is not linear"
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_that_panicked_is_cleaned_up_by_owner() {
    let store = Arc::new(Faulty::default());
    let client = LockClient::from_arc(store.clone());
    store.panic_next_acquire.store(true, Ordering::SeqCst);
    let outcome = client.try_acquire("panicked").await;
    assert!(outcome.is_err(), "the client saw an error: {outcome:?}");
    // The store applied it before the backend panicked: same cleanup as for a lost reply.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        other_takes(&store.inner, "panicked").await,
        "an attempt that panicked left a lock nobody owns"
    );
}

/// Work that blocked its runtime past the lease's deadline and then awaits something is not
/// polled again: the statements after that await would run without the lock (the store has
/// expired it and another client may hold it). Real time, on one thread: the work is woken by
/// a task queued before it, without the timer driver turning in between (so neither the
/// watchdog nor the lost signal's timer has run).
#[tokio::test(flavor = "current_thread")]
async fn with_lock_never_polls_the_work_past_the_deadline() {
    let store = Arc::new(Faulty::default());
    let client = LockClient::from_arc(store.clone());
    let ttl = Duration::from_millis(300);
    let ran_late = Arc::new(AtomicBool::new(false));
    let work_ran_late = ran_late.clone();
    // A task, not the test's own future: the scheduler runs queued tasks one after another
    // and turns the timer driver only when none is left.
    let outcome = tokio::spawn(async move {
        client
            .with_lock("late", &opts(ttl), move |_ctx| {
                let ran_late = work_ran_late;
                async move {
                    // The watchdog task runs and goes to sleep on its timer.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    tokio::spawn(async move {
                        let _ = tx.send(());
                    });
                    std::thread::sleep(ttl * 2); // the runtime is blocked past the store's expiry
                    let _ = rx.await;
                    ran_late.store(true, Ordering::SeqCst);
                }
            })
            .await
    })
    .await
    .expect("the task ran");
    assert!(
        !ran_late.load(Ordering::SeqCst),
        "the work ran on after the lock's deadline (another client could hold it)"
    );
    assert!(matches!(outcome, Err(Error::LockLost { .. })), "{outcome:?}");
}

/// The watchdog renews at a third of the TTL: a safety margin of two thirds or more puts the
/// local deadline before the first renewal, and every hold would be lost. Such options are
/// refused; without renewal a large margin only ends the hold early, and is allowed.
#[tokio::test(start_paused = true)]
async fn a_safety_margin_that_leaves_no_time_to_renew_is_refused() {
    let client = LockClient::new(MemoryLock::new());
    let ttl = Duration::from_secs(3);
    let too_big = opts(ttl).safety_margin(Duration::from_millis(2100));
    match client.acquire_with("margin", &too_big).await {
        Err(Error::InvalidOptions { .. }) => {}
        Ok(guard) => {
            tokio::time::sleep(ttl).await;
            panic!(
                "accepted a margin above two thirds of the TTL (lost: {})",
                guard.is_lost()
            );
        }
        Err(other) => panic!("expected InvalidOptions, got {other:?}"),
    }
    let unrenewed = client
        .acquire_with("margin", &too_big.clone().auto_renew(false))
        .await
        .expect("without renewal a large margin is allowed");
    drop(unrenewed);
    let fine = client
        .acquire_with("fine", &opts(ttl).safety_margin(Duration::from_millis(1500)))
        .await
        .expect("a margin of half the TTL is fine");
    tokio::time::sleep(ttl * 10).await;
    assert!(!fine.is_lost(), "renewed in time with half the TTL as margin");
    match fine.extend(Duration::from_secs(2)).await {
        Err(Error::InvalidOptions { .. }) => {}
        other => panic!("extend to a TTL that leaves no time to renew: {other:?}"),
    }
}

/// `Wait::For(Duration::ZERO)` is one attempt, as `Wait::No`: a free lock is taken.
#[tokio::test(start_paused = true)]
async fn a_zero_wait_makes_exactly_one_attempt() {
    let store = Arc::new(Faulty::default());
    let client = LockClient::from_arc(store.clone());
    let zero = AcquireOptions::new().wait(Wait::For(Duration::ZERO));
    let guard = client.acquire_with("zero", &zero).await;
    assert_eq!(store.attempts.load(Ordering::SeqCst), 1);
    let guard = guard.expect("a free lock is taken by a zero wait");
    match client.acquire_with("zero", &zero).await {
        Err(Error::Timeout { .. }) => {}
        other => panic!("a held lock times out: {other:?}"),
    }
    assert_eq!(store.attempts.load(Ordering::SeqCst), 2, "one attempt each");
    assert!(guard.release().await.expect("released"));
}

/// A guard past its local deadline is lost; extending it afterwards reports the loss, even if
/// the store still had the lock (its TTL runs a safety margin longer).
#[tokio::test(start_paused = true)]
async fn extending_a_guard_lost_by_the_clock_reports_the_loss() {
    let store = Arc::new(Faulty::default());
    let client = LockClient::from_arc(store.clone());
    let ttl = Duration::from_secs(3);
    let guard = client
        .acquire_with("lapsed", &opts(ttl).auto_renew(false))
        .await
        .expect("acquired");
    tokio::time::sleep(Duration::from_millis(2800)).await; // past 2.7 s, before the store's 3 s
    assert!(guard.is_lost());
    let extended = guard.extend(ttl).await;
    assert!(
        matches!(extended, Ok(false)),
        "a lost guard was extended: {extended:?}"
    );
    assert!(guard.is_lost(), "and it stays lost");
}

/// A lease is never believed past the client's own `sent_at + ttl`, whatever the backend
/// dates it.
#[tokio::test(start_paused = true)]
async fn a_lease_is_capped_at_the_clients_own_send_time_plus_ttl() {
    let store = Arc::new(Faulty {
        lease_skew: Some(Duration::from_secs(60)),
        ..Faulty::default()
    });
    let client = LockClient::from_arc(store.clone());
    let ttl = Duration::from_secs(3);
    let guard = client
        .acquire_with("skewed", &opts(ttl).auto_renew(false))
        .await
        .expect("acquired");
    let remaining = guard.remaining().expect("a TTL lease");
    assert!(
        remaining <= ttl,
        "the lease claims {remaining:?} of a {ttl:?} TTL"
    );
    tokio::time::sleep(ttl).await;
    assert!(other_takes(&store.inner, "skewed").await, "the store expired it");
    assert!(
        guard.is_lost(),
        "the guard says held while another client holds the lock"
    );
}

/// The watchdog task runs on one runtime; when that runtime stops, the holds of the other
/// runtimes go on being renewed without waiting for a new registration.
#[test]
fn holds_of_other_runtimes_are_renewed_after_the_watchdogs_runtime_stopped() {
    let store = Arc::new(Faulty::default());
    let client = LockClient::from_arc(store.clone());
    let first = tokio::runtime::Runtime::new().expect("runtime");
    let second = tokio::runtime::Runtime::new().expect("runtime");
    let kept = first.block_on(async {
        client
            .acquire_with("first", &opts(Duration::from_secs(60)))
            .await
            .expect("acquired")
    });
    let guard = second.block_on(async {
        client
            .acquire_with("second", &opts(Duration::from_millis(300)))
            .await
            .expect("acquired")
    });
    drop(first); // the watchdog task started on it
    let _ = kept.leak();
    second.block_on(async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            !guard.is_lost(),
            "a 300 ms lock of a live runtime was not renewed for 1 s"
        );
        assert!(!other_takes(&store.inner, "second").await);
        assert!(guard.release().await.expect("released"));
    });
}

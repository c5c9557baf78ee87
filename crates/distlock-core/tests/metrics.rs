//! The lock metrics, read back from a recorder after real acquisitions on the memory store:
//! outcomes, call and wait times, store round trips, renewals, hold times and a lost lock.
//!
//! One recorder serves the whole test binary, so the tests take turns, and each reads only
//! what was recorded since it started (a snapshot takes the values out).

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use distlock_core::{metrics, AcquireOptions, Error, LockClient, LockName, LossReason, MemoryLock};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;

/// The tests take turns: they share the process's one recorder.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the only recorder of this process");
        snapshotter
    })
}

/// A metric's name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

/// What was recorded since [`Recorded::start`], added up over snapshots.
#[derive(Default)]
struct Recorded {
    counters: HashMap<Series, u64>,
    gauges: HashMap<Series, f64>,
    histograms: HashMap<Series, Vec<f64>>,
}

impl Recorded {
    /// Starts from now: drops everything recorded before.
    fn start() -> Self {
        let _ = snapshotter().snapshot();
        Self::default()
    }

    /// Adds what was recorded since the last look.
    fn take(&mut self) -> &Self {
        for (key, _unit, _description, value) in snapshotter().snapshot().into_vec() {
            let (kind, key) = key.into_parts();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|label| (label.key().to_owned(), label.value().to_owned()))
                .collect();
            labels.sort();
            let series = (key.name().to_owned(), labels);
            match (kind, value) {
                (MetricKind::Counter, DebugValue::Counter(n)) => {
                    *self.counters.entry(series).or_default() += n
                }
                (MetricKind::Gauge, DebugValue::Gauge(v)) => *self.gauges.entry(series).or_default() += v.0,
                (MetricKind::Histogram, DebugValue::Histogram(values)) => self
                    .histograms
                    .entry(series)
                    .or_default()
                    .extend(values.into_iter().map(|v| v.0)),
                (kind, value) => panic!("{kind:?} with {value:?}"),
            }
        }
        self
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.counters.get(&series(name, labels)).copied().unwrap_or(0)
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.gauges.get(&series(name, labels)).copied().unwrap_or(0.0)
    }

    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.histograms
            .get(&series(name, labels))
            .cloned()
            .unwrap_or_default()
    }

    /// Every label name used by any series.
    fn label_names(&self) -> Vec<String> {
        let keys = self
            .counters
            .keys()
            .chain(self.gauges.keys())
            .chain(self.histograms.keys());
        let mut names: Vec<String> = keys
            .flat_map(|(_, labels)| labels.iter().map(|(k, _)| k.clone()))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    (name.to_owned(), labels)
}

const MUTEX: [(&str, &str); 2] = [("backend", "memory"), ("primitive", "mutex")];

fn mutex_with(extra: (&'static str, &'static str)) -> [(&'static str, &'static str); 3] {
    [MUTEX[0], MUTEX[1], extra]
}

#[tokio::test(start_paused = true)]
async fn acquisitions_renewals_holds_and_a_loss_are_recorded() {
    let _turn = TURN.lock().await;
    let mut recorded = Recorded::start();
    let store = MemoryLock::new();
    let client = LockClient::new(store.clone());
    let ttl = Duration::from_secs(3);
    let opts = AcquireOptions::new().ttl(ttl);

    // Acquired at once, then busy for a call that does not wait, then a wait that runs out.
    let guard = client.acquire_with("report", &opts).await.expect("free");
    assert_eq!(
        recorded.take().gauge(metrics::LOCKS_HELD, &MUTEX),
        1.0,
        "one hold now"
    );
    assert!(client.try_acquire("report").await.expect("answered").is_none());
    let waited = client
        .acquire_with("report", &opts.clone().wait_for(Duration::from_secs(1)))
        .await;
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");

    // The watchdog renews at a third of the TTL: one renewal by 1.5 s.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(guard.release().await.expect("released"), "still ours");

    // A hold destroyed behind its guard's back: the next renewal finds it not ours.
    let lost = client.acquire_with("stolen", &opts).await.expect("free");
    assert!(store.steal(&LockName::new("stolen").expect("valid")), "held");
    let reason = tokio::time::timeout(Duration::from_secs(5), lost.lost())
        .await
        .expect("the loss is seen within one renewal period");
    assert_eq!(reason, LossReason::NotOwned);

    // A semaphore permit, and a count that disagrees with its holder's.
    let permit = client
        .semaphore("pool", 2)
        .expect("offered")
        .acquire()
        .await
        .expect("free");
    let mismatch = client.semaphore("pool", 3).expect("offered").try_acquire().await;
    assert!(
        matches!(mismatch, Err(Error::PermitsMismatch { .. })),
        "{mismatch:?}"
    );
    permit.release().await.expect("released");

    // A wait dropped by its caller.
    let blocker = client.acquire_with("blocked", &opts).await.expect("free");
    let dropped = tokio::time::timeout(Duration::from_millis(200), client.acquire("blocked")).await;
    assert!(dropped.is_err(), "still waiting when dropped");
    blocker.release().await.expect("released");

    let r = recorded.take();
    // Outcomes of acquisition calls.
    assert_eq!(
        r.counter(metrics::ACQUIRES, &mutex_with(("outcome", "acquired"))),
        3
    );
    assert_eq!(r.counter(metrics::ACQUIRES, &mutex_with(("outcome", "busy"))), 1);
    assert_eq!(
        r.counter(metrics::ACQUIRES, &mutex_with(("outcome", "timeout"))),
        1
    );
    assert_eq!(
        r.counter(metrics::ACQUIRES, &mutex_with(("outcome", "cancelled"))),
        1
    );
    let semaphore = |extra| [("backend", "memory"), ("primitive", "semaphore"), extra];
    assert_eq!(
        r.counter(metrics::ACQUIRES, &semaphore(("outcome", "acquired"))),
        1
    );
    assert_eq!(
        r.counter(metrics::ACQUIRES, &semaphore(("outcome", "permits_mismatch"))),
        1
    );

    // Call and wait times: the timed-out call waited its second; one acquired at once did not.
    let timed_out = r.histogram(metrics::ACQUIRE_DURATION, &mutex_with(("outcome", "timeout")));
    assert!(timed_out.len() == 1 && timed_out[0] >= 1.0, "{timed_out:?}");
    let wait = r.histogram(metrics::ACQUIRE_WAIT, &mutex_with(("outcome", "timeout")));
    assert!(wait.len() == 1 && (0.9..=1.5).contains(&wait[0]), "{wait:?}");
    let wait = r.histogram(metrics::ACQUIRE_WAIT, &mutex_with(("outcome", "acquired")));
    assert_eq!(wait, vec![0.0; 3], "acquired at the first attempt");
    let busy = r.histogram(metrics::ACQUIRE_WAIT, &mutex_with(("outcome", "busy")));
    assert_eq!(busy, vec![0.0], "a call that does not wait never waits");
    let cancelled = r.histogram(metrics::ACQUIRE_DURATION, &mutex_with(("outcome", "cancelled")));
    assert!(cancelled.len() == 1 && cancelled[0] >= 0.2, "{cancelled:?}");

    // Store round trips: three acquired; held for try_acquire, the timed-out wait, the
    // dropped wait (at least once each).
    let attempts = r.histogram(
        metrics::ACQUIRE_ATTEMPT_DURATION,
        &mutex_with(("result", "acquired")),
    );
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    let held = r.histogram(metrics::ACQUIRE_ATTEMPT_DURATION, &mutex_with(("result", "held")));
    assert!(held.len() >= 3, "{held:?}");

    // Renewals: "report" renewed once, "stolen" found not ours.
    assert!(r.counter(metrics::RENEWALS, &mutex_with(("outcome", "ok"))) >= 1);
    assert_eq!(r.counter(metrics::RENEWALS, &mutex_with(("outcome", "lost"))), 1);
    assert_eq!(
        r.counter(metrics::RENEWALS, &mutex_with(("outcome", "failed"))),
        0
    );

    // The loss, and hold times from grant to end.
    assert_eq!(
        r.counter(metrics::LOCKS_LOST, &mutex_with(("reason", "not_owned"))),
        1
    );
    let released = r.histogram(metrics::HOLD_DURATION, &mutex_with(("end", "released")));
    assert_eq!(released.len(), 2, "report and blocked: {released:?}");
    assert!(
        released.iter().any(|&held| held >= 2.5),
        "report was held 2.5 s: {released:?}"
    );
    let lost = r.histogram(metrics::HOLD_DURATION, &mutex_with(("end", "lost")));
    assert!(
        lost.len() == 1 && (0.9..=1.5).contains(&lost[0]),
        "lost at its first renewal: {lost:?}"
    );
    assert_eq!(
        r.histogram(metrics::HOLD_DURATION, &semaphore(("end", "released")))
            .len(),
        1
    );

    // Every hold ended: nothing counts as held.
    assert_eq!(r.gauge(metrics::LOCKS_HELD, &MUTEX), 0.0);
    assert_eq!(
        r.gauge(
            metrics::LOCKS_HELD,
            &[("backend", "memory"), ("primitive", "semaphore")]
        ),
        0.0
    );

    // Bounded labels: never the lock's name by default.
    assert_eq!(
        r.label_names(),
        ["backend", "end", "outcome", "primitive", "reason", "result"]
    );
}

#[tokio::test(start_paused = true)]
async fn renewals_that_fail_and_an_expired_lease_are_recorded() {
    let _turn = TURN.lock().await;
    let mut recorded = Recorded::start();
    let store = MemoryLock::new();
    let client = LockClient::new(store.clone());
    let guard = client
        .acquire_with("unreachable", &AcquireOptions::new().ttl(Duration::from_secs(3)))
        .await
        .expect("free");
    store.set_available(false);
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost by its deadline");
    assert!(matches!(reason, LossReason::RenewalFailed(_)), "{reason:?}");
    drop(guard);
    store.set_available(true);

    let r = recorded.take();
    assert!(r.counter(metrics::RENEWALS, &mutex_with(("outcome", "failed"))) >= 2);
    assert_eq!(r.counter(metrics::RENEWALS, &mutex_with(("outcome", "ok"))), 0);
    assert_eq!(
        r.counter(metrics::LOCKS_LOST, &mutex_with(("reason", "renewal_failed"))),
        1
    );
    assert_eq!(
        r.histogram(metrics::HOLD_DURATION, &mutex_with(("end", "lost")))
            .len(),
        1
    );
    assert_eq!(r.gauge(metrics::LOCKS_HELD, &MUTEX), 0.0);

    // An acquisition while the store is down: the error's kind.
    store.set_available(false);
    let down = client.try_acquire("unreachable").await;
    store.set_available(true);
    assert!(matches!(down, Err(Error::Unavailable { .. })), "{down:?}");
    let r = recorded.take();
    assert_eq!(
        r.counter(metrics::ACQUIRES, &mutex_with(("outcome", "unavailable"))),
        1
    );
    let attempts = r.histogram(
        metrics::ACQUIRE_ATTEMPT_DURATION,
        &mutex_with(("result", "unavailable")),
    );
    assert_eq!(attempts.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_lock_name_is_a_label_only_when_asked_for() {
    let _turn = TURN.lock().await;
    let mut recorded = Recorded::start();
    let client = LockClient::new(MemoryLock::new()).metrics_by_name(true);
    let guard = client.acquire("nightly").await.expect("free");
    guard.release().await.expect("released");
    let by_name = |extra| [MUTEX[0], MUTEX[1], extra, ("name", "nightly")];
    let r = recorded.take();
    assert_eq!(r.counter(metrics::ACQUIRES, &by_name(("outcome", "acquired"))), 1);
    assert_eq!(
        r.histogram(metrics::HOLD_DURATION, &by_name(("end", "released")))
            .len(),
        1
    );
    // The gauge stays bounded: it never carries the name.
    assert_eq!(r.gauge(metrics::LOCKS_HELD, &MUTEX), 0.0);
    assert!(r
        .gauges
        .keys()
        .all(|(_, labels)| labels.iter().all(|(k, _)| k != "name")));

    // Turned off again, the name is gone.
    let client = client.metrics_by_name(false);
    client
        .acquire("nightly")
        .await
        .expect("free")
        .release()
        .await
        .expect("released");
    let r = recorded.take();
    assert_eq!(
        r.counter(metrics::ACQUIRES, &mutex_with(("outcome", "acquired"))),
        1
    );
}

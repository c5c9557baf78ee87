//! When a clock-jump fault says the store lost its state: the instant the server's clock
//! actually stepped (the jump forward, the restore after a jump back), however late the
//! harness got to it, not the instant it was planned for.

use std::sync::mpsc;
use std::thread;

use super::*;
use crate::history::Nanos;

/// How long something else keeps the store busy before the fault gets to it (a loaded
/// machine's late thread, an operation still running).
const HELD_FOR: Duration = Duration::from_secs(2);
/// How far the recorded loss may be from the observed step (the watcher polls every
/// millisecond; the machine is loaded).
const SLACK: Nanos = 400_000_000;

/// Watches `clock` from another thread; returns the instants its offset changed, `count` of
/// them (each seen at most a poll after the change).
fn watch(clock: distlock_testkit::StoreClock, count: usize) -> thread::JoinHandle<Vec<Nanos>> {
    thread::spawn(move || {
        let mut seen = Vec::new();
        let mut last = clock.offset();
        let deadline = now() + 30_000_000_000;
        while seen.len() < count && now() < deadline {
            let offset = clock.offset();
            if offset != last {
                seen.push(now());
                last = offset;
            }
            thread::sleep(Duration::from_millis(1));
        }
        seen
    })
}

/// Injects `kind` while another thread holds the store for [`HELD_FOR`]; returns the record
/// and the observed steps (the jump, the restore).
async fn held_up(
    kind: FaultKind,
    store: &Arc<Mutex<Store>>,
    clock: &distlock_testkit::StoreClock,
) -> (FaultRecord, Vec<Nanos>) {
    let resource = Resource::start().await.expect("a loopback listener");
    let steps = watch(clock.clone(), 2);
    let (locked, is_locked) = mpsc::channel();
    let holder = {
        let store = store.clone();
        thread::spawn(move || {
            let _busy = store.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = locked.send(());
            thread::sleep(HELD_FOR);
        })
    };
    is_locked.recv().expect("the store held");
    let planned = Planned {
        kind,
        duration: Duration::from_millis(300),
        gap: Duration::ZERO,
    };
    let record = inject(
        planned,
        Duration::ZERO,
        "hot",
        &resource,
        store,
        &mut [],
        &|_, _| Ok(()),
    )
    .await
    .expect("the clock steps");
    holder.join().expect("the holder thread");
    (record, steps.join().expect("the watcher thread"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_step_held_up_is_recorded_as_the_loss_when_it_lands() {
    let store =
        tokio::task::spawn_blocking(|| Store::start_on(Backend::Memcached, Some(Duration::from_secs(1))))
            .await
            .expect("the start-up thread")
            .expect("memcached on libfaketime (scripts/install-test-deps installs both)");
    let Store::Clocked(_, clock, _) = &store else {
        panic!("memcached runs on a clock the harness steps");
    };
    let clock = clock.clone();
    let store = Arc::new(Mutex::new(store));

    // A step forward frees what the store expires by its clock at once: the jump loses.
    let (record, steps) = held_up(FaultKind::ClockJumpForward, &store, &clock).await;
    assert_eq!(steps.len(), 2, "the clock stepped ahead and back: {steps:?}");
    let lost = record.lost_at.expect("a clock jump loses the store's state");
    assert!(
        lost <= steps[0] && steps[0] - lost < SLACK,
        "the jump forward landed {:.0} ms into the fault, its loss recorded at {:.0} ms",
        (steps[0] - record.start) as f64 / 1e6,
        (lost as f64 - record.start as f64) / 1e6
    );

    // A step back loses what was granted meanwhile when the clock is restored.
    let (record, steps) = held_up(FaultKind::ClockJumpBack, &store, &clock).await;
    assert_eq!(steps.len(), 2, "the clock stepped back and forward: {steps:?}");
    let lost = record.lost_at.expect("a clock jump loses the store's state");
    assert!(
        lost <= steps[1] && steps[1] - lost < SLACK,
        "the restore after the jump back landed {:.0} ms into the fault, its loss recorded at {:.0} ms",
        (steps[1] - record.start) as f64 / 1e6,
        (lost as f64 - record.start as f64) / 1e6
    );
}

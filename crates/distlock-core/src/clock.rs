//! Time the monotonic clock does not see: a suspended host.
//!
//! Local deadlines are measured on tokio's clock, which is `CLOCK_MONOTONIC` and stands still
//! while the host is suspended, while a store's TTL runs on: after a resume, a lease the store
//! expired long ago would still look valid here. On Linux, `CLOCK_BOOTTIME` minus
//! `CLOCK_MONOTONIC` grows by exactly the time spent suspended, so every deadline check
//! subtracts what it grew since the lease was taken. Elsewhere it is zero.

use std::time::Duration;

/// The total time this host has spent suspended since it booted (zero where unknown).
pub(crate) fn suspended_total() -> Duration {
    suspended_total_os() + test_offset()
}

#[cfg(target_os = "linux")]
fn suspended_total_os() -> Duration {
    use rustix::time::{clock_gettime, ClockId};
    let since = |clock| {
        let t = clock_gettime(clock);
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or_default(),
            u32::try_from(t.tv_nsec).unwrap_or_default(),
        )
    };
    // Boot time first: time that passes between the two reads (a preempted thread) then
    // shrinks the difference, and is never taken for a suspend.
    let boottime = since(ClockId::Boottime);
    boottime.saturating_sub(since(ClockId::Monotonic))
}

#[cfg(not(target_os = "linux"))]
fn suspended_total_os() -> Duration {
    Duration::ZERO
}

// Per thread: each unit test runs on a thread of its own (a paused-clock test on its
// current-thread runtime), so one test's pretended suspend never reaches a test beside it.
#[cfg(test)]
thread_local! {
    static TEST_OFFSET: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

#[cfg(test)]
fn test_offset() -> Duration {
    TEST_OFFSET.get()
}

#[cfg(not(test))]
fn test_offset() -> Duration {
    Duration::ZERO
}

/// Pretends the host was suspended for `d` more, as seen from this thread (unit tests only).
#[cfg(test)]
pub(crate) fn pretend_suspended(d: Duration) {
    TEST_OFFSET.set(TEST_OFFSET.get() + d);
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;

    /// The two clocks cannot be read at once: a reading must never count the time between its
    /// two reads as suspended, else a busy host (a thread preempted between them) seems to
    /// resume from a suspend again and again, and each time the watchdog looks at every hold.
    #[test]
    fn a_busy_host_never_seems_suspended() {
        let stop = Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        let spinners: Vec<_> = (0..cores * 2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let first = (0..1_000).map(|_| suspended_total_os()).max().unwrap_or_default();
        let mut most = first;
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(2) {
            most = most.max(suspended_total_os());
        }
        stop.store(true, Ordering::Relaxed);
        for spinner in spinners {
            spinner.join().expect("the spinner ends");
        }
        let grew = most.saturating_sub(first);
        assert!(
            grew < Duration::from_micros(200),
            "the host seemed suspended for {grew:?} more while it only ran busy threads"
        );
    }
}

//! Every loss of a hold is decided by one rule, whoever looks first: the guard, its lost-lock
//! signal or the watchdog.

use std::time::Duration;

use distlock_core::{AcquireOptions, LockClient, LossReason, MemoryLock};

/// The maximum hold time passes while the runtime is blocked, so the watchdog cannot run: the
/// guard reports the loss the watchdog would have recorded, not "held".
#[tokio::test(flavor = "current_thread")]
async fn a_guard_past_its_maximum_hold_time_is_lost_though_the_watchdog_has_not_run() {
    let client = LockClient::new(MemoryLock::new());
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .max_hold(Duration::from_millis(200));
    let guard = client.acquire_with("max-hold", &opts).await.expect("free");
    assert!(!guard.is_lost());
    // Blocks the runtime: neither the watchdog nor any timer runs meanwhile.
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        guard.is_lost(),
        "past its maximum hold time, the guard still says held"
    );
    assert_eq!(guard.lost().await, LossReason::MaxHoldExceeded);
}

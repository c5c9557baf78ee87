//! The behaviour cases, one file per area. Each is `pub async fn(Ctx) -> Outcome` and panics
//! with a message saying what broke.

use std::future::Future;
use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, Lease, LockName, OwnerToken, TryAcquire};

use crate::expect::Skip;

mod acquire;
mod clock;
mod cut_off;
mod election;
mod exclusion;
mod expiry;
mod failover;
mod faults;
mod fencing;
mod handover;
mod input;
mod kinds;
mod lost;
mod lost_grant;
mod lost_release;
mod multi;
mod order;
mod outage;
mod partition;
mod process;
mod queued;
mod renewal;
mod rw_lock;
mod semaphore;
mod stale;
mod unknown;
mod upgrade;
mod waiting;
mod wakeup;
mod weighted;

pub use acquire::{
    c01_try_acquire_reports_held, c02_release_then_not_owned, c14_no_reentrancy, c15_names_are_exact,
};
pub use clock::c51_forward_clock_jump_lets_no_second_holder;
pub use cut_off::c43_wait_cut_off_mid_attempt_leaves_nothing;
pub use election::{
    c56_one_leader_at_a_time, c57_observers_see_every_leader_in_order, c58_cut_off_leader_hears_of_loss_first,
};
pub use exclusion::{c09_mutual_exclusion_under_contention, c10_many_locks_at_once};
pub use expiry::{
    c03_stale_owner_cannot_release_or_extend, c04_ttl_expiry_frees_lock, c13_dropped_guard_frees_lock,
};
pub use failover::c53_failover_keeps_every_acknowledged_lock;
pub use faults::{
    c21_timed_out_acquire_leaves_nothing, c22_silent_partition_of_a_holder, c23_slow_store,
    c24_waiters_survive_resets, c25_no_exhaustion_after_timeouts,
    c41_timed_out_permit_or_write_leaves_nothing, c42_silent_partition_of_a_permit_or_rw_holder,
};
pub use fencing::c08_fencing_tokens_increase;
pub use handover::c29_release_hands_over_to_the_next_owner;
pub use input::c11_bad_input_is_a_typed_error;
pub use kinds::{c39_lost_signal_for_each_primitive, c40_cancelled_waits_leave_nothing};
pub use lost::{c16_lost_lock_signal, c18_max_hold_time, c19_no_renewal_reports_expiry};
pub use lost_grant::{
    c61_waiter_whose_notification_is_lost_still_gets_in,
    c62_release_whose_reply_is_lost_keeps_the_waiter_s_hold,
};
pub use lost_release::c50_release_whose_reply_is_lost_is_not_not_owned;
pub use multi::{c30_multi_lock_all_or_none, c31_multi_lock_never_deadlocks, c32_multi_lock_lost_signal};
pub use order::c49_waiters_are_served_in_arrival_order;
pub use outage::c12_store_going_away;
pub use partition::c52_partitioned_member_holder_hears_of_loss_first;
pub use process::{
    c17_cross_process_holder, c26_paused_holder_knows_it_lost, c35_killed_permit_holder_frees_its_permit,
};
pub use queued::{c59_dead_waiter_strands_nothing, c60_wait_ended_at_the_release_strands_nothing};
pub use renewal::c05_extend_and_watchdog_keep_lock;
pub use rw_lock::{
    c36_readers_share_a_writer_excludes, c37_waiting_writer_is_not_starved,
    c38_rw_lock_exclusion_under_contention,
};
pub use semaphore::{c33_semaphore_never_over_admits, c34_semaphore_counts_agree_and_stale_frees_nothing};
pub use stale::c48_cut_off_holder_frees_nothing_of_the_next;
pub use unknown::c47_unknown_acquisition_is_cleaned_up_by_owner;
pub use upgrade::c55_upgradeable_read_excludes_writers_until_released;
pub use waiting::{
    c06_wait_timeout_and_handoff, c07_cancelled_acquire_leaves_nothing, c20_with_lock,
    c45_with_lock_never_polls_work_past_the_deadline, c46_zero_wait_is_one_attempt,
};
pub use wakeup::{
    c27_release_wakes_one_waiter, c28_release_in_process_wakes_a_polling_waiter,
    c44_permit_release_wakes_one_waiter,
};
pub use weighted::c54_weighted_permits_never_over_admit;

/// How a case ended (a failure is a panic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every check held.
    Passed,
    /// Nothing ran: the backend declares it lacks what the case checks, or the fixture cannot
    /// do it.
    Skipped(Skip),
    /// A part ran and held; the rest was left out, for the reason given.
    Partial(Skip),
}

/// Awaits `fut`, failing the case if it takes longer than `limit`.
pub(crate) async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: did not finish within {limit:?}"),
    }
}

/// One raw acquisition that must succeed.
pub(crate) async fn take(backend: &dyn DistributedLock, name: &LockName, ttl: Duration) -> Lease {
    match backend.try_acquire(name, OwnerToken::new(), ttl).await {
        Ok(TryAcquire::Acquired(lease)) => lease,
        Ok(TryAcquire::Held(h)) => panic!("{name:?} should be free, but is held ({h:?})"),
        Err(e) => panic!("acquiring {name:?} failed: {e}"),
    }
}

/// Whether a raw attempt by `backend` finds `name` held (releasing it again if it got it).
pub(crate) async fn is_held(backend: &dyn DistributedLock, name: &LockName, ttl: Duration) -> bool {
    match backend.try_acquire(name, OwnerToken::new(), ttl).await {
        Ok(TryAcquire::Held(_)) => true,
        Ok(TryAcquire::Acquired(lease)) => {
            let _ = backend.release(&lease).await;
            false
        }
        Err(e) => panic!("probing {name:?} failed: {e}"),
    }
}

/// A TTL long enough that it never runs out during a case.
pub(crate) const LONG_TTL: Duration = Duration::from_secs(60);

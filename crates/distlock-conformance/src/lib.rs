//! One behaviour suite that every distlock backend runs.
//!
//! A backend's `tests/conformance.rs` implements [`Fixture`] for its store (a few lines: how
//! to open a client, how to steal a lock behind a holder's back, how to count held locks; a
//! [`Site`] gives a server-backed fixture its servers, outage, fault proxies and child
//! processes) and expands [`conformance_tests!`], which generates one `#[tokio::test]` per
//! case in [`CASES`]. Cases read the backend's [`Capabilities`](distlock_core::Capabilities)
//! and skip only what it declares it lacks, naming the [`Reason`]; the backend's test file
//! lists the skips it expects, and any other skip fails.
//!
//! ```ignore
//! use std::sync::Arc;
//! use distlock_conformance::{conformance_tests, Fixture, Needs};
//!
//! async fn fixture(needs: Needs) -> Arc<dyn Fixture> {
//!     Arc::new(MyStoreFixture::start(needs).await)
//! }
//!
//! conformance_tests!(fixture, backend = "My store", skips = [c29: HandOver]);
//! ```
//!
//! Each case uses a name prefix unique to its run, so runs against a shared store never
//! collide. The suite's time limits are generous: speed is measured by the benchmarks.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

pub mod bench;
pub mod cases;
pub mod child;
mod clocked;
mod context;
mod expect;
mod failover;
mod fixture;
mod live;
mod memory;
mod observed;
mod report;
mod site;

pub use cases::Outcome;
pub use clocked::{Clocked, ClockedStore, OpenClient};
pub use context::Ctx;
pub use distlock_testkit::{Direction, FaultProxies, FaultProxy};
pub use expect::{Expectations, Expected, Extent, Reason, Skip};
pub use failover::Failover;
pub use fixture::{Fixture, Members, Outage, Proxied};
pub use live::LiveFixture;
pub use memory::MemoryFixture;
pub use report::{run_cases, Report};
pub use site::{parent_store, Plan, Servers, Site, STORE_ENV};

/// The longest any case may run before the suite calls it a hang.
pub const CASE_LIMIT: Duration = Duration::from_secs(300);

/// One case of the suite.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// The case's name (also its test function's name).
    pub name: &'static str,
    /// What it checks, in one line.
    pub summary: &'static str,
    /// What it needs of the store: a fixture gives every case what it declares here.
    pub needs: Needs,
    /// Runs it.
    pub run: fn(Ctx) -> BoxFuture<'static, Outcome>,
}

impl Case {
    /// The case named `name` (its full name, or its number such as `c12`), if there is one.
    pub fn named(name: &str) -> Option<&'static Case> {
        CASES
            .iter()
            .find(|c| c.name == name || short_name(c.name) == name)
    }
}

/// What a case needs of the store, declared by the case so that a fixture never keeps a list
/// of case names: a fixture must give each case what it declares, whatever the environment
/// (a `DISTLOCK_TEST_*_URL` never makes a case skip).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Any store: the test binary's shared server or the one a `DISTLOCK_TEST_*_URL` names.
    Store,
    /// A store of the case's own, which it takes away ([`Fixture::outage`]): a server the
    /// fixture started for this case alone.
    OwnStore,
    /// Fault proxies between a client and every server of the store
    /// ([`Fixture::proxied_backend`]); a store whose servers announce their own addresses
    /// (Redis Cluster) must be one of the case's own, started so that clients stay behind
    /// the proxies.
    FaultProxy,
}

macro_rules! case {
    ($name:ident, $summary:literal) => {
        case!($name, $summary, Needs::Store)
    };
    ($name:ident, $summary:literal, $needs:expr) => {
        Case {
            name: stringify!($name),
            summary: $summary,
            needs: $needs,
            run: |ctx| Box::pin(cases::$name(ctx)),
        }
    };
}

/// Every case, in order. [`conformance_tests!`] generates a test for each (and checks that it
/// covers this list).
pub const CASES: &[Case] = &[
    case!(
        c01_try_acquire_reports_held,
        "a free lock is acquired; a second client sees it held, not an error"
    ),
    case!(
        c02_release_then_not_owned,
        "release frees it; a second release reports not owned"
    ),
    case!(
        c03_stale_owner_cannot_release_or_extend,
        "an expired holder cannot release or extend the next holder's lock"
    ),
    case!(
        c04_ttl_expiry_frees_lock,
        "a lock nobody renews frees itself at its TTL (or session end), not before"
    ),
    case!(
        c05_extend_and_watchdog_keep_lock,
        "extend keeps the lock past its TTL; the watchdog holds it for 3.5x TTL"
    ),
    case!(
        c06_wait_timeout_and_handoff,
        "a wait times out on time; a release hands over promptly"
    ),
    case!(
        c07_cancelled_acquire_leaves_nothing,
        "a dropped acquire future leaves nothing held or queued"
    ),
    case!(
        c08_fencing_tokens_increase,
        "fencing tokens strictly increase across clients and expiry"
    ),
    case!(
        c09_mutual_exclusion_under_contention,
        "8 clients x 25 rounds of read-sleep-write: exact count, no overlap"
    ),
    case!(
        c10_many_locks_at_once,
        "500 locks held at once, renewed, released, nothing left behind"
    ),
    case!(
        c11_bad_input_is_a_typed_error,
        "odd names work without collisions; bad names and TTLs are typed errors"
    ),
    case!(
        c12_store_going_away,
        "a dead store gives errors in bounded time and fires the lost-lock signal",
        Needs::OwnStore
    ),
    case!(
        c13_dropped_guard_frees_lock,
        "dropping a guard releases the lock promptly"
    ),
    case!(
        c14_no_reentrancy,
        "a second acquire by the same client is just another contender"
    ),
    case!(c15_names_are_exact, "names are exact and case-sensitive"),
    case!(
        c16_lost_lock_signal,
        "release never fires the lost signal; a stolen lock fires it; late subscribers hear it"
    ),
    case!(
        c17_cross_process_holder,
        "another process's lock excludes us; kill -9 frees it at TTL/session end"
    ),
    case!(
        c18_max_hold_time,
        "the maximum hold time stops renewal and fires the lost signal"
    ),
    case!(
        c19_no_renewal_reports_expiry,
        "without renewal, the guard reports the expiry"
    ),
    case!(
        c20_with_lock,
        "with_lock runs under the lock and stops with LockLost when it is lost"
    ),
    case!(
        c21_timed_out_acquire_leaves_nothing,
        "an acquire whose reply is lost or too slow errs in bounded time and strands nothing",
        Needs::FaultProxy
    ),
    case!(
        c22_silent_partition_of_a_holder,
        "a silently partitioned holder hears of the loss before anyone else can acquire",
        Needs::FaultProxy
    ),
    case!(
        c23_slow_store,
        "a slow store never yields two holders; renewals keep the lock; waits keep deadlines",
        Needs::FaultProxy
    ),
    case!(
        c24_waiters_survive_resets,
        "after every connection is reset, a release still wakes waiters by notification",
        Needs::FaultProxy
    ),
    case!(
        c25_no_exhaustion_after_timeouts,
        "20 timeouts against a black hole leave the client healthy for 100 leases",
        Needs::FaultProxy
    ),
    case!(
        c26_paused_holder_knows_it_lost,
        "a holder frozen past its lease says lost the moment it runs again"
    ),
    case!(
        c27_release_wakes_one_waiter,
        "a release wakes one of six waiters, not all, and no wake is lost"
    ),
    case!(
        c28_release_in_process_wakes_a_polling_waiter,
        "a release in this process hands over at once, even on stores that publish nothing"
    ),
    case!(
        c29_release_hands_over_to_the_next_owner,
        "hand_over passes a lock on in one operation; a release gives it to a waiter here"
    ),
    case!(
        c30_multi_lock_all_or_none,
        "a multi-lock holds all of its set or none, also after a wait or a drop"
    ),
    case!(
        c31_multi_lock_never_deadlocks,
        "six clients taking overlapping sets in different orders all finish, exclusively"
    ),
    case!(
        c32_multi_lock_lost_signal,
        "a multi-lock's one lost signal fires when one lock of the set is destroyed"
    ),
    case!(
        c33_semaphore_never_over_admits,
        "12 clients on 3 permits: never more than 3 holders, and 3 are reached"
    ),
    case!(
        c34_semaphore_counts_agree_and_stale_frees_nothing,
        "another permit count is refused while held; stale or forged permits free nothing"
    ),
    case!(
        c35_killed_permit_holder_frees_its_permit,
        "a permit held by another process counts; kill -9 frees it at TTL/session end"
    ),
    case!(
        c36_readers_share_a_writer_excludes,
        "readers share a read-write lock; a writer excludes readers and writers"
    ),
    case!(
        c37_waiting_writer_is_not_starved,
        "a waiting writer gets in while readers keep coming; no new reader passes it"
    ),
    case!(
        c38_rw_lock_exclusion_under_contention,
        "6 clients reading and writing: a writer never overlaps anyone"
    ),
    case!(
        c39_lost_signal_for_each_primitive,
        "a permit, a read and a write hold destroyed behind their backs fire the lost signal"
    ),
    case!(
        c40_cancelled_waits_leave_nothing,
        "dropped waits for a permit, a write or a read lock leave nothing held or blocking"
    ),
    case!(
        c41_timed_out_permit_or_write_leaves_nothing,
        "a permit or write lock whose reply is lost errs in bounded time and strands nothing",
        Needs::FaultProxy
    ),
    case!(
        c42_silent_partition_of_a_permit_or_rw_holder,
        "a silently partitioned permit, read or write holder hears of the loss before anyone gets in",
        Needs::FaultProxy
    ),
    case!(
        c43_wait_cut_off_mid_attempt_leaves_nothing,
        "a wait dropped mid-attempt leaves no queue entry or writer record once the attempt ends"
    ),
    case!(
        c44_permit_release_wakes_one_waiter,
        "a permit's release wakes one of six waiters of the semaphore, not all, and no wake is lost"
    ),
    case!(
        c45_with_lock_never_polls_work_past_the_deadline,
        "work that blocked its runtime past the deadline never runs on; with_lock says LockLost"
    ),
    case!(
        c46_zero_wait_is_one_attempt,
        "a wait of zero is exactly one attempt: it takes a free lock, times out on a held one"
    ),
    case!(
        c47_unknown_acquisition_is_cleaned_up_by_owner,
        "a grant whose reply was lost or whose backend panicked is freed by owner, not at its TTL"
    ),
    case!(
        c48_cut_off_holder_frees_nothing_of_the_next,
        "a holder cut off until its lock is gone (TTL or session end) frees nothing of the next",
        Needs::FaultProxy
    ),
    case!(
        c49_waiters_are_served_in_arrival_order,
        "on a store with a FIFO queue, waiters for a lock or a permit are served in arrival order"
    ),
    case!(
        c50_release_whose_reply_is_lost_is_not_not_owned,
        "a release whose reply is lost is never \"not ours\"; with_lock returns the work's output",
        Needs::FaultProxy
    ),
    case!(
        c51_forward_clock_jump_lets_no_second_holder,
        "a forward jump of the store's clock past the TTL lets nobody in while the holder says held"
    ),
    case!(
        c52_partitioned_member_holder_hears_of_loss_first,
        "a holder on a member cut off from the others (a follower, the leader) says lost before the majority grants the lock"
    ),
    case!(
        c53_failover_keeps_every_acknowledged_lock,
        "a failover to a replica with every acknowledged write grants nobody a lock its holder says held; tokens grow"
    ),
    case!(
        c54_weighted_permits_never_over_admit,
        "holds of 1 to 3 permits of 5 never add up to more than 5; more than 5 is a typed error that sends nothing"
    ),
    case!(
        c55_upgradeable_read_excludes_writers_until_released,
        "one upgradeable reader beside readers; its upgrade waits for them; no writer gets in before its release"
    ),
    case!(
        c56_one_leader_at_a_time,
        "one leader at a time, terms increase, anyone reads the leader; a resigned or dead leader is replaced"
    ),
    case!(
        c57_observers_see_every_leader_in_order,
        "observers see every change of leader, in order, with its term"
    ),
    case!(
        c58_cut_off_leader_hears_of_loss_first,
        "a silently cut-off leader hears of its loss before another candidate leads",
        Needs::FaultProxy
    ),
    case!(
        c59_dead_waiter_strands_nothing,
        "a waiter killed first in line costs the next waiter no more than a dead holder would"
    ),
    case!(
        c60_wait_ended_at_the_release_strands_nothing,
        "a wait that ends just before or just after the release hands it the lock leaves no hold"
    ),
    case!(
        c61_waiter_whose_notification_is_lost_still_gets_in,
        "a waiter that hears nothing of the release gets the lock soon after the heal, alone",
        Needs::FaultProxy
    ),
    case!(
        c62_release_whose_reply_is_lost_keeps_the_waiter_s_hold,
        "a release whose reply is lost never frees the lock its waiter got; its renewals work",
        Needs::FaultProxy
    ),
];

/// Runs the case `name` against `fixture`, failing (panicking) if it fails or runs past
/// [`CASE_LIMIT`]. `child_test` is the test name of the cross-process entry point.
pub async fn run_case(name: &str, fixture: Arc<dyn Fixture>, child_test: Option<String>) -> Outcome {
    let ctx = Ctx::new(fixture, short_name(name), child_test).await;
    run_in(name, ctx).await
}

/// Runs the case `name` in `ctx`, failing (panicking) if it fails or hangs.
pub(crate) async fn run_in(name: &str, ctx: Ctx) -> Outcome {
    let case = CASES
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no conformance case named {name}"));
    match tokio::time::timeout(CASE_LIMIT, (case.run)(ctx)).await {
        Ok(outcome) => outcome,
        Err(_) => panic!("case {name} hung for {CASE_LIMIT:?}"),
    }
}

/// The case's number, `c07` for `c07_cancelled_acquire_leaves_nothing`.
pub(crate) fn short_name(name: &str) -> &str {
    name.split('_').next().unwrap_or(name)
}

/// Expands to one `#[tokio::test]` per conformance case for the fixture made by `$factory`
/// (a path to an `async fn(Needs) -> Arc<dyn Fixture>`, called with what the case declares it
/// needs), a test `conformance_expected_skips` that prints the backend's one-line summary and
/// checks the guide's row for it (`docs/src/conformance.md`), and the child entry point of
/// the cross-process cases.
///
/// `backend` names the backend's row of the guide's table of expected skips; `skips` lists
/// the cases expected to skip in full, `partial` those expected to run only a part, each with
/// its [`Reason`]. A case that skips (in full or in part) while unlisted, or for another
/// reason, or runs in full while listed, fails. The calling crate needs `tokio` with the
/// `macros` and `rt-multi-thread` features.
///
/// ```ignore
/// distlock_conformance::conformance_tests!(
///     support::fixture,
///     backend = "SQLite",
///     skips = [c21: FaultProxy, c22: FaultProxy],
///     partial = [],
/// );
/// ```
#[macro_export]
macro_rules! conformance_tests {
    (@cases $factory:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let case = $crate::Case::named(stringify!($case)).expect("a conformance case");
                let fixture = $factory(case.needs).await;
                let child = $crate::child::entry_test_name(module_path!());
                let outcome = $crate::run_case(stringify!($case), fixture, Some(child)).await;
                println!("{}: {:?}", stringify!($case), outcome);
                __DISTLOCK_EXPECTED.settle(stringify!($case), &outcome);
            }
        )*

        #[test]
        fn conformance_suite_is_complete() {
            let generated = [$(stringify!($case)),*];
            let listed: Vec<&str> = $crate::CASES.iter().map(|c| c.name).collect();
            assert_eq!(generated.as_slice(), listed.as_slice(), "conformance_tests! and CASES disagree");
        }
    };
    (
        $factory:path,
        backend = $backend:literal,
        skips = [$($skip:ident : $reason:ident),* $(,)?]
        $(, partial = [$($part:ident : $part_reason:ident),* $(,)?])?
        $(,)?
    ) => {
        const __DISTLOCK_EXPECTED: $crate::Expectations = $crate::Expectations {
            backend: $backend,
            skips: &[
                $($crate::Expected {
                    case: stringify!($skip),
                    reason: $crate::Reason::$reason,
                    extent: $crate::Extent::Whole,
                },)*
                $($($crate::Expected {
                    case: stringify!($part),
                    reason: $crate::Reason::$part_reason,
                    extent: $crate::Extent::Part,
                },)*)?
            ],
        };

        $crate::conformance_tests!(@cases $factory;
            c01_try_acquire_reports_held,
            c02_release_then_not_owned,
            c03_stale_owner_cannot_release_or_extend,
            c04_ttl_expiry_frees_lock,
            c05_extend_and_watchdog_keep_lock,
            c06_wait_timeout_and_handoff,
            c07_cancelled_acquire_leaves_nothing,
            c08_fencing_tokens_increase,
            c09_mutual_exclusion_under_contention,
            c10_many_locks_at_once,
            c11_bad_input_is_a_typed_error,
            c12_store_going_away,
            c13_dropped_guard_frees_lock,
            c14_no_reentrancy,
            c15_names_are_exact,
            c16_lost_lock_signal,
            c17_cross_process_holder,
            c18_max_hold_time,
            c19_no_renewal_reports_expiry,
            c20_with_lock,
            c21_timed_out_acquire_leaves_nothing,
            c22_silent_partition_of_a_holder,
            c23_slow_store,
            c24_waiters_survive_resets,
            c25_no_exhaustion_after_timeouts,
            c26_paused_holder_knows_it_lost,
            c27_release_wakes_one_waiter,
            c28_release_in_process_wakes_a_polling_waiter,
            c29_release_hands_over_to_the_next_owner,
            c30_multi_lock_all_or_none,
            c31_multi_lock_never_deadlocks,
            c32_multi_lock_lost_signal,
            c33_semaphore_never_over_admits,
            c34_semaphore_counts_agree_and_stale_frees_nothing,
            c35_killed_permit_holder_frees_its_permit,
            c36_readers_share_a_writer_excludes,
            c37_waiting_writer_is_not_starved,
            c38_rw_lock_exclusion_under_contention,
            c39_lost_signal_for_each_primitive,
            c40_cancelled_waits_leave_nothing,
            c41_timed_out_permit_or_write_leaves_nothing,
            c42_silent_partition_of_a_permit_or_rw_holder,
            c43_wait_cut_off_mid_attempt_leaves_nothing,
            c44_permit_release_wakes_one_waiter,
            c45_with_lock_never_polls_work_past_the_deadline,
            c46_zero_wait_is_one_attempt,
            c47_unknown_acquisition_is_cleaned_up_by_owner,
            c48_cut_off_holder_frees_nothing_of_the_next,
            c49_waiters_are_served_in_arrival_order,
            c50_release_whose_reply_is_lost_is_not_not_owned,
            c51_forward_clock_jump_lets_no_second_holder,
            c52_partitioned_member_holder_hears_of_loss_first,
            c53_failover_keeps_every_acknowledged_lock,
            c54_weighted_permits_never_over_admit,
            c55_upgradeable_read_excludes_writers_until_released,
            c56_one_leader_at_a_time,
            c57_observers_see_every_leader_in_order,
            c58_cut_off_leader_hears_of_loss_first,
            c59_dead_waiter_strands_nothing,
            c60_wait_ended_at_the_release_strands_nothing,
            c61_waiter_whose_notification_is_lost_still_gets_in,
            c62_release_whose_reply_is_lost_keeps_the_waiter_s_hold,
        );

        #[test]
        fn conformance_expected_skips() {
            __DISTLOCK_EXPECTED.check(env!("CARGO_MANIFEST_DIR"));
        }

        #[test]
        #[ignore = "entry point of the cross-process case: runs only as its child process"]
        fn __distlock_child_entry() {
            $crate::child::entry(|| $factory($crate::Needs::Store));
        }
    };
}

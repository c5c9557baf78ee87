//! Lock metrics through the [`metrics`](https://docs.rs/metrics) facade (feature `metrics`).
//!
//! [`LockClient`](crate::LockClient), its guards and its watchdog record these, once for every
//! backend; install any `metrics` recorder (a Prometheus exporter, StatsD, ...) to collect
//! them. Without the feature nothing is recorded and nothing is compiled in.
//!
//! | metric | type | unit | labels | what |
//! |---|---|---|---|---|
//! | `distlock_acquires_total` | counter | calls | `backend`, `primitive`, `outcome` | finished `acquire*` / `try_acquire*` calls (also a semaphore's, a read-write lock's, each lock of an `acquire_all`) |
//! | `distlock_acquire_duration_seconds` | histogram | seconds | `backend`, `primitive`, `outcome` | one such call, from its start to its outcome |
//! | `distlock_acquire_wait_seconds` | histogram | seconds | `backend`, `primitive`, `outcome` | the part of that call spent waiting for other holders: from the first attempt that found the object held (or, on a store with a FIFO queue, from the start) to the outcome; 0 when the first attempt decided |
//! | `distlock_acquire_attempt_duration_seconds` | histogram | seconds | `backend`, `primitive`, `result` | one acquisition round trip to the store |
//! | `distlock_locks_held` | gauge | holds | `backend`, `primitive` | holds of this process right now (guards granted and not yet ended) |
//! | `distlock_hold_duration_seconds` | histogram | seconds | `backend`, `primitive`, `end` | a hold, from its grant to its release (also by drop or leak) or its loss |
//! | `distlock_renewals_total` | counter | renewals | `backend`, `primitive`, `outcome` | renewals by the watchdog and by `LockGuard::extend` |
//! | `distlock_locks_lost_total` | counter | losses | `backend`, `primitive`, `reason` | holds that ended lost |
//!
//! Label values (every label has a small fixed set of values):
//!
//! - `backend`: [`DistributedLock::backend`](crate::DistributedLock::backend): `memory`,
//!   `sqlite`, `mysql`, `redis`, `redlock`, `zookeeper`, `memcached`, or a custom backend's name.
//! - `primitive`: `mutex`, `semaphore`, `rw-lock` ([`Primitive::as_str`](crate::Primitive::as_str)).
//! - `outcome` of an acquisition: `acquired`; `timeout` (a wait ran out); `busy` (a call that
//!   does not wait, such as `try_acquire`, found the object held); `cancelled` (the caller
//!   dropped the future); or the error's kind: `invalid_name`, `invalid_options`,
//!   `invalid_config`, `unavailable`, `not_supported`, `permits_mismatch`, `lock_lost`,
//!   `backend`.
//! - `result` of an attempt: `acquired`, `held` (someone else holds it), or the error's kind.
//! - `end` of a hold: `released` or `lost`.
//! - `outcome` of a renewal: `ok`; `failed` (an error or no answer: the hold is kept while its
//!   deadline allows and the renewal retried); `lost` (the store no longer records the owner).
//! - `reason` of a loss: `not_owned`, `expired`, `renewal_failed`, `max_hold_exceeded`,
//!   `session_expired`, `session_suspended`.
//!
//! Lock names are not a label by default: there can be any number of them, and each would be
//! a series of its own in every metric above. [`LockClient::metrics_by_name`] adds a `name`
//! label to the per-lock metrics (all but the gauge) for deployments with a small, fixed set
//! of names; its cardinality is unbounded otherwise.
//!
//! [`describe`] registers the units and descriptions with the installed recorder (exporters
//! show them as help text); every new [`LockClient`](crate::LockClient) calls it.
//!
//! ```
//! use distlock_core::{metrics, LockClient, MemoryLock};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
//! // Install a recorder first (for example metrics-exporter-prometheus), then:
//! let client = LockClient::new(MemoryLock::new());
//! client.acquire("report").await?.release().await?;
//! assert_eq!(metrics::ACQUIRES, "distlock_acquires_total");
//! # Ok(()) }
//! ```
//!
//! [`LockClient::metrics_by_name`]: crate::LockClient::metrics_by_name

use metrics::Unit;

/// Finished acquisition calls (counter).
pub const ACQUIRES: &str = "distlock_acquires_total";
/// An acquisition call from its start to its outcome (histogram, seconds).
pub const ACQUIRE_DURATION: &str = "distlock_acquire_duration_seconds";
/// The part of an acquisition call spent waiting for other holders (histogram, seconds).
pub const ACQUIRE_WAIT: &str = "distlock_acquire_wait_seconds";
/// One acquisition round trip to the store (histogram, seconds).
pub const ACQUIRE_ATTEMPT_DURATION: &str = "distlock_acquire_attempt_duration_seconds";
/// Holds of this process right now (gauge).
pub const LOCKS_HELD: &str = "distlock_locks_held";
/// A hold from its grant to its end (histogram, seconds).
pub const HOLD_DURATION: &str = "distlock_hold_duration_seconds";
/// Renewals by outcome (counter).
pub const RENEWALS: &str = "distlock_renewals_total";
/// Holds that ended lost, by reason (counter).
pub const LOCKS_LOST: &str = "distlock_locks_lost_total";

/// Registers every metric's unit and description with the installed recorder.
///
/// A recorder installed after a client was built hears of them at the next client built, or
/// when this is called.
pub fn describe() {
    metrics::describe_counter!(ACQUIRES, Unit::Count, "Finished lock acquisition calls.");
    metrics::describe_histogram!(
        ACQUIRE_DURATION,
        Unit::Seconds,
        "Lock acquisition calls, from their start to their outcome."
    );
    metrics::describe_histogram!(
        ACQUIRE_WAIT,
        Unit::Seconds,
        "The part of a lock acquisition call spent waiting for other holders."
    );
    metrics::describe_histogram!(
        ACQUIRE_ATTEMPT_DURATION,
        Unit::Seconds,
        "One lock acquisition round trip to the store."
    );
    metrics::describe_gauge!(LOCKS_HELD, Unit::Count, "Locks this process holds now.");
    metrics::describe_histogram!(
        HOLD_DURATION,
        Unit::Seconds,
        "Holds of a lock, from the grant to the release or the loss."
    );
    metrics::describe_counter!(RENEWALS, Unit::Count, "Lease renewals, by outcome.");
    metrics::describe_counter!(LOCKS_LOST, Unit::Count, "Holds that ended lost, by reason.");
}

//! The contract of distlock: one distributed-lock API over many stores.
//!
//! - [`DistributedLock`] is what a backend implements: one acquisition attempt of any kind
//!   ([`Attempt`]), owner-checked release and renewal, an optional release notification and
//!   store-side queue, and its [`Capabilities`]. Each method's documentation states its part
//!   of the contract (the `distlock-conformance` suite checks it); [`DistributedLockExt`]
//!   adds conveniences over them, written once.
//! - [`LockClient`] is what business code uses, written once for every backend: waiting with
//!   notifications or jittered backoff, [`LockGuard`]s renewed by one watchdog task per client,
//!   a lost-lock signal, [`LockClient::with_lock`], and cancel safety. A release wakes one
//!   waiter where the store can address it (a watch [`for_waiter`](ReleaseWatch::for_waiter)),
//!   and on stores that publish nothing, a release by a client of this process wakes one of
//!   this process's waiters at once ([`LocalWaiters`]), or hands it straight to one
//!   ([`Mechanics::hands_over`]). That waiting layer is a part of the client, around the
//!   backend's calls: [`LockClient::backend`] is the store itself, and
//!   [`LockClient::release_lease`] releases a leaked lease as a guard's release does.
//!   [`Capabilities`] say what users may rely on; [`Mechanics`] what the client switches on.
//! - [`LockClient::acquire_all`] holds several locks together, all or none, taken in one
//!   canonical order so that overlapping sets never deadlock: a [`MultiGuard`] with one
//!   lost-lock signal for the set. It works on every backend.
//! - [`LockClient::semaphore`] (at most N holders at once) and [`LockClient::rw_lock`] (many
//!   readers or one writer, a waiting writer not starved) give the same [`LockGuard`], on the
//!   backends that declare [`Capabilities::semaphores`] / [`Capabilities::rw_locks`]; a backend
//!   implements them in [`DistributedLock::attempt`] (by [`Attempt::kind`]) and routes
//!   `release` and `renew` by [`Lease::kind`].
//! - [`FencingToken`]s strictly increase per name on backends that promise
//!   [`Fencing::Monotonic`]; [`OwnerToken`]s are random and never reused.
//! - [`MemoryLock`] is the in-process reference backend.
//! - With the `blocking` feature, the `blocking` module offers the same client to synchronous
//!   programs: plain calls run on a runtime thread of the client's own.
//! - With the `metrics` feature, the client, its guards and its watchdog record acquire
//!   latency and outcomes, wait and hold times, renewals and lost locks through the `metrics`
//!   facade, labelled by backend and primitive: see the `metrics` module.
//!
//! ```
//! use distlock_core::{AcquireOptions, LockClient, MemoryLock};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
//! let client = LockClient::new(MemoryLock::new());
//! let opts = AcquireOptions::new().ttl(Duration::from_secs(15)).wait_for(Duration::from_secs(5));
//! let guard = client.acquire_with("inventory:sku-42", &opts).await?;
//! // ... the work the lock protects, sending guard.fencing_token() with each write ...
//! guard.release().await?;
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod attempt;
mod attempts;
#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub mod blocking;
mod capabilities;
mod cleanup;
mod client;
mod clock;
mod contention;
mod detach;
mod doctor;
mod election;
mod error;
mod guard;
mod hold;
mod kind;
mod lease;
mod local;
mod local_wake;
mod lock;
mod lock_ext;
mod mechanics;
mod memory;
mod memory_holds;
mod meter;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
mod multi;
mod name;
mod options;
mod rw_lock;
mod schedule;
mod semaphore;
mod session;
mod signal;
mod state;
mod store;
mod token;
mod upgrade;
mod url_param;
mod wait;
mod watch;
mod watchdog;

pub use attempt::{Attempt, Holder, TryAcquire, WaiterRecord};
pub use capabilities::{Capabilities, Expiry, Fairness, Fencing, WakeUp};
pub use client::{IntoLockName, LockClient, LockContext};
pub use doctor::{Finding, Verdict};
pub use election::{Election, Leader, Leadership, MAX_LEADER_VALUE_BYTES};
pub use error::{BoxError, Error, LossReason, Result};
pub use guard::LockGuard;
pub use kind::{LockKind, Primitive};
pub use lease::Lease;
pub use local::LocalWaiters;
pub use lock::{renew_each, DistributedLock};
pub use lock_ext::DistributedLockExt;
pub use mechanics::Mechanics;
pub use memory::MemoryLock;
pub use multi::MultiGuard;
pub use name::{LockName, MAX_NAME_BYTES};
pub use options::{AcquireOptions, Wait};
pub use rw_lock::RwLock;
pub use semaphore::Semaphore;
pub use session::{Session, SessionState};
pub use signal::{HoldEnd, LostSignal};
pub use state::{LockState, ObjectState};
pub use token::{FencingToken, OwnerToken};
pub use upgrade::UpgradeableReadGuard;
pub use url_param::duration_param;
pub use watch::{ReleaseWatch, Woke};

#[doc(no_inline)]
pub use async_trait::async_trait;

//! [`Waiters`]: the client's side of the servers' queues of waiters, shared by
//! [`RedisLock`](crate::RedisLock) and [`Redlock`](crate::Redlock).
//!
//! A waiter's attempt queues it on a server that finds the lock held (the acquire script's
//! waiting variants), and a won attempt takes it out. This module remembers which waiters of
//! this client may still be queued, and when a waiter's wait ends while it may be, takes it out
//! of every server's queue in the background (the `LEAVE` script, which also wakes the next
//! waiter if the lock is free, in case this one was woken and went away without trying).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use distlock_core::{Result, TryAcquire};
use tokio::sync::RwLock;
use tokio::time::Instant;

use crate::keys::LockKeys;
use crate::lua;
use crate::node::Node;

/// How many times a waiter's leaving is sent, on one server, before its entry is left to end
/// with its stay (about 2 s of pauses in all).
const LEAVE_TRIES: u32 = 8;
/// The pause after a waiter's first failed leaving; it doubles, up to [`LEAVE_LONGEST_PAUSE`].
const LEAVE_FIRST_PAUSE: Duration = Duration::from_millis(20);
/// The longest pause between two sendings of a waiter's leaving.
const LEAVE_LONGEST_PAUSE: Duration = Duration::from_millis(500);

/// A waiter's id and its stay in ms, for an attempt that queues it if the lock is held.
pub(crate) type Waiting<'a> = Option<(&'a str, u64)>;

/// A waiter's last attempt: sent no later than `at` (so a lock a release hands the waiter
/// afterwards was handed over after `at`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LastAttempt {
    pub(crate) at: Instant,
}

/// The waiters of one client that may be in a server's queue, with their last attempt. Cheap
/// to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct Waiters {
    queued: Arc<Mutex<HashMap<Arc<str>, LastAttempt>>>,
    /// By lock key, the leavings of this client's waiters under way (each holds a read guard
    /// until its `LEAVE` has run): a release of the lock by this client waits for them.
    leaving: Arc<Mutex<Leavings>>,
}

/// By lock key, a gate that each leaving under way holds for reading.
type Leavings = HashMap<Vec<u8>, Arc<RwLock<()>>>;

impl Waiters {
    fn queued(&self) -> MutexGuard<'_, HashMap<Arc<str>, LastAttempt>> {
        self.queued.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn leaving(&self) -> MutexGuard<'_, Leavings> {
        self.leaving.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits (at most `limit`) until the leavings of this client's waiters of the lock `lock`
    /// that are under way have run. A release sent before them would hand the lock to a waiter
    /// of ours that has gone (its wait timed out, say), which gives it back only when its
    /// leaving runs: a `try_acquire` right after the release would find the lock held.
    /// Nothing to wait for, no waiting: one look at a table.
    pub(crate) async fn after_leavings(&self, lock: &[u8], limit: Duration) {
        let gate = self.leaving().get(lock).cloned();
        if let Some(gate) = gate {
            let _ = tokio::time::timeout(limit, gate.write()).await;
        }
    }

    /// The last attempt of `waiter`, if it may be queued.
    pub(crate) fn last_attempt(&self, waiter: &str) -> Option<LastAttempt> {
        self.queued().get(waiter).copied()
    }

    /// `waiter` won the lock without an attempt (a release handed it over, which took it out
    /// of the queue): it has nothing to leave.
    pub(crate) fn won(&self, waiter: &str) {
        self.queued().remove(waiter);
    }

    /// Runs `attempt` for `waiter` (given its [`Waiting`]), remembering the waiter as possibly
    /// queued unless the attempt won (an error may have queued it too).
    pub(crate) async fn attempt<'a, F, Fut>(
        &self,
        waiter: &'a str,
        stay: Duration,
        attempt: F,
    ) -> Result<TryAcquire>
    where
        F: FnOnce(Waiting<'a>) -> Fut,
        Fut: Future<Output = Result<TryAcquire>>,
    {
        let id: Arc<str> = waiter.into();
        let stay_ms = u64::try_from(stay.as_millis()).unwrap_or(u64::MAX).max(1);
        let last = LastAttempt { at: Instant::now() };
        self.queued().insert(id.clone(), last);
        let outcome = attempt(Some((waiter, stay_ms))).await;
        if matches!(outcome, Ok(TryAcquire::Acquired(_))) {
            self.queued().remove(&id);
        }
        outcome
    }

    /// What a waiter's watch holds: when dropped, the waiter leaves the queues of `keys` on
    /// `nodes` if it may still be in them.
    pub(crate) fn leave_on_drop(&self, nodes: Vec<Node>, keys: LockKeys, waiter: Arc<str>) -> Leave {
        Leave {
            waiters: self.clone(),
            nodes,
            keys,
            waiter,
        }
    }
}

/// Held by a waiter's [`ReleaseWatch`](distlock_core::ReleaseWatch): when the wait ends, a
/// waiter that may still be queued leaves every server's queue, in the background. Without a
/// runtime the entries end with their stay.
pub(crate) struct Leave {
    waiters: Waiters,
    nodes: Vec<Node>,
    keys: LockKeys,
    waiter: Arc<str>,
}

impl Drop for Leave {
    fn drop(&mut self) {
        if self.waiters.queued().remove(&self.waiter).is_none() {
            return; // never queued, or it won the lock, which took it out
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (nodes, keys, waiter) = (
            std::mem::take(&mut self.nodes),
            self.keys.clone(),
            self.waiter.clone(),
        );
        // Under way until the `LEAVE`s have run: a release by this client waits for it.
        let gate = self
            .waiters
            .leaving()
            .entry(keys.lock.clone())
            .or_default()
            .clone();
        let under_way = gate.clone().try_read_owned().ok();
        let waiters = self.waiters.clone();
        runtime.spawn(async move {
            for node in &nodes {
                // Sent again after a failure (a slot in migration answers `ASK` or `TRYAGAIN`
                // for a while): a lock handed to the waiter stays its own until it leaves, or
                // for the claim. Leaving twice does no harm.
                let mut pause = LEAVE_FIRST_PAUSE;
                for tries_left in (0..LEAVE_TRIES).rev() {
                    let left: Result<i64> = node
                        .script(
                            &lua::LEAVE,
                            &[&keys.lock, &keys.waiters],
                            &[waiter.as_bytes(), &keys.channel],
                        )
                        .await;
                    let Err(error) = left else { break };
                    if tries_left == 0 {
                        tracing::debug!(%error, "distlock-redis: a waiter could not leave the queue; its entry ends with its stay, a lock handed to it with its claim");
                        break;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(LEAVE_LONGEST_PAUSE);
                }
            }
            drop(under_way);
            let mut leaving = waiters.leaving();
            // The table's and ours: no other leaving or release holds the gate.
            if Arc::strong_count(&gate) <= 2 {
                leaving.remove(&keys.lock);
            }
        });
    }
}

//! Redlock's quorum rounds: one attempt on every master and how its answers are counted (the
//! validity left after the round, split votes, the time until a majority is free), the
//! releases that follow, and how a renewal's answers are judged.

use std::time::Duration;

use distlock_core::{Error, Holder, Lease, LockName, OwnerToken, Result, TryAcquire};
use futures::future::join_all;
use rand::Rng;
use tokio::time::Instant;

use super::Redlock;
use crate::acquire::{acquire_unfenced_on, AcquireReply};
use crate::keys::LockKeys;
use crate::lock::ttl_millis;
use crate::node::BACKEND;
use crate::release::{release_quietly_on, release_waking_on};
use crate::waiters::Waiting;

/// The shortest per-node timeout during acquire, however short the TTL.
const MIN_NODE_TIMEOUT: Duration = Duration::from_millis(5);
/// The per-node timeout during acquire is at most `ttl / ACQUIRE_TIMEOUT_DIVISOR`: a guard for
/// very short TTLs only (the default node timeout is far below usual TTLs). Safety does not
/// depend on it: the validity left is checked after all answers.
const ACQUIRE_TIMEOUT_DIVISOR: u32 = 2;
/// The longest random pause after a split vote.
const SPLIT_RETRY_MAX: Duration = Duration::from_millis(5);

/// What the masters said to one operation.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) yes: usize,
    pub(super) no: usize,
    pub(super) errors: Vec<String>,
}

impl Redlock {
    pub(super) fn quorum(&self) -> usize {
        self.inner.nodes.len() / 2 + 1
    }

    /// The per-node bound during acquire: the node timeout, at most half the TTL.
    pub(super) fn acquire_limit(&self, ttl: Duration) -> Duration {
        self.inner
            .config
            .node_timeout
            .min(ttl / ACQUIRE_TIMEOUT_DIVISOR)
            .max(MIN_NODE_TIMEOUT)
    }

    pub(super) fn no_majority(&self, what: &str, answered: usize, errors: &[String]) -> Error {
        Error::unavailable(
            BACKEND,
            format!(
                "Redlock {what}: only {answered} of {} masters answered, {} needed; {}",
                self.inner.nodes.len(),
                self.quorum(),
                errors.join("; ")
            ),
        )
    }

    /// One attempt on every master, queueing `waiting`'s waiter where the lock is held.
    pub(super) async fn attempt(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
        waiting: Waiting<'_>,
    ) -> Result<TryAcquire> {
        let ttl_ms = ttl_millis(ttl)?;
        self.inner
            .longest_ttl_ms
            .fetch_max(ttl_ms, std::sync::atomic::Ordering::Relaxed);
        let keys = self.keys(name);
        let token = owner.to_string();
        let limit = self.acquire_limit(ttl);
        // A waiter's score in every master's queue: the end of its stay by this client's
        // clock, the same on all of them (see `acquire.lua`).
        let queued_until_us = waiting.map_or(0, |(_, stay_ms)| {
            clock_micros().saturating_add(stay_ms.saturating_mul(1000))
        });
        let sent_at = Instant::now();
        let replies =
            join_all(self.inner.nodes.iter().map(|node| {
                acquire_unfenced_on(node, limit, &keys, &token, ttl_ms, waiting, queued_until_us)
            }))
            .await;
        let elapsed = sent_at.elapsed();
        let drift = self.inner.config.drift(ttl);
        let (mut won, mut held, mut errors, mut untrusted) = (0, Vec::new(), Vec::new(), 0);
        let mut holders = std::collections::HashMap::<Option<Vec<u8>>, usize>::new();
        // The masters that may hold our key: those that granted it, and those whose reply
        // was lost. The others refused it: a failed attempt has nothing to give back there.
        let mut may_hold = vec![false; replies.len()];
        for (i, reply) in replies.into_iter().enumerate() {
            match reply {
                Ok((acquired, run_id)) if !self.trusted(i, run_id.as_deref()) => {
                    // A recently restarted master: its answer counts for nobody.
                    untrusted += 1;
                    match acquired {
                        AcquireReply::Held { remaining, .. } => held.push(remaining),
                        AcquireReply::Acquired(_)
                        | AcquireReply::PermitsMismatch(_)
                        | AcquireReply::AcquiredAsWaiter(_) => may_hold[i] = true,
                    }
                }
                Ok((AcquireReply::Acquired(_), _)) => {
                    won += 1;
                    may_hold[i] = true;
                }
                Ok((AcquireReply::Held { remaining, holder }, _)) => {
                    held.push(remaining);
                    *holders.entry(holder).or_default() += 1;
                }
                Ok((AcquireReply::PermitsMismatch(_), _)) => {
                    // Not a reply to a mutex: its outcome is unknown.
                    errors.push("unexpected acquire reply for a mutex: a permit count".to_owned());
                    may_hold[i] = true;
                }
                Ok((AcquireReply::AcquiredAsWaiter(_), _)) => {
                    // Redlock's releases hand nothing over: not a reply it can get.
                    errors.push("unexpected acquire reply for Redlock: a mutex handed over".to_owned());
                    may_hold[i] = true;
                }
                Err(e) => {
                    errors.push(crate::node::detail(&e));
                    may_hold[i] = true;
                }
            }
        }
        // Masters that failed to answer or restarted recently may hold the lock for anyone.
        let unknown = errors.len() + untrusted;
        let someone_may_hold_a_majority = holders
            .iter()
            .any(|(holder, &count)| holder.is_some() && count + unknown >= self.quorum());
        let valid = ttl.checked_sub(elapsed).and_then(|t| t.checked_sub(drift));
        if won >= self.quorum() && valid.is_some_and(|v| !v.is_zero()) {
            return Ok(TryAcquire::Acquired(
                Lease::new(name.clone(), owner, ttl, sent_at).with_validity_margin(drift),
            ));
        }
        // Failed: give back whatever we got, including on masters whose reply was lost,
        // without announcing it (the lock is not free for anyone). Nothing to give back if
        // every master refused: no second round then.
        self.release_quietly_where(&may_hold, &keys, &token).await;
        let answered = self.inner.nodes.len() - errors.len();
        if answered < self.quorum() {
            return Err(self.no_majority("acquire", answered, &errors));
        }
        if won >= self.quorum() {
            tracing::debug!(
                ?elapsed,
                "distlock-redis: Redlock majority came too late to be valid"
            );
            return Ok(TryAcquire::Held(Holder::unknown()));
        }
        if !someone_may_hold_a_majority {
            // A split vote: nobody holds a majority. Retry after a short random pause.
            let pause = rand::rng().random_range(Duration::from_millis(1)..=SPLIT_RETRY_MAX);
            return Ok(TryAcquire::Held(Holder::expiring_in(pause)));
        }
        Ok(TryAcquire::Held(match self.remaining(won, held) {
            Some(remaining) => Holder::expiring_in(remaining),
            None => Holder::unknown(),
        }))
    }

    /// Releases on every master, bounded by the node timeout.
    pub(super) async fn release_all(&self, keys: &LockKeys, token: &str) -> Tally {
        let limit = self.inner.config.node_timeout;
        let replies = join_all(
            self.inner
                .nodes
                .iter()
                .map(|node| async move { release_waking_on(node, limit, keys, token).await?.strict() }),
        )
        .await;
        tally(replies)
    }

    /// Releases on the masters `i` with `on[i]`, in parallel, without announcing it (the
    /// cleanup of a failed attempt): one round trip, none if `on` names no master.
    pub(super) async fn release_quietly_where(&self, on: &[bool], keys: &LockKeys, token: &str) {
        let limit = self.inner.config.node_timeout;
        join_all(
            self.inner
                .nodes
                .iter()
                .zip(on)
                .filter(|(_, &on)| on)
                .map(|(node, _)| release_quietly_on(node, limit, keys, token)),
        )
        .await;
    }

    /// The time until enough masters are free for a majority, if the holders said.
    pub(super) fn remaining(&self, free: usize, mut held: Vec<Option<Duration>>) -> Option<Duration> {
        let needed = self.quorum().checked_sub(free)?.checked_sub(1)?;
        // `None` (no TTL) sorts last: it never frees by itself.
        held.sort_by_key(|r| r.map_or((1, Duration::ZERO), |d| (0, d)));
        held.get(needed).copied().flatten()
    }

    pub(super) fn judge_extension(
        &self,
        lease: &Lease,
        ttl: Duration,
        sent_at: Instant,
        tally: &Tally,
    ) -> Result<Option<Lease>> {
        let n = self.inner.nodes.len();
        let drift = self.inner.config.drift(ttl);
        if tally.yes >= self.quorum() {
            let elapsed = sent_at.elapsed();
            if ttl
                .checked_sub(elapsed)
                .and_then(|t| t.checked_sub(drift))
                .is_none()
            {
                return Err(Error::unavailable(
                    BACKEND,
                    format!("Redlock extend took {elapsed:?}, longer than the TTL allows"),
                ));
            }
            return Ok(Some(lease.renewed(ttl, sent_at).with_validity_margin(drift)));
        }
        if tally.no > n - self.quorum() {
            return Ok(None);
        }
        Err(self.no_majority("extend", tally.yes + tally.no, &tally.errors))
    }
}

pub(super) fn tally(replies: Vec<Result<bool>>) -> Tally {
    let mut tally = Tally::default();
    for reply in replies {
        match reply {
            Ok(true) => tally.yes += 1,
            Ok(false) => tally.no += 1,
            Err(e) => tally.errors.push(crate::node::detail(&e)),
        }
    }
    tally
}

/// This client's clock in microseconds since the Unix epoch (0 before it).
fn clock_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

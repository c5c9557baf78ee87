//! The mutex's attempt on one server (the one acquire script, see
//! [`crate::acquire`]), and the conversions of a TTL and a waiter's stay into the
//! scripts' milliseconds.

use std::time::Duration;

use distlock_core::{Error, FencingToken, Holder, Lease, LockName, OwnerToken, Result, TryAcquire};
use tokio::time::Instant;

use super::{RedisLock, MAX_TTL};
use crate::acquire::{self, no_fencing_token, AcquireCall, AcquireReply};
use crate::node::BACKEND;
use crate::release::release_waking_on;
use crate::waiters::Waiting;

impl RedisLock {
    /// One attempt, queueing `waiting`'s waiter if the lock is held.
    pub(crate) async fn attempt(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
        waiting: Waiting<'_>,
    ) -> Result<TryAcquire> {
        let ttl_ms = ttl_millis(ttl)?;
        let keys = self.keys(name);
        let token = owner.to_string();
        let sent_at = Instant::now();
        let (reply, acknowledged) = self
            .run_acquire(&AcquireCall::mutex(&keys, &token, ttl_ms, true, waiting, None))
            .await?;
        let outcome = match acquire::parse(reply) {
            Ok(AcquireReply::PermitsMismatch(_)) => Err(Error::backend(
                BACKEND,
                "unexpected acquire reply for a mutex: a permit count",
            )),
            other => other,
        };
        // Held under the waiter's id (a release handed it over): the lease is the waiter's.
        let owner = match (&outcome, waiting) {
            (Ok(AcquireReply::AcquiredAsWaiter(_)), Some((waiter, _))) => match waiter.parse() {
                Ok(waiter) => waiter,
                Err(_) => {
                    let node = &self.inner.node;
                    let _ = release_waking_on(node, node.timeout(), &keys, waiter).await;
                    return Err(Error::backend(
                        BACKEND,
                        "a lock handed to a waiter whose id is not an owner token; it was given back",
                    ));
                }
            },
            _ => owner,
        };
        let token = owner.to_string();
        let outcome = match outcome {
            Ok(AcquireReply::Acquired(0) | AcquireReply::AcquiredAsWaiter(0)) => Err(no_fencing_token()),
            Ok(AcquireReply::AcquiredAsWaiter(fencing)) => Ok(AcquireReply::Acquired(fencing)),
            other => other,
        };
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(e) => {
                // Granted without a token (the counter vanished before the attempt was sent
                // again), or a reply not understood: give the lock back, then report.
                let node = &self.inner.node;
                let _ = release_waking_on(node, node.timeout(), &keys, &token).await;
                return Err(e);
            }
        };
        if matches!(outcome, AcquireReply::Acquired(_)) && !acknowledged {
            // Too few replicas: give the lock back, then report.
            let node = &self.inner.node;
            let _ = release_waking_on(node, node.timeout(), &keys, &token).await;
            return Err(self.too_few_replicas());
        }
        Ok(match outcome {
            AcquireReply::Acquired(fencing) => TryAcquire::Acquired(
                Lease::new(name.clone(), owner, ttl, sent_at).with_fencing(FencingToken::new(fencing)),
            ),
            AcquireReply::Held {
                remaining: Some(remaining),
                ..
            } => TryAcquire::Held(Holder::expiring_in(remaining)),
            _ => TryAcquire::Held(Holder::unknown()),
        })
    }
}

/// The TTL in whole milliseconds (rounded up), or an error past [`MAX_TTL`].
pub(crate) fn ttl_millis(ttl: Duration) -> Result<u64> {
    if ttl > MAX_TTL {
        return Err(Error::invalid_options(format!(
            "a TTL of {ttl:?} is longer than the {MAX_TTL:?} Redis locks accept"
        )));
    }
    let ms = u64::try_from(ttl.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
    Ok(ms.max(1))
}

/// A waiter's stay in whole ms, at most [`MAX_TTL`] (its record's score must stay a number the
/// server keeps exactly).
pub(crate) fn stay_millis(stay: Duration) -> u64 {
    u64::try_from(stay.min(MAX_TTL).as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

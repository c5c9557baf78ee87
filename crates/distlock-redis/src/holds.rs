//! The holds of semaphores and read-write locks on one server: which script, keys and
//! arguments each operation sends (see [`kind_scripts`]), and what their replies mean. Every
//! operation is one script, so one round trip.
//!
//! It may not decide anything the scripts decide; [`RedisLock`](crate::RedisLock) calls it
//! for every hold whose [`LockKind`] is not [`LockKind::Exclusive`].

use std::time::Duration;

use distlock_core::{Error, Holder, LockKind, LockName, LockState, Primitive, Result};
use redis::Value;

use crate::keys::{release_marker, KeySpace, RwLockKeys, SemaphoreKeys};
use crate::kind_scripts;
use crate::lock::{AcquireCall, Renewal};
use crate::node::{self, Node, BACKEND};
use crate::released::{self, Released};
use crate::scripts;

/// What an acquire script answered.
#[derive(Debug)]
pub(crate) enum HoldReply {
    /// Acquired, with this fencing token.
    Acquired(u64),
    /// Held by others.
    Held(Holder),
    /// A semaphore whose live holders use this count of permits.
    PermitsMismatch(u32),
}

/// The acquire call of a hold of `kind` (not [`LockKind::Exclusive`]) on `name`. `waiting`
/// (a waiter id and its stay in ms) is recorded by a failing [`LockKind::Write`] (a waiting
/// writer keeps new readers out) and a failing permit (the semaphore's queue, whose first
/// waiter a release wakes alone).
///
/// # Errors
/// [`Error::InvalidOptions`] for a semaphore of zero permits, [`Error::NotSupported`] for
/// the mutex or a kind this backend does not know.
pub(crate) fn acquire_call(
    space: &KeySpace,
    name: &LockName,
    kind: LockKind,
    owner: &str,
    ttl_ms: u64,
    waiting: Option<(&str, u64)>,
) -> Result<AcquireCall> {
    let mut args = vec![owner.as_bytes().to_vec(), ttl_ms.to_string().into_bytes()];
    Ok(match kind {
        LockKind::Permit { permits: 0 } => {
            return Err(Error::invalid_options(format!(
                "the semaphore {name} needs at least one permit"
            )))
        }
        LockKind::Permit { permits } => {
            let keys = space.semaphore_keys(name);
            let (waiter, stay_ms) = waiting.unwrap_or(("", 0));
            args.push(permits.to_string().into_bytes());
            args.push(waiter.as_bytes().to_vec());
            args.push(stay_ms.to_string().into_bytes());
            AcquireCall::new(
                &kind_scripts::ACQUIRE_PERMIT,
                vec![keys.holders, keys.state, keys.waiting],
                args,
            )
        }
        LockKind::Read => {
            let RwLockKeys {
                readers,
                writer,
                waiting: queue,
                fence,
                ..
            } = space.rw_lock_keys(name);
            AcquireCall::new(
                &kind_scripts::ACQUIRE_READ,
                vec![readers, writer, queue, fence],
                args,
            )
        }
        LockKind::Write => {
            let RwLockKeys {
                readers,
                writer,
                waiting: queue,
                fence,
                ..
            } = space.rw_lock_keys(name);
            let (waiter, stay_ms) = waiting.unwrap_or(("", 0));
            args.push(waiter.as_bytes().to_vec());
            args.push(stay_ms.to_string().into_bytes());
            AcquireCall::new(
                &kind_scripts::ACQUIRE_WRITE,
                vec![readers, writer, queue, fence],
                args,
            )
        }
        _ => return Err(not_a_hold_kind()),
    })
}

/// The mutex, or a kind added to the core that this backend does not know yet.
fn not_a_hold_kind() -> Error {
    Error::NotSupported {
        backend: BACKEND,
        what: "this kind of hold",
    }
}

/// Reads an acquire script's reply (see [`kind_scripts`]).
pub(crate) fn parse_acquire(reply: Value) -> Result<HoldReply> {
    let parts: Vec<Value> = redis::from_redis_value(reply).map_err(|e| node::map_error(e.into()))?;
    let mut parts = parts.into_iter();
    let outcome = parts.next().map(|v| node::int_reply(&v)).transpose()?;
    let n = parts
        .next()
        .map(|v| node::int_reply(&v))
        .transpose()?
        .unwrap_or(-1);
    match outcome {
        Some(1) => u64::try_from(n)
            .ok()
            .filter(|&token| token > 0)
            .map(HoldReply::Acquired)
            .ok_or_else(crate::lock::no_fencing_token),
        Some(0) => {
            let holder = match u64::try_from(n) {
                Ok(ms) => Holder::expiring_in(Duration::from_millis(ms)),
                Err(_) => Holder::unknown(),
            };
            let owner: Option<String> = parts.next().and_then(|v| redis::from_redis_value(v).ok());
            Ok(HoldReply::Held(match owner {
                Some(owner) => holder.with_owner(owner),
                None => holder,
            }))
        }
        Some(2) => Ok(HoldReply::PermitsMismatch(u32::try_from(n).unwrap_or(0))),
        other => Err(Error::backend(
            BACKEND,
            format!("unexpected acquire reply {other:?}"),
        )),
    }
}

/// Releases the hold of `kind` of `owner` on `name`, waking the semaphore's first waiter or
/// announcing it on the object's channel: one round trip. Whether the owner held it (live),
/// or, for a request that may have run twice, [`Released::Unknown`].
pub(crate) async fn release(
    node: &Node,
    limit: Duration,
    space: &KeySpace,
    name: &LockName,
    kind: LockKind,
    owner: &str,
) -> Result<Released> {
    let marker = release_marker(&space.lock_key(name.as_str()), owner);
    let marker_ttl = released::marker_ttl_arg(node, limit);
    let marker_ttl = marker_ttl.as_bytes();
    let (released, resent): (i64, bool) = match kind {
        LockKind::Permit { .. } => {
            let SemaphoreKeys {
                holders,
                waiting,
                channel,
                ..
            } = space.semaphore_keys(name);
            node.script_sent_within(
                limit,
                &kind_scripts::RELEASE_MEMBER,
                &[&holders, &waiting, &marker],
                &[owner.as_bytes(), &channel, b"next", marker_ttl],
            )
            .await?
        }
        LockKind::Read => {
            let RwLockKeys {
                readers,
                waiting,
                channel,
                ..
            } = space.rw_lock_keys(name);
            // KEYS[2] goes unused for readers: any key of the object's slot will do.
            node.script_sent_within(
                limit,
                &kind_scripts::RELEASE_MEMBER,
                &[&readers, &waiting, &marker],
                &[owner.as_bytes(), &channel, b"last", marker_ttl],
            )
            .await?
        }
        LockKind::Write => {
            let RwLockKeys { writer, channel, .. } = space.rw_lock_keys(name);
            node.script_sent_within(
                limit,
                &kind_scripts::RELEASE_WRITE,
                &[&writer, &marker],
                &[owner.as_bytes(), &channel, marker_ttl],
            )
            .await?
        }
        _ => return Err(not_a_hold_kind()),
    };
    Ok(Released::from_reply(released, resent))
}

/// The renewal of the hold of `kind` of `owner` on `name` for `ttl_ms`: a member's expiry
/// moved (`ZADD XX`), or the writer's `PEXPIRE` (the mutex's extend script on the writer key).
pub(crate) fn renewal(
    space: &KeySpace,
    name: &LockName,
    kind: LockKind,
    owner: String,
    ttl_ms: u64,
) -> Result<Renewal> {
    Ok(match kind {
        LockKind::Permit { .. } => Renewal::new(
            &kind_scripts::EXTEND_MEMBER,
            space.semaphore_keys(name).holders,
            owner,
            ttl_ms,
        ),
        LockKind::Read => Renewal::new(
            &kind_scripts::EXTEND_MEMBER,
            space.rw_lock_keys(name).readers,
            owner,
            ttl_ms,
        ),
        LockKind::Write => Renewal::new(&scripts::EXTEND, space.rw_lock_keys(name).writer, owner, ttl_ms),
        _ => return Err(not_a_hold_kind()),
    })
}

/// Takes the waiting writer `waiter` out of `name`'s records, announcing it if readers may
/// come in now: one round trip.
pub(crate) async fn withdraw_writer(
    node: &Node,
    space: &KeySpace,
    name: &LockName,
    waiter: &str,
) -> Result<()> {
    let RwLockKeys {
        waiting,
        writer,
        channel,
        ..
    } = space.rw_lock_keys(name);
    let _: i64 = node
        .script(
            &kind_scripts::WITHDRAW_WRITER,
            &[&waiting, &writer],
            &[waiter.as_bytes(), &channel],
        )
        .await?;
    Ok(())
}

/// Takes the semaphore waiter `waiter` out of `name`'s queue, waking the next waiter if a
/// permit is free (it may have been woken and gone without trying): one round trip.
pub(crate) async fn withdraw_permit_waiter(
    node: &Node,
    space: &KeySpace,
    name: &LockName,
    waiter: &str,
) -> Result<()> {
    let SemaphoreKeys {
        holders,
        state,
        waiting,
        channel,
    } = space.semaphore_keys(name);
    let _: i64 = node
        .script(
            &kind_scripts::LEAVE_PERMIT,
            &[&holders, &state, &waiting],
            &[waiter.as_bytes(), &channel],
        )
        .await?;
    Ok(())
}

/// The release channel of the `primitive` object `name`, for the semaphore and the
/// read-write lock.
pub(crate) fn channel(space: &KeySpace, name: &LockName, primitive: Primitive) -> Option<Vec<u8>> {
    match primitive {
        Primitive::Semaphore => Some(space.semaphore_keys(name).channel),
        Primitive::RwLock => Some(space.rw_lock_keys(name).channel),
        _ => None,
    }
}

/// The live holders of the semaphore `name`: one round trip. The permit count is the stored
/// one; the holders' fencing tokens are not kept.
pub(crate) async fn semaphore_holders(
    node: &Node,
    space: &KeySpace,
    name: &LockName,
) -> Result<Vec<LockState>> {
    let keys = space.semaphore_keys(name);
    let (members, permits, now): (Vec<(String, i64)>, Option<u32>, i64) = node
        .script(
            &kind_scripts::INSPECT_SEMAPHORE,
            &[&keys.holders, &keys.state],
            &[],
        )
        .await?;
    let kind = LockKind::Permit {
        permits: permits.unwrap_or(0),
    };
    Ok(members
        .into_iter()
        .map(|(owner, expiry)| LockState::held(owner, None, remaining(expiry, now)).with_kind(kind))
        .collect())
}

/// The live holders of the read-write lock `name` (readers, or the writer): one round trip.
/// The holders' fencing tokens are not kept.
pub(crate) async fn rw_lock_holders(
    node: &Node,
    space: &KeySpace,
    name: &LockName,
) -> Result<Vec<LockState>> {
    let keys = space.rw_lock_keys(name);
    let (readers, writer, writer_pttl, now): (Vec<(String, i64)>, Option<String>, i64, i64) = node
        .script(
            &kind_scripts::INSPECT_RW_LOCK,
            &[&keys.readers, &keys.writer],
            &[],
        )
        .await?;
    let mut holders: Vec<LockState> = readers
        .into_iter()
        .map(|(owner, expiry)| LockState::held(owner, None, remaining(expiry, now)).with_kind(LockKind::Read))
        .collect();
    if let Some(writer) = writer {
        let left = u64::try_from(writer_pttl).ok().map(Duration::from_millis);
        holders.push(LockState::held(writer, None, left).with_kind(LockKind::Write));
    }
    Ok(holders)
}

/// The time from `now` to `expiry` (both ms of the server's clock).
fn remaining(expiry: i64, now: i64) -> Option<Duration> {
    u64::try_from(expiry.saturating_sub(now))
        .ok()
        .map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_without_a_token_is_an_error_not_token_zero() {
        let granted = |parts: Vec<Value>| parse_acquire(Value::Array(parts));
        assert!(matches!(
            granted(vec![Value::Int(1), Value::Int(7)]),
            Ok(HoldReply::Acquired(7))
        ));
        assert!(granted(vec![Value::Int(1)]).is_err());
        assert!(granted(vec![Value::Int(1), Value::Int(0)]).is_err());
    }
}

//! The holds of semaphores and read-write locks on one server: which script, keys and
//! arguments each operation sends (see [`crate::lua`]), and what their replies mean. Every
//! operation is one script, so one round trip.
//!
//! It may not decide anything the scripts decide; [`RedisLock`](crate::RedisLock) calls it
//! for every hold whose [`LockKind`] is not [`LockKind::Exclusive`].

use std::time::Duration;

use distlock_core::{Error, Holder, LockKind, LockName, LockState, Primitive, Result};
use redis::Value;

use crate::acquire::{self, no_fencing_token, AcquireCall, AcquireReply};
use crate::keys::{KeySpace, RwLockKeys, SemaphoreKeys};
use crate::lock::Renewal;
use crate::lua;
use crate::member::{member, permit_holder, reader};
use crate::node::{Node, BACKEND};
use crate::release;
use crate::released::Released;

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

/// The acquire call of a hold of `kind` (not [`LockKind::Exclusive`]) of `owner` on `name`
/// (a permit's and a reader's member computed from both: see [`member`]). `waiting`
/// (a waiter id and its stay in ms) is recorded by a failing [`LockKind::Write`] (a waiting
/// writer keeps new readers out) and a failing permit (the semaphore's queue, whose first
/// waiter a release wakes alone).
///
/// # Errors
/// [`Error::InvalidOptions`] for a semaphore of zero permits or a weight of zero or above the
/// permits, [`Error::NotSupported`] for
/// the mutex or a kind this backend does not know.
pub(crate) fn acquire_call(
    space: &KeySpace,
    name: &LockName,
    kind: LockKind,
    owner: &str,
    ttl_ms: u64,
    waiting: Option<(&str, u64)>,
) -> Result<AcquireCall> {
    Ok(match kind {
        LockKind::Permit { permits: 0, .. } => {
            return Err(Error::invalid_options(format!(
                "the semaphore {name} needs at least one permit"
            )))
        }
        LockKind::Permit { permits, weight } if weight == 0 || weight > permits => {
            return Err(Error::invalid_options(format!(
                "{weight} permits asked of the semaphore {name}, which has {permits}"
            )))
        }
        LockKind::Permit { permits, weight } => AcquireCall::permit(
            space.semaphore_keys(name),
            &member(kind, owner),
            ttl_ms,
            (permits, weight),
            waiting,
        ),
        LockKind::Read => AcquireCall::read(space.rw_lock_keys(name), owner, ttl_ms),
        LockKind::UpgradeableRead => {
            AcquireCall::upgradeable(space.rw_lock_keys(name), &member(kind, owner), ttl_ms)
        }
        LockKind::Write => AcquireCall::write(space.rw_lock_keys(name), owner, ttl_ms, waiting),
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

/// Reads the acquire script's reply (see [`acquire::parse`]) for a hold: a grant must carry a
/// token above 0; the holder's owner is kept if it is text.
pub(crate) fn parse_acquire(reply: Value) -> Result<HoldReply> {
    Ok(match acquire::parse(reply)? {
        AcquireReply::Acquired(0) => return Err(no_fencing_token()),
        AcquireReply::Acquired(token) => HoldReply::Acquired(token),
        AcquireReply::Held { remaining, holder } => {
            let held = match remaining {
                Some(left) => Holder::expiring_in(left),
                None => Holder::unknown(),
            };
            HoldReply::Held(match holder.and_then(|owner| String::from_utf8(owner).ok()) {
                Some(owner) => held.with_owner(owner),
                None => held,
            })
        }
        AcquireReply::PermitsMismatch(stored) => HoldReply::PermitsMismatch(stored),
        AcquireReply::AcquiredAsWaiter(_) => {
            return Err(Error::backend(
                BACKEND,
                "unexpected acquire reply for a permit or a read-write lock: a mutex handed over",
            ))
        }
    })
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
    release::release_hold_on(node, limit, space, name, kind, owner).await
}

/// The renewal of the hold of `kind` of `owner` on `name` for `ttl_ms`: a member's expiry
/// moved (`ZADD XX`; the member of `kind`, so a weighted hold is renewed whole and an
/// upgradeable read upgraded since is not found), or the writer's `PEXPIRE` (the mutex's
/// extend script on the writer key).
pub(crate) fn renewal(
    space: &KeySpace,
    name: &LockName,
    kind: LockKind,
    owner: String,
    ttl_ms: u64,
) -> Result<Renewal> {
    Ok(match kind {
        LockKind::Permit { .. } => Renewal::new(
            &lua::EXTEND_MEMBER,
            space.semaphore_keys(name).holders,
            member(kind, &owner),
            ttl_ms,
        ),
        LockKind::Read | LockKind::UpgradeableRead => Renewal::new(
            &lua::EXTEND_MEMBER,
            space.rw_lock_keys(name).readers,
            member(kind, &owner),
            ttl_ms,
        ),
        LockKind::Write => Renewal::new(&lua::EXTEND, space.rw_lock_keys(name).writer, owner, ttl_ms),
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
            &lua::WITHDRAW_WRITER,
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
            &lua::LEAVE_PERMIT,
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

/// The live holders of the semaphore `name`, each with its weight: one round trip. The
/// permit count is the stored one; the holders' fencing tokens are not kept.
pub(crate) async fn semaphore_holders(
    node: &Node,
    space: &KeySpace,
    name: &LockName,
) -> Result<Vec<LockState>> {
    let keys = space.semaphore_keys(name);
    let (members, permits, now): (Vec<(String, i64)>, Option<u32>, i64) = node
        .script(&lua::INSPECT_SEMAPHORE, &[&keys.holders, &keys.state], &[])
        .await?;
    let permits = permits.unwrap_or(0);
    Ok(members
        .into_iter()
        .map(|(member, expiry)| {
            let (owner, weight) = permit_holder(&member);
            LockState::held(owner.to_owned(), None, remaining(expiry, now))
                .with_kind(LockKind::Permit { permits, weight })
        })
        .collect())
}

/// The live holders of the read-write lock `name` (plain and upgradeable readers, or the
/// writer): one round trip. The holders' fencing tokens are not kept.
pub(crate) async fn rw_lock_holders(
    node: &Node,
    space: &KeySpace,
    name: &LockName,
) -> Result<Vec<LockState>> {
    let keys = space.rw_lock_keys(name);
    let (readers, writer, writer_pttl, now): (Vec<(String, i64)>, Option<String>, i64, i64) = node
        .script(&lua::INSPECT_RW_LOCK, &[&keys.readers, &keys.writer], &[])
        .await?;
    let mut holders: Vec<LockState> = readers
        .into_iter()
        .map(|(member, expiry)| {
            let (owner, kind) = reader(&member);
            LockState::held(owner.to_owned(), None, remaining(expiry, now)).with_kind(kind)
        })
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

//! The calls of the one release script ([`lua::RELEASE`]) for every kind of hold and both
//! clients ([`RedisLock`](crate::RedisLock) and [`Redlock`](crate::Redlock)): one round trip
//! each, owner-checked, by the hold's kind, name and owner alone.
//!
//! Owns which keys and arguments each release sends (in the order `release.lua` documents);
//! what a reply of a request that may have run twice means is [`crate::released`]'s.

use std::time::Duration;

use distlock_core::{Error, LockKind, LockName, Result};

use crate::keys::{release_marker, KeySpace, LockKeys, RwLockKeys, SemaphoreKeys};
use crate::lua;
use crate::member::member;
use crate::node::{Node, BACKEND};
use crate::released::{self, Released};

/// Releases the mutex `keys` of `owner` on `node` (bounded by `limit`), waking the first
/// waiter of its queue: whether our key was deleted (by this run, or on a cluster by an
/// earlier run of the same request, as its release marker tells), or, for a request this
/// client sent twice, [`Released::Unknown`].
pub(crate) async fn release_waking_on(
    node: &Node,
    limit: Duration,
    keys: &LockKeys,
    owner: &str,
) -> Result<Released> {
    release_on(
        node,
        limit,
        b"mutex",
        (&keys.lock, Some(&keys.waiters)),
        &keys.lock,
        owner,
        &keys.channel,
    )
    .await
}

/// Releases the mutex `keys` of `owner` on `node` (bounded by `limit`), handing it to the
/// first waiter of its queue (see `grant_next.lua`): the lock key then holds that waiter's id
/// for a claim of at least `claim` (and until its stay would have ended), with a fencing token
/// drawn for it, and the publish tells it (`grant:<waiter>:<token>:<claim in ms>`); a waiter
/// of an older client is woken instead. As [`release_waking_on`] otherwise: a release sent
/// again finds the lock the waiter's, never frees it, and reports what [`Released`] says of a
/// resent request.
pub(crate) async fn release_granting_on(
    node: &Node,
    limit: Duration,
    keys: &LockKeys,
    owner: &str,
    claim: Duration,
) -> Result<Released> {
    let claim_ms = u64::try_from(claim.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
        .to_string();
    let marker = release_marker(&keys.lock, owner);
    let marker_ttl = released::marker_ttl_arg(node, limit);
    let call_keys: [&[u8]; 4] = [&keys.lock, &marker, &keys.waiters, &keys.fence];
    let (released, resent): (i64, bool) = node
        .script_sent_within(
            limit,
            &lua::RELEASE,
            &call_keys,
            &[
                b"mutex",
                owner.as_bytes(),
                &keys.channel,
                marker_ttl.as_bytes(),
                claim_ms.as_bytes(),
            ],
        )
        .await?;
    Ok(Released::from_reply(released, resent))
}

/// Releases the mutex `keys` of `owner` on `node` (bounded by `limit`) without waking anyone:
/// for the cleanup of a failed Redlock attempt, whose minority grants nobody waits for
/// (waking a waiter for them would spend its wake, and cut the random pause after a split vote
/// short, on a lock that is still not free). No release marker. Whether our key was deleted.
pub(crate) async fn release_quietly_on(
    node: &Node,
    limit: Duration,
    keys: &LockKeys,
    owner: &str,
) -> Result<bool> {
    let released: i64 = node
        .script_within(
            limit,
            &lua::RELEASE,
            &[&keys.lock],
            &[b"mutex", owner.as_bytes(), b"", b"0"],
        )
        .await?;
    Ok(released == 1)
}

/// Releases the hold of `kind` (not the mutex) of `owner` on `name` (for a permit or a
/// reader, the member of `kind`: see [`member`](crate::member)): a release of n permits wakes
/// the first n waiters of the semaphore's queue, a reader's and the writer's announce it on
/// the object's channel. As [`release_waking_on`] otherwise.
///
/// # Errors
/// [`Error::NotSupported`] for the mutex or a kind this backend does not know.
pub(crate) async fn release_hold_on(
    node: &Node,
    limit: Duration,
    space: &KeySpace,
    name: &LockName,
    kind: LockKind,
    owner: &str,
) -> Result<Released> {
    let lock_key = space.lock_key(name.as_str());
    let member = member(kind, owner);
    match kind {
        LockKind::Permit { .. } => {
            let SemaphoreKeys {
                holders,
                waiting,
                channel,
                ..
            } = space.semaphore_keys(name);
            release_on(
                node,
                limit,
                b"permit",
                (&holders, Some(&waiting)),
                &lock_key,
                &member,
                &channel,
            )
            .await
        }
        LockKind::Read | LockKind::UpgradeableRead => {
            let RwLockKeys { readers, channel, .. } = space.rw_lock_keys(name);
            let script_kind: &[u8] = match kind {
                LockKind::Read => b"read",
                _ => b"upgradeable",
            };
            release_on(
                node,
                limit,
                script_kind,
                (&readers, None),
                &lock_key,
                &member,
                &channel,
            )
            .await
        }
        LockKind::Write => {
            let RwLockKeys { writer, channel, .. } = space.rw_lock_keys(name);
            release_on(node, limit, b"write", (&writer, None), &lock_key, owner, &channel).await
        }
        _ => Err(Error::NotSupported {
            backend: BACKEND,
            what: "this kind of hold",
        }),
    }
}

/// Runs the release script of `kind` on `hold` (and its `queue`), with a release marker of
/// `lock_key` and `owner` (on a cluster; see [`released`]), announcing on `channel`.
async fn release_on(
    node: &Node,
    limit: Duration,
    kind: &[u8],
    (hold, queue): (&[u8], Option<&[u8]>),
    lock_key: &[u8],
    owner: &str,
    channel: &[u8],
) -> Result<Released> {
    let marker = release_marker(lock_key, owner);
    let marker_ttl = released::marker_ttl_arg(node, limit);
    let mut keys: Vec<&[u8]> = vec![hold, &marker];
    keys.extend(queue);
    let (released, resent): (i64, bool) = node
        .script_sent_within(
            limit,
            &lua::RELEASE,
            &keys,
            &[kind, owner.as_bytes(), channel, marker_ttl.as_bytes()],
        )
        .await?;
    Ok(Released::from_reply(released, resent))
}

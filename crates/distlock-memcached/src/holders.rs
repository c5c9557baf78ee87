//! Semaphores and read-write locks on memcached: one item per object, read and rewritten
//! CAS-guarded by each operation.
//!
//! This module owns those operations (acquire, release, extend, the watchdog's batch
//! renewal, withdraw, listing holders) and their round trips; each runs the loop of
//! `item_rewrite.rs` with its own decision, on the rules of `holders_item.rs`. It never
//! touches the mutex's items. **Acquire, release and extend: 2 round trips** (`mg`, then
//! `cas` with `mg`), one more when an acquisition creates the item. A write that lost its
//! race to another client's is retried: at once the first time (1 more round trip), then
//! after a random pause and a new read (2 more each), until the operation timeout.
//!
//! # Clock
//!
//! Holds end by the **server's clock**, as the mutex's items do: the item is written with an
//! absolute expiry `expires` that its value repeats, so every read learns the server's clock,
//! `expires - t`, in whole seconds, and a hold recorded until second `u` is over once that
//! clock reaches `u`. A hold is recorded until the read's second plus the TTL rounded up plus
//! the mutex's two seconds of slack, so, as for the mutex, the server never ends it before the
//! lease's local deadline (the read is sent before the server reads its clock). A read whose
//! reply was slow may have waited out a stop of the server and met its clock of before the
//! stop; it is made again once the clock has caught up (`stopped_server.rs`).
//!
//! Absolute expiries are why these primitives stop working in mid-December 2037: memcached
//! 1.6 reads expiry times as signed 32-bit numbers, so an absolute time past 2038-01-19 wraps.
//! An item written then would be gone at once, and every permit with it; a write whose
//! expiry does not fit is refused with [`Error::Backend`] instead, before anything is sent.

use std::collections::HashMap;
use std::time::Duration;

use distlock_core::{
    Error, FencingToken, Holder, Lease, LockKind, LockName, LockState, OwnerToken, Primitive, Result,
    TryAcquire,
};
use futures::future::join_all;

use crate::expiry::{ttl_on_server, EXPIRY_SLACK_SECS};
use crate::holders_item::{self, Admission, Item, Refusal, Side, MAX_HOLDERS};
use crate::item_rewrite::{Decision, Read, ITEM_LIFETIME_SECS};
use crate::lock::{MemcachedLock, BACKEND};
use crate::pool::Server;
use crate::renewal::EXTEND_BATCH;

/// The error past [`MAX_HOLDERS`].
const TOO_MANY_HOLDERS: &str =
    "more than 512 holders (permits or readers) of one semaphore or read-write lock on memcached";

impl MemcachedLock {
    // ---------------------------------------------------------------------------------------
    // Acquire

    /// One attempt at a permit (or a weighted hold of several), a read, an upgradeable read
    /// or the write lock (for the owner of the upgradeable read, its upgrade). **2 round trips** (`mg`, then `cas`
    /// with `mg`), 1 when the attempt is refused without recording a waiting writer, one more
    /// when it creates the item, more for races lost to other clients' writes (see the module
    /// docs; if they go on until the operation timeout, the attempt reports the object held,
    /// with no expiry hint). The mutex's kind goes to the mutex.
    pub(crate) async fn acquire_hold(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
        ttl: Duration,
        waiter: Option<(&str, Duration)>,
    ) -> Result<TryAcquire> {
        if Side::of(kind).is_none() {
            return match kind {
                LockKind::Exclusive => self.acquire_once(name, owner, ttl).await,
                kind => Err(Error::invalid_options(format!(
                    "{kind} is not a hold of a semaphore or read-write lock"
                ))),
            };
        }
        if let LockKind::Permit { permits, weight } = kind {
            if permits == 0 {
                return Err(Error::invalid_options("a semaphore needs at least one permit"));
            }
            if weight == 0 || weight > permits {
                return Err(Error::invalid_options(format!(
                    "a hold of {weight} permits of a semaphore of {permits}: it takes at least one \
                     and at most them all"
                )));
            }
            if usize::try_from(permits).map_or(true, |p| p > MAX_HOLDERS) {
                return Err(Error::NotSupported {
                    backend: BACKEND,
                    what: TOO_MANY_HOLDERS,
                });
            }
        }
        let (lease_ttl, expiry) = ttl_on_server(ttl)?;
        let expiry = u64::from(expiry);
        let waiter = match (kind, waiter) {
            (LockKind::Write, Some((id, stay))) => Some((checked_waiter(id)?, stay_secs(stay))),
            _ => None,
        };
        let owner_id = owner.as_uuid().as_u128();
        let (server, key) = self.object_at(name, kind.primitive());
        let outcome = self
            .update(server, std::slice::from_ref(&key), true, |_, found| {
                let Some((item, read)) = found else {
                    return Err(Error::backend(
                        BACKEND,
                        "an acquisition found no item to decide on",
                    ));
                };
                let lapses = waiter.map(|(id, stay)| (id, read.now + stay));
                match item.admit(kind, owner_id, read.now + expiry, lapses, read.now) {
                    Ok(Admission::Granted { token }) => Ok(Decision::Write(TryAcquire::Acquired(
                        Lease::new(name.clone(), owner, lease_ttl, read.sent_at)
                            .with_fencing(FencingToken::new(token))
                            .with_kind(kind),
                    ))),
                    Ok(Admission::Refused { holder, recorded }) => Ok(if recorded {
                        Decision::Write(TryAcquire::Held(holder))
                    } else {
                        Decision::Done(TryAcquire::Held(holder))
                    }),
                    Err(refusal) => Err(refusal_error(refusal, name, kind)),
                }
            })
            .await;
        match single(outcome)? {
            Some(outcome) => Ok(outcome),
            // Every write lost its race: the object is busy; the waiter polls again.
            None => Ok(TryAcquire::Held(Holder::unknown())),
        }
    }

    // ---------------------------------------------------------------------------------------
    // Release

    /// Ends the hold of `lease`'s owner on its side of the object, found by owner token (a
    /// lease without any handle, as the ambiguous-outcome cleanup sends, works the same).
    /// **2 round trips** (`mg`, then `cas` + `mg`), 1 if the owner holds nothing there any
    /// more; more under contention, as for acquire (if the races go on until the operation
    /// timeout, [`Error::Unavailable`]).
    pub(crate) async fn release_hold(&self, lease: &Lease) -> Result<bool> {
        let side = side_of(lease)?;
        let owner = lease.owner().as_uuid().as_u128();
        let primitive = lease.kind().primitive();
        let (server, key) = self.object_at(lease.name(), primitive);
        let outcome = self
            .update(server, std::slice::from_ref(&key), false, |_, found| {
                let released = found.is_some_and(|(item, _)| item.release(side, owner));
                Ok(match released {
                    true => Decision::Write(true),
                    false => Decision::Done(false),
                })
            })
            .await;
        single(outcome)?.ok_or_else(|| contended(server, primitive, lease.name()))
    }

    // ---------------------------------------------------------------------------------------
    // Extend

    /// The watchdog's renewal of the permit, read and write leases among `leases` (their
    /// positions in `which`): one job per object, so every lease of one object is renewed by
    /// one rewrite, and per server up to 64 objects per pipeline, every pipeline in flight at
    /// once. **2 round trips per server and 64 objects**, more for objects under contention.
    pub(crate) async fn extend_holds(
        &self,
        leases: &[Lease],
        which: &[usize],
    ) -> Vec<(usize, Result<Option<Lease>>)> {
        let mut done = Vec::new();
        // Per server, the objects and the leases of each; where each key is in that list.
        let mut servers: Vec<Vec<ObjectRenewals<'_>>> = self.servers().iter().map(|_| Vec::new()).collect();
        let mut at: HashMap<String, (usize, usize)> = HashMap::new();
        for &i in which {
            let lease = &leases[i];
            let renewal = match Renewal::of(lease, lease.ttl()) {
                Ok(renewal) => renewal,
                Err(e) => {
                    done.push((i, Err(e)));
                    continue;
                }
            };
            let (index, key) = self.object_index(lease.name(), lease.kind().primitive());
            match at.get(&key) {
                Some(&(index, object)) => servers[index][object].1.push((i, renewal)),
                None => {
                    at.insert(key.clone(), (index, servers[index].len()));
                    servers[index].push((key, vec![(i, renewal)]));
                }
            }
        }
        let chunks = servers.iter().enumerate().flat_map(|(index, objects)| {
            objects
                .chunks(EXTEND_BATCH)
                .map(move |chunk| (&self.servers()[index], chunk))
        });
        let renewed = join_all(chunks.map(|(server, chunk)| async move {
            let keys: Vec<String> = chunk.iter().map(|(key, _)| key.clone()).collect();
            let outcomes = self
                .update(server, &keys, false, |job, found| {
                    let group = &chunk[job].1;
                    let Some((item, read)) = found else {
                        return Ok(Decision::Done(vec![None; group.len()]));
                    };
                    let renewed: Vec<Option<Lease>> = group
                        .iter()
                        .map(|(_, renewal)| renewal.apply(item, read))
                        .collect();
                    Ok(match renewed.iter().any(Option::is_some) {
                        true => Decision::Write(renewed),
                        false => Decision::Done(renewed),
                    })
                })
                .await;
            let mut out = Vec::new();
            for ((key, group), outcome) in chunk.iter().zip(outcomes) {
                match outcome {
                    Ok(Some(renewed)) => {
                        out.extend(group.iter().map(|(i, _)| *i).zip(renewed.into_iter().map(Ok)));
                    }
                    Ok(None) => out.extend(group.iter().map(|(i, _)| {
                        (
                            *i,
                            Err(Error::unavailable(
                                BACKEND,
                                format!(
                                    "{}: {key} kept changing under this client's writes until the operation timeout (contended)",
                                    server.addr()
                                ),
                            )),
                        )
                    })),
                    Err(e) => out.extend(group.iter().map(|(i, _)| (*i, Err(e.duplicate())))),
                }
            }
            out
        }))
        .await;
        done.extend(renewed.into_iter().flatten());
        done
    }

    // ---------------------------------------------------------------------------------------
    // Wait

    /// Takes the waiting writer `waiter` out of the read-write lock `name` (other kinds record
    /// no waiter: nothing to do, no round trip). **1 round trip** when it is not recorded, 2
    /// when it is removed.
    pub(crate) async fn withdraw_waiter(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        if kind != LockKind::Write {
            return Ok(());
        }
        let waiter = checked_waiter(waiter)?;
        let (server, key) = self.object_at(name, Primitive::RwLock);
        let outcome = self
            .update(server, std::slice::from_ref(&key), false, |_, found| {
                let withdrawn = found.is_some_and(|(item, _)| item.withdraw(waiter));
                Ok(match withdrawn {
                    true => Decision::Write(()),
                    false => Decision::Done(()),
                })
            })
            .await;
        single(outcome)?.ok_or_else(|| contended(server, Primitive::RwLock, name))
    }

    /// The live holders of the semaphore or read-write lock `name` (the mutex's holder for
    /// [`Primitive::Mutex`]). **1 round trip.**
    pub(crate) async fn holders_of(&self, name: &LockName, primitive: Primitive) -> Result<Vec<LockState>> {
        if !matches!(primitive, Primitive::Semaphore | Primitive::RwLock) {
            let state = self.inspect_once(name).await?;
            return Ok(if state.is_held() { vec![state] } else { Vec::new() });
        }
        let (server, key) = self.object_at(name, primitive);
        let outcome = self
            .update(server, std::slice::from_ref(&key), false, |_, found| {
                let Some((item, read)) = found else {
                    return Ok(Decision::Done(Vec::new()));
                };
                let holders = item
                    .holds
                    .iter()
                    .map(|hold| {
                        let kind = match hold.side {
                            Side::Permit => LockKind::permits(item.permits, hold.weight),
                            Side::Read => LockKind::Read,
                            Side::Upgradeable => LockKind::UpgradeableRead,
                            Side::Write => LockKind::Write,
                        };
                        LockState::held(
                            holders_item::owner_text(hold.owner),
                            Some(FencingToken::new(hold.token)),
                            Some(Duration::from_secs(hold.until.saturating_sub(read.now))),
                        )
                        .with_kind(kind)
                    })
                    .collect();
                Ok(Decision::Done(holders))
            })
            .await;
        single(outcome)?.ok_or_else(|| contended(server, primitive, name))
    }
}

/// One object's key and the renewals of its leases, each with its position among the leases.
type ObjectRenewals<'a> = (String, Vec<(usize, Renewal<'a>)>);

/// One lease's renewal, prepared before any round trip.
struct Renewal<'a> {
    lease: &'a Lease,
    side: Side,
    owner: u128,
    lease_ttl: Duration,
    expiry: u64,
}

impl<'a> Renewal<'a> {
    fn of(lease: &'a Lease, ttl: Duration) -> Result<Self> {
        let (lease_ttl, expiry) = ttl_on_server(ttl)?;
        Ok(Self {
            lease,
            side: side_of(lease)?,
            owner: lease.owner().as_uuid().as_u128(),
            lease_ttl,
            expiry: u64::from(expiry),
        })
    }

    /// Renews the hold in `item`; the renewed lease, or `None` if the owner holds nothing.
    fn apply(&self, item: &mut Item, read: Read) -> Option<Lease> {
        item.renew(self.side, self.owner, read.now + self.expiry)
            .then(|| self.lease.renewed(self.lease_ttl, read.sent_at))
    }
}

fn side_of(lease: &Lease) -> Result<Side> {
    Side::of(lease.kind())
        .ok_or_else(|| Error::invalid_options("the mutex's lease is not a semaphore or read-write lock hold"))
}

/// A waiter id as the item can record it.
fn checked_waiter(id: &str) -> Result<&str> {
    if holders_item::is_valid_waiter_id(id) {
        return Ok(id);
    }
    Err(Error::invalid_options(format!(
        "a waiter id for memcached must be 1 to {} characters of [A-Za-z0-9._-], not {id:?}",
        holders_item::MAX_WAITER_ID
    )))
}

/// A waiting writer's stay in whole server seconds, with the slack a lagging server clock
/// needs, no longer than an item lives.
fn stay_secs(stay: Duration) -> u64 {
    let secs = stay.as_secs().saturating_add(u64::from(stay.subsec_nanos() > 0));
    secs.saturating_add(EXPIRY_SLACK_SECS).min(ITEM_LIFETIME_SECS)
}

fn refusal_error(refusal: Refusal, name: &LockName, kind: LockKind) -> Error {
    match (refusal, kind) {
        (Refusal::PermitsMismatch { stored }, LockKind::Permit { permits, .. }) => Error::PermitsMismatch {
            name: name.to_string(),
            stored,
            asked: permits,
        },
        (Refusal::TooManyHolders, _) => Error::NotSupported {
            backend: BACKEND,
            what: TOO_MANY_HOLDERS,
        },
        _ => Error::invalid_options(format!("{kind} is not a hold of a semaphore or read-write lock")),
    }
}

fn contended(server: &Server, primitive: Primitive, name: &LockName) -> Error {
    Error::unavailable(
        BACKEND,
        format!(
            "{}: the {primitive} {name:?} kept changing under this client's writes until the \
             operation timeout (contended); try again",
            server.addr()
        ),
    )
}

/// The outcome of a one-job [`MemcachedLock::update`].
fn single<T>(outcomes: Vec<Result<Option<T>>>) -> Result<Option<T>> {
    outcomes
        .into_iter()
        .next()
        .unwrap_or_else(|| Err(Error::backend(BACKEND, "an update returned no outcome")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_bound_is_named_in_its_error() {
        assert!(TOO_MANY_HOLDERS.contains(&format!("more than {MAX_HOLDERS} ")));
    }

    #[test]
    fn waiting_writers_stay_in_whole_seconds_with_slack() {
        assert_eq!(stay_secs(Duration::from_millis(600)), 1 + EXPIRY_SLACK_SECS);
        assert_eq!(stay_secs(Duration::from_secs(2)), 2 + EXPIRY_SLACK_SECS);
        assert_eq!(stay_secs(Duration::MAX), ITEM_LIFETIME_SECS);
    }

    #[test]
    fn waiter_ids_are_checked_before_sending() {
        assert!(checked_waiter("8c1e0f3a-1b2c-4d5e-8f90-0123456789ab").is_ok());
        assert!(matches!(checked_waiter("a b"), Err(Error::InvalidOptions { .. })));
    }
}

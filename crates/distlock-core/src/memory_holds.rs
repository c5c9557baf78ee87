//! The memory store's semaphores and read-write locks: the reference rules for holds of a
//! [`LockKind`] other than the mutex, on one table of objects.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::{
    Error, FencingToken, Holder, Lease, LockKind, LockName, LockState, OwnerToken, Primitive, TryAcquire,
};

/// Every semaphore and read-write lock of one memory store.
#[derive(Default)]
pub(crate) struct Objects {
    by_key: HashMap<(Primitive, LockName), Object>,
}

/// One semaphore or read-write lock: its live holds, its waiting writers, and the channel its
/// releases are announced on.
struct Object {
    holds: HashMap<OwnerToken, Hold>,
    /// Waiting writers by waiter id, each until its record lapses.
    writers_waiting: HashMap<String, Instant>,
    releases: watch::Sender<u64>,
}

struct Hold {
    kind: LockKind,
    expires_at: Instant,
    fencing: u64,
}

impl Object {
    fn new() -> Self {
        Self {
            holds: HashMap::new(),
            writers_waiting: HashMap::new(),
            releases: watch::channel(0).0,
        }
    }

    fn prune(&mut self, now: Instant) {
        self.holds.retain(|_, hold| hold.expires_at > now);
        self.writers_waiting.retain(|_, until| *until > now);
    }

    fn is_idle(&self) -> bool {
        self.holds.is_empty() && self.writers_waiting.is_empty() && self.releases.receiver_count() == 0
    }

    /// Time until the first (`earliest`) or the last hold matching `which` expires.
    fn expiring(&self, now: Instant, earliest: bool, which: impl Fn(LockKind) -> bool) -> Holder {
        let ends = self
            .holds
            .values()
            .filter(|h| which(h.kind))
            .map(|h| h.expires_at);
        let end = if earliest { ends.min() } else { ends.max() };
        end.map_or_else(Holder::unknown, |end| Holder::expiring_in(end - now))
    }

    /// Whether `kind` may be granted to `owner` now, or what holds it back.
    fn admits(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
        now: Instant,
    ) -> crate::Result<Option<Holder>> {
        match kind {
            LockKind::Permit { permits, weight } => {
                if let Some(stored) = self.holds.values().find_map(|h| match h.kind {
                    LockKind::Permit { permits: stored, .. } if stored != permits => Some(stored),
                    _ => None,
                }) {
                    return Err(Error::PermitsMismatch {
                        name: name.to_string(),
                        stored,
                        asked: permits,
                    });
                }
                let taken: u64 = self.holds.values().map(|h| u64::from(h.kind.weight())).sum();
                let full = taken + u64::from(weight) > u64::from(permits);
                Ok(full.then(|| self.expiring(now, true, |_| true)))
            }
            LockKind::Read => {
                let writer = self.holds.values().any(|h| h.kind == LockKind::Write);
                if writer {
                    return Ok(Some(self.expiring(now, true, |k| k == LockKind::Write)));
                }
                Ok((!self.writers_waiting.is_empty()).then(Holder::unknown))
            }
            LockKind::UpgradeableRead => {
                let blocked = |k: LockKind| kind.excludes(k);
                if self.holds.values().any(|h| blocked(h.kind)) {
                    return Ok(Some(self.expiring(now, true, blocked)));
                }
                Ok((!self.writers_waiting.is_empty()).then(Holder::unknown))
            }
            LockKind::Write => {
                // The owner's own upgradeable read does not stand in the way of its upgrade.
                let others = |o: &OwnerToken, h: &Hold| !(*o == owner && h.kind == LockKind::UpgradeableRead);
                let held = self.holds.iter().any(|(o, h)| others(o, h));
                Ok(held.then(|| {
                    let end = self
                        .holds
                        .iter()
                        .filter(|(o, h)| others(o, h))
                        .map(|(_, h)| h.expires_at)
                        .max();
                    end.map_or_else(Holder::unknown, |end| Holder::expiring_in(end - now))
                }))
            }
            LockKind::Exclusive => Err(Error::invalid_options(
                "the mutex is not a semaphore or read-write lock",
            )),
        }
    }
}

impl Objects {
    /// One attempt at a hold of `kind`; `fencing` is the store's counter, advanced on a grant.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn try_acquire(
        &mut self,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
        ttl: Duration,
        waiter: Option<(&str, Duration)>,
        now: Instant,
        fencing: &mut u64,
    ) -> crate::Result<TryAcquire> {
        let expires_at = now
            .checked_add(ttl)
            .ok_or_else(|| Error::invalid_options(format!("a TTL of {ttl:?} overflows the clock")))?;
        let object = self
            .by_key
            .entry((kind.primitive(), name.clone()))
            .or_insert_with(Object::new);
        object.prune(now);
        if let Some(holder) = object.admits(name, kind, owner, now)? {
            if let (LockKind::Write, Some((id, stay))) = (kind, waiter) {
                object.writers_waiting.insert(id.to_owned(), now + stay);
            }
            return Ok(TryAcquire::Held(holder));
        }
        if let (LockKind::Write, Some((id, _))) = (kind, waiter) {
            object.writers_waiting.remove(id);
        }
        // An upgrade turns the owner's upgradeable read into this write hold (inserted under
        // the same owner, in its place), with a fencing token of its own.
        *fencing += 1;
        let fencing = *fencing;
        object.holds.insert(
            owner,
            Hold {
                kind,
                expires_at,
                fencing,
            },
        );
        Ok(TryAcquire::Acquired(
            Lease::new(name.clone(), owner, ttl, now)
                .with_kind(kind)
                .with_fencing(FencingToken::new(fencing)),
        ))
    }

    /// The live hold of `lease`'s owner, if any.
    fn hold_of(&mut self, lease: &Lease, now: Instant) -> Option<(&mut Object, OwnerToken)> {
        let object = self
            .by_key
            .get_mut(&(lease.kind().primitive(), lease.name().clone()))?;
        object.prune(now);
        object
            .holds
            .get(&lease.owner())
            .is_some_and(|hold| hold.kind == lease.kind())
            .then_some((object, lease.owner()))
    }

    pub(crate) fn release(&mut self, lease: &Lease, now: Instant) -> bool {
        let Some((object, owner)) = self.hold_of(lease, now) else {
            return false;
        };
        object.holds.remove(&owner);
        object.releases.send_modify(|count| *count += 1);
        self.forget_idle(lease.kind().primitive(), lease.name());
        true
    }

    pub(crate) fn extend(
        &mut self,
        lease: &Lease,
        ttl: Duration,
        now: Instant,
    ) -> crate::Result<Option<Lease>> {
        let expires_at = now
            .checked_add(ttl)
            .ok_or_else(|| Error::invalid_options(format!("a TTL of {ttl:?} overflows the clock")))?;
        let Some((object, owner)) = self.hold_of(lease, now) else {
            return Ok(None);
        };
        if let Some(hold) = object.holds.get_mut(&owner) {
            hold.expires_at = expires_at;
        }
        Ok(Some(lease.renewed(ttl, now)))
    }

    pub(crate) fn withdraw(&mut self, name: &LockName, kind: LockKind, waiter: &str) {
        if let Some(object) = self.by_key.get_mut(&(kind.primitive(), name.clone())) {
            if object.writers_waiting.remove(waiter).is_some() {
                object.releases.send_modify(|count| *count += 1);
            }
        }
        self.forget_idle(kind.primitive(), name);
    }

    /// A receiver of `name`'s release announcements.
    pub(crate) fn watch(&mut self, name: &LockName, primitive: Primitive) -> watch::Receiver<u64> {
        self.by_key
            .entry((primitive, name.clone()))
            .or_insert_with(Object::new)
            .releases
            .subscribe()
    }

    pub(crate) fn holders(&mut self, name: &LockName, primitive: Primitive, now: Instant) -> Vec<LockState> {
        let Some(object) = self.by_key.get_mut(&(primitive, name.clone())) else {
            return Vec::new();
        };
        object.prune(now);
        object
            .holds
            .iter()
            .map(|(owner, hold)| {
                LockState::held(
                    owner.to_string(),
                    Some(FencingToken::new(hold.fencing)),
                    Some(hold.expires_at - now),
                )
                .with_kind(hold.kind)
            })
            .collect()
    }

    /// Drops objects with no live hold, waiting writer or watcher.
    pub(crate) fn sweep(&mut self, now: Instant) {
        self.by_key.retain(|_, object| {
            object.prune(now);
            !object.is_idle()
        });
    }

    fn forget_idle(&mut self, primitive: Primitive, name: &LockName) {
        let key = (primitive, name.clone());
        if self.by_key.get(&key).is_some_and(Object::is_idle) {
            self.by_key.remove(&key);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.by_key.len()
    }
}

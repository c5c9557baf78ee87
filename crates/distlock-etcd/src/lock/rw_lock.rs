//! The read-write lock: the layout and order of etcd's own `recipe.RWMutex` (its Go client's
//! `experimental/recipes`), one FIFO queue ordered by create revision.
//!
//! ```text
//! <root>/rw-lock:<encoded name>/read/<lease id, hex>-<owner token>    a reader; value = the owner token
//! <root>/rw-lock:<encoded name>/write/<lease id, hex>-<owner token>   a writer; value = the owner token
//! <root>/rw-lock:<encoded name>/x-upgradeable/<lease id, hex>-<owner token>
//!                                                                     an upgradeable reader (see `upgrade.rs`)
//! ```
//!
//! A reader holds when no writer's key was created before its own, a writer when its key is
//! the first under the prefix. A waiter watches only the key it must outlive: a reader the
//! last writer before it, a writer the key just before it (the same wait as the mutex's).
//! The queue is FIFO: a waiting writer's key keeps every reader that comes after it out until
//! it has held and released, so a stream of readers never starves a writer. etcd's
//! `RWMutex` names its keys `read/<time>` and `write/<time>` under the same prefix and looks
//! for the last key below its own mod revision (ours are never written twice, so their mod
//! revision is their create revision, except an upgraded hold's anchor, see `upgrade.rs`):
//! it queues with this crate in one order, given `<root>/rw-lock:<encoded name>` as its
//! prefix. Keys go with the client's lease.
//!
//! An upgradeable reader holds when no writer and no other upgradeable reader was created
//! before it; readers do not look at it, writers wait behind it as behind any key. Its
//! upgrade, and why a reader also stays out while an upgraded key is in the queue: see
//! `upgrade.rs`.
//!
//! Fencing: a hold's token is its key's create revision when it holds at once, else the
//! revision of the look that found it first (after every key it waited on was deleted). A
//! writer holds only once every key before it is gone and every later reader waits for it,
//! so writers and the readers around them hold in the order of their tokens; an upgrade,
//! granted out of the queue's order, takes its grant's revision, and whoever waited behind it
//! gets in after the upgraded hold's deletion, so with a greater token.
//!
//! Round trips: an attempt is 1 transaction (our key created only when nothing blocks it,
//! else the first blocker read: nothing is left behind); a wait is 1 when it holds at once,
//! else 1 look at the key to outlive plus a watch on it, and 1 per wake-up. Release: 1 (a write lock's deletes its key and
//! the upgradeable read key it may have been upgraded from, in one transaction).

use std::sync::Arc;

use distlock_core::{
    Error, FencingToken, Holder, Lease, LockKind, LockName, LockState, OwnerToken, Primitive, Result,
    TryAcquire,
};
use tokio::time::Instant;

use super::mutex::{owner_of, Entry, Line};
use super::Inner;
use crate::keys::{contender_key, object_prefix, rw_reads, rw_upgradeables, rw_writes, KeyRange};
use crate::proto::KeyValue;
use crate::txn::{self, created, kvs};

/// Where a hold of one side of a read-write lock queues.
pub(super) struct Side {
    /// The prefix our key goes under (`read/`, `write/` or `x-upgradeable/`).
    pub(super) own: String,
    /// The keys created before ours that keep us out: the writers for a reader, every key for
    /// a writer, the writers and upgradeable readers for an upgradeable reader.
    pub(super) blockers: KeyRange,
    /// The upgradeable readers' prefix: a reader also stays out while one of them is upgraded.
    pub(super) upgradeables: String,
    /// The readers and writers (what an upgrade waits on: a reader before every writer holds).
    pub(super) readers_and_writers: KeyRange,
}

impl Side {
    pub(super) fn of(inner: &Inner, name: &LockName, kind: LockKind) -> Result<Self> {
        let prefix = object_prefix(inner.config.root(), Primitive::RwLock, name);
        let (reads, writes, upgradeables) = (rw_reads(&prefix), rw_writes(&prefix), rw_upgradeables(&prefix));
        let (own, blockers) = match kind {
            LockKind::Read => (reads.clone(), KeyRange::prefix(&writes)),
            LockKind::Write => (writes.clone(), KeyRange::prefix(&prefix)),
            LockKind::UpgradeableRead => (upgradeables.clone(), KeyRange::spanning(&writes, &upgradeables)),
            other => {
                return Err(Error::invalid_options(format!(
                    "{other} is no side of a read-write lock"
                )))
            }
        };
        Ok(Self {
            own,
            blockers,
            readers_and_writers: KeyRange::spanning(&reads, &writes),
            upgradeables,
        })
    }

    /// The upgradeable read key of `owner` on `lease` (what makes a write attempt its upgrade).
    pub(super) fn upgradeable_key(&self, lease: i64, owner: OwnerToken) -> String {
        contender_key(&self.upgradeables, lease, owner)
    }
}

/// Whether our key, created at `mine`, holds given `first`, the oldest key under the
/// blockers' prefix (ours, for a writer first in line).
fn holds(mine: i64, first: Option<&KeyValue>) -> bool {
    mine > 0 && first.is_none_or(|first| first.create_revision >= mine)
}

/// An upgradeable read that became the write lock: its key was written again (see
/// `upgrade.rs`). It keeps every reader out.
pub(super) fn upgraded(kv: &KeyValue) -> bool {
    kv.version > 1
}

impl Inner {
    /// One attempt at a read, the write lock or the upgradeable read: 1 transaction that
    /// creates our key if no key that would keep it out exists, else reads the first such key
    /// and ours (a key of ours still ahead of every blocker, left by an attempt whose reply
    /// was lost, is adopted). A write attempt by the owner of the upgradeable read is its
    /// upgrade (see `upgrade.rs`).
    pub(super) async fn try_rw(
        self: &Arc<Self>,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
    ) -> Result<TryAcquire> {
        let side = Side::of(self, name, kind)?;
        let sent_at = Instant::now();
        let lease = self.lease().await?;
        let key = contender_key(&side.own, lease.id, owner);
        let upgradeable = side.upgradeable_key(lease.id, owner);
        // Never put over a key of ours: its mod revision would move past later keys, and
        // etcd's own `RWMutex` orders by mod revision.
        let mut compare = vec![txn::none_in(&side.blockers), txn::absent(&key)];
        if kind == LockKind::Read {
            compare.push(txn::none_rewritten_under(&side.upgradeables));
        }
        let reply = self
            .txn(
                "acquire",
                txn::txn(
                    compare,
                    vec![txn::put(&key, &owner.to_string(), lease.id), txn::get(&key)],
                    vec![
                        txn::first_in(&side.blockers),
                        txn::get(&key),
                        txn::range(txn::all_under(&side.upgradeables, 0)),
                        txn::get(&upgradeable),
                    ],
                ),
            )
            .await?;
        if !reply.succeeded && kind == LockKind::Write {
            if let Some(read) = kvs(&reply, 3).first() {
                return self
                    .try_upgrade(name, owner, lease, read.create_revision, sent_at)
                    .await;
            }
        }
        let (mine, first) = if reply.succeeded {
            (created(&reply, 1), None)
        } else {
            (created(&reply, 1), kvs(&reply, 0).first())
        };
        let shut_out = !reply.succeeded && kind == LockKind::Read && kvs(&reply, 2).iter().any(upgraded);
        if holds(mine, first) && !shut_out {
            let hold = Self::hold(name, owner, lease, &key, mine, sent_at).with_kind(kind);
            return Ok(TryAcquire::Acquired(hold));
        }
        Ok(TryAcquire::Held(match first {
            Some(first) => Holder::unknown().with_owner(owner_of(first)),
            None => Holder::unknown(),
        }))
    }

    /// Waits in the read-write lock's queue until `deadline`: our key created (with a read of
    /// the first blocker, so 1 round trip when it holds at once), then the wait of the mutex
    /// on the last blocker before our key (a reader also outlives an upgraded hold, read with
    /// the same looks). A write wait by the owner of the upgradeable read is its upgrade (see
    /// `upgrade.rs`). Cancel safe: dropped, our key is deleted in the background.
    pub(super) async fn queue_rw(
        self: &Arc<Self>,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let side = Side::of(self, name, kind)?;
        loop {
            let sent_at = Instant::now();
            let lease = self.lease().await?;
            let key = contender_key(&side.own, lease.id, owner);
            let upgradeable = side.upgradeable_key(lease.id, owner);
            let mut entry = Entry::new(self, &key);
            let look = [
                txn::first_in(&side.blockers),
                txn::range(txn::all_under(&side.upgradeables, 0)),
                txn::get(&upgradeable),
            ];
            let reply = entry
                .create(
                    "acquire",
                    txn::txn(
                        vec![txn::absent(&key)],
                        [txn::put(&key, &owner.to_string(), lease.id), txn::get(&key)]
                            .into_iter()
                            .chain(look.clone())
                            .collect(),
                        [txn::get(&key)].into_iter().chain(look).collect(),
                    ),
                )
                .await?;
            let at = usize::from(reply.succeeded);
            let mine = created(&reply, at);
            if mine == 0 {
                // Our key went with its lease between the comparison and the read.
                continue;
            }
            if kind == LockKind::Write {
                if let Some(read) = kvs(&reply, at + 3).first() {
                    let read = read.create_revision;
                    return self
                        .wait_upgrade(name, owner, lease, (entry, mine), read, deadline, sent_at)
                        .await;
                }
            }
            let mut first_held = holds(mine, kvs(&reply, at + 1).first());
            // The upgradeable readers as last read, and the revision of that read.
            let mut upgradeables = kvs(&reply, at + 2).to_vec();
            // A hold that waited takes as its token the revision at which it found itself
            // first, not its key's creation: an upgrade is granted out of the queue's order,
            // and every hold after it needs a token above the upgrade's.
            let mut token = mine;
            let line = loop {
                if !first_held {
                    // A reader reads the upgradeable readers with each look, for an upgraded one.
                    let also = (kind == LockKind::Read).then_some(side.upgradeables.as_str());
                    match self
                        .wait_in_line_reading(&side.blockers, (&key, mine), lease, deadline, also)
                        .await?
                    {
                        (Line::First { at }, read) => (token, upgradeables) = (at, read),
                        (ended, _) => break ended,
                    }
                    first_held = true;
                }
                let shut_out = match kind {
                    LockKind::Read => upgradeables.iter().find(|kv| upgraded(kv)),
                    _ => None,
                };
                let Some(upgraded_hold) = shut_out else {
                    break Line::First { at: token };
                };
                match self.wait_gone(&upgraded_hold.key, token, lease, deadline).await? {
                    // Gone (or look again): the writers before us may have changed too.
                    None => first_held = false,
                    Some(ended) => break ended,
                }
            };
            match line {
                Line::First { at } => {
                    entry.disarm();
                    return Ok(Some(
                        Self::hold(name, owner, lease, &key, at, sent_at).with_kind(kind),
                    ));
                }
                Line::TimedOut => {
                    entry.delete_now().await;
                    return Ok(None);
                }
                Line::LeaseEnded => {
                    entry.disarm();
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// The holders of the read-write lock `name` (1 round trip): the first key if it is a
    /// writer's or an upgraded hold's, else every reader created before the first writer and
    /// the first upgradeable reader among them, each with its owner and fencing token.
    pub(super) async fn rw_holders(self: &Arc<Self>, name: &LockName) -> Result<Vec<LockState>> {
        let prefix = object_prefix(self.config.root(), Primitive::RwLock, name);
        let writes = rw_writes(&prefix);
        let upgradeables = rw_upgradeables(&prefix);
        let reply = self
            .txn(
                "inspect",
                txn::txn(
                    Vec::new(),
                    vec![txn::range(txn::all_under(&prefix, 0))],
                    Vec::new(),
                ),
            )
            .await?;
        let is_write = |kv: &KeyValue| kv.key.starts_with(writes.as_bytes());
        let is_upgradeable = |kv: &KeyValue| kv.key.starts_with(upgradeables.as_bytes());
        let state = |kv: &KeyValue, kind: LockKind, token: i64| {
            LockState::held(owner_of(kv), Some(FencingToken::new(token.unsigned_abs())), None).with_kind(kind)
        };
        let all = kvs(&reply, 0);
        Ok(match all.first() {
            Some(first) if is_write(first) => vec![state(first, LockKind::Write, first.create_revision)],
            // The upgraded hold's token is the revision of its upgrade.
            Some(first) if is_upgradeable(first) && upgraded(first) => {
                vec![state(first, LockKind::Write, first.mod_revision)]
            }
            _ => {
                let mut upgradeable_seen = false;
                all.iter()
                    .take_while(|kv| !is_write(kv))
                    .filter_map(|kv| {
                        if !is_upgradeable(kv) {
                            return Some(state(kv, LockKind::Read, kv.create_revision));
                        }
                        let first = !std::mem::replace(&mut upgradeable_seen, true);
                        first.then(|| state(kv, LockKind::UpgradeableRead, kv.create_revision))
                    })
                    .collect()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(revision: i64) -> KeyValue {
        KeyValue {
            create_revision: revision,
            ..KeyValue::default()
        }
    }

    #[test]
    fn a_key_holds_when_no_blocker_is_older() {
        assert!(holds(5, None));
        assert!(holds(5, Some(&at(5))), "a writer first in line");
        assert!(holds(5, Some(&at(9))), "a reader before the first writer");
        assert!(!holds(5, Some(&at(3))));
        assert!(!holds(0, None), "no key of ours");
    }
}

//! The read-write lock: the layout and order of etcd's own `recipe.RWMutex` (its Go client's
//! `experimental/recipes`), one FIFO queue ordered by create revision.
//!
//! ```text
//! <root>/rw-lock:<encoded name>/read/<lease id, hex>-<owner token>    a reader; value = the owner token
//! <root>/rw-lock:<encoded name>/write/<lease id, hex>-<owner token>   a writer; value = the owner token
//! ```
//!
//! A reader holds when no writer's key was created before its own, a writer when its key is
//! the first under the prefix. A waiter watches only the key it must outlive: a reader the
//! last writer before it, a writer the key just before it (the same wait as the mutex's).
//! The queue is FIFO: a waiting writer's key keeps every reader that comes after it out until
//! it has held and released, so a stream of readers never starves a writer. etcd's
//! `RWMutex` names its keys `read/<time>` and `write/<time>` under the same prefix and looks
//! for the last key below its own mod revision (ours are never written twice, so their mod
//! revision is their create revision): it queues with this crate in one order, given
//! `<root>/rw-lock:<encoded name>` as its prefix. Keys go with the client's lease.
//!
//! Fencing: a hold's token is its key's create revision. A writer holds only once every key
//! before it is gone and every later reader waits for it, so writers and the readers around
//! them hold in the order of their tokens.
//!
//! Round trips: an attempt is 1 transaction (our key created only when nothing blocks it,
//! else the first blocker read: nothing is left behind); a wait is 1 when it holds at once,
//! else 1 look at the key to outlive plus a watch on it, and 1 per wake-up. Release: 1.

use std::sync::Arc;

use distlock_core::{
    Error, FencingToken, Holder, Lease, LockKind, LockName, LockState, OwnerToken, Primitive, Result,
    TryAcquire,
};
use tokio::time::Instant;

use super::mutex::{owner_of, Entry, Line};
use super::Inner;
use crate::keys::{contender_key, object_prefix, rw_reads, rw_writes};
use crate::proto::KeyValue;
use crate::txn::{self, created, kvs};

/// Where a hold of one side of a read-write lock queues.
struct Side {
    /// The prefix our key goes under (`read/` or `write/`).
    own: String,
    /// The prefix of the keys created before ours that keep us out: the writers for a reader,
    /// every key for a writer.
    blockers: String,
}

impl Side {
    fn of(inner: &Inner, name: &LockName, kind: LockKind) -> Result<Self> {
        let prefix = object_prefix(inner.config.root(), Primitive::RwLock, name);
        match kind {
            LockKind::Read => Ok(Self {
                own: rw_reads(&prefix),
                blockers: rw_writes(&prefix),
            }),
            LockKind::Write => Ok(Self {
                own: rw_writes(&prefix),
                blockers: prefix,
            }),
            other => Err(Error::invalid_options(format!(
                "{other} is no side of a read-write lock"
            ))),
        }
    }
}

/// Whether our key, created at `mine`, holds given `first`, the oldest key under the
/// blockers' prefix (ours, for a writer first in line).
fn holds(mine: i64, first: Option<&KeyValue>) -> bool {
    mine > 0 && first.is_none_or(|first| first.create_revision >= mine)
}

impl Inner {
    /// One attempt at a read or the write lock: 1 transaction that creates our key if no key
    /// that would keep it out exists, else reads the first such key and ours (a key of ours
    /// still ahead of every blocker, left by an attempt whose reply was lost, is adopted).
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
        let reply = self
            .txn(
                "acquire",
                txn::txn(
                    // Never put over a key of ours: its mod revision would move past later
                    // keys, and etcd's own `RWMutex` orders by mod revision.
                    vec![txn::none_under(&side.blockers), txn::absent(&key)],
                    vec![txn::put(&key, &owner.to_string(), lease.id), txn::get(&key)],
                    vec![txn::first_under(&side.blockers), txn::get(&key)],
                ),
            )
            .await?;
        let (mine, first) = if reply.succeeded {
            (created(&reply, 1), None)
        } else {
            (created(&reply, 1), kvs(&reply, 0).first())
        };
        if holds(mine, first) {
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
    /// on the last blocker before our key. Cancel safe: dropped, our key is deleted in the
    /// background.
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
            let mut entry = Entry::new(self, &key);
            let reply = entry
                .create(
                    "acquire",
                    txn::txn(
                        vec![txn::absent(&key)],
                        vec![
                            txn::put(&key, &owner.to_string(), lease.id),
                            txn::get(&key),
                            txn::first_under(&side.blockers),
                        ],
                        vec![txn::get(&key), txn::first_under(&side.blockers)],
                    ),
                )
                .await?;
            let (mine, first) = if reply.succeeded {
                (created(&reply, 1), kvs(&reply, 2).first())
            } else {
                (created(&reply, 0), kvs(&reply, 1).first())
            };
            if mine == 0 {
                // Our key went with its lease between the comparison and the read.
                continue;
            }
            if holds(mine, first) {
                entry.disarm();
                return Ok(Some(
                    Self::hold(name, owner, lease, &key, mine, sent_at).with_kind(kind),
                ));
            }
            match self
                .wait_in_line(&side.blockers, &key, mine, lease, deadline)
                .await?
            {
                Line::First => {
                    entry.disarm();
                    return Ok(Some(
                        Self::hold(name, owner, lease, &key, mine, sent_at).with_kind(kind),
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
    /// writer's, else every reader created before the first writer, each with its owner (the
    /// key's value; the key itself for etcd's own valueless keys) and create revision.
    pub(super) async fn rw_holders(self: &Arc<Self>, name: &LockName) -> Result<Vec<LockState>> {
        let prefix = object_prefix(self.config.root(), Primitive::RwLock, name);
        let writes = rw_writes(&prefix);
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
        let all = kvs(&reply, 0);
        let holding: Vec<&KeyValue> = match all.first() {
            Some(first) if is_write(first) => vec![first],
            _ => all.iter().take_while(|kv| !is_write(kv)).collect(),
        };
        Ok(holding
            .into_iter()
            .map(|kv| {
                let kind = if is_write(kv) {
                    LockKind::Write
                } else {
                    LockKind::Read
                };
                LockState::held(
                    owner_of(kv),
                    Some(FencingToken::new(kv.create_revision.unsigned_abs())),
                    None,
                )
                .with_kind(kind)
            })
            .collect())
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

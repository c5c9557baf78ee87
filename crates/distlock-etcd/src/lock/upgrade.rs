//! The upgrade of an upgradeable read to the write lock, on the queue of etcd's
//! `recipe.RWMutex` (see `rw_lock.rs`).
//!
//! ```text
//! <root>/rw-lock:<encoded name>/read/<lease id, hex>-<owner token>            a reader
//! <root>/rw-lock:<encoded name>/write/<lease id, hex>-<owner token>           a writer
//! <root>/rw-lock:<encoded name>/x-upgradeable/<lease id, hex>-<owner token>   an upgradeable reader;
//!                                                                             written again once upgraded
//! ```
//!
//! An upgradeable reader is one more kind of key in the one queue: it holds when no writer
//! and no other upgradeable reader was created before it (`x-upgradeable/` sorts just after
//! `write/`, so that is one range), it keeps writers out as any key ahead of them does, and
//! readers do not look at it; so it shares with readers, and like them stays out while a
//! writer waits.
//!
//! **The upgrade** is a write attempt by the owner whose upgradeable read key is in the queue
//! (found in the write attempt's own transaction, on the same lease). Its write key is the
//! waiter record: created at once, it keeps every later reader out, as any waiting writer's.
//! It is granted when no reader holds: when the first key among the readers and writers is a
//! writer's (a waiting writer or our write key: every reader left is behind it) or there is
//! none. The grant is one transaction that holds only if the read hold's key is still there
//! and never written again, and that first writer is still there (or still no reader at
//! all), and then writes the read hold's key again. From that transaction on, the store
//! records one write hold (the write key, whose lease the guard renews) and no upgradeable
//! read: the read key stays, written again, as the anchor of the hold's place in the queue,
//! so a writer that waited all along behind it (created before our write key) stays out, and
//! readers stay out of the queue while an upgraded key is there (also those behind a waiting
//! writer that gives up). The write hold's fencing token is the grant's revision, above every
//! earlier token. Releasing the write hold deletes both keys (1 transaction); renewing the old
//! read lease finds its key written again and answers `None`.
//!
//! etcd's own `RWMutex` has no upgrade and does not know these keys: its writers queue behind
//! an upgradeable reader as behind any key, but its readers do not stay out of an upgraded
//! hold whose waiting writer gave up.
//!
//! Round trips: `try_upgrade` 3 when granted (the write attempt that finds the read key, a
//! look, the grant; a lost race looks again, at most three times), 2 when a reader holds.
//! `upgrade` that waits: 1 to create the write key, 1 look, then 1 look and a watch per
//! reader that leaves, and 1 to grant.

use std::sync::Arc;

use distlock_core::{Error, Holder, Lease, LockKind, LockName, LossReason, OwnerToken, Result, TryAcquire};
use tokio::time::Instant;

use super::mutex::{owner_of, Entry, Line};
use super::rw_lock::{upgraded, Side};
use super::{ClientLease, Inner};
use crate::keys::{contender_key, KeyRange};
use crate::proto::{Compare, TxnResponse};
use crate::txn::{self, kvs, revision};

/// How often one try reads again after losing a race.
const TRIES: usize = 3;

/// What one look at the queue says about an upgrade.
enum Look {
    /// The read hold is gone.
    Lost,
    /// Already upgraded (an earlier try whose reply was lost): the hold, at this token.
    Upgraded(i64),
    /// A reader holds: this key.
    Reader(Vec<u8>, String),
    /// No reader holds, as long as this comparison holds.
    Free(Compare),
}

impl Inner {
    /// Reads the read hold's key (created at `read`), the write key and the first reader or
    /// writer (1 round trip).
    async fn look_at_upgrade(
        &self,
        side: &Side,
        (read_key, read): (&str, i64),
        write_key: &str,
    ) -> Result<(Look, TxnResponse)> {
        let reply = self
            .txn_idempotent(
                "look at the readers",
                txn::txn(
                    Vec::new(),
                    vec![
                        txn::get(read_key),
                        txn::get(write_key),
                        txn::first_in(&side.readers_and_writers),
                    ],
                    Vec::new(),
                ),
            )
            .await?;
        let look = match kvs(&reply, 0).first() {
            Some(kv) if kv.create_revision != read => Look::Lost,
            None => Look::Lost,
            Some(kv) if upgraded(kv) && !kvs(&reply, 1).is_empty() => Look::Upgraded(kv.mod_revision),
            Some(kv) if upgraded(kv) => Look::Lost,
            Some(_) => match kvs(&reply, 2).first() {
                None => Look::Free(txn::none_in(&KeyRange::prefix(&side_reads(side)))),
                Some(first) if first.key.starts_with(side_reads(side).as_bytes()) => {
                    Look::Reader(first.key.clone(), owner_of(first))
                }
                Some(first) => Look::Free(txn::created_at(
                    &String::from_utf8_lossy(&first.key),
                    first.create_revision,
                )),
            },
        };
        Ok((look, reply))
    }

    /// The grant (1 round trip): the read key written again if it is still the hold's and
    /// `free` holds; with `create`, the write key created too (else it must be the one at
    /// `write`). The write hold's token: the grant's revision.
    async fn grant_upgrade(
        &self,
        (read_key, read): (&str, i64),
        (write_key, write): (&str, Option<i64>),
        free: Compare,
        owner: OwnerToken,
        lease: ClientLease,
    ) -> Result<Option<i64>> {
        let mut compare = vec![
            txn::created_at(read_key, read),
            txn::never_rewritten(read_key),
            free,
        ];
        let mut success = vec![txn::put_keeping_lease(read_key, &owner.to_string())];
        match write {
            Some(write) => compare.push(txn::created_at(write_key, write)),
            None => {
                compare.push(txn::absent(write_key));
                success.push(txn::put(write_key, &owner.to_string(), lease.id));
            }
        }
        let reply = self
            .txn("upgrade", txn::txn(compare, success, Vec::new()))
            .await?;
        Ok(reply.succeeded.then(|| revision(&reply)))
    }

    /// One attempt at the upgrade of `owner`'s upgradeable read (its key created at `read`).
    pub(super) async fn try_upgrade(
        self: &Arc<Self>,
        name: &LockName,
        owner: OwnerToken,
        lease: ClientLease,
        read: i64,
        sent_at: Instant,
    ) -> Result<TryAcquire> {
        let side = Side::of(self, name, LockKind::Write)?;
        let read_key = side.upgradeable_key(lease.id, owner);
        let write_key = contender_key(&side.own, lease.id, owner);
        for _ in 0..TRIES {
            let (look, _) = self.look_at_upgrade(&side, (&read_key, read), &write_key).await?;
            let token = match look {
                Look::Lost => return Err(lost(name)),
                Look::Upgraded(token) => token,
                Look::Reader(_, owner) => return Ok(TryAcquire::Held(Holder::unknown().with_owner(owner))),
                Look::Free(free) => {
                    match self
                        .grant_upgrade((&read_key, read), (&write_key, None), free, owner, lease)
                        .await?
                    {
                        Some(token) => token,
                        None => continue,
                    }
                }
            };
            return Ok(TryAcquire::Acquired(write_hold(
                name, owner, lease, &write_key, token, sent_at,
            )));
        }
        Ok(TryAcquire::Held(Holder::unknown()))
    }

    /// Waits for the upgrade of `owner`'s upgradeable read (its key created at `read`) until
    /// `deadline`, `entry` holding our write key (created at `write`), the waiter record.
    /// Timed out, the write key is deleted and the upgradeable read holds on.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn wait_upgrade(
        self: &Arc<Self>,
        name: &LockName,
        owner: OwnerToken,
        lease: ClientLease,
        (mut entry, write): (Entry, i64),
        read: i64,
        deadline: Option<Instant>,
        sent_at: Instant,
    ) -> Result<Option<Lease>> {
        let side = Side::of(self, name, LockKind::Write)?;
        let read_key = side.upgradeable_key(lease.id, owner);
        let write_key = contender_key(&side.own, lease.id, owner);
        loop {
            let (look, reply) = self.look_at_upgrade(&side, (&read_key, read), &write_key).await?;
            match look {
                Look::Lost => {
                    entry.delete_now().await;
                    return Err(lost(name));
                }
                Look::Upgraded(token) => {
                    entry.disarm();
                    return Ok(Some(write_hold(name, owner, lease, &write_key, token, sent_at)));
                }
                Look::Reader(key, _) => {
                    match self.wait_gone(&key, revision(&reply), lease, deadline).await? {
                        None => {}
                        Some(Line::TimedOut) => {
                            entry.delete_now().await;
                            return Ok(None);
                        }
                        Some(_) => {
                            entry.disarm();
                            return Err(lost(name));
                        }
                    }
                }
                Look::Free(free) => {
                    let granted = self
                        .grant_upgrade((&read_key, read), (&write_key, Some(write)), free, owner, lease)
                        .await?;
                    if let Some(token) = granted {
                        entry.disarm();
                        return Ok(Some(write_hold(name, owner, lease, &write_key, token, sent_at)));
                    }
                }
            }
        }
    }
}

/// The readers' prefix of the read-write lock whose writers' prefix is `side.own`.
fn side_reads(side: &Side) -> String {
    let writes = side.own.strip_suffix("write/").unwrap_or(&side.own);
    crate::keys::rw_reads(writes)
}

/// The write hold an upgrade gives: its write key, the grant's revision as its token.
fn write_hold(
    name: &LockName,
    owner: OwnerToken,
    lease: ClientLease,
    key: &str,
    token: i64,
    sent_at: Instant,
) -> Lease {
    Inner::hold(name, owner, lease, key, token, sent_at).with_kind(LockKind::Write)
}

/// The upgradeable read is gone: there is nothing to upgrade.
fn lost(name: &LockName) -> Error {
    Error::LockLost {
        name: name.to_string(),
        reason: LossReason::NotOwned,
    }
}

//! The mutex: etcd's lock recipe. Each contender is a key under the lock's prefix, attached
//! to its client's lease; the holder is the key of the lowest create revision, whose create
//! revision is the fencing token (revisions grow over the cluster's whole history, also when
//! the prefix empties and fills again); each waiter watches only the key just before it.
//!
//! - One attempt: a transaction that creates our key only if the prefix is empty, else reads
//!   the first contender (1 round trip either way; nothing is created when the lock is held,
//!   so a failed attempt leaves nothing behind). A key of ours already first (an earlier
//!   attempt of the same owner and lease whose reply was lost) is adopted.
//! - Waiting: etcd's `concurrency.Mutex` transaction (create our key if it does not exist,
//!   else read it; read the first contender), then until ours is first: one read-only
//!   transaction that reads our key (gone: the lease ended) and the contender just before
//!   it, and a watch on that contender's deletion.
//! - Release: delete our key. Its name carries the lease and the owner token, unique to this
//!   hold, so the delete is owner-checked by construction.
//!
//! The key is fully determined by the lease and the owner token, so a create sent again after
//! an ambiguous reply finds the same key instead of making a second one.

use std::sync::Arc;

use distlock_core::{
    Error, FencingToken, Holder, Lease, LockKind, LockName, LockState, OwnerToken, Primitive, Result,
    TryAcquire,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{ClientLease, Inner};
use crate::client::BACKEND;
use crate::keys::{
    contender_key, is_owners, object_prefix, owner_in, upgradeable_of_write, write_of_upgradeable, KeyRange,
};
use crate::proto::{DeleteRangeRequest, KeyValue, TxnRequest, TxnResponse};
use crate::txn::{self, kvs, revision};

/// How often a waiter looks again without a wake-up: a watch that went silent (its member
/// cut off from the others) must not keep a waiter from a lock that is free.
pub(super) const LOOK_AGAIN_AFTER_TTLS: u32 = 1;

/// The most operations etcd takes in one transaction (its `--max-txn-ops` default).
const MAX_TXN_OPS: usize = 128;

impl Inner {
    pub(super) async fn txn(&self, what: &str, request: TxnRequest) -> Result<TxnResponse> {
        self.rpc
            .call(what, move |rpc| {
                let request = request.clone();
                async move { rpc.kv().txn(request).await }
            })
            .await
    }

    /// As [`txn`](Self::txn), for a transaction that may be applied twice with the effect of
    /// once (reads, deletes of given keys, the mutex's creates, which find their own key):
    /// sent again after any transient failure within the operation timeout.
    pub(super) async fn txn_idempotent(&self, what: &str, request: TxnRequest) -> Result<TxnResponse> {
        self.rpc
            .call_idempotent(what, move |rpc| {
                let request = request.clone();
                async move { rpc.kv().txn(request).await }
            })
            .await
    }

    fn prefix(&self, name: &LockName) -> String {
        object_prefix(self.config.root(), Primitive::Mutex, name)
    }

    /// The lease of a hold on `name` won by `owner` with the key `kv` on `lease`.
    pub(super) fn hold(
        name: &LockName,
        owner: OwnerToken,
        lease: ClientLease,
        key: &str,
        revision: i64,
        sent_at: Instant,
    ) -> Lease {
        Lease::session_bound(name.clone(), owner, lease.epoch, sent_at)
            .with_fencing(FencingToken::new(revision.unsigned_abs()))
            .with_handle(key)
            .with_kind(LockKind::Exclusive)
    }

    /// One attempt at the mutex: 1 round trip.
    pub(super) async fn try_take(
        self: &Arc<Self>,
        name: &LockName,
        owner: OwnerToken,
    ) -> Result<distlock_core::TryAcquire> {
        let sent_at = Instant::now();
        let lease = self.lease().await?;
        let prefix = self.prefix(name);
        let key = contender_key(&prefix, lease.id, owner);
        let reply = self
            .txn_idempotent(
                "acquire",
                txn::txn(
                    vec![txn::none_under(&prefix)],
                    vec![txn::put(&key, &owner.to_string(), lease.id)],
                    vec![txn::first_under(&prefix)],
                ),
            )
            .await?;
        if reply.succeeded {
            return Ok(TryAcquire::Acquired(Self::hold(
                name,
                owner,
                lease,
                &key,
                revision(&reply),
                sent_at,
            )));
        }
        match kvs(&reply, 0).first() {
            Some(first) if first.key == key.as_bytes() => Ok(TryAcquire::Acquired(Self::hold(
                name,
                owner,
                lease,
                &key,
                first.create_revision,
                sent_at,
            ))),
            Some(first) => Ok(TryAcquire::Held(Holder::unknown().with_owner(owner_of(first)))),
            // Emptied between the comparison and the read: cannot happen in one
            // transaction, but nothing is held either way.
            None => Ok(TryAcquire::Held(Holder::unknown())),
        }
    }

    /// Waits in line for the mutex until `deadline`. Cancel safe: dropped, our key is deleted
    /// in the background.
    pub(super) async fn queue(
        self: &Arc<Self>,
        name: &LockName,
        owner: OwnerToken,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let prefix = self.prefix(name);
        loop {
            let sent_at = Instant::now();
            let lease = self.lease().await?;
            let key = contender_key(&prefix, lease.id, owner);
            let mut entry = Entry::new(self, &key);
            let reply = entry
                .create(
                    "acquire",
                    txn::txn(
                        vec![txn::absent(&key)],
                        vec![
                            txn::put(&key, &owner.to_string(), lease.id),
                            txn::first_under(&prefix),
                        ],
                        vec![txn::get(&key), txn::first_under(&prefix)],
                    ),
                )
                .await?;
            let mine = if reply.succeeded {
                revision(&reply)
            } else {
                kvs(&reply, 0).first().map_or(0, |kv| kv.create_revision)
            };
            if mine == 0 {
                // Our key went with its lease between the comparison and the read.
                continue;
            }
            if kvs(&reply, 1)
                .first()
                .is_some_and(|first| first.create_revision == mine)
            {
                entry.disarm();
                return Ok(Some(Self::hold(name, owner, lease, &key, mine, sent_at)));
            }
            match self
                .wait_in_line(&KeyRange::prefix(&prefix), &key, mine, lease, deadline)
                .await?
            {
                Line::First { .. } => {
                    entry.disarm();
                    return Ok(Some(Self::hold(name, owner, lease, &key, mine, sent_at)));
                }
                Line::TimedOut => {
                    entry.delete_now().await;
                    return Ok(None);
                }
                // The lease ended while we waited: our key is gone; get in line again on the
                // next lease.
                Line::LeaseEnded => {
                    entry.disarm();
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Until our key (`key`, created at `mine`) has no key before it in `blockers`: look at
    /// the key just before it and wait for its deletion.
    pub(super) async fn wait_in_line(
        self: &Arc<Self>,
        blockers: &KeyRange,
        key: &str,
        mine: i64,
        lease: ClientLease,
        deadline: Option<Instant>,
    ) -> Result<Line> {
        let (line, _) = self
            .wait_in_line_reading(blockers, (key, mine), lease, deadline, None)
            .await?;
        Ok(line)
    }

    /// As [`wait_in_line`](Self::wait_in_line), reading every key under `also` with each look:
    /// when first, the keys the last look read there.
    pub(super) async fn wait_in_line_reading(
        self: &Arc<Self>,
        blockers: &KeyRange,
        (key, mine): (&str, i64),
        lease: ClientLease,
        deadline: Option<Instant>,
        also: Option<&str>,
    ) -> Result<(Line, Vec<KeyValue>)> {
        let mut look = vec![txn::get(key), txn::just_before(blockers, mine)];
        look.extend(also.map(|prefix| txn::range(txn::all_under(prefix, 0))));
        loop {
            let reply = self
                .txn_idempotent("look in line", txn::txn(Vec::new(), look.clone(), Vec::new()))
                .await?;
            if kvs(&reply, 0).is_empty() || !self.keeps(lease.epoch) {
                return Ok((Line::LeaseEnded, Vec::new()));
            }
            let Some(before) = kvs(&reply, 1).first() else {
                let at = revision(&reply);
                return Ok((Line::First { at }, kvs(&reply, 2).to_vec()));
            };
            if let Some(ended) = self
                .wait_gone(&before.key, revision(&reply), lease, deadline)
                .await?
            {
                return Ok((ended, Vec::new()));
            }
        }
    }

    /// Waits for the deletion of `key` after `after`, at most one lease TTL (a watch that went
    /// silent, its member cut off, must not keep a waiter from a lock that is free) and until
    /// `deadline`: `None` to look again, else how the wait ended.
    pub(super) async fn wait_gone(
        &self,
        key: &[u8],
        after: i64,
        lease: ClientLease,
        deadline: Option<Instant>,
    ) -> Result<Option<Line>> {
        let mut session = self.session.subscribe();
        let look_again = Instant::now() + lease.ttl * LOOK_AGAIN_AFTER_TTLS;
        let until = deadline.map_or(look_again, |d| d.min(look_again));
        let deleted = crate::watch::deletion(&self.rpc, key, after);
        let lease_changed = async {
            // Closed only with the client: then, too, look again.
            let _ = session.wait_for(|s| !s.keeps(lease.epoch)).await.map(drop);
        };
        tokio::select! {
            outcome = deleted => {
                if let Err(error) = outcome {
                    if !error.is_transient() {
                        return Err(error);
                    }
                    // A watch that failed: look again after a pause, not in a tight loop.
                    tokio::time::sleep_until(until.min(Instant::now() + std::time::Duration::from_millis(100))).await;
                }
                Ok(None)
            }
            () = lease_changed => Ok(Some(Line::LeaseEnded)),
            () = tokio::time::sleep_until(until) => {
                Ok(deadline.is_some_and(|d| Instant::now() >= d).then_some(Line::TimedOut))
            }
        }
    }

    /// Releases `lease` by its key (1 round trip), or by its owner token when it has no key
    /// (2: the object's keys read, then the owner's deleted). The same for every kind of hold:
    /// each is one key that carries the owner token.
    pub(super) async fn release(self: &Arc<Self>, lease: &Lease) -> Result<bool> {
        let Some(key) = lease.handle().map(str::to_owned) else {
            return self.release_by_owner(lease).await;
        };
        let upgradeable_parts = match lease.kind() {
            // An upgraded hold is its write key and the read key it was upgraded from.
            LockKind::Write => upgradeable_of_write(&key)
                .map(|read| (Vec::new(), vec![txn::delete(&key), txn::delete(&read)])),
            // A read key written again is an upgraded hold's: not this lease's to delete.
            LockKind::UpgradeableRead => {
                let released = self.release_upgradeable(&key).await;
                return released
                    .map(|deleted| deleted && lease.session_epoch().is_some_and(|epoch| self.keeps(epoch)));
            }
            _ => None,
        };
        let (deleted, resent) = match upgradeable_parts {
            Some((compare, deletes)) => {
                let request = txn::txn(compare, deletes, Vec::new());
                let (reply, resent) = self
                    .rpc
                    .call_idempotent_noting("release", move |rpc| {
                        let request = request.clone();
                        async move { rpc.kv().txn(request).await }
                    })
                    .await?;
                (txn::deleted(&reply, 0), resent)
            }
            None => {
                let (reply, resent) = self
                    .rpc
                    .call_idempotent_noting("release", move |rpc| {
                        let key = key.clone();
                        async move {
                            rpc.kv()
                                .delete_range(DeleteRangeRequest {
                                    key: key.into_bytes(),
                                    ..DeleteRangeRequest::default()
                                })
                                .await
                        }
                    })
                    .await?;
                (reply.deleted, resent)
            }
        };
        if deleted == 0 && resent {
            // An earlier try may have deleted the key (its reply was lost): "not ours" would
            // be a guess. The key is gone either way.
            return Err(Error::unavailable(
                BACKEND,
                "release: a try's reply was lost and the key is gone, perhaps by that try",
            ));
        }
        Ok(deleted > 0 && lease.session_epoch().is_some_and(|epoch| self.keeps(epoch)))
    }

    /// Releases an upgradeable read by its key `key`: deleted if never written again (1 round
    /// trip). Written again, it is an upgraded hold's anchor and stays, unless that hold's
    /// write key is gone (an upgrade granted while its caller went away, its write key deleted
    /// behind it): then it is deleted too, and the release answers `false` (+1).
    async fn release_upgradeable(&self, key: &str) -> Result<bool> {
        let Some(write) = write_of_upgradeable(key) else {
            return Ok(false);
        };
        let (reply, resent) = self
            .rpc
            .call_idempotent_noting("release", {
                let request = txn::txn(
                    vec![txn::never_rewritten(key)],
                    vec![txn::delete(key)],
                    vec![txn::get(key), txn::get(&write)],
                );
                move |rpc| {
                    let request = request.clone();
                    async move { rpc.kv().txn(request).await }
                }
            })
            .await?;
        if reply.succeeded {
            return Ok(txn::deleted(&reply, 0) > 0);
        }
        if kvs(&reply, 0).is_empty() {
            if resent {
                return Err(Error::unavailable(
                    BACKEND,
                    "release: a try's reply was lost and the key is gone, perhaps by that try",
                ));
            }
            return Ok(false);
        }
        if kvs(&reply, 1).is_empty() {
            self.txn_idempotent(
                "release",
                txn::txn(vec![txn::absent(&write)], vec![txn::delete(key)], Vec::new()),
            )
            .await?;
        }
        Ok(false)
    }

    /// Deletes every key of `lease`'s owner under the prefix of its object (of its kind's
    /// primitive: for a semaphore, its `locks` and `leases` keys), of any lease.
    async fn release_by_owner(self: &Arc<Self>, lease: &Lease) -> Result<bool> {
        let prefix = object_prefix(self.config.root(), lease.kind().primitive(), lease.name());
        let request = txn::all_under(&prefix, 0);
        let listed = self
            .rpc
            .call_idempotent("list", move |rpc| {
                let request = request.clone();
                async move { rpc.kv().range(request).await }
            })
            .await?;
        let owner = lease.owner();
        let deletes: Vec<_> = listed
            .kvs
            .iter()
            .filter(|kv| is_owners(&kv.key, owner))
            .map(|kv| txn::delete(&String::from_utf8_lossy(&kv.key)))
            .collect();
        if deletes.is_empty() {
            return Ok(false);
        }
        let reply = self
            .txn_idempotent("release", txn::txn(Vec::new(), deletes, Vec::new()))
            .await?;
        Ok((0..reply.responses.len()).any(|i| txn::deleted(&reply, i) > 0))
    }

    /// Checks in one transaction that each lease's key still exists on the current lease.
    pub(super) async fn renew(self: &Arc<Self>, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        let Some(current) = self.current() else {
            return leases.iter().map(|_| Ok(None)).collect();
        };
        // Only leases with a key are read (etcd refuses a read of the empty key); one without
        // (a stale or forged lease) holds nothing to renew. At most MAX_TXN_OPS reads go in one
        // transaction (etcd refuses more); the transactions are sent at once: 1 round trip.
        let keyed: Vec<&Lease> = leases.iter().filter(|lease| lease.handle().is_some()).collect();
        let batches = keyed.chunks(MAX_TXN_OPS).map(|batch| async move {
            let reads = batch
                .iter()
                .map(|lease| txn::get(lease.handle().unwrap_or_default()))
                .collect();
            self.txn_idempotent("renew", txn::txn(Vec::new(), reads, Vec::new()))
                .await
                .map(|reply| {
                    (0..batch.len())
                        .map(|i| {
                            // An upgradeable read's key written again was upgraded: the write
                            // lease holds it now.
                            let upgraded = batch[i].kind() == LockKind::UpgradeableRead;
                            kvs(&reply, i)
                                .first()
                                .is_some_and(|kv| kv.lease == current.id && !(upgraded && kv.version > 1))
                        })
                        .collect::<Vec<bool>>()
                })
        });
        let mut found = Vec::with_capacity(keyed.len());
        for batch in futures::future::join_all(batches).await {
            match batch {
                Ok(alive) => found.extend(alive),
                Err(error) => return leases.iter().map(|_| Err(same_error(&error))).collect(),
            }
        }
        let mut found = found.into_iter();
        leases
            .iter()
            .map(|lease| {
                if lease.handle().is_none() {
                    return Ok(None);
                }
                let alive = found.next().unwrap_or(false);
                let ours = alive && lease.session_epoch() == Some(current.epoch) && self.keeps(current.epoch);
                Ok(ours.then(|| lease.clone()))
            })
            .collect()
    }

    /// The mutex's holder: its first contender, with its note (1 round trip).
    pub(super) async fn holder(self: &Arc<Self>, name: &LockName) -> Result<LockState> {
        let request = txn::first_under_request(&self.prefix(name));
        let reply = self
            .rpc
            .call_idempotent("inspect", move |rpc| {
                let request = request.clone();
                async move { rpc.kv().range(request).await }
            })
            .await?;
        Ok(match reply.kvs.first() {
            Some(first) => LockState::held(
                owner_of(first),
                Some(FencingToken::new(first.create_revision.unsigned_abs())),
                None,
            )
            .with_note(super::note::note_of(first)),
            None => LockState::free(None),
        })
    }
}

/// An error like `error`, for each of several results it answers.
fn same_error(error: &Error) -> Error {
    if error.is_transient() {
        Error::unavailable(BACKEND, error.to_string())
    } else {
        Error::backend(BACKEND, error.to_string())
    }
}

/// How a wait in line ended.
pub(super) enum Line {
    /// Our key is first, as a look at this revision found.
    First {
        at: i64,
    },
    TimedOut,
    LeaseEnded,
}

/// A contender's owner: the owner token in its key for ours (its value may be the holder's
/// note), else its key (etcd's own lock stores nothing, its election the leader's value).
pub(super) fn owner_of(kv: &KeyValue) -> String {
    owner_in(&kv.key).unwrap_or_else(|| String::from_utf8_lossy(&kv.key).into_owned())
}

/// Our key in a queue while we wait: deleted in the background if the wait is dropped or
/// fails before the lock is won.
pub(super) struct Entry {
    inner: Arc<Inner>,
    key: Option<String>,
    /// Answered (or dropped) once the create sent through [`Entry::create`] has its reply: a
    /// dropped wait deletes its key only then, so the delete never overtakes the create.
    creating: Option<oneshot::Receiver<()>>,
}

impl Entry {
    pub(super) fn new(inner: &Arc<Inner>, key: &str) -> Self {
        Self {
            inner: inner.clone(),
            key: Some(key.to_owned()),
            creating: None,
        }
    }

    /// Sends `request`, a transaction that may create the key, in a task of its own: a wait
    /// dropped meanwhile does not cut the request off mid-flight, and the key's deletion
    /// waits for its reply (a delete sent at once could reach etcd first and leave the key
    /// for the lease's life).
    pub(super) async fn create(&mut self, what: &'static str, request: TxnRequest) -> Result<TxnResponse> {
        let (answered, creating) = oneshot::channel::<()>();
        let inner = self.inner.clone();
        let sent = tokio::spawn(async move {
            let _answered = answered;
            inner.txn(what, request).await
        });
        self.creating = Some(creating);
        let reply = sent
            .await
            .map_err(|e| Error::backend(BACKEND, format!("{what}: {e}")))?;
        self.creating = None;
        reply
    }

    /// The key, while the entry would delete it.
    pub(super) fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    pub(super) fn disarm(&mut self) {
        self.key = None;
    }

    /// Deletes the key now, bounded by the operation timeout (in the background if that fails).
    pub(super) async fn delete_now(&mut self) {
        if let Some(key) = self.key.clone() {
            if delete_key(&self.inner, key).await.is_ok() {
                self.key = None;
            }
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let inner = self.inner.clone();
            let creating = self.creating.take();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    if let Some(creating) = creating {
                        let _ = creating.await;
                    }
                    for attempt in 0..3u32 {
                        match delete_key(&inner, key.clone()).await {
                            Ok(()) => return,
                            Err(error) if !error.is_transient() => return,
                            Err(_) => tokio::time::sleep(inner.rpc.timeout() * (attempt + 1)).await,
                        }
                    }
                });
            }
        }
    }
}

async fn delete_key(inner: &Inner, key: String) -> Result<()> {
    inner
        .rpc
        .call_idempotent("delete", move |rpc| {
            let key = key.clone();
            async move {
                rpc.kv()
                    .delete_range(DeleteRangeRequest {
                        key: key.into_bytes(),
                        ..DeleteRangeRequest::default()
                    })
                    .await
            }
        })
        .await
        .map(drop)
}

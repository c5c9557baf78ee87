//! The mutex: one item per name, created by `add`, released and renewed only by CAS-guarded
//! commands bound to the server process that issued the CAS. Owns acquire (with its fencing
//! token), release (by CAS, or by owner token), inspect and the polling wait; the renewals are
//! in `renewal.rs`. Never touches a semaphore's or read-write lock's item.
//!
//! Operations, top to bottom: acquire, release, wait, inspect.

use std::time::Duration;

use distlock_core::{
    Error, FencingToken, Holder, Lease, LockName, LockState, OwnerToken, ReleaseWatch, Result, TryAcquire,
};
use tokio::time::Instant;

use crate::exchange::{refused, unexpected};
use crate::expiry::{fence_seed, ttl_on_server};
use crate::keys;
use crate::lock::{MemcachedLock, BACKEND};
use crate::note::note_for;
use crate::pool::Server;
use crate::renewal::{renewal_outcome, Renewal};
use crate::stopped_server;
use crate::wire::{Batch, Code, Epoch, Reply};

/// The fencing counter's expiry (refreshed on every acquisition attempt).
const COUNTER_TTL_SECS: u32 = 30 * 24 * 3600;

/// Where one lock name lives.
pub(crate) struct Located<'a> {
    pub(crate) server: &'a Server,
    pub(crate) lock_key: String,
    pub(crate) fence_key: String,
}

/// What a lease carries in its handle: the item's CAS and the issuing server process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handle {
    pub(crate) cas: u64,
    pub(crate) epoch: Epoch,
}

impl Handle {
    pub(crate) fn encode(self) -> String {
        format!("cas={};server={:032x}", self.cas, self.epoch.nonce)
    }

    fn decode(text: &str) -> Option<Self> {
        let mut parts = text.split(';');
        let cas = parts.next()?.strip_prefix("cas=")?.parse().ok()?;
        let nonce = parts.next()?.strip_prefix("server=")?;
        let nonce = u128::from_str_radix(nonce, 16).ok()?;
        Some(Self {
            cas,
            epoch: Epoch { nonce },
        })
    }

    pub(crate) fn of(lease: &Lease) -> Result<Self> {
        lease.handle().and_then(Self::decode).ok_or_else(|| {
            Error::backend(
                BACKEND,
                "the lease was not issued by the memcached backend (no CAS handle)",
            )
        })
    }
}

impl MemcachedLock {
    /// Where `name`'s mutex lives: its server, and its lock item's and fencing counter's keys.
    pub(crate) fn locate(&self, name: &LockName) -> Located<'_> {
        let encoded = self.keys().encoded(name);
        let index = keys::route(&encoded, self.servers().iter().map(Server::addr));
        Located {
            server: &self.servers()[index],
            lock_key: self.keys().lock_key(&encoded),
            fence_key: self.keys().fence_key(&encoded),
        }
    }

    // ---------------------------------------------------------------------------------------
    // Acquire

    /// One `add` of the owner token, pipelined with a read of the item (its CAS if the add
    /// won, the holder's remaining TTL if it lost) and the fencing counter's increment.
    /// **1 round trip when the lock is held, 2 when the attempt wins** (the second records
    /// the token in the item, see [`record_token`](Self::record_token)); one more on a new
    /// connection.
    pub(crate) async fn acquire_once(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<TryAcquire> {
        let (lease_ttl, expiry) = ttl_on_server(ttl)?;
        let at = self.locate(name);
        let owner_text = owner.to_string();
        let mut batch = Batch::new();
        batch.add(&at.lock_key, owner_text.as_bytes(), expiry);
        batch.get(&at.lock_key, "c t v");
        batch.incr_or_seed(&at.fence_key, fence_seed(), COUNTER_TTL_SECS);
        let sent_at = Instant::now();
        let Some((epoch, replies, written_at)) = self.exchange_timed(at.server, &batch, None).await? else {
            return Err(Error::backend(BACKEND, "an unbound exchange was refused"));
        };
        let [added, item, fenced] = replies.as_slice() else {
            return Err(unexpected(at.server, "three replies", &replies));
        };
        match &added.code {
            Code::Hd => {}
            Code::Ns => return Ok(TryAcquire::Held(holder_from(item))),
            Code::Refused(message) => return Err(refused(at.server, message)),
            _ => return Err(unexpected(at.server, "STORED or NOT_STORED", added)),
        }
        // Stored. The read right behind it on the same connection sees our item, unless it
        // vanished in between (deleted, or evicted at once): then we never held it usefully.
        let cas = match (&item.code, item.text()) {
            (Code::Va, Some(value)) if value == owner_text => item
                .flag_num::<u64>('c')
                .ok_or_else(|| unexpected(at.server, "a CAS", item))?,
            _ => return Ok(TryAcquire::Held(holder_from(item))),
        };
        let handle = Handle { cas, epoch };
        let token = match fenced.code {
            Code::Va => fenced.text().and_then(|t| t.trim().parse::<u64>().ok()),
            _ => None,
        };
        let Some(token) = token else {
            // Ours, but without a token: give it back rather than hand out an unfenced lease
            // (a full `-M` server refuses to create the counter, for example).
            let _ = self.delete_if_cas(&at, handle).await;
            return Err(Error::backend(
                BACKEND,
                format!(
                    "{}: the fencing counter failed: {:?}",
                    at.server.addr(),
                    fenced.code
                ),
            ));
        };
        let lease = Lease::new(name.clone(), owner, lease_ttl, sent_at)
            .with_fencing(FencingToken::new(token))
            .with_handle(handle.encode());
        // The second round trip sets the expiry again: after a slow add, once the server's
        // clock has caught up with a stop the add may have waited out.
        if stopped_server::was_slow(written_at) {
            tokio::time::sleep(stopped_server::CLOCK_CATCH_UP).await;
        }
        self.record_token(&at, lease, handle, expiry).await
    }

    /// The winner's second round trip: `cas <lock>` rewrites the item as `<owner> <token>`
    /// (so that [`DistributedLock::inspect`] shows the holder's token), pipelined with
    /// `mg <lock> c v` for the new CAS. The token cannot be in the `add` itself: it must be
    /// drawn after the `add` won, or an earlier attempt's token could reach a later holder.
    /// **1 round trip**; 3 when the item is no longer as we wrote it (then the attempt
    /// reports the lock held, after giving back our item if it still holds our token).
    async fn record_token(
        &self,
        at: &Located<'_>,
        lease: Lease,
        handle: Handle,
        expiry: u32,
    ) -> Result<TryAcquire> {
        let mut batch = Batch::new();
        batch.replace_if_cas(&at.lock_key, item_value(&lease).as_bytes(), expiry, handle.cas);
        batch.get(&at.lock_key, "c v");
        let outcome = match self.exchange(at.server, &batch, Some(handle.epoch)).await {
            Ok(Some((_, replies))) => match replies.as_slice() {
                [stored, item] => renewal_outcome(
                    at.server,
                    &lease,
                    handle,
                    lease.ttl(),
                    lease.acquired_at(),
                    stored,
                    item,
                ),
                _ => Err(unexpected(at.server, "two replies", &replies)),
            },
            Ok(None) => Ok(Renewal::Done(None)), // the server restarted in between
            Err(e) => Err(e),
        };
        match outcome {
            Ok(Renewal::Done(Some(recorded))) => Ok(TryAcquire::Acquired(recorded)),
            // Deleted, replaced or restarted away within the round trip, or rewritten by
            // another write: not ours to report held. An item that still holds our owner
            // token (a changed CAS, or the same process under a new identity) goes back now,
            // or it would keep every client out until its TTL ran out.
            Ok(Renewal::Done(None) | Renewal::RetryWith(_)) => {
                self.release_by_owner(at, lease.owner()).await?;
                Ok(TryAcquire::Held(Holder::unknown()))
            }
            Err(e) => {
                // Refused (a full `-M` server) or no answer: give the lock back if we can.
                // The `cas` may have been applied with its reply lost, which changed the
                // item's CAS: find the item by our owner token, not by the CAS we sent.
                let _ = self.release_by_owner(at, lease.owner()).await;
                Err(e)
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Release

    /// `md <lock> C<cas>` on the lease's server process: deletes only the item this lease
    /// created (or renewed). **1 round trip**; 3 when the CAS no longer matches (the
    /// lost-renewal-reply case described on [`MemcachedLock`]) or the connection reaches the
    /// server under another identity. A lease without a handle (built with [`Lease::new`]
    /// after an acquisition attempt whose outcome is unknown) is released by its owner token.
    ///
    /// Both fallbacks are the owner-checked release
    /// ([`release_by_owner`](Self::release_by_owner)): another identity is a restart (the
    /// item died with the old process, and the read finds nothing) or the same process whose
    /// identity item was evicted or deleted (our item is still there and must go).
    pub(crate) async fn release_once(&self, lease: &Lease) -> Result<bool> {
        let at = self.locate(lease.name());
        if lease.handle().is_none() {
            return self.release_by_owner(&at, lease.owner()).await;
        }
        let handle = Handle::of(lease)?;
        match self.delete_if_cas(&at, handle).await? {
            Some(Code::Hd) => Ok(true),
            Some(Code::Nf) => Ok(false),
            None | Some(Code::Ex) => self.release_by_owner(&at, lease.owner()).await,
            Some(Code::Refused(message)) => Err(refused(at.server, &message)),
            Some(other) => Err(Error::backend(
                BACKEND,
                format!("{}: unexpected reply {other:?} to md", at.server.addr()),
            )),
        }
    }

    /// Owner-checked release without a CAS: `mg <lock> v c` on whatever server process runs
    /// now, then, only if the item holds `owner`'s token, `md <lock> C<cas>` with the CAS
    /// just read, bound to that same process. Owner tokens are random and never reused, so
    /// an item holding ours was written by us; the delete stays CAS-guarded, so an item that
    /// expired and was taken by another client in between is left alone. **2 round trips**
    /// (more if our own in-flight write changes the CAS in between: up to 3 reads).
    async fn release_by_owner(&self, at: &Located<'_>, owner: OwnerToken) -> Result<bool> {
        let owner = owner.to_string();
        for _ in 0..3 {
            let mut batch = Batch::new();
            batch.get(&at.lock_key, "v c");
            let (epoch, replies) = self.exchange_any(at.server, &batch).await?;
            let Some(item) = replies.first() else {
                return Err(unexpected(at.server, "one reply", &replies));
            };
            let cas = match &item.code {
                Code::Va if item.text().map(owner_of) == Some(owner.as_str()) => item
                    .flag_num::<u64>('c')
                    .ok_or_else(|| unexpected(at.server, "a CAS", item))?,
                Code::Va | Code::En => return Ok(false), // another holder's, or free
                Code::Refused(message) => return Err(refused(at.server, message)),
                _ => return Err(unexpected(at.server, "VA or EN", item)),
            };
            match self.delete_if_cas(at, Handle { cas, epoch }).await? {
                // Another process (or identity) on this connection: read again there; after
                // a restart the read finds nothing.
                None => continue,
                Some(Code::Hd) => return Ok(true),
                Some(Code::Nf) => return Ok(false),
                Some(Code::Ex) => continue, // rewritten in between: read it again
                Some(Code::Refused(message)) => return Err(refused(at.server, &message)),
                Some(other) => {
                    return Err(Error::backend(
                        BACKEND,
                        format!("{}: unexpected reply {other:?} to md", at.server.addr()),
                    ))
                }
            }
        }
        Err(Error::backend(
            BACKEND,
            format!(
                "{}: the lock item holding our owner token, or the server's identity, kept \
                 changing during its release",
                at.server.addr()
            ),
        ))
    }

    async fn delete_if_cas(&self, at: &Located<'_>, handle: Handle) -> Result<Option<Code>> {
        let mut batch = Batch::new();
        batch.delete_if_cas(&at.lock_key, handle.cas);
        Ok(self
            .exchange(at.server, &batch, Some(handle.epoch))
            .await?
            .and_then(|(_, replies)| replies.into_iter().next())
            .map(|reply| reply.code))
    }

    // ---------------------------------------------------------------------------------------
    // Wait

    /// memcached publishes nothing on release or expiry, so waiters poll: `LockClient` backs
    /// off with jitter between attempts (`AcquireOptions::poll_interval`, 10 ms to 500 ms by
    /// default) and wakes at the holder's expiry, which every failed attempt learns from the
    /// `mg <lock> c t v` in its pipeline. **0 round trips** to subscribe; each retry is one
    /// acquisition attempt (1 round trip).
    pub(crate) fn release_watch(&self) -> ReleaseWatch {
        ReleaseWatch::polling()
    }

    /// `mg <lock> v t`: the owner token, the holder's fencing token and the whole seconds
    /// left, pipelined with `mg <note> v`: the note beside the hold, shown only if it was
    /// left beside this very hold (`note.rs`). **1 round trip.**
    pub(crate) async fn inspect_once(&self, name: &LockName) -> Result<LockState> {
        let at = self.locate(name);
        let note_key = self.keys().note_key(&self.keys().encoded(name));
        let mut batch = Batch::new();
        batch.get(&at.lock_key, "v t");
        batch.get(&note_key, "v");
        let (_, replies) = self.exchange_any(at.server, &batch).await?;
        let [reply, noted] = replies.as_slice() else {
            return Err(unexpected(at.server, "two replies", &replies));
        };
        if let Code::Refused(message) = &noted.code {
            return Err(refused(at.server, message));
        }
        match &reply.code {
            Code::Va => {
                let value = String::from_utf8_lossy(reply.value.as_deref().unwrap_or_default()).into_owned();
                let token = value
                    .split_once(' ')
                    .and_then(|(_, token)| token.parse::<u64>().ok())
                    .map(FencingToken::new);
                Ok(
                    LockState::held(owner_of(&value).to_owned(), token, remaining(reply))
                        .with_note(note_for(noted, &value)),
                )
            }
            Code::En => Ok(LockState::free(None)),
            Code::Refused(message) => Err(refused(at.server, message)),
            _ => Err(unexpected(at.server, "VA or EN", reply)),
        }
    }
}

/// The lock item's value: `<owner> <fencing token>` (just `<owner>` between the `add` and
/// the acquisition's second round trip).
pub(crate) fn item_value(lease: &Lease) -> String {
    match lease.fencing_token() {
        Some(token) => format!("{} {token}", lease.owner()),
        None => lease.owner().to_string(),
    }
}

/// The owner part of a lock item's value.
pub(crate) fn owner_of(value: &str) -> &str {
    value.split(' ').next().unwrap_or(value)
}

/// What a failed add learned about the holder from `mg <lock> c t v`.
fn holder_from(probe: &Reply) -> Holder {
    match probe.code {
        Code::Hd | Code::Va => remaining(probe).map_or_else(Holder::unknown, Holder::expiring_in),
        // Gone between the add and the read: worth retrying at once.
        Code::En => Holder::expiring_in(Duration::ZERO),
        _ => Holder::unknown(),
    }
}

/// The `t` flag: whole seconds left (the item expires within the last of them), `-1` for an
/// item without expiry (not one of ours).
fn remaining(reply: &Reply) -> Option<Duration> {
    reply
        .flag_num::<i64>('t')
        .and_then(|t| u64::try_from(t).ok())
        .map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip() {
        let h = Handle {
            cas: 42,
            epoch: Epoch {
                nonce: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
            },
        };
        assert_eq!(Handle::decode(&h.encode()), Some(h));
        assert_eq!(Handle::decode("cas=1"), None);
    }
}

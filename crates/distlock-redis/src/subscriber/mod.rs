//! [`Subscriber`]: one pub/sub connection per [`RedisLock`](crate::RedisLock) (and per Redlock
//! master), shared by all its waiting locks. On a cluster, that connection is a cluster
//! connection over RESP3 (one connection per master, opened as needed): each channel is
//! subscribed by `SSUBSCRIBE` on the master serving the channel's slot, which is its lock's
//! (see [`keys`](crate::keys)), and messages arrive as pushes; everything below holds for it
//! the same way, and:
//!
//! - a connection to any master that ends (a killed master, a failover, a reset) ends the
//!   whole subscription connection: the task opens a new one and subscribes every channel
//!   again, on whichever master now serves its slot, waking its watchers once confirmed;
//! - a `SSUBSCRIBE` that fails (its master cannot be reached) fails only its channel, which
//!   is tried again after a pause (doubling up to 250 ms); the other masters' channels stay
//!   subscribed;
//! - a channel the server unsubscribes by itself (its slot moved to another master: Redis
//!   sends `SUNSUBSCRIBE` to the shard's subscribers) is subscribed again, on the new master,
//!   and its watchers are woken once confirmed.
//!
//! It owns the connection, which channels are subscribed on it, and one `tokio::sync::watch`
//! sender per channel, reference-counted by the `keep` values handed to [`ReleaseWatch`]es.
//! It may not touch lock keys.
//!
//! One background task (started by the first [`watch_as_waiter`](Subscriber::watch_as_waiter), restarted if its
//! runtime went away) is the only one that talks to the server; callers only edit the shared
//! table of channels and wait for their own channel's confirmation. So:
//!
//! - `watch` returns only after the server confirmed the `SUBSCRIBE` **of its own channel**,
//!   so a release published after `watch` returns is always heard (the caller retries after
//!   subscribing). Every `SUBSCRIBE` and `UNSUBSCRIBE` names exactly one channel: the server
//!   answers each with exactly one reply, so the client library's in-order matching of replies
//!   to requests cannot confirm one channel with another's reply (a multi-channel
//!   `UNSUBSCRIBE a b c` gets three replies, and its leftovers would confirm the next request
//!   before the server ran it). The commands of one round are pipelined.
//! - A `watch` of a channel that is already confirmed returns at once, without a round trip
//!   and without waiting for anything else; a new channel waits for one pipelined round, which
//!   sends subscriptions before the unsubscriptions of channels nobody watches any more. The
//!   wait is bounded by the operation timeout.
//! - When the last watch of a channel is dropped, the channel stays subscribed for
//!   [`LINGER`]: a client that waits for the same lock again soon (a hot lock: each of its
//!   waits starts right after its last release) finds it subscribed, and its wait costs no
//!   `SUBSCRIBE` and no `UNSUBSCRIBE`. A channel left unwatched for [`LINGER`] is dropped by
//!   the task, which then sends its `UNSUBSCRIBE` (the decision is taken under the table's
//!   lock, so a channel watched again meanwhile is never unsubscribed; one watched again
//!   after it is subscribed anew, after the `UNSUBSCRIBE`).
//! - If the connection breaks or a round times out, the task reconnects (backing off to at
//!   most a second) and subscribes every watched channel again; once a channel is confirmed
//!   again its watchers are woken, because a release in the gap may have been missed. The
//!   watches stay open meanwhile (their waiters keep their safety-net poll).
//! - A connection can also go silent without breaking (a firewall or NAT that forgot it): no
//!   message, no error, and without a round nothing would notice, leaving waiters to their
//!   safety net for as long as it lasts. So after [`KEEPALIVE`] without a round the task sends
//!   `PING` (on a cluster, to the master of each slot with a watched channel: a master that
//!   carries no subscription, unreachable, must not take the others' down); without an answer
//!   within the operation timeout it treats the connection as broken, as above.
//! - A watch may belong to one waiter ([`watch_as_waiter`](Subscriber::watch_as_waiter)): a
//!   message `wake:<waiter id>` wakes only that waiter, any other message every watch of the
//!   channel (a resubscription too). A plain [`watch`](Subscriber::watch) (the read-write locks'
//!   waiters) wakes on every message naming no waiter.
//! - A message `grant:<waiter id>:<token>:<claim>` (a release handed the mutex to that waiter)
//!   wakes that waiter and is kept for it ([`take_grant`](Subscriber::take_grant)) until it
//!   takes it up or its watch goes.
//! - A mutex's waiter ([`watch_as_client_waiter`](Subscriber::watch_as_client_waiter)) has an
//!   id naming this client ([`new_waiter_id`](Subscriber::new_waiter_id)) and listens on its
//!   lock's channel and on this client's channel beside it
//!   ([`client_channel`](Subscriber::client_channel)), where the release scripts publish the
//!   messages that name it: a grant reaches its waiter's client alone, however many clients
//!   wait for the lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use distlock_core::{Error, Result};
use futures::future::join_all;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::config::Target;
use crate::keys;
use crate::node::BACKEND;

mod task;

use task::{run, Running};

/// The longest pause between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// The first pause after a failed connection attempt.
const MIN_BACKOFF: Duration = Duration::from_millis(20);
/// The longest pause before a cluster's channels whose master could not be reached are
/// subscribed again (their waiters keep their safety-net poll meanwhile).
const MAX_RETRY_PAUSE: Duration = Duration::from_millis(250);
/// How long the connection may go without a round before it is asked `PING`.
const KEEPALIVE: Duration = Duration::from_secs(5);
/// How long a channel stays subscribed after its last watch went, for the next wait on it.
pub(crate) const LINGER: Duration = Duration::from_secs(2);
/// A message that wakes one waiter: this prefix, then its id.
pub(crate) const WAKE_PREFIX: &[u8] = b"wake:";
/// A message that tells one waiter a release handed it the mutex: this prefix, its id, `:`,
/// the fencing token drawn for it, `:` and the claim's TTL in ms.
pub(crate) const GRANT_PREFIX: &[u8] = b"grant:";

/// A release's grant to a waiter: the fencing token drawn for it and the claim's TTL (set no
/// earlier than the waiter's last attempt was sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) token: u64,
    pub(crate) claim: Duration,
}

/// The pub/sub side of one client.
pub(crate) struct Subscriber {
    target: Target,
    url: String,
    timeout: Duration,
    connect_timeout: Duration,
    /// This client's tag: the first 4 bytes of its waiters' ids, and its channels' suffix.
    tag: [u8; 4],
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the task: a channel to subscribe or unsubscribe, a lost connection, or closing.
    wake: Notify,
}

#[derive(Default)]
struct State {
    /// Whether the task runs.
    running: bool,
    /// Set when the [`Subscriber`] is dropped: the task ends.
    closed: bool,
    /// The generation of the live connection; bumped when one is made or lost.
    generation: u64,
    next_id: u64,
    channels: HashMap<Vec<u8>, Channel>,
    /// The fencing tokens of the mutexes releases handed to waiters of this client, by waiter,
    /// until the waiter takes its own up or its watch goes.
    grants: HashMap<Arc<str>, Grant>,
}

impl State {
    /// One watched channel of each hash slot that has any (on a cluster, a channel's slot is
    /// the master carrying its subscription).
    fn one_channel_per_slot(&self) -> Vec<Vec<u8>> {
        let mut by_slot: Vec<(u16, &Vec<u8>)> = self
            .channels
            .keys()
            .map(|channel| (keys::key_slot(channel), channel))
            .collect();
        by_slot.sort_unstable_by_key(|(slot, _)| *slot);
        by_slot.dedup_by_key(|(slot, _)| *slot);
        by_slot.into_iter().map(|(_, channel)| channel.clone()).collect()
    }

    /// Takes out the channels unwatched for [`LINGER`] by `now`, and the unwatched ones the
    /// live connection has not subscribed (a lost connection: nobody needs them again),
    /// returning those it has subscribed (to unsubscribe), and when the next of the others
    /// lingers out.
    fn drop_lingered(&mut self, now: Instant) -> (Vec<Vec<u8>>, Option<Instant>) {
        let mut next = None::<Instant>;
        let mut gone = Vec::new();
        self.channels.retain(|name, entry| match entry.idle_since {
            Some(_) if entry.status == Status::Unsent => false,
            Some(since) if since + LINGER <= now => {
                gone.push(name.clone());
                false
            }
            Some(since) => {
                let until = since + LINGER;
                next = Some(next.map_or(until, |next| next.min(until)));
                true
            }
            None => true,
        });
        gone.sort();
        (gone, next)
    }
}

/// Where a channel's subscription stands on the live connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Not subscribed on the live connection (new, or the connection was replaced).
    Unsent,
    /// `SUBSCRIBE` sent, reply not yet read.
    InFlight,
    /// The server confirmed the `SUBSCRIBE`.
    Confirmed,
}

struct Channel {
    id: u64,
    refs: usize,
    /// Bumped on every release announced on the channel.
    tx: watch::Sender<u64>,
    /// The watches of single waiters, bumped by messages naming them (and by every other).
    waiters: HashMap<Arc<str>, Arc<watch::Sender<u64>>>,
    /// `true` while the subscription is confirmed on the live connection.
    confirmed: watch::Sender<bool>,
    status: Status,
    /// Whether it was confirmed on an earlier connection (then a resubscription wakes it).
    was_confirmed: bool,
    /// When its last watch went, while no watch holds it (it lingers for [`LINGER`]).
    idle_since: Option<Instant>,
}

impl Channel {
    /// Wakes every watch of the channel.
    fn wake_all(&self) {
        self.tx.send_modify(|n| *n = n.wrapping_add(1));
        for tx in self.waiters.values() {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Wakes the waiter a message names, or everyone for any other message. A grant to one of
    /// its waiters is returned: that waiter's id and fencing token.
    fn deliver(&self, payload: &[u8]) -> Option<(Arc<str>, Grant)> {
        if let Some(grant) = payload.strip_prefix(GRANT_PREFIX) {
            let Some((id, grant)) = parse_grant(grant) else {
                self.wake_all(); // not understood: everyone looks
                return None;
            };
            let (id, tx) = self.waiters.get_key_value(id)?;
            tx.send_modify(|n| *n = n.wrapping_add(1));
            return Some((id.clone(), grant));
        }
        let named = payload
            .strip_prefix(WAKE_PREFIX)
            .and_then(|id| std::str::from_utf8(id).ok());
        match named {
            Some(id) => {
                if let Some(tx) = self.waiters.get(id) {
                    tx.send_modify(|n| *n = n.wrapping_add(1));
                }
            }
            None => self.wake_all(),
        }
        None
    }

    fn unconfirm(&mut self) {
        self.status = Status::Unsent;
        self.confirmed.send_replace(false);
    }
}

/// `<waiter>:<token>:<claim in ms>`, a grant's message after its prefix.
fn parse_grant(message: &[u8]) -> Option<(&str, Grant)> {
    let message = std::str::from_utf8(message).ok()?;
    let (rest, claim) = message.rsplit_once(':')?;
    let (id, token) = rest.rsplit_once(':')?;
    let grant = Grant {
        token: token.parse().ok()?,
        claim: Duration::from_millis(claim.parse().ok()?),
    };
    Some((id, grant))
}

/// Kept alive by a [`ReleaseWatch`]; dropping it releases its channels' references.
pub(crate) struct Keep {
    shared: Arc<Shared>,
    /// Each channel with the id of its entry.
    channels: Vec<(Vec<u8>, u64)>,
    waiter: Option<Arc<str>>,
}

impl Drop for Keep {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        let now = Instant::now();
        let mut idle = false;
        for (channel, id) in &self.channels {
            match state.channels.get_mut(channel) {
                Some(entry) if entry.id == *id => {
                    if let Some(waiter) = &self.waiter {
                        entry.waiters.remove(waiter);
                    }
                    entry.refs -= 1;
                    if entry.refs == 0 {
                        entry.idle_since = Some(now);
                        idle = true;
                    }
                }
                _ => {}
            }
        }
        if let Some(waiter) = &self.waiter {
            // A grant it never took up: its lock is given back by the waiter's leaving.
            state.grants.remove(waiter);
        }
        drop(state);
        if idle {
            // The task times the channel's lingering out.
            self.shared.wake.notify_one();
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Delivers a message of `channel`, keeping a grant to one of its waiters for the waiter
    /// to take up (under the same lock as its wake, so a woken waiter finds it).
    fn deliver(&self, channel: &[u8], payload: &[u8]) {
        let mut state = self.state();
        let granted = state
            .channels
            .get(channel)
            .and_then(|entry| entry.deliver(payload));
        if let Some((waiter, grant)) = granted {
            state.grants.insert(waiter, grant);
        }
    }

    /// The server ended `channel`'s subscription on the connection of `generation` (on a
    /// cluster: its slot moved to another master). If it is still watched and was confirmed,
    /// it is subscribed again (on the slot's master now) and its watchers are woken once
    /// that is confirmed. The reply to our own `SUNSUBSCRIBE` of a channel nobody watches
    /// finds no entry; one for a channel watched again since finds it not yet confirmed.
    fn unsubscribed(&self, channel: &[u8], generation: u64) {
        let mut state = self.state();
        if state.generation != generation {
            return;
        }
        let Some(entry) = state.channels.get_mut(channel) else {
            return;
        };
        if entry.status != Status::Confirmed {
            return;
        }
        tracing::debug!("distlock-redis: a sharded channel was unsubscribed by the server (its slot moved); subscribing again");
        entry.unconfirm();
        drop(state);
        self.wake.notify_one();
    }

    /// The connection of `generation` is gone: nothing is subscribed any more.
    fn connection_lost(&self, generation: u64) {
        let mut state = self.state();
        if state.generation == generation {
            state.generation += 1;
            state.channels.values_mut().for_each(Channel::unconfirm);
        }
        drop(state);
        self.wake.notify_one();
    }
}

impl Subscriber {
    pub(crate) fn new(target: Target, url: String, timeout: Duration, connect_timeout: Duration) -> Self {
        Self {
            target,
            url,
            timeout,
            connect_timeout,
            tag: rand::random(),
            shared: Arc::default(),
        }
    }

    /// Subscribes to `channel` for one waiter, `waiter`, and returns once the server confirmed
    /// it, within the operation timeout. No round trip if the channel is already subscribed;
    /// else one pipelined round (plus connecting, the first time). The waiter's receiver
    /// changes on messages naming it (`wake:<waiter>`) and on those naming no one.
    pub(crate) async fn watch_as_waiter(
        &self,
        channel: &[u8],
        waiter: Arc<str>,
    ) -> Result<(watch::Receiver<u64>, Keep)> {
        self.subscribe_as(&[channel], Some(waiter)).await
    }

    /// A new waiter id of this client: an owner token whose first 8 characters are this
    /// client's tag, a version-8 UUID (the release scripts publish what names such a waiter
    /// on its client's channel, see [`client_channel`](Self::client_channel)).
    pub(crate) fn new_waiter_id(&self) -> Arc<str> {
        let mut bytes: [u8; 16] = rand::random();
        bytes[..4].copy_from_slice(&self.tag);
        bytes[6] = (bytes[6] & 0x0f) | 0x80; // version 8
        bytes[8] = (bytes[8] & 0x3f) | 0x80; // the RFC 9562 variant
        let mut id = String::with_capacity(36);
        for (i, byte) in bytes.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                id.push('-');
            }
            id.push_str(&format!("{byte:02x}"));
        }
        id.into()
    }

    /// This client's channel beside the object's `channel`: `<channel>\xFF<tag in hex>`, in
    /// the channel's hash slot (its `{...}` tag comes first). The release scripts publish a
    /// message naming one of this client's waiters ([`new_waiter_id`](Self::new_waiter_id))
    /// there, so that only this client hears it, not every client waiting for the object.
    /// The `0xFF` byte never occurs in a (UTF-8) lock name, so no object's channel is one.
    pub(crate) fn client_channel(&self, channel: &[u8]) -> Vec<u8> {
        let tag: String = self.tag.iter().map(|b| format!("{b:02x}")).collect();
        [channel, b"\xFF".as_slice(), tag.as_bytes()].concat()
    }

    /// Subscribes to the object's `channel` and this client's channel beside it
    /// ([`client_channel`](Self::client_channel)) for one waiter, `waiter` (from
    /// [`new_waiter_id`](Self::new_waiter_id)), and returns once the server confirmed both,
    /// within the operation timeout: no round trip if both are subscribed already, else one
    /// pipelined round. The object's channel carries the messages of clients of earlier
    /// versions (and those naming waiters of other kinds); this client's, those that name its
    /// waiters. The waiter's receiver changes on messages naming it and on those naming no
    /// one, on either channel.
    pub(crate) async fn watch_as_client_waiter(
        &self,
        channel: &[u8],
        waiter: Arc<str>,
    ) -> Result<(watch::Receiver<u64>, Keep)> {
        let own = self.client_channel(channel);
        self.subscribe_as(&[channel, &own], Some(waiter)).await
    }

    /// Takes up the grant a release made to `waiter` (see [`GRANT_PREFIX`]), if one came.
    pub(crate) fn take_grant(&self, waiter: &str) -> Option<Grant> {
        self.shared.state().grants.remove(waiter)
    }

    /// Subscribes to `channel` for every message on it that names no waiter, as
    /// [`watch_as_waiter`](Self::watch_as_waiter) otherwise.
    pub(crate) async fn watch(&self, channel: &[u8]) -> Result<(watch::Receiver<u64>, Keep)> {
        self.subscribe_as(&[channel], None).await
    }

    /// Subscribes to `channels` (one, or a waiter's: its object's and its client's) and
    /// returns once the server confirmed every one of them, within the operation timeout.
    async fn subscribe_as(
        &self,
        channels: &[&[u8]],
        waiter: Option<Arc<str>>,
    ) -> Result<(watch::Receiver<u64>, Keep)> {
        let (rx, keep, confirmations) = {
            let mut state = self.shared.state();
            if !state.running {
                state.running = true;
                tokio::spawn(run(
                    Running(self.shared.clone()),
                    self.target.clone(),
                    self.url.clone(),
                    self.timeout,
                    self.connect_timeout,
                ));
            }
            // A waiter's one receiver, changed by the messages of any of its channels.
            let (waiter_tx, waiter_rx) = watch::channel(0);
            let waiter_tx = Arc::new(waiter_tx);
            let mut rx = None;
            let mut kept = Vec::with_capacity(channels.len());
            let mut confirmations = Vec::with_capacity(channels.len());
            for channel in channels {
                let next_id = state.next_id;
                let entry = state.channels.entry(channel.to_vec()).or_insert_with(|| Channel {
                    id: next_id,
                    refs: 0,
                    tx: watch::channel(0).0,
                    waiters: HashMap::new(),
                    confirmed: watch::channel(false).0,
                    status: Status::Unsent,
                    was_confirmed: false,
                    idle_since: None,
                });
                entry.refs += 1;
                entry.idle_since = None;
                let new = entry.id == next_id;
                match &waiter {
                    Some(waiter) => {
                        entry.waiters.insert(waiter.clone(), waiter_tx.clone());
                    }
                    None => {
                        rx.get_or_insert_with(|| entry.tx.subscribe());
                    }
                }
                kept.push((channel.to_vec(), entry.id));
                confirmations.push(entry.confirmed.subscribe());
                if new {
                    state.next_id += 1;
                }
            }
            let keep = Keep {
                shared: self.shared.clone(),
                channels: kept,
                waiter,
            };
            (rx.unwrap_or(waiter_rx), keep, confirmations)
        };
        let mut unconfirmed: Vec<_> = confirmations
            .into_iter()
            .filter_map(|mut confirmed| {
                let ok = *confirmed.borrow_and_update();
                (!ok).then_some(confirmed)
            })
            .collect();
        if unconfirmed.is_empty() {
            return Ok((rx, keep));
        }
        self.shared.wake.notify_one();
        // Each wait's `Ref` dropped at once: it holds a lock, and the future must stay `Send`.
        let all = join_all(
            unconfirmed
                .iter_mut()
                .map(|confirmed| async move { confirmed.wait_for(|ok| *ok).await.map(drop) }),
        );
        let outcome = tokio::time::timeout(self.timeout, all)
            .await
            .map(|results| results.into_iter().collect::<std::result::Result<(), _>>());
        match outcome {
            Ok(Ok(())) => Ok((rx, keep)),
            Ok(Err(_)) => Err(Error::unavailable(
                BACKEND,
                format!("{}: pub/sub closed", self.url),
            )),
            Err(_) => Err(Error::unavailable(
                BACKEND,
                format!(
                    "{}: no SUBSCRIBE confirmation within {:?}",
                    self.url, self.timeout
                ),
            )),
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.shared.state().closed = true;
        self.shared.wake.notify_one();
    }
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

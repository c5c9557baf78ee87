//! [`Redlock`]: one lock over N independent Redis masters. Its type docs give the layout, the
//! algorithm with its round trips, and why it issues no fencing tokens.

mod notes;
mod quorum;
mod trust;
mod wake;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    Attempt, Capabilities, DistributedLock, Error, Fencing, Lease, LockKind, LockName, LockState,
    ObjectState, Primitive, Result, TryAcquire, WakeUp,
};
use futures::future::join_all;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::{RedlockConfig, Target};
use crate::keys::{KeySpace, LockKeys};
use crate::lock::{extend_many_on, scan_keys, ttl_millis, Renewal};
use crate::node::{Node, BACKEND};
use crate::subscriber::{Keep, Subscriber};
use crate::waiters::Waiters;

use notes::agreed_note;
use quorum::tally;
use trust::Trust;
use wake::forward_releases;

/// A lock over N independent Redis masters (N odd, 3 or 5), the algorithm of the Redis
/// documentation ("Distributed Locks with Redis"). Cheap to clone; clones share the
/// connections.
///
/// # Key layout
///
/// On every master, exactly the single-instance layout of [`RedisLock`](crate::RedisLock):
/// `<prefix><name>` holds the owner token with a `PX` TTL, and a holder's note (see below)
/// is the note key beside it (`<owner>\n<note>`, no TTL). No fencing counter is kept (see
/// below). The masters are independent: no replication between them.
///
/// **A single-instance client does not exclude a Redlock holder**: a
/// [`RedisLock`](crate::RedisLock) (or any `SET NX PX` client) on one master sees only that
/// master. It acquires there whenever that master is free, which it may be while a Redlock
/// holder holds the other masters of its majority; and a Redlock client wins a majority
/// without the master a single-instance client holds. Use one kind of client per lock name.
///
/// # Eviction
///
/// As for [`RedisLock`](crate::RedisLock), a `maxmemory-policy` other than `noeviction` lets
/// a master evict lock keys, which takes its vote from the holder. `build` checks every
/// master's policy in the background (masters connect lazily) and logs a warning for each
/// that can evict.
///
/// # Restarted masters
///
/// A master that restarts without its last writes (no persistence, RDB snapshots, or AOF
/// `everysec`) forgets locks it granted and can vote again for a second holder while the
/// first is valid. The algorithm's remedy is to keep a restarted master out for the maximum
/// TTL; this client does its part: each acquisition knows the run id of every master that
/// answered it, and a master whose run id changed since this client last saw it does not
/// count toward anyone's majority until [`RedlockConfig::with_restart_quarantine`] has passed
/// (default: the longer of 60 s and the longest TTL this client used). A client that first
/// meets a master after its restart cannot know; delay restarts by the maximum TTL, or use AOF
/// `appendfsync always`.
///
/// The run id is read once per connection, not per acquisition: a restart ends every
/// connection, so the pipeline that reads `INFO server` also names the connection
/// (`CLIENT SETNAME distlock-<random>`), and each acquisition pipelines `CLIENT GETNAME`
/// before its script. A name this client set tells which run answered; any other name (the
/// connection was reopened) makes the acquisition read the run id again and run its script
/// once more, on the same connection (by `EVAL`, which loads it on a server that never saw
/// it). One acquisition at a time names a master's connection: the others that find it
/// unnamed meanwhile (a burst on a new client, or after a reconnection) wait for that naming,
/// then send their script after `CLIENT GETNAME`, so a burst costs one `INFO` and one `EVAL`
/// per master, not one per acquisition queued within the acquisition's time bound. Each
/// waits within its own per-master bound (the node timeout, at most half its TTL), not the
/// naming's, and if that naming fails each names the connection itself at once: a master
/// that falls silent or dies while its connection is named costs an acquisition that
/// master's vote and at most that bound, and a burst's votes fail together, not one after
/// another. A master that answers `NOSCRIPT` (restarted, or its scripts flushed) is named
/// again the same way. The masters' ACLs must allow `CLIENT SETNAME` and `CLIENT GETNAME`
/// besides `INFO`, and a proxy that keeps the client's connection open across a master's
/// restart would hide the restart: connect to the masters directly.
///
/// # Ambiguous errors
///
/// "only k of N masters answered" from `try_acquire`, `release` or `extend` is ambiguous: the
/// masters that did not answer may have applied it. A failed acquisition releases what it may
/// hold on every master (without announcing it, so waiters are not woken for a lock that is
/// not free), and `LockClient`'s cleanup by owner token does it again; what remains expires
/// with the TTL.
///
/// # Algorithm and round trips
///
/// - **acquire**: the acquire script on all masters at once, each bounded by the node timeout
///   (200 ms by default, far below usual TTLs; capped at half the TTL for very short ones).
///   Safety comes from the validity check; the timeout only stops a dead master from eating
///   the validity. Success needs a majority **and** remaining validity
///   `ttl - elapsed - drift > 0` (`drift = 0.01 * ttl + 2 ms` by default); the lease's local
///   deadline is `sent + ttl - drift`. On failure the lock is released, without announcing
///   it, on the masters that granted it or did not answer. One parallel round trip (two if
///   a failed attempt got the lock somewhere or lost a reply; one when every master said
///   "held"), one more on a master whose connection is new (it reads the run id, see
///   above).
/// - **release**: compare-and-delete on all masters, one parallel round trip. `true` if a
///   majority deleted our key, `false` if a majority did not hold it, an error if too few
///   answered to tell.
/// - **extend**: compare-and-`PEXPIRE` on all masters, one parallel round trip; kept only
///   with a majority and remaining validity. `extend_many` sends one pipeline per master.
/// - **set_note**: the owner-checked note script on all masters, one parallel round trip
///   (see "Notes and leader election" below).
/// - **inspect**: one script per master reading the owner, its `PTTL` and the note record,
///   one parallel round trip.
/// - **wait**: a waiter's attempt queues it on every master that finds the lock held (as on a
///   single server, see [`RedisLock`](crate::RedisLock)), and each master's release wakes the
///   first waiter of its own queue. The queues are ordered by a score the waiter's client
///   sends with the attempt (the end of its stay by the client's clock), the same on every
///   master, so they agree and a release wakes one waiter, not all. (Ordered by arrival,
///   they disagreed: an attempt reaches the masters in parallel, so two waiters' attempts
///   arrive in different orders, and each master woke a different waiter.) A master drops
///   an entry once its own clock passes the score: clients' clocks running behind the
///   masters' by more than a second shorten a waiter's stay, which then only waits for its
///   next re-check, as without notifications. A waiter subscribes on every master (one pub/sub
///   connection per master and client) and tries once a majority of masters woke it (each
///   wakes it once it has released, so the attempt finds a majority free), or the node
///   timeout after the first did; else at the time a majority of holds expire. After a split vote (no
///   majority for anyone, the lock free somewhere) the attempt reports a short random wait,
///   the "retry after a random delay" of the algorithm, so contenders do not collide again.
///   Masters that did not answer (or restarted recently) might hold the lock for anyone, so
///   it is a split vote only if no holder could have a majority even counting them.
///
/// With a minority of masters down, everything works (slower only by the node timeout while
/// their connections fail). With a majority down, every operation fails with
/// [`Error::Unavailable`] within the node timeout: no hang and no false success.
///
/// # Fencing: none
///
/// Redlock cannot issue fencing tokens (Kleppmann, "How to do distributed locking", 2016):
/// counters on independent masters are not a consensus. Had each master a counter, the
/// maximum over the majority that granted a lock would still not be monotonic, even without
/// crashes: attempts that fail still count on the minority that granted them, so one master's
/// counter runs ahead, and the next holder's majority may not include that master. Restarts
/// without persistence make it worse. So no counter is kept,
/// [`Capabilities::fencing`] is [`Fencing::None`] and leases carry no token. Redlock also
/// assumes bounded clock drift, network delay and process pauses: a holder paused past its
/// validity can still act. Use it where an occasional double holder costs efficiency, not
/// correctness; for correctness, fence the resource with a store that gives
/// [`Fencing::Monotonic`].
///
/// # Notes and leader election: no terms
///
/// [`DistributedLock::set_note`] runs the single-instance note script on every master at
/// once: each stores `<owner>\n<note>` only if its lock key holds the lease's owner. It
/// returns `true` if a majority stored it while the lease was still valid by the local
/// clock, `false` if a majority did not (they no longer hold for the owner: its hold expired
/// there, or a master restarted empty and forgot it; or the answers came after the lease ran
/// out), and an ambiguous [`Error::Unavailable`] if too few masters answered to tell (sending
/// it again is harmless). A master that restarted empty refuses the note, so a restart
/// counts against a note, never for it.
///
/// `inspect` reads the holder as before (the owner a majority of masters holds for) and
/// gives it the note most of the masters that answered carry in records *that owner* left.
/// Any record of the owner counts, not only one beside a live hold: a note stored on a
/// majority shares a master with every majority that answers, so a minority that missed it
/// (down meanwhile, restarted empty, or its hold expired there) hides nothing. Records are
/// tagged with their owner and outlive the hold (as on one server), so a later holder is
/// never shown an earlier holder's note. If a holder replaced its note and the masters that
/// answered are split evenly between the old and the new value, no note is shown.
///
/// So [`LockClient::election`](distlock_core::LockClient::election) works on Redlock, with
/// one difference: **a leader has no term**. [`Leadership::term`](distlock_core::Leadership::term)
/// and [`Leader::term`](distlock_core::Leader::term) are `None`, as Redlock issues no fencing
/// tokens (below); observers tell leaders apart by their owner tokens. A leader paused or
/// cut off past its validity (or a master's clock stepped forward) can act beside its
/// successor, and nothing refuses its late writes: use an election on Redlock where two
/// leaders for a moment cost efficiency (a job run twice), not correctness.
///
/// # Semaphores and read-write locks: none
///
/// Redlock offers only the mutex ([`Capabilities::semaphores`] and
/// [`Capabilities::rw_locks`] are `false`; `try_acquire_kind` answers
/// [`Error::NotSupported`]).
///
/// A semaphore cannot be built by majority votes: a majority quorum bounds who holds a
/// *single* lock (two majorities always share a master, and that master grants one owner),
/// but it does not bound a *count*. With 3 masters and 2 permits, holder A is admitted on
/// masters {1, 2}, B on {2, 3} and C on {1, 3}: each holds a majority, each master sees only
/// 2 holders (within its 2 permits), and yet 3 clients hold a 2-permit semaphore. Counting
/// correctly would need every master to agree on one set of holders, which is consensus, not
/// Redlock.
///
/// Read-write locks are not offered in this version either. Their exclusion is within a
/// majority's reach (a reader's majority and a writer's share a master, which refuses one of
/// them), but the rest is not designed nor tested yet: the waiting writers that keep new
/// readers out would have to be recorded alike on a majority, and a failed attempt's partial
/// grants of each kind given back. Use a single [`RedisLock`](crate::RedisLock) (or a store
/// with fencing) for both.
///
/// ```no_run
/// use distlock_core::LockClient;
/// use distlock_redis::{Redlock, RedlockConfig};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let redlock = RedlockConfig::new([
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])?
/// .build()
/// .await?;
/// let client = LockClient::new(redlock);
/// let guard = client.acquire("nightly-report").await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

struct Inner {
    nodes: Vec<Node>,
    /// Per master: the run id it answered with and until when its votes do not count.
    trust: Vec<std::sync::Mutex<Trust>>,
    /// The longest TTL this client asked for, in ms (the least a restart quarantine lasts).
    longest_ttl_ms: std::sync::atomic::AtomicU64,
    /// One pub/sub connection per master, opened with the first wait.
    subscribers: Vec<Subscriber>,
    keys: KeySpace,
    config: RedlockConfig,
    /// This client's waiters that may be in the masters' queues (as on a single server).
    waiters: Waiters,
}

impl Redlock {
    /// Sets up connections to every master; they connect on first use, so masters that are
    /// down now do not stop the others.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for bad settings.
    pub async fn build(config: RedlockConfig) -> Result<Self> {
        config.validate()?;
        let nodes = config
            .nodes
            .iter()
            .map(|node| {
                let Target::Server(client) = &node.target else {
                    return Err(Error::invalid_config(format!(
                        "{}: Redlock's masters are independent servers, not a cluster",
                        node.url
                    )));
                };
                Node::lazy(
                    client.clone(),
                    node.url.clone(),
                    config.node_timeout,
                    node.connect_timeout,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let prefix = config.nodes.first().map(|n| n.prefix.clone()).unwrap_or_default();
        let subscribers = nodes
            .iter()
            .map(|node| {
                Subscriber::new(
                    node.target().clone(),
                    node.url().to_owned(),
                    node.timeout(),
                    node.connect_timeout(),
                )
            })
            .collect();
        // Masters connect lazily, so the eviction policy is checked in the background, as
        // each master answers; a policy that can evict lock keys is logged as a warning.
        for node in &nodes {
            let node = node.clone();
            tokio::spawn(async move {
                if let Err(e) = crate::lock::check_eviction_policy(&node, false).await {
                    tracing::debug!(master = %node.url(), error = %e, "distlock-redis: eviction policy not checked");
                }
            });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                trust: nodes.iter().map(|_| std::sync::Mutex::default()).collect(),
                longest_ttl_ms: std::sync::atomic::AtomicU64::new(0),
                nodes,
                subscribers,
                keys: KeySpace::new(prefix),
                config,
                waiters: Waiters::default(),
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RedlockConfig {
        &self.inner.config
    }

    fn keys(&self, name: &LockName) -> LockKeys {
        self.inner.keys.keys(name)
    }

    /// How many locks whose names start with `name_prefix` are held on a majority of the
    /// masters that answer (a `SCAN` on each, for tests and status pages).
    ///
    /// # Errors
    /// [`Error::Unavailable`] if fewer than a majority of masters answer.
    pub async fn count_held(&self, name_prefix: &str) -> Result<usize> {
        let pattern = self.inner.keys.scan_pattern(name_prefix);
        let scans = join_all(self.inner.nodes.iter().map(|n| scan_keys(n, &pattern))).await;
        let mut counts = std::collections::HashMap::<Vec<u8>, usize>::new();
        let mut answered = 0;
        for keys in scans.into_iter().flatten() {
            answered += 1;
            let mut keys = keys;
            keys.sort();
            keys.dedup();
            for key in keys {
                *counts.entry(key).or_default() += 1;
            }
        }
        if answered < self.quorum() {
            return Err(self.no_majority("count", answered, &[]));
        }
        Ok(counts.values().filter(|&&n| n >= self.quorum()).count())
    }
}

/// Redlock holds only mutexes (see the type docs): a lease of another kind was never granted
/// by it, and its name's mutex key must not be touched for it.
fn only_mutex(lease: &Lease) -> Result<()> {
    if lease.kind() == LockKind::Exclusive {
        Ok(())
    } else {
        Err(Error::NotSupported {
            backend: "redlock",
            what: "semaphores and read-write locks",
        })
    }
}

#[async_trait]
impl DistributedLock for Redlock {
    fn backend(&self) -> &'static str {
        "redlock"
    }

    /// No fencing (see the type docs), notified waiters (unless switched off), 1 ms TTL
    /// granularity, TTLs from 10 ms (below that the drift allowance eats the validity), no
    /// semaphores and no read-write locks (see the type docs), notes (so leader election,
    /// without terms).
    fn capabilities(&self) -> Capabilities {
        let wake_up = if self.inner.config.notifications {
            WakeUp::Notification
        } else {
            WakeUp::Polling
        };
        Capabilities::new(Fencing::None, wake_up)
            .with_ttl_granularity(Duration::from_millis(1))
            .with_ttl_range(Duration::from_millis(10), Duration::from_secs(30 * 24 * 3600))
            .with_primitives(false, false)
            .with_notes(true)
    }

    /// The mutex only: one parallel round trip to all masters (another to release where it
    /// got the lock, or lost a reply, if it failed). With a waiter, the waiter is queued on
    /// every master that finds the lock held (each master's release wakes the first waiter of
    /// its own queue).
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        if attempt.kind != LockKind::Exclusive {
            return Err(attempt.not_supported(self.backend()));
        }
        let Attempt { name, owner, ttl, .. } = attempt;
        let (owner, ttl) = (*owner, *ttl);
        match attempt.waiter_parts() {
            Some((waiter, stay)) => {
                self.inner
                    .waiters
                    .attempt(waiter, stay, |waiting| self.attempt(name, owner, ttl, waiting))
                    .await
            }
            None => self.attempt(name, owner, ttl, None).await,
        }
    }

    /// One parallel round trip: compare-and-delete on all masters, each waking the first waiter
    /// of its queue.
    async fn release(&self, lease: &Lease) -> Result<bool> {
        only_mutex(lease)?;
        let keys = self.keys(lease.name());
        let tally = self.release_all(&keys, &lease.owner().to_string()).await;
        let n = self.inner.nodes.len();
        if tally.yes >= self.quorum() {
            Ok(true)
        } else if tally.no > n - self.quorum() {
            Ok(false)
        } else {
            Err(self.no_majority("release", tally.yes + tally.no, &tally.errors))
        }
    }

    /// One pipeline per master (compare-and-`PEXPIRE` of each lease), all masters at once; a
    /// renewal is kept with a majority.
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        // Leases with an invalid TTL never reach the masters (`PEXPIRE 0` would delete).
        let mut batch = Vec::with_capacity(leases.len());
        let mut batched = Vec::with_capacity(leases.len());
        for (i, lease) in leases.iter().enumerate() {
            if lease.kind() != LockKind::Exclusive {
                continue;
            }
            if let Ok(ms) = ttl_millis(lease.ttl()) {
                batch.push(Renewal::lock(
                    &self.keys(lease.name()),
                    lease.owner().to_string(),
                    ms,
                ));
                batched.push(i);
            }
        }
        let sent_at = Instant::now();
        let per_node = if batch.is_empty() {
            Vec::new()
        } else {
            join_all(self.inner.nodes.iter().map(|node| extend_many_on(node, &batch))).await
        };
        let mut results: Vec<Result<Option<Lease>>> = leases
            .iter()
            .map(|lease| only_mutex(lease).and_then(|()| ttl_millis(lease.ttl()).map(|_| None)))
            .collect();
        for (j, &i) in batched.iter().enumerate() {
            let replies = per_node
                .iter()
                .map(|replies| match replies.get(j) {
                    Some(Ok(ours)) => Ok(*ours),
                    Some(Err(e)) => Err(e.duplicate()),
                    None => Err(Error::backend(BACKEND, "missing reply")),
                })
                .collect();
            let lease = &leases[i];
            results[i] = self.judge_extension(lease, lease.ttl(), sent_at, &tally(replies));
        }
        results
    }

    /// Subscribes on every master at once (each bounded by the node timeout) and returns a
    /// watch that fires on the first announcement from any of them. Fails only if no master
    /// confirmed the subscription (the waiter then polls). Semaphores and read-write locks
    /// are not offered: polling.
    async fn watch(&self, name: &LockName, primitive: Primitive) -> Result<distlock_core::ReleaseWatch> {
        if !self.inner.config.notifications || primitive != Primitive::Mutex {
            return Ok(distlock_core::ReleaseWatch::polling());
        }
        let keys = self.keys(name);
        let limit = self.inner.config.node_timeout;
        let waiter: Arc<str> = format!("{:016x}", rand::random::<u64>()).into();
        let subscriptions = join_all(self.inner.subscribers.iter().map(|subscriber| async {
            match tokio::time::timeout(limit, subscriber.watch_as_waiter(&keys.channel, waiter.clone())).await
            {
                Ok(subscribed) => subscribed,
                Err(_) => Err(Error::unavailable(
                    BACKEND,
                    format!("no SUBSCRIBE answer within {limit:?}"),
                )),
            }
        }))
        .await;
        let mut errors = Vec::new();
        let live: Vec<(watch::Receiver<u64>, Keep)> = subscriptions
            .into_iter()
            .filter_map(|s| s.map_err(|e| errors.push(crate::node::detail(&e))).ok())
            .collect();
        if live.is_empty() {
            return Err(self.no_majority("watch", 0, &errors));
        }
        let (tx, rx) = watch::channel(0u64);
        // Masters whose subscription failed cannot wake the waiter: they are not waited for.
        let quorum = self.quorum().min(live.len());
        tokio::spawn(forward_releases(live, tx, quorum, self.inner.config.node_timeout));
        let leave = self
            .inner
            .waiters
            .leave_on_drop(self.inner.nodes.clone(), keys, waiter.clone());
        Ok(distlock_core::ReleaseWatch::for_waiter(rx, leave, waiter))
    }

    /// One parallel round trip: the note script on every master, owner-checked on each; `true`
    /// once a majority stored it within the lease's validity (see the type docs: "Notes and
    /// leader election").
    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool> {
        self.note_on_majority(lease, note).await
    }

    /// Reads every master (one parallel round trip: a script reading the owner, its TTL and
    /// the note record at once, a key of another type named `<type>` as on one server); the
    /// holder is the owner a majority agrees on, its note the one most of the masters that
    /// answered carry for that owner. The mutex only.
    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        if primitive != Primitive::Mutex {
            return Err(Error::NotSupported {
                backend: self.backend(),
                what: "listing the holders of a semaphore or read-write lock",
            });
        }
        let keys = self.keys(name);
        let limit = self.inner.config.node_timeout;
        let note_key = crate::keys::note_key(&keys.lock);
        let read_keys: [&[u8]; 2] = [&keys.lock, &note_key];
        let reads = join_all(self.inner.nodes.iter().map(|node| {
            node.script_within::<(Option<Vec<u8>>, i64, Option<Vec<u8>>)>(
                limit,
                &crate::lua::INSPECT_UNFENCED,
                &read_keys,
                &[],
            )
        }))
        .await;
        let mut answered = 0;
        let mut owners = std::collections::HashMap::<Vec<u8>, Vec<Option<Duration>>>::new();
        let mut notes = Vec::new();
        for (owner, pttl, note) in reads.into_iter().flatten() {
            answered += 1;
            notes.extend(note);
            if let Some(owner) = owner {
                owners
                    .entry(owner)
                    .or_default()
                    .push(u64::try_from(pttl).ok().map(Duration::from_millis));
            }
        }
        if answered < self.quorum() {
            return Err(self.no_majority("inspect", answered, &[]));
        }
        Ok(ObjectState::from(
            match owners.into_iter().find(|(_, ttls)| ttls.len() >= self.quorum()) {
                Some((owner, ttls)) => {
                    let remaining = ttls.into_iter().flatten().min();
                    let note = agreed_note(&notes, &owner);
                    // Other clients of the layout may store any bytes as the owner.
                    LockState::held(String::from_utf8_lossy(&owner).into_owned(), None, remaining)
                        .with_note(note)
                }
                None => LockState::free(None),
            },
        ))
    }

    /// `PING` on all masters; fine with a majority.
    async fn ping(&self) -> Result<()> {
        let ping = redis::cmd("PING");
        let replies = join_all(self.inner.nodes.iter().map(|node| node.query::<String>(&ping))).await;
        let mut errors = Vec::new();
        let answered = replies
            .into_iter()
            .filter_map(|r| r.map_err(|e| errors.push(crate::node::detail(&e))).ok())
            .count();
        if answered >= self.quorum() {
            Ok(())
        } else {
            Err(self.no_majority("ping", answered, &errors))
        }
    }
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

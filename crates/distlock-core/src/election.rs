//! [`Election`]: one leader among the replicas of a service, its value readable by anyone.
//!
//! An election is the mutex of its name (as Curator's `LeaderSelector` is a mutex and etcd's
//! election a queue of keys under one prefix): the leader is its holder, the term the hold's
//! fencing token, and the leader's value a note beside the hold
//! ([`DistributedLock::set_note`](crate::DistributedLock::set_note)). Leadership is a
//! [`LockGuard`] underneath: renewed by the watchdog, with the lost-lock signal, ended by
//! [`Leadership::resign`] or by the TTL (or session) of a leader that died.

use std::fmt;
use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};

use crate::{
    AcquireOptions, DistributedLock, Error, FencingToken, IntoLockName, LockClient, LockGuard, LockName,
    LossReason, LostSignal, Primitive, ReleaseWatch, Result,
};

/// The longest value a candidate may publish, in bytes.
pub const MAX_LEADER_VALUE_BYTES: usize = 1024;

/// How often [`Election::observe`] reads the leader when no release wakes it first.
const OBSERVE_EVERY: Duration = Duration::from_millis(100);

/// A leader election on the client's store. Built by [`LockClient::election`].
///
/// ```
/// use distlock_core::{LockClient, MemoryLock};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let client = LockClient::new(MemoryLock::new());
/// let election = client.election("scheduler")?;
/// let leadership = election.campaign("10.0.0.7:8080").await?;
/// let leader = election.leader().await?.expect("a leader is in office");
/// assert_eq!(leader.value, "10.0.0.7:8080");
/// assert_eq!(leader.term, leadership.term());
/// assert!(election.try_campaign("10.0.0.8:8080").await?.is_none(), "one leader at a time");
/// leadership.resign().await?;
/// assert!(election.leader().await?.is_none());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    client: LockClient,
    name: LockName,
}

/// The leader of an election as the store sees it, from [`Election::leader`] and
/// [`Election::observe`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The value the leader published (for example its host and port).
    pub value: String,
    /// The leader's term: the fencing token of its hold, greater than every earlier leader's
    /// on stores that fence ([`Fencing::Monotonic`](crate::Fencing::Monotonic)); `None` on
    /// stores that do not.
    pub term: Option<FencingToken>,
    /// The owner token the store records for the leader's hold.
    pub owner: String,
}

/// This process's leadership of an election, from [`Election::campaign`]: a held lock whose
/// holder published a value.
///
/// While it lives the watchdog keeps it; [`lost`](Self::lost) resolves if it is lost (act on
/// that at once: another candidate may lead within the TTL). Dropping it resigns in the
/// background, as dropping a [`LockGuard`] releases.
#[must_use = "dropping the leadership resigns it"]
pub struct Leadership {
    guard: LockGuard,
    value: String,
}

impl LockClient {
    /// The election `name` on this client's store. Nothing is sent until a candidate
    /// campaigns or someone asks who leads.
    ///
    /// An election is the mutex of its name: do not also take that mutex as a plain lock.
    ///
    /// # Errors
    /// [`Error::InvalidName`]; [`Error::NotSupported`] if the backend cannot publish a
    /// leader's value ([`Capabilities::notes`](crate::Capabilities::notes)).
    pub fn election(&self, name: impl IntoLockName) -> Result<Election> {
        let name = name.into_lock_name()?;
        if !self.capabilities().notes {
            return Err(Error::NotSupported {
                backend: self.backend().backend(),
                what: "leader election",
            });
        }
        Ok(Election {
            client: self.clone(),
            name,
        })
    }
}

impl Election {
    /// The election's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// Waits to become leader (with the client's default options: by default for as long as
    /// it takes), then publishes `value` for others to read.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`] for a value longer than [`MAX_LEADER_VALUE_BYTES`]; as
    /// [`campaign_with`](Self::campaign_with).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`LockClient::acquire_with`]: a leadership won by a campaign whose
    /// caller went away is resigned.
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        let opts = self.client.defaults().clone();
        self.campaign_with(value, &opts).await
    }

    /// Waits to become leader as `opts` say, then publishes `value`.
    ///
    /// # Errors
    /// [`Error::Timeout`] if no leadership came in time; [`Error::InvalidOptions`] for a value
    /// longer than [`MAX_LEADER_VALUE_BYTES`]; store errors (after which nothing is held).
    pub async fn campaign_with(&self, value: impl Into<String>, opts: &AcquireOptions) -> Result<Leadership> {
        let value = value.into();
        if value.len() > MAX_LEADER_VALUE_BYTES {
            return Err(Error::invalid_options(format!(
                "a leader's value of {} bytes is longer than the {MAX_LEADER_VALUE_BYTES} allowed",
                value.len()
            )));
        }
        loop {
            let guard = self.client.acquire_with(self.name.clone(), opts).await?;
            let lease = guard.lease();
            // Sent again on an unknown outcome: storing the same note twice is harmless.
            let mut published = self.client.backend().set_note(&lease, &value).await;
            if published.as_ref().is_err_and(Error::is_ambiguous) {
                published = self.client.backend().set_note(&lease, &value).await;
            }
            match published {
                Ok(true) => return Ok(Leadership { guard, value }),
                // Lost between the acquisition and the note (its TTL ran out): campaign again.
                Ok(false) => {
                    let _ = guard.release().await;
                }
                Err(error) => {
                    let _ = guard.release().await;
                    return Err(error);
                }
            }
        }
    }

    /// One attempt to become leader: `Ok(None)` if another candidate leads.
    ///
    /// # Errors
    /// As [`campaign_with`](Self::campaign_with), without the timeout.
    pub async fn try_campaign(&self, value: impl Into<String>) -> Result<Option<Leadership>> {
        let opts = self.client.defaults().clone().no_wait();
        match self.campaign_with(value, &opts).await {
            Ok(leadership) => Ok(Some(leadership)),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The current leader, or `None` if no one leads (or the new leader has not published
    /// its value yet). Anyone may ask, candidate or not.
    ///
    /// # Errors
    /// Store errors.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        read_leader(self.client.backend().as_ref(), &self.name).await
    }

    /// Each change of leader, in order: the leader in office when the stream starts (if any),
    /// then every new leader as it takes office. Terms only go up on stores that fence.
    ///
    /// The stream reads the leader when a release wakes it and at least every 100 ms; a
    /// leadership that begins and ends between two reads is not seen. A store error is
    /// yielded as an item, and the stream goes on.
    ///
    /// ```
    /// use distlock_core::{LockClient, MemoryLock};
    /// use futures::StreamExt;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
    /// let client = LockClient::new(MemoryLock::new());
    /// let election = client.election("scheduler")?;
    /// let mut changes = election.observe();
    /// let first = election.campaign("a:1").await?;
    /// assert_eq!(changes.next().await.expect("a change")?.value, "a:1");
    /// first.resign().await?;
    /// let _second = election.campaign("b:2").await?;
    /// assert_eq!(changes.next().await.expect("a change")?.value, "b:2");
    /// # Ok(()) }
    /// ```
    pub fn observe(&self) -> BoxStream<'static, Result<Leader>> {
        let state = Observer {
            store: self.client.backend().clone(),
            name: self.name.clone(),
            last: None,
            watch: None,
        };
        stream::unfold(state, |mut observer| async move {
            let item = observer.next_change().await;
            Some((item, observer))
        })
        .boxed()
    }
}

/// The state of one [`Election::observe`] stream.
struct Observer {
    store: std::sync::Arc<dyn DistributedLock>,
    name: LockName,
    /// The last leader yielded: its owner and term.
    last: Option<(String, Option<FencingToken>)>,
    watch: Option<ReleaseWatch>,
}

impl Observer {
    async fn next_change(&mut self) -> Result<Leader> {
        loop {
            if self.watch.is_none() {
                // Subscribed before the read, so a release right after it is not missed.
                self.watch = self.store.watch(&self.name, Primitive::Mutex).await.ok();
            }
            match read_leader(self.store.as_ref(), &self.name).await {
                Ok(Some(leader)) => {
                    let seen = (leader.owner.clone(), leader.term);
                    let older = matches!((&self.last, leader.term), (Some((_, Some(last))), Some(term)) if term < *last);
                    if self.last.as_ref() != Some(&seen) && !older {
                        self.last = Some(seen);
                        return Ok(leader);
                    }
                }
                Ok(None) => {}
                Err(error) => {
                    self.watch = None;
                    tokio::time::sleep(OBSERVE_EVERY).await;
                    return Err(error);
                }
            }
            match self.watch.as_mut() {
                Some(watch) => {
                    watch.wait(OBSERVE_EVERY).await;
                }
                None => tokio::time::sleep(OBSERVE_EVERY).await,
            }
        }
    }
}

async fn read_leader(store: &dyn DistributedLock, name: &LockName) -> Result<Option<Leader>> {
    let state = store.inspect(name, Primitive::Mutex).await?.into_lock();
    Ok(match (state.owner, state.note) {
        (Some(owner), Some(value)) => Some(Leader {
            value,
            term: state.fencing,
            owner,
        }),
        _ => None,
    })
}

impl Leadership {
    /// The value this leader published.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// This leadership's term (its fencing token), where the store fences: pass it with every
    /// write the leader makes, so a store of record can refuse a deposed leader's.
    pub fn term(&self) -> Option<FencingToken> {
        self.guard.fencing_token()
    }

    /// Whether the leadership is lost (see [`LockGuard::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Resolves when the leadership is lost.
    pub async fn lost(&self) -> LossReason {
        self.guard.lost().await
    }

    /// A handle that tells when the leadership is lost, to pass to the leader's work.
    pub fn lost_signal(&self) -> LostSignal {
        self.guard.lost_signal()
    }

    /// The lock held underneath.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// The lock held underneath, to keep or pass on as any guard (dropping it resigns).
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }

    /// Steps down: releases the leadership so another candidate may take office. Returns
    /// whether this process still led.
    ///
    /// # Errors
    /// As [`LockGuard::release`].
    pub async fn resign(self) -> Result<bool> {
        self.guard.release().await
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("value", &self.value)
            .field("guard", &self.guard)
            .finish()
    }
}

//! The semaphore: Apache Curator's `InterProcessSemaphoreV2` structure (as the ZooKeeper
//! backend's), on etcd keys attached to the client's lease and ordered by create revision.
//!
//! ```text
//! <root>/semaphore:<encoded name>/locks/<lease id, hex>-<owner token>    who may add a lease next (a mutex's queue)
//! <root>/semaphore:<encoded name>/leases/<lease id, hex>-<owner token>   one per hold held or asked for;
//!                                                                       value = "permits=<count>", and
//!                                                                       ";weight=<n>" for n permits
//! ```
//!
//! - **Waiting.** Get in line for the `locks` mutex (the mutex's queue: each waiter watches
//!   only the key before it), then, holding it, create our lease and count the leases
//!   created up to ours: at most `permits`, we hold one and delete our `locks` key (the next
//!   in line is woken); else wait for a deletion under `leases`, still holding `locks`, and
//!   count again. Only the holder of `locks` watches `leases`, so a permit's release wakes
//!   the one waiter that can win.
//! - **One attempt.** Read the first `locks` key and every lease (1 round trip): `locks`
//!   held, or `permits` leases live, is "held" (nothing created). Else create our lease in a
//!   transaction that holds only if `locks` is still empty and no lease was created since
//!   the read, so the count read is the count at the creation (+1 round trip); a lost race
//!   reads again (at most three times).
//! - **Several permits.** A hold of `n` permits is one lease key that records its weight, and
//!   every count above is of the weights of the leases (a foreign value counts as 1), not of
//!   the keys. One key rather than `n` created in one transaction: a hold stays one key, so
//!   release, renewal, the held-key watch and the cleanup by owner act on all of it at once as
//!   on one permit, and its fencing token is that key's create revision. Waiters stay in
//!   arrival order: a heavy waiter at the head of `locks` keeps lighter ones behind it out
//!   until its permits are free (none starves).
//! - **Exactness.** Every holder counted the leases older than its own after it existed, with
//!   a linearizable read: the live leases older than the youngest were all in its count, so
//!   their weights and its own add up to at most `permits`.
//! - **Permit count.** Every lease records its count; a live lease with another count
//!   refuses with [`Error::PermitsMismatch`] (a waiter deletes its lease and `locks` key
//!   first: nothing is left behind). Values that are not a count (a foreign client's) are
//!   not checked.
//! - **Fencing.** A permit's token is its lease key's create revision. Leases are created
//!   only by the holder of `locks`, or by an attempt while `locks` is empty, so in the order
//!   permits are granted: each new permit's token is above every earlier one's.
//!
//! Round trips: an attempt 1 when full, 2 with room. A wait: 1 to get in line for `locks`
//! (+1 look and a watch per key ahead), 1 to create the lease and count, 1 to delete our
//! `locks` key; a full semaphore adds 1 read per deletion under `leases`. Release: 1. A hold of
//! several permits costs the same as one of one.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{
    Error, FencingToken, Holder, Lease, LockKind, LockName, LockState, OwnerToken, Primitive, Result,
    TryAcquire,
};
use tokio::time::Instant;

use super::mutex::{Entry, Line, LOOK_AGAIN_AFTER_TTLS};
use super::{ClientLease, Inner};
use crate::keys::{contender_key, object_prefix, owner_in, semaphore_leases, semaphore_locks, KeyRange};
use crate::proto::KeyValue;
use crate::txn::{self, created, kvs, revision};

/// What a lease key's value starts with; the permit count follows.
const PERMITS_DATA: &str = "permits=";

/// What follows the count in the value of a lease of several permits; its weight follows.
const WEIGHT_DATA: &str = ";weight=";

/// How often one attempt reads again after losing a race to another acquirer.
const ATTEMPT_TRIES: usize = 3;

/// A lease key's value: `permits=<count>`, and `;weight=<weight>` after it for a lease of
/// several permits.
fn lease_data(permits: u32, weight: u32) -> String {
    match weight {
        1 => format!("{PERMITS_DATA}{permits}"),
        _ => format!("{PERMITS_DATA}{permits}{WEIGHT_DATA}{weight}"),
    }
}

/// The permit count and weight in a lease key's value, if it holds them.
fn recorded(value: &[u8]) -> Option<(u32, u32)> {
    let data = std::str::from_utf8(value).ok()?.strip_prefix(PERMITS_DATA)?;
    match data.split_once(WEIGHT_DATA) {
        Some((permits, weight)) => Some((permits.parse().ok()?, weight.parse().ok()?)),
        None => Some((data.parse().ok()?, 1)),
    }
}

/// The permit count in a lease key's value, if it holds one.
fn permits_in(value: &[u8]) -> Option<u32> {
    recorded(value).map(|(permits, _)| permits)
}

/// How many permits a lease takes: the weight its value records, 1 for a foreign value.
fn weight_of(kv: &KeyValue) -> u64 {
    recorded(&kv.value).map_or(1, |(_, weight)| u64::from(weight))
}

/// The semaphore's two prefixes.
struct Paths {
    locks: String,
    leases: String,
}

impl Paths {
    fn of(inner: &Inner, name: &LockName) -> Self {
        let prefix = object_prefix(inner.config.root(), Primitive::Semaphore, name);
        Self {
            locks: semaphore_locks(&prefix),
            leases: semaphore_leases(&prefix),
        }
    }
}

/// Refuses with [`Error::PermitsMismatch`] if a lease in `leases` other than `ours` records a
/// count other than `asked`.
fn check_permits(name: &LockName, leases: &[KeyValue], ours: Option<&str>, asked: u32) -> Result<()> {
    let stored = leases
        .iter()
        .filter(|kv| ours.is_none_or(|ours| kv.key != ours.as_bytes()))
        .find_map(|kv| permits_in(&kv.value).filter(|stored| *stored != asked));
    match stored {
        Some(stored) => Err(Error::PermitsMismatch {
            name: name.to_string(),
            stored,
            asked,
        }),
        None => Ok(()),
    }
}

/// How many permits the `leases` created up to `mine` take.
fn counted(leases: &[KeyValue], mine: i64) -> u64 {
    leases
        .iter()
        .filter(|kv| kv.create_revision <= mine)
        .map(weight_of)
        .sum()
}

/// How many permits all of `leases` take.
fn taken(leases: &[KeyValue]) -> u64 {
    leases.iter().map(weight_of).sum()
}

impl Inner {
    /// One attempt at a permit (see the module docs): 1 round trip when full, 2 with room.
    pub(super) async fn try_permit(
        self: &Arc<Self>,
        name: &LockName,
        (permits, weight): (u32, u32),
        owner: OwnerToken,
    ) -> Result<TryAcquire> {
        let paths = Paths::of(self, name);
        let sent_at = Instant::now();
        let lease = self.lease().await?;
        let key = contender_key(&paths.leases, lease.id, owner);
        let look = || {
            txn::txn(
                Vec::new(),
                vec![
                    txn::first_under(&paths.locks),
                    txn::range(txn::all_under(&paths.leases, 0)),
                ],
                Vec::new(),
            )
        };
        let mut read = self.txn("look", look()).await?;
        for _ in 0..ATTEMPT_TRIES {
            let leases = kvs(&read, 1);
            check_permits(name, leases, None, permits)?;
            if let Some(waiter) = kvs(&read, 0).first() {
                let owner =
                    owner_in(&waiter.key).unwrap_or_else(|| String::from_utf8_lossy(&waiter.key).into());
                return Ok(TryAcquire::Held(Holder::unknown().with_owner(owner)));
            }
            if taken(leases) + u64::from(weight) > u64::from(permits) {
                return Ok(TryAcquire::Held(Holder::unknown()));
            }
            let reply = self
                .txn(
                    "acquire",
                    txn::txn(
                        vec![
                            txn::none_under(&paths.locks),
                            txn::unchanged_since(&paths.leases, revision(&read)),
                        ],
                        vec![
                            txn::put(&key, &lease_data(permits, weight), lease.id),
                            txn::get(&key),
                        ],
                        look().success,
                    ),
                )
                .await?;
            if reply.succeeded {
                let mine = created(&reply, 1);
                let hold = Self::hold(name, owner, lease, &key, mine, sent_at)
                    .with_kind(LockKind::Permit { permits, weight });
                return Ok(TryAcquire::Acquired(hold));
            }
            read = reply;
        }
        Ok(TryAcquire::Held(Holder::unknown()))
    }

    /// Waits for a permit until `deadline` (see the module docs).
    ///
    /// # Cancel safety
    /// Cancel safe: dropped at any point, our lease key and our `locks` key are deleted in the
    /// background (both are created only after their deletion is armed).
    pub(super) async fn queue_for_permit(
        self: &Arc<Self>,
        name: &LockName,
        (permits, weight): (u32, u32),
        owner: OwnerToken,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let paths = Paths::of(self, name);
        loop {
            let sent_at = Instant::now();
            let lease = self.lease().await?;
            let locks_key = contender_key(&paths.locks, lease.id, owner);
            let lease_key = contender_key(&paths.leases, lease.id, owner);
            // Armed before their creates are sent: a dropped wait deletes both keys in the
            // background.
            let mut in_line = Entry::new(self, &locks_key);
            let mut entry = Entry::new(self, &lease_key);
            let reply = in_line
                .create(
                    "acquire",
                    txn::txn(
                        vec![txn::absent(&locks_key)],
                        vec![
                            txn::put(&locks_key, &owner.to_string(), lease.id),
                            txn::get(&locks_key),
                            txn::first_under(&paths.locks),
                        ],
                        vec![txn::get(&locks_key), txn::first_under(&paths.locks)],
                    ),
                )
                .await?;
            let (mine, first) = if reply.succeeded {
                (created(&reply, 1), kvs(&reply, 2).first())
            } else {
                (created(&reply, 0), kvs(&reply, 1).first())
            };
            if mine == 0 {
                continue;
            }
            if first.is_some_and(|first| first.create_revision != mine) {
                match self
                    .wait_in_line(&KeyRange::prefix(&paths.locks), &locks_key, mine, lease, deadline)
                    .await?
                {
                    Line::First { .. } => {}
                    Line::TimedOut => {
                        entry.disarm();
                        in_line.delete_now().await;
                        return Ok(None);
                    }
                    Line::LeaseEnded => {
                        in_line.disarm();
                        entry.disarm();
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            return Ok(None);
                        }
                        continue;
                    }
                }
            }
            // We hold `locks`: nobody else adds a lease until we let go of it.
            let counted = self
                .add_lease(name, (permits, weight), lease, &paths, &mut entry, deadline)
                .await;
            match counted {
                Ok(Counted::Holds(mine)) => {
                    // `locks` goes to the next in line (in the background if this fails:
                    // the permit holds either way).
                    in_line.delete_now().await;
                    entry.disarm();
                    let hold = Self::hold(name, owner, lease, &lease_key, mine, sent_at)
                        .with_kind(LockKind::Permit { permits, weight });
                    return Ok(Some(hold));
                }
                Ok(Counted::TimedOut) => {
                    entry.delete_now().await;
                    in_line.delete_now().await;
                    return Ok(None);
                }
                Ok(Counted::LeaseEnded) => {
                    in_line.disarm();
                    entry.disarm();
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(None);
                    }
                }
                Err(error @ Error::PermitsMismatch { .. }) => {
                    entry.delete_now().await;
                    in_line.delete_now().await;
                    return Err(error);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Holding `locks`: creates our lease, `entry`'s key (reading every lease in the same
    /// transaction), then until the leases created up to ours take at most `permits`, waits
    /// for a deletion under `leases` and reads them again.
    async fn add_lease(
        self: &Arc<Self>,
        name: &LockName,
        (permits, weight): (u32, u32),
        lease: ClientLease,
        paths: &Paths,
        entry: &mut Entry,
        deadline: Option<Instant>,
    ) -> Result<Counted> {
        let key = entry.key().unwrap_or_default().to_owned();
        let key = key.as_str();
        let reply = entry
            .create(
                "add a lease",
                txn::txn(
                    Vec::new(),
                    vec![
                        txn::put(key, &lease_data(permits, weight), lease.id),
                        txn::get(key),
                        txn::range(txn::all_under(&paths.leases, 0)),
                    ],
                    Vec::new(),
                ),
            )
            .await?;
        let mine = created(&reply, 1);
        check_permits(name, kvs(&reply, 2), Some(key), permits)?;
        let mut read = reply;
        let mut leases_at = 2;
        let mut session = self.session.subscribe();
        loop {
            if kvs(&read, leases_at - 1).is_empty() || !self.keeps(lease.epoch) {
                return Ok(Counted::LeaseEnded);
            }
            if counted(kvs(&read, leases_at), mine) <= u64::from(permits) {
                return Ok(Counted::Holds(mine));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Counted::TimedOut);
            }
            let look_again = Instant::now() + lease.ttl * LOOK_AGAIN_AFTER_TTLS;
            let until = deadline.map_or(look_again, |d| d.min(look_again));
            let deleted = crate::watch::deletion_under(&self.rpc, &paths.leases, revision(&read));
            let lease_changed = async {
                let _ = session.wait_for(|s| !s.keeps(lease.epoch)).await.map(drop);
            };
            tokio::select! {
                outcome = deleted => {
                    if let Err(error) = outcome {
                        if !error.is_transient() {
                            return Err(error);
                        }
                        // A watch that failed: look again after a pause, not in a tight loop.
                        tokio::time::sleep_until(until.min(Instant::now() + Duration::from_millis(100))).await;
                    }
                }
                () = lease_changed => return Ok(Counted::LeaseEnded),
                () = tokio::time::sleep_until(until) => {}
            }
            read = self
                .txn(
                    "count leases",
                    txn::txn(
                        Vec::new(),
                        vec![txn::get(key), txn::range(txn::all_under(&paths.leases, 0))],
                        Vec::new(),
                    ),
                )
                .await?;
            leases_at = 1;
        }
    }

    /// The holders of the semaphore `name` (1 round trip): its oldest leases, as long as the
    /// permits they take add up to at most the count they record (a lease beyond is an
    /// acquirer still counting or waiting), each with its owner token, weight and create
    /// revision.
    pub(super) async fn permit_holders(self: &Arc<Self>, name: &LockName) -> Result<Vec<LockState>> {
        let paths = Paths::of(self, name);
        let reply = self
            .txn(
                "inspect",
                txn::txn(
                    Vec::new(),
                    vec![txn::range(txn::all_under(&paths.leases, 0))],
                    Vec::new(),
                ),
            )
            .await?;
        let leases = kvs(&reply, 0);
        let agreed = leases.iter().find_map(|kv| permits_in(&kv.value));
        let room = agreed.map_or(u64::MAX, u64::from);
        let mut held = 0;
        Ok(leases
            .iter()
            .take_while(|kv| {
                held += weight_of(kv);
                held <= room
            })
            .map(|kv| {
                let owner = owner_in(&kv.key).unwrap_or_else(|| String::from_utf8_lossy(&kv.key).into());
                let (permits, weight) = recorded(&kv.value).unwrap_or((agreed.unwrap_or(0), 1));
                LockState::held(
                    owner,
                    Some(FencingToken::new(kv.create_revision.unsigned_abs())),
                    None,
                )
                .with_kind(LockKind::Permit { permits, weight })
            })
            .collect())
    }
}

/// How a count of the leases ended.
enum Counted {
    /// Ours, created at this revision, is among the first `permits`.
    Holds(i64),
    TimedOut,
    LeaseEnded,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_value_carries_the_count_and_foreign_values_are_no_count() {
        assert_eq!(lease_data(3, 1), "permits=3");
        assert_eq!(lease_data(3, 2), "permits=3;weight=2");
        assert_eq!(recorded(b"permits=3;weight=2"), Some((3, 2)));
        assert_eq!(recorded(b"permits=3"), Some((3, 1)));
        assert_eq!(recorded(b"permits=3;weight=x"), None);
        assert_eq!(permits_in(b"permits=3"), Some(3));
        assert_eq!(permits_in(b""), None);
        assert_eq!(permits_in(b"permits=-1"), None);
        assert_eq!(permits_in(&[0xff, 0xfe]), None);
    }

    #[test]
    fn only_leases_up_to_ours_are_counted_by_weight() {
        let at = |revision, value: &str| KeyValue {
            create_revision: revision,
            value: value.as_bytes().to_vec(),
            ..KeyValue::default()
        };
        let leases = [at(3, "permits=4;weight=3"), at(5, ""), at(8, "permits=4")];
        assert_eq!(counted(&leases, 5), 4, "a foreign lease takes one");
        assert_eq!(counted(&leases, 3), 3);
        assert_eq!(taken(&leases), 5);
    }
}

//! The watchdog's timers: when it looks at each hold next, grouped by millisecond.
//!
//! Holds renewed in one batch share their next renewal (sent together, renewed by one TTL),
//! so they share one bucket: scheduling a hold is a push onto a bucket found among the few
//! that exist, and a wake-up takes whole buckets. The cost per hold per renewal stays the same
//! however many are held (a heap of every hold cost a logarithm of their number per renewal).
//! A bucket holds the holds themselves, and each hold records the tick of its one live entry
//! ([`Hold::timer`]), so taking a bucket reads the holds it needs and no map of every hold.
//! Times are rounded up to the millisecond, tokio's timer resolution, so a hold is never
//! looked at before the time asked for, and at most a millisecond after.
//!
//! This module owns the order of the timers only; what a timer means is the watchdog's.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::hold::{Hold, NO_TIMER};

/// Spare emptied buckets kept for reuse (their capacity is what a batch needs).
const SPARES: usize = 4;

/// Milliseconds since [`Timers::origin`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Tick(u64);

impl PartialOrd for Tick {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Tick {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        #[cfg(test)]
        super::tests::COMPARISONS.set(super::tests::COMPARISONS.get() + 1);
        self.0.cmp(&other.0)
    }
}

/// The holds due at one tick (live or dead entries).
pub(super) type Bucket = Vec<Arc<Hold>>;

/// For each hold, one live timer: the earliest time asked for. Entries of holds gone, or
/// rescheduled earlier, stay in their bucket, dead, until it comes up, and the buckets are
/// rebuilt from the live entries if dead ones ever outnumber them: the entries stay
/// proportional to the number of holds, however long each is held.
///
/// Every change to a hold's [`Hold::timer`] is made here, under the watchdog's state lock.
pub(super) struct Timers {
    origin: Instant,
    buckets: BTreeMap<Tick, Bucket>,
    /// Holds with a live entry.
    live: usize,
    /// Entries in `buckets`, live and dead.
    entries: usize,
    spare: Vec<Bucket>,
}

impl Timers {
    pub(super) fn new(origin: Instant) -> Self {
        Self {
            origin,
            buckets: BTreeMap::new(),
            live: 0,
            entries: 0,
            spare: Vec::new(),
        }
    }

    /// The tick at or after `at` (a time before the origin is due at once).
    fn tick(&self, at: Instant) -> Tick {
        let since = at.saturating_duration_since(self.origin);
        let ms = since.as_millis() + u128::from(since.subsec_nanos() % 1_000_000 != 0);
        // The last tick stands for "no timer".
        Tick(u64::try_from(ms).unwrap_or(NO_TIMER - 1).min(NO_TIMER - 1))
    }

    /// When `tick` comes.
    pub(super) fn at(&self, tick: Tick) -> Instant {
        self.origin
            .checked_add(Duration::from_millis(tick.0))
            .unwrap_or_else(|| self.origin + Duration::from_secs(86_400 * 365 * 30))
    }

    /// Makes sure `hold` is looked at by `at` at the latest (looking early is harmless: the
    /// watchdog reschedules the hold then).
    pub(super) fn push(&mut self, at: Instant, hold: &Arc<Hold>) {
        let tick = self.tick(at);
        let live = hold.timer.load(Ordering::Relaxed);
        if live != NO_TIMER && Tick(live) <= tick {
            return;
        }
        if live == NO_TIMER {
            self.live += 1;
        }
        hold.timer.store(tick.0, Ordering::Relaxed);
        let spare = &mut self.spare;
        self.buckets
            .entry(tick)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push(hold.clone());
        self.entries += 1;
    }

    /// The earliest bucket's tick.
    pub(super) fn first(&self) -> Option<Tick> {
        self.buckets.first_key_value().map(|(tick, _)| *tick)
    }

    /// Takes the earliest bucket off: its tick and its holds, live or dead (see
    /// [`take_if_live`](Self::take_if_live)); give the bucket back by [`done`](Self::done).
    pub(super) fn take_first(&mut self) -> Option<(Tick, Bucket)> {
        let taken = self.buckets.pop_first()?;
        self.entries -= taken.1.len();
        Some(taken)
    }

    /// Whether `hold`'s live timer is the entry at `tick`; if so it is taken (no longer live).
    pub(super) fn take_if_live(&mut self, tick: Tick, hold: &Hold) -> bool {
        let live = hold.timer.load(Ordering::Relaxed) == tick.0;
        if live {
            self.forget(hold);
        }
        live
    }

    /// Gives back a bucket taken by [`take_first`](Self::take_first), emptied: the holds
    /// taken from it but not looked at yet (`kept`) are live at `tick` again (beside any
    /// pushed there meanwhile); an unused bucket is kept for reuse.
    pub(super) fn done(&mut self, tick: Tick, mut bucket: Bucket, kept: &mut Bucket) {
        bucket.clear();
        if !kept.is_empty() {
            for hold in kept.iter() {
                hold.timer.store(tick.0, Ordering::Relaxed);
            }
            self.live += kept.len();
            self.entries += kept.len();
            match self.buckets.entry(tick) {
                Entry::Occupied(mut pushed) => pushed.get_mut().append(kept),
                Entry::Vacant(vacant) => {
                    bucket.append(kept);
                    vacant.insert(bucket);
                    return;
                }
            }
        }
        if self.spare.len() < SPARES {
            self.spare.push(bucket);
        }
    }

    /// Stops timing `hold` (it is gone, or being looked at; its entry, if any, is now dead).
    pub(super) fn forget(&mut self, hold: &Hold) {
        if hold.timer.swap(NO_TIMER, Ordering::Relaxed) != NO_TIMER {
            self.live -= 1;
        }
    }

    /// Entries in the buckets, live and dead.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries
    }

    /// Forgets every hold's timer.
    pub(super) fn clear(&mut self) {
        for hold in self.buckets.values().flatten() {
            hold.timer.store(NO_TIMER, Ordering::Relaxed);
        }
        self.buckets.clear();
        self.live = 0;
        self.entries = 0;
    }

    /// Drops the dead entries once they outnumber the live ones.
    pub(super) fn shed_dead(&mut self) {
        if self.entries <= 2 * self.live + 16 {
            return;
        }
        self.buckets.retain(|tick, bucket| {
            bucket.retain(|hold| hold.timer.load(Ordering::Relaxed) == tick.0);
            !bucket.is_empty()
        });
        self.entries = self.buckets.values().map(Vec::len).sum();
    }
}

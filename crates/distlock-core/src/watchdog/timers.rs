//! The watchdog's timers: when it looks at each hold next, grouped by millisecond.
//!
//! Holds renewed in one batch share their next renewal (sent together, renewed by one TTL),
//! so they share one bucket: scheduling a hold is a push onto a bucket found among the few
//! that exist, and a wake-up takes whole buckets. The cost per hold per renewal stays the same
//! however many are held (a heap of every hold cost a logarithm of their number per renewal).
//! Times are rounded up to the millisecond, tokio's timer resolution, so a hold is never
//! looked at before the time asked for, and at most a millisecond after.
//!
//! This module owns the order of the timers only; what a timer means is the watchdog's.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::time::Instant;

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

/// For each hold, one live timer: the earliest time asked for. Entries of holds gone, or
/// rescheduled earlier, stay in their bucket, dead, until it comes up, and the buckets are
/// rebuilt from the live timers if dead ones ever outnumber them: the entries stay
/// proportional to the number of holds, however long each is held.
pub(super) struct Timers {
    origin: Instant,
    /// Hold ids by the tick they are due at (live or dead entries).
    buckets: BTreeMap<Tick, Vec<u64>>,
    /// Each hold's one live timer.
    live: HashMap<u64, Tick>,
    /// Entries in `buckets`, live and dead.
    entries: usize,
    spare: Vec<Vec<u64>>,
}

impl Timers {
    pub(super) fn new(origin: Instant) -> Self {
        Self {
            origin,
            buckets: BTreeMap::new(),
            live: HashMap::new(),
            entries: 0,
            spare: Vec::new(),
        }
    }

    /// The tick at or after `at` (a time before the origin is due at once).
    fn tick(&self, at: Instant) -> Tick {
        let since = at.saturating_duration_since(self.origin);
        let ms = since.as_millis() + u128::from(since.subsec_nanos() % 1_000_000 != 0);
        Tick(u64::try_from(ms).unwrap_or(u64::MAX))
    }

    /// When `tick` comes.
    pub(super) fn at(&self, tick: Tick) -> Instant {
        self.origin
            .checked_add(Duration::from_millis(tick.0))
            .unwrap_or_else(|| self.origin + Duration::from_secs(86_400 * 365 * 30))
    }

    /// Makes sure hold `id` is looked at by `at` at the latest (looking early is harmless:
    /// the watchdog reschedules the hold then).
    pub(super) fn push(&mut self, at: Instant, id: u64) {
        let tick = self.tick(at);
        if self.live.get(&id).is_some_and(|live| *live <= tick) {
            return;
        }
        self.live.insert(id, tick);
        let spare = &mut self.spare;
        self.buckets
            .entry(tick)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push(id);
        self.entries += 1;
    }

    /// The earliest bucket's tick.
    pub(super) fn first(&self) -> Option<Tick> {
        self.buckets.first_key_value().map(|(tick, _)| *tick)
    }

    /// Takes the earliest bucket off: its tick and its ids, live or dead (see
    /// [`is_live`](Self::is_live)); give the bucket back by [`done`](Self::done).
    pub(super) fn take_first(&mut self) -> Option<(Tick, Vec<u64>)> {
        let taken = self.buckets.pop_first()?;
        self.entries -= taken.1.len();
        Some(taken)
    }

    /// Whether `id`'s live timer is the entry at `tick`; if so it is taken (no longer live).
    pub(super) fn take_if_live(&mut self, tick: Tick, id: u64) -> bool {
        let live = self.live.get(&id) == Some(&tick);
        if live {
            self.live.remove(&id);
        }
        live
    }

    /// Gives back a bucket taken by [`take_first`](Self::take_first): the live ids taken
    /// from it but not looked at yet (`kept`) are live at `tick` again; the emptied bucket is
    /// kept for reuse.
    pub(super) fn done(&mut self, tick: Tick, mut ids: Vec<u64>, kept: &[u64]) {
        ids.clear();
        if !kept.is_empty() {
            for &id in kept {
                self.live.insert(id, tick);
            }
            ids.extend_from_slice(kept);
            self.entries += ids.len();
            self.buckets.insert(tick, ids);
        } else if self.spare.len() < SPARES {
            self.spare.push(ids);
        }
    }

    /// Stops timing `id` (its hold is gone; its entry, if any, is now dead).
    pub(super) fn remove(&mut self, id: u64) {
        self.live.remove(&id);
    }

    /// Entries in the buckets, live and dead.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries
    }

    pub(super) fn clear(&mut self) {
        self.buckets.clear();
        self.live.clear();
        self.entries = 0;
    }

    /// Rebuilds the buckets from the live timers once dead entries outnumber them.
    pub(super) fn shed_dead(&mut self) {
        if self.entries <= 2 * self.live.len() + 16 {
            return;
        }
        let mut buckets: BTreeMap<Tick, Vec<u64>> = BTreeMap::new();
        for (id, tick) in &self.live {
            buckets.entry(*tick).or_default().push(*id);
        }
        self.buckets = buckets;
        self.entries = self.live.len();
    }
}

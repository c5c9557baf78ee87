//! State epochs: the faults that reset the store's state (those its docs declare a loss under)
//! and which pairs of grants straddle one.

use std::collections::HashSet;

use crate::history::{FaultRecord, Nanos};

/// The run's faults that reset the store's state, in the order they started.
pub(super) struct Resets<'a> {
    list: Vec<&'a FaultRecord>,
}

impl<'a> Resets<'a> {
    /// The faults of `faults` whose kind is in `kinds`.
    pub(super) fn new(faults: &'a [FaultRecord], kinds: &HashSet<String>) -> Self {
        let mut list: Vec<&FaultRecord> = faults.iter().filter(|f| kinds.contains(&f.kind)).collect();
        list.sort_by_key(|f| f.start);
        Self { list }
    }

    /// The latest reset that two grants at `a` and `b` (either order) straddle: it began by the
    /// later grant and ended no earlier than the earlier one. `None`: one state epoch.
    pub(super) fn between(&self, a: Nanos, b: Nanos) -> Option<&'a FaultRecord> {
        let (early, late) = (a.min(b), a.max(b));
        self.list
            .iter()
            .rev()
            .find(|f| f.start <= late && f.end >= early)
            .copied()
    }

    /// When the state epoch of a grant at `at` began: the latest end of a reset that began by
    /// then (zero if none did). An earlier grant is in the same epoch iff it came after this.
    pub(super) fn epoch_start(&self, at: Nanos) -> Nanos {
        self.list
            .iter()
            .filter(|f| f.start <= at)
            .map(|f| f.end)
            .max()
            .unwrap_or(0)
    }

    /// Every epoch start [`epoch_start`](Self::epoch_start) can return.
    pub(super) fn epoch_starts(&self) -> Vec<Nanos> {
        let mut starts: Vec<Nanos> = std::iter::once(0)
            .chain(self.list.iter().map(|f| f.end))
            .collect();
        starts.sort_unstable();
        starts.dedup();
        starts
    }
}

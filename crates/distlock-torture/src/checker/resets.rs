//! State epochs: the faults that reset the store's state (those its docs declare a loss under),
//! when each lost it, and which pairs of grants straddle that moment.

use std::collections::HashSet;

use crate::history::{FaultRecord, Nanos};

/// One reset: the fault, when the state was lost, and the last moment a grant the old state
/// gave may have been recorded.
struct Reset<'a> {
    fault: &'a FaultRecord,
    lost: Nanos,
    until: Nanos,
}

/// The run's faults that reset the store's state, in the order they lost it.
pub(super) struct Resets<'a> {
    list: Vec<Reset<'a>>,
}

impl<'a> Resets<'a> {
    /// The faults of `faults` whose kind is in `kinds`; a grant recorded up to `in_flight`
    /// after a loss may still be the old state's.
    pub(super) fn new(faults: &'a [FaultRecord], kinds: &HashSet<String>, in_flight: Nanos) -> Self {
        let mut list: Vec<Reset<'a>> = faults
            .iter()
            .filter(|f| kinds.contains(&f.kind))
            .map(|fault| {
                let lost = fault.lost_at.unwrap_or(fault.start);
                Reset {
                    fault,
                    lost,
                    until: lost.saturating_add(in_flight),
                }
            })
            .collect();
        list.sort_by_key(|r| r.lost);
        Self { list }
    }

    /// The latest reset that two grants recorded at `a` and `b` (either order) straddle: the
    /// earlier may be the old state's, the later came after the loss. `None`: one epoch.
    pub(super) fn between(&self, a: Nanos, b: Nanos) -> Option<&'a FaultRecord> {
        let (early, late) = (a.min(b), a.max(b));
        self.list
            .iter()
            .rev()
            .find(|r| r.lost <= late && r.until >= early)
            .map(|r| r.fault)
    }

    /// When the state epoch of a grant at `at` began: the latest moment a grant of a state
    /// lost by then may have been recorded (zero if none was lost). An earlier grant is in the
    /// same epoch iff it was recorded after this.
    pub(super) fn epoch_start(&self, at: Nanos) -> Nanos {
        self.list
            .iter()
            .filter(|r| r.lost <= at)
            .map(|r| r.until)
            .max()
            .unwrap_or(0)
    }

    /// Every epoch start [`epoch_start`](Self::epoch_start) can return.
    pub(super) fn epoch_starts(&self) -> Vec<Nanos> {
        let mut starts: Vec<Nanos> = std::iter::once(0)
            .chain(self.list.iter().map(|r| r.until))
            .collect();
        starts.sort_unstable();
        starts.dedup();
        starts
    }
}

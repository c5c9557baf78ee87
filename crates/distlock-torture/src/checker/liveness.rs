//! Liveness: after each fault, how soon the hot lock was granted again.

use std::collections::HashMap;

use super::{ms, Findings, Grant, Judgement};
use crate::history::{GrantId, History, Nanos};

/// Measures each fault's recovery (per fault kind) and finds those slower than the bound.
/// A documented loss excuses none: losing a lock never makes it unavailable.
pub(super) fn check(
    history: &History,
    grants: &HashMap<GrantId, Grant>,
    judgement: &Judgement,
    found: &mut Findings<'_>,
) -> HashMap<String, Vec<Nanos>> {
    let faults = &history.faults;
    // Liveness after each fault.
    let hot_grants: Vec<Nanos> = {
        let mut v: Vec<Nanos> = grants
            .values()
            .filter(|g| g.name == judgement.hot)
            .map(|g| g.granted)
            .collect();
        v.sort_unstable();
        v
    };
    let mut recoveries: HashMap<String, Vec<Nanos>> = HashMap::new();
    for (i, fault) in faults.iter().enumerate() {
        let next_fault = faults.get(i + 1).map_or(history.stopped, |f| f.start);
        let first = hot_grants.iter().find(|&&at| at >= fault.start).copied();
        match first {
            Some(at) if at <= next_fault.max(fault.end) => {
                let recovery = at.saturating_sub(fault.end);
                recoveries.entry(fault.kind.clone()).or_default().push(recovery);
                if recovery > judgement.recovery_bound {
                    found.violation(
                        "liveness",
                        fault.end,
                        format!(
                            "{} on {}: the hot lock was next granted {:.0} ms after the fault ended (bound {:.0} ms)",
                            fault.kind,
                            fault.target,
                            ms(recovery),
                            ms(judgement.recovery_bound)
                        ),
                        None,
                    );
                }
            }
            _ if next_fault.saturating_sub(fault.end) > judgement.recovery_bound => {
                found.violation(
                    "liveness",
                    fault.end,
                    format!(
                        "{} on {}: the hot lock was not granted again within {:.0} ms of the fault's end",
                        fault.kind,
                        fault.target,
                        ms(next_fault.saturating_sub(fault.end))
                    ),
                    None,
                );
            }
            _ => {} // the next fault came first: no measurement
        }
    }
    recoveries
}

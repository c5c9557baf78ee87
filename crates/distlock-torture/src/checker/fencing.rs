//! Fencing: tokens accepted from two holds, and the order of the tokens grants got.

use std::collections::{BTreeMap, HashMap};

use super::{Findings, Grant, Judgement};
use crate::history::{GrantId, History, HoldKind, Nanos};

/// Finds stale writes the resource accepted by token and tokens out of order. Under
/// `BestEffort` fencing a pair of grants that straddles a reset is excused (the counter may
/// have gone back); under `Monotonic` fencing nothing is.
pub(super) fn check(
    history: &History,
    grants: &HashMap<GrantId, Grant>,
    judgement: &Judgement,
    found: &mut Findings<'_>,
) {
    let granted = |id: &str| grants.get(id).map_or(0, |g| g.granted);
    // The reset between two grants that excuses their tokens, if any.
    let excuse = |found: &Findings<'_>, a: Nanos, b: Nanos| match judgement.monotonic_fencing {
        true => None,
        false => found.resets.between(a, b).cloned(),
    };

    // Stale accepted writes, in the resource's order: a token accepted from two holds of a name.
    let mut accepted: HashMap<(&str, u64), Vec<&str>> = HashMap::new();
    for write in history.writes.iter().filter(|w| w.accepted) {
        let Some(token) = write.token else { continue };
        let from = accepted.entry((write.name.as_str(), token)).or_default();
        if !from.is_empty() && !from.contains(&write.grant.as_str()) {
            let at = granted(&write.grant);
            // Excused only if every other holder of the token is of an earlier state epoch.
            let mut excused = None;
            let mut same_epoch = None;
            for other in from.iter() {
                match excuse(found, granted(other), at) {
                    Some(reset) => excused = Some(reset),
                    None => same_epoch = Some(*other),
                }
            }
            let other = same_epoch.unwrap_or(from[0]);
            found.pair(
                "stale-write",
                write.at,
                if same_epoch.is_some() {
                    None
                } else {
                    excused.as_ref()
                },
                format!(
                    "{}: the resource accepted {}'s {} with token {token}, already accepted from {other}",
                    write.name,
                    write.grant,
                    if write.kind == HoldKind::Read {
                        "read"
                    } else {
                        "write"
                    }
                ),
                None,
            );
        }
        if !from.contains(&write.grant.as_str()) {
            from.push(write.grant.as_str());
        }
    }

    // Token order among grants, within a state epoch.
    let mut per_name: BTreeMap<&str, Vec<(&GrantId, &Grant)>> = BTreeMap::new();
    for (id, grant) in grants {
        if grant.token.is_some() {
            per_name.entry(grant.name.as_str()).or_default().push((id, grant));
        }
    }
    let epochs = match judgement.monotonic_fencing {
        true => vec![0],
        false => found.resets.epoch_starts(),
    };
    let epoch_of = |found: &Findings<'_>, at: Nanos| match judgement.monotonic_fencing {
        true => 0,
        false => found.resets.epoch_start(at),
    };
    for (name, mut list) in per_name {
        list.sort_by_key(|(_, g)| g.granted);
        let mut seen: HashMap<u64, Vec<(&GrantId, Nanos)>> = HashMap::new();
        // Per epoch start, the highest token among grants that came after it and returned
        // before the current acquire began.
        let mut earlier_max: HashMap<Nanos, (u64, &GrantId)> = HashMap::new();
        let returned: Vec<(Nanos, u64, &GrantId)> = list
            .iter()
            .map(|(id, g)| (g.granted, g.token.unwrap_or_default(), *id))
            .collect();
        let mut next = 0;
        let mut by_invoked = list.clone();
        by_invoked.sort_by_key(|(_, g)| g.invoked);
        for (id, grant) in by_invoked {
            while next < returned.len() && returned[next].0 < grant.invoked {
                let (at, token, other) = returned[next];
                for &start in epochs.iter().filter(|&&start| start < at) {
                    let max = earlier_max.entry(start).or_insert((token, other));
                    if token > max.0 {
                        *max = (token, other);
                    }
                }
                next += 1;
            }
            let token = grant.token.unwrap_or_default();
            if let Some(&(max, other)) = earlier_max.get(&epoch_of(found, grant.granted)) {
                if token <= max {
                    found.violation(
                        "token-order",
                        grant.granted,
                        format!("{name}: {id} got token {token}, not above {other}'s {max}, granted before it asked"),
                        None,
                    );
                }
            }
            let same = seen.entry(token).or_default();
            if let Some((other, _)) = same
                .iter()
                .find(|(_, at)| excuse(found, *at, grant.granted).is_none())
            {
                found.violation(
                    "repeated-token",
                    grant.granted,
                    format!("{name}: {id} and {other} both got token {token}"),
                    None,
                );
            }
            same.push((id, grant.granted));
        }
    }
}

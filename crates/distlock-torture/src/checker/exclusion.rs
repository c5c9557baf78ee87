//! Exclusion: the holders' belief intervals of one name, and which of them may overlap.

use std::collections::{BTreeMap, HashMap};

use super::{ms, Findings, Grant, Judgement};
use crate::history::{GrantId, HoldKind};

/// Finds two holders at once (or more permit holders than the semaphore has).
pub(super) fn check(grants: &HashMap<GrantId, Grant>, judgement: &Judgement, found: &mut Findings<'_>) {
    let mut by_name: BTreeMap<&str, Vec<(&GrantId, &Grant)>> = BTreeMap::new();
    for (id, grant) in grants.iter().filter(|(_, g)| g.affirmed) {
        by_name.entry(grant.name.as_str()).or_default().push((id, grant));
    }
    let capacity = usize::try_from(judgement.permits.max(1)).unwrap_or(usize::MAX);
    for (name, mut list) in by_name {
        list.sort_by_key(|(_, g)| g.granted);
        // The earlier grants still believed held when the current one was granted.
        let mut active: Vec<(&GrantId, &Grant)> = Vec::new();
        for (id, grant) in list {
            active.retain(|(_, other)| grant.granted < other.believed_until);
            let beside = conflicts(grant, &active, capacity);
            if !beside.is_empty() {
                // The over-admission lasted until the first of the others stopped believing,
                // and ended for the holders' knowledge when the first of them was told.
                let overlap = ms(beside
                    .iter()
                    .map(|(_, o)| o.believed_until)
                    .min()
                    .unwrap_or(grant.granted)
                    - grant.granted);
                let told = beside
                    .iter()
                    .filter_map(|(_, o)| o.lost_at)
                    .min()
                    .map(|at| ms(at.saturating_sub(grant.granted)));
                let told_text = match (told, beside.len()) {
                    (None, 1) => "that holder was never told it lost the lock".to_owned(),
                    (None, _) => "none of those holders was told it lost its hold".to_owned(),
                    (Some(t), 1) => format!("that holder was told it lost the lock {t:.1} ms after the grant"),
                    (Some(t), _) => format!("the first of those holders to be told it lost its hold was told {t:.1} ms after the grant"),
                };
                let detail = match (grant.kind, beside.as_slice()) {
                    (HoldKind::Exclusive, [(other_id, other)]) => format!(
                        "{name}: {id} (client {}) was granted {overlap:.1} ms before {other_id} (client {}) last affirmed holding; {told_text}",
                        grant.client, other.client
                    ),
                    (HoldKind::Permit, _) => format!(
                        "{name}: {id} (client {}) was granted a permit while the {} permits were held by {}, all of whom went on believing they held for {overlap:.1} ms more: {} holders at once; {told_text}",
                        grant.client,
                        beside.len(),
                        holders(&beside),
                        beside.len() + 1
                    ),
                    _ => format!(
                        "{name}: {id} (client {}) was granted {} {overlap:.1} ms before {} last affirmed holding {}; {told_text}",
                        grant.client,
                        grant.kind.describe(),
                        holders(&beside),
                        beside[0].1.kind.describe()
                    ),
                };
                // A documented loss explains the overlap only if one of the earlier holders was
                // granted before it (the store forgot that hold) and this grant after it.
                let reset = beside
                    .iter()
                    .find_map(|(_, other)| found.resets.between(other.granted, grant.granted));
                found.pair("exclusion", grant.granted, reset, detail, Some((overlap, told)));
            }
            active.push((id, grant));
        }
    }
}

/// The earlier holds in `active` (still believed held when `grant` was granted) that `grant`
/// may not be held beside: of the lock or a write lock, the one believed longest that its kind
/// excludes; of a permit, if `capacity` permits were already believed held, the `capacity`
/// believed longest. Empty if `grant` is allowed.
pub(super) fn conflicts<'a>(
    grant: &Grant,
    active: &[(&'a GrantId, &'a Grant)],
    capacity: usize,
) -> Vec<(&'a GrantId, &'a Grant)> {
    if grant.kind == HoldKind::Permit {
        let mut permits: Vec<_> = active
            .iter()
            .filter(|(_, other)| other.kind == HoldKind::Permit)
            .copied()
            .collect();
        if permits.len() < capacity {
            return Vec::new();
        }
        // Stable: of equal beliefs, the earlier grant.
        permits.sort_by_key(|(_, other)| std::cmp::Reverse(other.believed_until));
        permits.truncate(capacity);
        return permits;
    }
    active
        .iter()
        .filter(|(_, other)| grant.kind.excludes(other.kind))
        .min_by_key(|(_, other)| std::cmp::Reverse(other.believed_until))
        .map(|&found| vec![found])
        .unwrap_or_default()
}

/// `a (client 1), b (client 2)`.
pub(super) fn holders(list: &[(&GrantId, &Grant)]) -> String {
    list.iter()
        .map(|(id, grant)| format!("{id} (client {})", grant.client))
        .collect::<Vec<_>>()
        .join(", ")
}

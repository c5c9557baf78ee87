//! Writes no token fences: those without a token (Redlock gives none) and permits' (the
//! resource takes each into a slot of its own). The resource accepts them whatever their order,
//! so the checker compares each with the holders' intervals: a holder's write lands after its
//! last affirmation (it affirms, then writes), and if a holder it may not be beside was granted
//! in between, the write reached the resource from a superseded holder.

use std::collections::{BTreeMap, HashMap};

use super::exclusion::conflicts;
use super::{ms, Findings, Grant, Judgement};
use crate::history::{GrantId, History, HoldKind};

/// Finds unfenced writes that landed after a holder they may not be beside was granted.
pub(super) fn check(
    history: &History,
    grants: &HashMap<GrantId, Grant>,
    judgement: &Judgement,
    found: &mut Findings<'_>,
) {
    let mut by_name: BTreeMap<&str, Vec<(&GrantId, &Grant)>> = BTreeMap::new();
    for (id, grant) in grants.iter().filter(|(_, g)| g.affirmed) {
        by_name.entry(grant.name.as_str()).or_default().push((id, grant));
    }
    for list in by_name.values_mut() {
        list.sort_by_key(|(id, g)| (g.granted, *id));
    }
    // The longest belief of any grant: how far back a holder still believing may have begun.
    let longest = grants
        .values()
        .map(|g| g.believed_until.saturating_sub(g.granted))
        .max()
        .unwrap_or(0);
    let capacity = usize::try_from(judgement.permits.max(1)).unwrap_or(usize::MAX);
    let unfenced = history
        .writes
        .iter()
        .filter(|w| w.accepted && (w.token.is_none() || w.kind == HoldKind::Permit));
    for write in unfenced {
        let (Some(writer), Some(list)) = (grants.get(&write.grant), by_name.get(write.name.as_str())) else {
            continue;
        };
        if !writer.affirmed || write.at <= writer.believed_until {
            continue; // written while it believed: the exclusion check covers it
        }
        // The grants between its last affirmation and the write (usually none).
        let from = list.partition_point(|(_, g)| g.granted <= writer.believed_until);
        let to = list.partition_point(|(_, g)| g.granted <= write.at);
        let later = &list[from..to];
        if later.is_empty() {
            continue;
        }
        let superseded_by: Vec<(&GrantId, &Grant)> = match writer.kind {
            HoldKind::Permit => {
                // The holders believing when the write landed, the writer aside.
                let back = list.partition_point(|(_, g)| g.granted < write.at.saturating_sub(longest));
                let active: Vec<(&GrantId, &Grant)> = list[back..to]
                    .iter()
                    .filter(|(id, g)| {
                        id.as_str() != write.grant
                            && g.believed_until >= write.at
                            && g.kind == HoldKind::Permit
                    })
                    .copied()
                    .collect();
                let beside = conflicts(writer, &active, capacity);
                // At least one of them came after the writer's last affirmation (else the
                // exclusion check found them together already).
                match beside.iter().any(|(_, g)| g.granted > writer.believed_until) {
                    true => beside,
                    false => Vec::new(),
                }
            }
            kind => later
                .iter()
                .filter(|(id, g)| id.as_str() != write.grant && g.kind.excludes(kind))
                .take(1)
                .copied()
                .collect(),
        };
        let Some(&(first_id, first)) = superseded_by.iter().max_by_key(|(_, g)| g.granted) else {
            continue;
        };
        let reset = found.resets.between(writer.granted, first.granted);
        let detail = format!(
            "{}: the resource accepted {} (client {})'s {} {:.1} ms after {first_id} (client {}) was granted {}, {:.1} ms after {} last affirmed holding{}",
            write.name,
            write.grant,
            writer.client,
            match write.token {
                None => "write without a token".to_owned(),
                Some(token) => format!("permit's write (token {token})"),
            },
            ms(write.at - first.granted),
            first.client,
            first.kind.describe(),
            ms(write.at - writer.believed_until),
            write.grant,
            match superseded_by.len() {
                1 => String::new(),
                n => format!("; {n} other permits were held then: {}", super::exclusion::holders(&superseded_by)),
            }
        );
        found.pair("stale-write", write.at, reset, detail, None);
    }
}

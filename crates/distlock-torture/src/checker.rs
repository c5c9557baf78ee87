//! The checker: reads a [`History`] and says whether the lock kept what its backend declares.
//!
//! - **Exclusion.** A holder believes it holds from the moment its acquire returned until the
//!   last moment it affirmed so (a check of its guard, clock read first, before each write,
//!   and before its release); a grant never affirmed (its guard was lost at the first check)
//!   believed nothing. Of one name: two such intervals of its lock that overlap are two
//!   holders at once; a write lock's interval may overlap no other (read or write); more than
//!   `permits` intervals of a semaphore's permits at one instant are one holder too many (the
//!   finding names the `permits + 1` holders). Read locks overlap each other freely.
//! - **Fencing.** The resource accepts a write whose token is at least the highest it
//!   accepted (a read: at least that of the last write; a permit's: always, see
//!   [`crate::resource`]). An accepted write or read whose token was already accepted from
//!   another holder of the name is a stale write. Two grants of one object (of any kind) with
//!   the same token, or a grant whose acquire began after an earlier grant returned and whose
//!   token is not higher, break monotonic fencing.
//! - **Liveness.** After each fault, the time until the hot lock is next granted (zero if it
//!   was granted while the fault lasted) must stay within the stated bound.
//!
//! Each finding is attributed to the fault that started last before it. A finding under a
//! fault kind the backend documents as a loss (a store restarted without persistence) is
//! counted and shown, not failed.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

#[cfg(test)]
use crate::history::FaultRecord;
use crate::history::{ClientEvent, GrantId, History, HoldKind, Nanos};

/// What the backend under test declares, and the run's bounds.
#[derive(Debug, Clone)]
pub struct Judgement {
    /// Whether fencing tokens are declared strictly increasing (`Fencing::Monotonic`).
    pub monotonic_fencing: bool,
    /// Fault kinds under which the backend's docs say a lock can be lost.
    pub documented_losses: HashSet<String>,
    /// The hot lock's name (liveness is measured on it).
    pub hot: String,
    /// The longest time from a fault's end to the hot lock's next grant.
    pub recovery_bound: Nanos,
    /// The fault kinds the run could inject (each gets a row, injected or not).
    pub kinds: Vec<String>,
    /// How many permits of a semaphore may be held at once (the run's `--permits`).
    pub permits: u32,
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// `exclusion`, `stale-write`, `repeated-token`, `token-order`, `liveness`, `left-held`,
    /// `client-crash`.
    pub kind: String,
    /// The fault kind it is attributed to (`none` before the first fault).
    pub fault: String,
    /// Whether the backend's docs declare this loss under that fault (then it fails nothing).
    pub documented: bool,
    /// What happened, for a person.
    pub detail: String,
    /// Two holders at once: how long the earlier holder went on believing it held after the
    /// later one was granted, milliseconds.
    pub overlap_ms: Option<f64>,
    /// Two holders at once: how long after the later grant the earlier holder was told it had
    /// lost the lock (its lost signal, or a release that found it gone), milliseconds; `None`
    /// if it never was (it released believing it held, or was killed).
    pub told_after_ms: Option<f64>,
}

/// The figures for one fault kind.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    /// The fault kind (`none`: the quiet time before the first fault).
    pub fault: String,
    /// Faults of this kind injected.
    pub faults: usize,
    /// Acquisitions granted while this kind was the last fault started.
    pub acquisitions: usize,
    /// Two holders at once.
    pub exclusion_violations: usize,
    /// Writes the resource accepted from a holder already superseded.
    pub stale_writes_accepted: usize,
    /// Writes the resource rejected (a fenced-off late holder: fencing doing its job).
    pub fenced_writes_rejected: usize,
    /// Recovery after the fault, milliseconds: median.
    pub recovery_p50_ms: Option<f64>,
    /// Recovery after the fault, milliseconds: worst.
    pub recovery_max_ms: Option<f64>,
    /// Two holders at once, how long the overlap lasted, milliseconds: median.
    pub overlap_p50_ms: Option<f64>,
    /// Two holders at once, how long the overlap lasted, milliseconds: longest.
    pub overlap_max_ms: Option<f64>,
    /// Two holders at once, how long until the earlier holder was told, milliseconds: median
    /// (of the overlaps whose holder was told).
    pub told_after_p50_ms: Option<f64>,
    /// Two holders at once, how long until the earlier holder was told, milliseconds: longest.
    pub told_after_max_ms: Option<f64>,
    /// Holders told they had lost the lock (lost signal, or a release that found it gone),
    /// counted under the fault before the telling.
    pub told_lost: usize,
    /// Of those, holders whose release then found the lock still theirs: the store still held
    /// it for them (after a lease that ran out locally first, a cautious loss; after a "not
    /// owned" answer, a wrong one).
    pub told_lost_but_held: usize,
    /// Whether the backend's docs declare a possible loss under this fault.
    pub documented_loss: bool,
}

/// The checker's verdict.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verdict {
    /// Per fault kind, `none` first.
    pub rows: Vec<Row>,
    /// Every finding.
    pub findings: Vec<Finding>,
    /// Acquisitions in all.
    pub acquisitions: usize,
}

impl Verdict {
    /// Findings that break a declared guarantee (they fail the run).
    pub fn violations(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| !f.documented)
    }
}

/// One acquisition as the history shows it.
#[derive(Debug, Clone)]
struct Grant {
    name: String,
    kind: HoldKind,
    token: Option<u64>,
    invoked: Nanos,
    granted: Nanos,
    /// The last moment its holder affirmed holding.
    believed_until: Nanos,
    /// Whether its holder ever affirmed holding. One that never did found its guard lost at
    /// its first check, right after the grant was recorded: it believed nothing we can see
    /// (when its process was stopped between the acquire's return and the recording, the
    /// grant's time is that of the process's resumption, long after the return).
    affirmed: bool,
    /// When its holder was first told it had lost the lock, if it was.
    lost_at: Option<Nanos>,
    /// Whether its release found it still held by it.
    released_owned: bool,
    client: u32,
}

/// Checks `history` against `judgement`. `left_held` lists the names found held after every
/// client stopped; `crashed`, the client processes that exited by themselves.
pub fn check(history: &History, judgement: &Judgement, left_held: &[String], crashed: &[String]) -> Verdict {
    let grants = grants(history);
    let faults = &history.faults;
    let attribute = |at: Nanos| -> String {
        faults
            .iter()
            .filter(|f| f.start <= at)
            .max_by_key(|f| f.start)
            .map_or_else(|| "none".to_owned(), |f| f.kind.clone())
    };
    // A store that lost its state (a documented loss) caused what follows until the end: a
    // repeated token surfaces whenever the reset counter catches up with the old one.
    let cause_of_loss = |at: Nanos| -> Option<String> {
        faults
            .iter()
            .filter(|f| f.start <= at && judgement.documented_losses.contains(&f.kind))
            .max_by_key(|f| f.start)
            .map(|f| f.kind.clone())
    };
    let mut findings = Vec::new();
    let mut found = |kind: &str, at: Nanos, detail: String, overlap: Option<(f64, Option<f64>)>| {
        // Stale writes are a declared possibility of best-effort fencing: counted against the
        // store's state loss that caused them.
        let best_effort_stale = kind == "stale-write" && !judgement.monotonic_fencing;
        let fault = match best_effort_stale {
            true => cause_of_loss(at).unwrap_or_else(|| attribute(at)),
            false => attribute(at),
        };
        findings.push(Finding {
            kind: kind.to_owned(),
            documented: best_effort_stale || judgement.documented_losses.contains(&fault),
            fault,
            detail,
            overlap_ms: overlap.map(|(o, _)| o),
            told_after_ms: overlap.and_then(|(_, t)| t),
        });
    };

    // Exclusion: overlapping beliefs per name.
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
                found("exclusion", grant.granted, detail, Some((overlap, told)));
            }
            active.push((id, grant));
        }
    }

    // Fencing: stale accepted writes, in the resource's order: a token accepted from two
    // holds of one name.
    let mut accepted: HashMap<(&str, u64), HashSet<&str>> = HashMap::new();
    for write in history.writes.iter().filter(|w| w.accepted) {
        let Some(token) = write.token else { continue };
        let from = accepted.entry((write.name.as_str(), token)).or_default();
        if !from.is_empty() && !from.contains(write.grant.as_str()) {
            found(
                "stale-write",
                write.at,
                format!(
                    "{}: the resource accepted {}'s {} with token {token}, already accepted from another holder",
                    write.name,
                    write.grant,
                    if write.kind == HoldKind::Read { "read" } else { "write" }
                ),
                None,
            );
        }
        from.insert(write.grant.as_str());
    }

    // Fencing: token order among grants.
    if judgement.monotonic_fencing {
        let mut per_name: BTreeMap<&str, Vec<(&GrantId, &Grant)>> = BTreeMap::new();
        for (id, grant) in &grants {
            if grant.token.is_some() {
                per_name.entry(grant.name.as_str()).or_default().push((id, grant));
            }
        }
        for (name, mut list) in per_name {
            list.sort_by_key(|(_, g)| g.granted);
            let mut seen: HashMap<u64, &GrantId> = HashMap::new();
            // The highest token among grants that returned before the current acquire began.
            let mut earlier_max: Option<(u64, &GrantId)> = None;
            let mut returned: Vec<(Nanos, u64, &GrantId)> = list
                .iter()
                .map(|(id, g)| (g.granted, g.token.unwrap_or_default(), *id))
                .collect();
            returned.sort_unstable();
            let mut next = 0;
            let mut by_invoked = list.clone();
            by_invoked.sort_by_key(|(_, g)| g.invoked);
            for (id, grant) in by_invoked {
                while next < returned.len() && returned[next].0 < grant.invoked {
                    let (_, token, other) = returned[next];
                    if earlier_max.is_none_or(|(t, _)| token > t) {
                        earlier_max = Some((token, other));
                    }
                    next += 1;
                }
                let token = grant.token.unwrap_or_default();
                if let Some((max, other)) = earlier_max {
                    if token <= max {
                        found(
                            "token-order",
                            grant.granted,
                            format!("{name}: {id} got token {token}, not above {other}'s {max}, granted before it asked"),
                            None,
                        );
                    }
                }
                if let Some(other) = seen.insert(token, id) {
                    found(
                        "repeated-token",
                        grant.granted,
                        format!("{name}: {id} and {other} both got token {token}"),
                        None,
                    );
                }
            }
        }
    }

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
    let mut recoveries: HashMap<&str, Vec<Nanos>> = HashMap::new();
    for (i, fault) in faults.iter().enumerate() {
        let next_fault = faults.get(i + 1).map_or(history.stopped, |f| f.start);
        let first = hot_grants.iter().find(|&&at| at >= fault.start).copied();
        match first {
            Some(at) if at <= next_fault.max(fault.end) => {
                let recovery = at.saturating_sub(fault.end);
                recoveries.entry(fault.kind.as_str()).or_default().push(recovery);
                if recovery > judgement.recovery_bound {
                    found(
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
                found(
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
    for name in left_held {
        found(
            "left-held",
            history.stopped,
            format!("{name} was still held after every client stopped"),
            None,
        );
    }
    for client in crashed {
        found("client-crash", history.stopped, client.clone(), None);
    }

    // The table.
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    rows.insert("none".to_owned(), Row::default());
    for kind in &judgement.kinds {
        rows.entry(kind.clone()).or_default();
    }
    for fault in faults {
        rows.entry(fault.kind.clone()).or_default().faults += 1;
    }
    for grant in grants.values() {
        rows.entry(attribute(grant.granted)).or_default().acquisitions += 1;
    }
    for write in history.writes.iter().filter(|w| !w.accepted) {
        rows.entry(attribute(write.at))
            .or_default()
            .fenced_writes_rejected += 1;
    }
    let mut overlaps: HashMap<&str, (Vec<f64>, Vec<f64>)> = HashMap::new();
    for finding in &findings {
        let row = rows.entry(finding.fault.clone()).or_default();
        match finding.kind.as_str() {
            "exclusion" => row.exclusion_violations += 1,
            "stale-write" => row.stale_writes_accepted += 1,
            _ => {}
        }
        let entry = overlaps.entry(finding.fault.as_str()).or_default();
        entry.0.extend(finding.overlap_ms);
        entry.1.extend(finding.told_after_ms);
    }
    // Holders told they lost the lock, and those of them whose release found it still theirs.
    for grant in grants.values() {
        let Some(told) = grant.lost_at else { continue };
        let row = rows.entry(attribute(told)).or_default();
        row.told_lost += 1;
        if grant.released_owned {
            row.told_lost_but_held += 1;
        }
    }
    for (kind, row) in &mut rows {
        row.fault.clone_from(kind);
        row.documented_loss = judgement.documented_losses.contains(kind);
        if let Some((overlap, told)) = overlaps.get_mut(kind.as_str()) {
            (row.overlap_p50_ms, row.overlap_max_ms) = median_and_max(overlap);
            (row.told_after_p50_ms, row.told_after_max_ms) = median_and_max(told);
        }
        if let Some(list) = recoveries.get_mut(kind.as_str()) {
            list.sort_unstable();
            row.recovery_p50_ms = Some(ms(list[list.len() / 2]));
            row.recovery_max_ms = list.last().map(|&r| ms(r));
        }
    }
    let mut rows: Vec<Row> = rows.into_values().collect();
    rows.sort_by_key(|r| (r.fault != "none", r.fault.clone()));
    Verdict {
        rows,
        findings,
        acquisitions: grants.len(),
    }
}

/// The median and the largest of `list` (sorted here), `None`s if it is empty.
fn median_and_max(list: &mut [f64]) -> (Option<f64>, Option<f64>) {
    list.sort_by(f64::total_cmp);
    (list.get(list.len() / 2).copied(), list.last().copied())
}

/// Milliseconds, for people.
fn ms(nanos: Nanos) -> f64 {
    #[allow(clippy::cast_precision_loss)] // display only
    let ms = nanos as f64 / 1e6;
    ms
}

/// The earlier holds in `active` (still believed held when `grant` was granted) that `grant`
/// may not be held beside: of the lock or a write lock, the one believed longest that its kind
/// excludes; of a permit, if `capacity` permits were already believed held, the `capacity`
/// believed longest. Empty if `grant` is allowed.
fn conflicts<'a>(
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
fn holders(list: &[(&GrantId, &Grant)]) -> String {
    list.iter()
        .map(|(id, grant)| format!("{id} (client {})", grant.client))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every acquisition with its belief interval.
fn grants(history: &History) -> HashMap<GrantId, Grant> {
    let mut grants: HashMap<GrantId, Grant> = HashMap::new();
    let mut invoked: HashMap<u32, Nanos> = HashMap::new();
    for stamped in &history.events {
        match &stamped.event {
            ClientEvent::AcquireInvoked { .. } => {
                invoked.insert(stamped.client, stamped.at);
            }
            ClientEvent::Granted {
                name,
                grant,
                token,
                kind,
            } => {
                grants.insert(
                    grant.clone(),
                    Grant {
                        name: name.clone(),
                        kind: *kind,
                        token: *token,
                        invoked: invoked.get(&stamped.client).copied().unwrap_or(stamped.at),
                        granted: stamped.at,
                        believed_until: stamped.at,
                        affirmed: false,
                        lost_at: None,
                        released_owned: false,
                        client: stamped.client,
                    },
                );
            }
            ClientEvent::Affirmed { grant }
            | ClientEvent::ReleaseInvoked {
                grant,
                believed: true,
            } => {
                if let Some(g) = grants.get_mut(grant) {
                    g.believed_until = g.believed_until.max(stamped.at);
                    g.affirmed = true;
                }
            }
            ClientEvent::ReleaseReturned {
                grant,
                owned: Some(true),
                ..
            } => {
                if let Some(g) = grants.get_mut(grant) {
                    g.released_owned = true;
                }
            }
            ClientEvent::Lost { grant, .. }
            | ClientEvent::ReleaseReturned {
                grant,
                owned: Some(false),
                ..
            } => {
                if let Some(g) = grants.get_mut(grant) {
                    g.lost_at = Some(g.lost_at.map_or(stamped.at, |at| at.min(stamped.at)));
                }
            }
            _ => {}
        }
    }
    grants
}

/// A fault's record, for tests.
#[cfg(test)]
fn fault(kind: &str, start: Nanos, end: Nanos) -> FaultRecord {
    FaultRecord {
        kind: kind.to_owned(),
        target: "test".to_owned(),
        start,
        end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Stamped, Write};

    const MS: Nanos = 1_000_000;

    fn judgement(monotonic: bool) -> Judgement {
        Judgement {
            monotonic_fencing: monotonic,
            documented_losses: HashSet::from(["server-kill".to_owned()]),
            hot: "hot".to_owned(),
            recovery_bound: 1000 * MS,
            kinds: Vec::new(),
            permits: 2,
        }
    }

    fn ev(at: Nanos, client: u32, event: ClientEvent) -> Stamped<ClientEvent> {
        Stamped { at, client, event }
    }

    fn hold(h: &mut History, client: u32, grant: &str, token: u64, from: Nanos, until: Nanos) {
        hold_of(h, HoldKind::Exclusive, client, grant, token, (from, until));
    }

    /// A hold of `kind` of the name `hot`, believed from `during.0` to `during.1`.
    fn hold_of(
        h: &mut History,
        kind: HoldKind,
        client: u32,
        grant: &str,
        token: u64,
        during: (Nanos, Nanos),
    ) {
        let (from, until) = during;
        h.events.push(ev(
            from - MS,
            client,
            ClientEvent::AcquireInvoked { name: "hot".into() },
        ));
        h.events.push(ev(
            from,
            client,
            ClientEvent::Granted {
                name: "hot".into(),
                grant: grant.into(),
                token: Some(token),
                kind,
            },
        ));
        h.events
            .push(ev(until, client, ClientEvent::Affirmed { grant: grant.into() }));
        h.events.push(ev(
            until + MS,
            client,
            ClientEvent::ReleaseInvoked {
                grant: grant.into(),
                believed: false,
            },
        ));
    }

    fn write(h: &mut History, at: Nanos, grant: &str, token: u64, accepted: bool) {
        h.writes.push(Write {
            at,
            name: "hot".into(),
            grant: grant.into(),
            token: Some(token),
            kind: HoldKind::Exclusive,
            accepted,
        });
    }

    #[test]
    fn a_clean_history_passes() {
        let mut h = History::default();
        hold(&mut h, 1, "a", 1, 10 * MS, 20 * MS);
        hold(&mut h, 2, "b", 2, 30 * MS, 40 * MS);
        write(&mut h, 15 * MS, "a", 1, true);
        write(&mut h, 35 * MS, "b", 2, true);
        write(&mut h, 36 * MS, "a", 1, false);
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(true), &[], &[]);
        assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
        assert_eq!(v.acquisitions, 2);
        assert_eq!(v.rows[0].fenced_writes_rejected, 1);
    }

    #[test]
    fn overlapping_beliefs_are_two_holders() {
        let mut h = History::default();
        hold(&mut h, 1, "a", 1, 10 * MS, 50 * MS);
        hold(&mut h, 2, "b", 2, 30 * MS, 60 * MS);
        let v = check(&h, &judgement(true), &[], &[]);
        let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
        assert_eq!(kinds, ["exclusion"]);
    }

    #[test]
    fn an_overlap_under_a_documented_fault_is_counted_not_failed() {
        let mut h = History::default();
        h.faults.push(fault("server-kill", 5 * MS, 6 * MS));
        hold(&mut h, 1, "a", 1, 10 * MS, 50 * MS);
        hold(&mut h, 2, "b", 2, 30 * MS, 60 * MS);
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(true), &[], &[]);
        assert_eq!(v.violations().count(), 0);
        let row = v.rows.iter().find(|r| r.fault == "server-kill").expect("a row");
        assert_eq!(row.exclusion_violations, 1);
        assert!(row.documented_loss);
    }

    #[test]
    fn an_overlap_is_measured_with_when_the_first_holder_was_told() {
        let mut h = History::default();
        h.faults.push(fault("failover", 5 * MS, 6 * MS));
        hold(&mut h, 1, "a", 1, 10 * MS, 50 * MS);
        hold(&mut h, 2, "b", 2, 30 * MS, 60 * MS);
        h.events.push(ev(
            45 * MS,
            1,
            ClientEvent::Lost {
                grant: "a".into(),
                reason: "not owned".into(),
            },
        ));
        hold(&mut h, 3, "c", 3, 55 * MS, 70 * MS);
        h.stopped = 100 * MS;
        let mut j = judgement(true);
        j.documented_losses = HashSet::from(["failover".to_owned()]);
        let v = check(&h, &j, &[], &[]);
        assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
        let row = v.rows.iter().find(|r| r.fault == "failover").expect("a row");
        assert_eq!(row.exclusion_violations, 2);
        // a (believed until 50) overlaps b (granted at 30) by 20 ms and was told 15 ms after b's
        // grant; b (believed until 60) overlaps c (granted at 55) by 5 ms and was never told.
        assert_eq!(row.overlap_max_ms, Some(20.0));
        assert_eq!(row.overlap_p50_ms, Some(20.0));
        assert_eq!(row.told_after_max_ms, Some(15.0));
        assert_eq!(row.told_lost, 1);
        assert_eq!(row.told_lost_but_held, 0);
        let never: Vec<_> = v.findings.iter().filter(|f| f.told_after_ms.is_none()).collect();
        assert_eq!(never.len(), 1, "{:?}", v.findings);
        assert_eq!(never[0].overlap_ms, Some(5.0));
    }

    #[test]
    fn a_repeated_token_lets_a_stale_write_through() {
        let mut h = History::default();
        hold(&mut h, 1, "a", 7, 10 * MS, 20 * MS);
        hold(&mut h, 2, "b", 7, 30 * MS, 40 * MS);
        write(&mut h, 35 * MS, "b", 7, true);
        write(&mut h, 45 * MS, "a", 7, true);
        let v = check(&h, &judgement(true), &[], &[]);
        let kinds: HashSet<&str> = v.violations().map(|f| f.kind.as_str()).collect();
        assert!(kinds.contains("stale-write"), "{kinds:?}");
        assert!(kinds.contains("repeated-token"), "{kinds:?}");
        assert!(kinds.contains("token-order"), "{kinds:?}");
    }

    #[test]
    fn best_effort_fencing_counts_stale_writes_against_the_state_loss() {
        let mut h = History::default();
        h.faults.push(fault("server-kill", 5 * MS, 6 * MS));
        h.faults.push(fault("holder-kill", 25 * MS, 25 * MS));
        hold(&mut h, 1, "a", 7, 10 * MS, 20 * MS);
        hold(&mut h, 2, "b", 7, 30 * MS, 40 * MS);
        write(&mut h, 35 * MS, "b", 7, true);
        write(&mut h, 45 * MS, "a", 7, true);
        let v = check(&h, &judgement(false), &[], &[]);
        assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
        let stale: Vec<&str> = v
            .findings
            .iter()
            .filter(|f| f.kind == "stale-write")
            .map(|f| f.fault.as_str())
            .collect();
        assert_eq!(stale, ["server-kill"]);
        // Monotonic fencing declares it impossible.
        let v = check(&h, &judgement(true), &[], &[]);
        assert!(v.violations().any(|f| f.kind == "stale-write"));
    }

    #[test]
    fn a_slow_recovery_and_a_lock_left_held_fail_liveness() {
        let mut h = History::default();
        h.faults.push(fault("holder-kill", 10 * MS, 10 * MS));
        hold(&mut h, 2, "b", 2, 2000 * MS, 2100 * MS);
        h.stopped = 3000 * MS;
        let v = check(&h, &judgement(true), &["hot".to_owned()], &[]);
        let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
        assert_eq!(kinds, ["liveness", "left-held"]);
        let row = v.rows.iter().find(|r| r.fault == "holder-kill").expect("a row");
        assert_eq!(row.recovery_max_ms, Some(1990.0));
    }

    #[test]
    fn a_grant_during_the_fault_is_an_immediate_recovery() {
        let mut h = History::default();
        h.faults.push(fault("holder-pause", 10 * MS, 900 * MS));
        hold(&mut h, 2, "b", 2, 500 * MS, 600 * MS);
        h.stopped = 3000 * MS;
        let v = check(&h, &judgement(true), &[], &[]);
        assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
        let row = v.rows.iter().find(|r| r.fault == "holder-pause").expect("a row");
        assert_eq!(row.recovery_max_ms, Some(0.0));
    }

    #[test]
    fn more_permits_at_once_than_the_semaphore_has_are_found() {
        // Two permits: a and b overlap (allowed); c comes while both still believe.
        let mut h = History::default();
        hold_of(&mut h, HoldKind::Permit, 1, "a", 1, (10 * MS, 50 * MS));
        hold_of(&mut h, HoldKind::Permit, 2, "b", 2, (20 * MS, 60 * MS));
        hold_of(&mut h, HoldKind::Permit, 3, "c", 3, (30 * MS, 40 * MS));
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(true), &[], &[]);
        let found: Vec<&Finding> = v.violations().collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, "exclusion");
        // All three held from 30 until a stopped believing at 50.
        assert_eq!(found[0].overlap_ms, Some(20.0));
        for holder in [
            "a (client 1)",
            "b (client 2)",
            "c (client 3)",
            "3 holders at once",
        ] {
            assert!(found[0].detail.contains(holder), "{}", found[0].detail);
        }
        // With three permits, the same history is fine.
        let mut three = judgement(true);
        three.permits = 3;
        let v = check(&h, &three, &[], &[]);
        assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
    }

    #[test]
    fn as_many_permits_at_once_as_the_semaphore_has_pass() {
        // Two permits: never more than two believed at one instant (c starts as a stops).
        let mut h = History::default();
        hold_of(&mut h, HoldKind::Permit, 1, "a", 1, (10 * MS, 30 * MS));
        hold_of(&mut h, HoldKind::Permit, 2, "b", 2, (20 * MS, 60 * MS));
        hold_of(&mut h, HoldKind::Permit, 3, "c", 3, (31 * MS, 70 * MS));
        hold_of(&mut h, HoldKind::Permit, 4, "d", 4, (61 * MS, 80 * MS));
        write_of(&mut h, 25 * MS, "a", 1, HoldKind::Permit, true);
        write_of(&mut h, 35 * MS, "c", 3, HoldKind::Permit, true);
        // b writes after c and d: an earlier permit rightly outlives later ones.
        write_of(&mut h, 40 * MS, "b", 2, HoldKind::Permit, true);
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(true), &[], &[]);
        assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
        assert_eq!(v.acquisitions, 4);
    }

    #[test]
    fn a_permit_token_from_two_holds_is_a_stale_write() {
        let mut h = History::default();
        hold_of(&mut h, HoldKind::Permit, 1, "a", 5, (10 * MS, 20 * MS));
        hold_of(&mut h, HoldKind::Permit, 2, "b", 5, (15 * MS, 30 * MS));
        write_of(&mut h, 16 * MS, "a", 5, HoldKind::Permit, true);
        write_of(&mut h, 17 * MS, "b", 5, HoldKind::Permit, true);
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(true), &[], &[]);
        let kinds: HashSet<&str> = v.violations().map(|f| f.kind.as_str()).collect();
        // b asked after a was granted: its token is out of order as well.
        assert_eq!(
            kinds,
            HashSet::from(["stale-write", "repeated-token", "token-order"]),
            "{:?}",
            v.findings
        );
    }

    #[test]
    fn a_writer_beside_a_reader_is_found_and_readers_together_are_not() {
        // Two readers overlap freely.
        let mut h = History::default();
        hold_of(&mut h, HoldKind::Read, 1, "r1", 1, (10 * MS, 50 * MS));
        hold_of(&mut h, HoldKind::Read, 2, "r2", 2, (20 * MS, 60 * MS));
        hold_of(&mut h, HoldKind::Write, 3, "w1", 3, (61 * MS, 70 * MS));
        write_of(&mut h, 30 * MS, "r1", 1, HoldKind::Read, true);
        write_of(&mut h, 31 * MS, "r2", 2, HoldKind::Read, true);
        write_of(&mut h, 65 * MS, "w1", 3, HoldKind::Write, true);
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(true), &[], &[]);
        assert_eq!(v.violations().count(), 0, "{:?}", v.findings);

        // A writer granted while a reader still believes.
        let mut h = History::default();
        hold_of(&mut h, HoldKind::Read, 1, "r1", 1, (10 * MS, 50 * MS));
        hold_of(&mut h, HoldKind::Write, 2, "w1", 2, (40 * MS, 60 * MS));
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(true), &[], &[]);
        let found: Vec<&Finding> = v.violations().collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, "exclusion");
        assert_eq!(found[0].overlap_ms, Some(10.0));
        assert!(found[0].detail.contains("the write lock"), "{}", found[0].detail);

        // A reader granted while a writer still believes, and two writers at once.
        let mut h = History::default();
        hold_of(&mut h, HoldKind::Write, 1, "w1", 1, (10 * MS, 50 * MS));
        hold_of(&mut h, HoldKind::Read, 2, "r1", 2, (20 * MS, 30 * MS));
        hold_of(&mut h, HoldKind::Write, 3, "w2", 3, (45 * MS, 60 * MS));
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(true), &[], &[]);
        let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
        assert_eq!(kinds, ["exclusion", "exclusion"], "{:?}", v.findings);
    }

    #[test]
    fn a_token_of_a_read_and_a_write_is_checked_across_both() {
        // The writer's token is not above the reader's, granted before the writer asked.
        let mut h = History::default();
        hold_of(&mut h, HoldKind::Read, 1, "r1", 4, (10 * MS, 20 * MS));
        hold_of(&mut h, HoldKind::Write, 2, "w1", 4, (30 * MS, 40 * MS));
        write_of(&mut h, 15 * MS, "r1", 4, HoldKind::Read, true);
        write_of(&mut h, 35 * MS, "w1", 4, HoldKind::Write, true);
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(true), &[], &[]);
        let kinds: HashSet<&str> = v.violations().map(|f| f.kind.as_str()).collect();
        assert_eq!(
            kinds,
            HashSet::from(["stale-write", "repeated-token", "token-order"]),
            "{:?}",
            v.findings
        );
    }

    // The narrowed exemptions: each history below was excused by the earlier rules.

    #[test]
    fn a_best_effort_stale_write_without_a_state_reset_is_a_violation() {
        // A holder kill resets nothing: the store kept its counter, so a token accepted from
        // two holds is a stale write as under monotonic fencing.
        let mut h = History::default();
        h.faults.push(fault("holder-kill", 25 * MS, 25 * MS));
        hold(&mut h, 1, "a", 7, 10 * MS, 20 * MS);
        hold(&mut h, 2, "b", 7, 30 * MS, 40 * MS);
        write(&mut h, 35 * MS, "b", 7, true);
        write(&mut h, 45 * MS, "a", 7, true);
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(false), &[], &[]);
        let kinds: HashSet<&str> = v.violations().map(|f| f.kind.as_str()).collect();
        assert!(kinds.contains("stale-write"), "{:?}", v.findings);
    }

    #[test]
    fn a_best_effort_stale_write_between_grants_after_the_reset_is_a_violation() {
        // The server restarted empty at 5 ms; both grants came after it: one state epoch.
        let mut h = History::default();
        h.faults.push(fault("server-kill", 5 * MS, 6 * MS));
        hold(&mut h, 1, "a", 7, 10 * MS, 20 * MS);
        hold(&mut h, 2, "b", 7, 30 * MS, 40 * MS);
        write(&mut h, 35 * MS, "b", 7, true);
        write(&mut h, 45 * MS, "a", 7, true);
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(false), &[], &[]);
        let kinds: HashSet<&str> = v.violations().map(|f| f.kind.as_str()).collect();
        assert!(kinds.contains("stale-write"), "{:?}", v.findings);
    }

    #[test]
    fn best_effort_tokens_are_ordered_within_one_state_epoch() {
        // No reset at all: a repeated token and one that went back are violations.
        let mut h = History::default();
        hold(&mut h, 1, "a", 7, 10 * MS, 20 * MS);
        hold(&mut h, 2, "b", 7, 30 * MS, 40 * MS);
        hold(&mut h, 3, "c", 3, 50 * MS, 60 * MS);
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(false), &[], &[]);
        let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
        assert!(kinds.contains(&"repeated-token"), "{:?}", v.findings);
        assert!(kinds.contains(&"token-order"), "{:?}", v.findings);
        // Across a restart without persistence the counter may go back: not checked.
        let mut h = History::default();
        hold(&mut h, 1, "a", 7, 10 * MS, 20 * MS);
        h.faults.push(fault("server-kill", 25 * MS, 26 * MS));
        hold(&mut h, 2, "b", 7, 30 * MS, 40 * MS);
        hold(&mut h, 3, "c", 8, 50 * MS, 60 * MS);
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(false), &[], &[]);
        assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
    }

    #[test]
    fn two_holders_both_granted_after_a_documented_fault_are_a_violation() {
        // The restart at 5 ms explains losing a lock granted before it, not two grants after it.
        let mut h = History::default();
        h.faults.push(fault("server-kill", 5 * MS, 6 * MS));
        hold(&mut h, 1, "a", 1, 10 * MS, 50 * MS);
        hold(&mut h, 2, "b", 2, 30 * MS, 60 * MS);
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(true), &[], &[]);
        let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
        assert_eq!(kinds, ["exclusion"], "{:?}", v.findings);
    }

    #[test]
    fn a_slow_recovery_after_a_documented_fault_is_a_violation() {
        // A documented loss excuses two holders, never a lock that stays unavailable.
        let mut h = History::default();
        h.faults.push(fault("server-kill", 10 * MS, 20 * MS));
        hold(&mut h, 2, "b", 2, 2000 * MS, 2100 * MS);
        h.stopped = 3000 * MS;
        let v = check(&h, &judgement(true), &[], &[]);
        let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
        assert_eq!(kinds, ["liveness"], "{:?}", v.findings);
    }

    /// A write without a token (the resource accepts it whatever the order).
    fn unfenced_write(h: &mut History, at: Nanos, grant: &str, kind: HoldKind) {
        h.writes.push(Write {
            at,
            name: "hot".into(),
            grant: grant.into(),
            token: None,
            kind,
            accepted: true,
        });
    }

    #[test]
    fn a_write_without_a_token_after_the_next_holder_was_granted_is_stale() {
        // a last affirmed at 20 ms (then its process stopped); b was granted at 30 ms and
        // wrote; a's write landed at 45 ms, after b's grant: no token could stop it.
        let mut h = History::default();
        hold(&mut h, 1, "a", 0, 10 * MS, 20 * MS);
        hold(&mut h, 2, "b", 0, 30 * MS, 40 * MS);
        unfenced_write(&mut h, 15 * MS, "a", HoldKind::Exclusive);
        unfenced_write(&mut h, 35 * MS, "b", HoldKind::Exclusive);
        unfenced_write(&mut h, 45 * MS, "a", HoldKind::Exclusive);
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(false), &[], &[]);
        let found: Vec<&Finding> = v.violations().collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, "stale-write");
        assert!(found[0].detail.contains("b (client 2)"), "{}", found[0].detail);
    }

    #[test]
    fn a_permit_write_beside_as_many_later_permits_as_the_semaphore_has_is_found() {
        // Two permits: a believed until 20 ms; b and c were granted at 25 and 30 ms and still
        // believed at 45 ms, when a's write landed: three holders acted at once.
        let mut h = History::default();
        hold_of(&mut h, HoldKind::Permit, 1, "a", 1, (10 * MS, 20 * MS));
        hold_of(&mut h, HoldKind::Permit, 2, "b", 2, (25 * MS, 60 * MS));
        hold_of(&mut h, HoldKind::Permit, 3, "c", 3, (30 * MS, 60 * MS));
        write_of(&mut h, 15 * MS, "a", 1, HoldKind::Permit, true);
        write_of(&mut h, 45 * MS, "a", 1, HoldKind::Permit, true);
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(true), &[], &[]);
        let found: Vec<&Finding> = v.violations().collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, "stale-write");
        // With three permits it is allowed.
        let mut three = judgement(true);
        three.permits = 3;
        let v = check(&h, &three, &[], &[]);
        assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
    }

    fn write_of(h: &mut History, at: Nanos, grant: &str, token: u64, kind: HoldKind, accepted: bool) {
        h.writes.push(Write {
            at,
            name: "hot".into(),
            grant: grant.into(),
            token: Some(token),
            kind,
            accepted,
        });
    }

    #[test]
    fn a_grant_found_lost_at_its_first_check_believed_nothing() {
        // A holder stopped between its acquire's return and the recording of the grant: the
        // grant is recorded when the process runs again, long after its lease ran out, and its
        // guard says lost at the first check (no affirmation). Two others hold meanwhile.
        let mut h = History::default();
        hold_of(&mut h, HoldKind::Permit, 1, "a", 2, (10 * MS, 60 * MS));
        hold_of(&mut h, HoldKind::Permit, 2, "b", 3, (20 * MS, 60 * MS));
        h.events.push(ev(
            40 * MS,
            3,
            ClientEvent::Granted {
                name: "hot".into(),
                grant: "late".into(),
                token: Some(1),
                kind: HoldKind::Permit,
            },
        ));
        h.events.push(ev(
            40 * MS,
            3,
            ClientEvent::Lost {
                grant: "late".into(),
                reason: "the lease expired before it was renewed".into(),
            },
        ));
        h.stopped = 100 * MS;
        let v = check(&h, &judgement(false), &[], &[]);
        assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
        // Once it affirms, even at its grant's instant, it is a third holder of two permits.
        h.events
            .push(ev(40 * MS, 3, ClientEvent::Affirmed { grant: "late".into() }));
        let v = check(&h, &judgement(false), &[], &[]);
        let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
        assert_eq!(kinds, ["exclusion"], "{:?}", v.findings);
    }
}

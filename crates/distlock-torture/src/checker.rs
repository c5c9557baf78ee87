//! The checker: reads a [`History`] and says whether the lock kept what its backend declares.
//!
//! - **Exclusion.** A holder believes it holds from the moment its acquire returned until the
//!   last moment it affirmed so (a check of its guard, clock read first, before each write,
//!   and before its release). Two such intervals of the same name that overlap are two
//!   holders at once.
//! - **Fencing.** The resource accepts a write whose token is at least the highest it
//!   accepted. An accepted write whose token equals one already accepted from another holder
//!   is a stale write. Two grants with the same token, or a grant whose acquire began after an
//!   earlier grant returned and whose token is not higher, break monotonic fencing.
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
use crate::history::{ClientEvent, GrantId, History, Nanos};

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
    token: Option<u64>,
    invoked: Nanos,
    granted: Nanos,
    /// The last moment its holder affirmed holding.
    believed_until: Nanos,
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
    for (id, grant) in &grants {
        by_name.entry(grant.name.as_str()).or_default().push((id, grant));
    }
    for (name, mut list) in by_name {
        list.sort_by_key(|(_, g)| g.granted);
        let mut furthest: Option<(&GrantId, &Grant)> = None;
        for (id, grant) in list {
            if let Some((other_id, other)) = furthest {
                if grant.granted < other.believed_until {
                    let overlap = ms(other.believed_until - grant.granted);
                    let told = other.lost_at.map(|at| ms(at.saturating_sub(grant.granted)));
                    found(
                        "exclusion",
                        grant.granted,
                        format!(
                            "{name}: {id} (client {}) was granted {overlap:.1} ms before {other_id} (client {}) last affirmed holding; {}",
                            grant.client,
                            other.client,
                            told.map_or_else(
                                || "that holder was never told it lost the lock".to_owned(),
                                |t| format!("that holder was told it lost the lock {t:.1} ms after the grant")
                            )
                        ),
                        Some((overlap, told)),
                    );
                }
            }
            if furthest.is_none_or(|(_, f)| grant.believed_until > f.believed_until) {
                furthest = Some((id, grant));
            }
        }
    }

    // Fencing: stale accepted writes, in the resource's order.
    let mut highest: HashMap<&str, (u64, HashSet<&str>)> = HashMap::new();
    for write in history.writes.iter().filter(|w| w.accepted) {
        let Some(token) = write.token else { continue };
        let entry = highest
            .entry(write.name.as_str())
            .or_insert_with(|| (token, HashSet::new()));
        if token > entry.0 {
            *entry = (token, HashSet::new());
        } else if token == entry.0 && !entry.1.is_empty() && !entry.1.contains(write.grant.as_str()) {
            found(
                "stale-write",
                write.at,
                format!(
                    "{}: the resource accepted {}'s write with token {token}, already accepted from another holder",
                    write.name, write.grant
                ),
                None,
            );
        }
        entry.1.insert(write.grant.as_str());
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

/// Every acquisition with its belief interval.
fn grants(history: &History) -> HashMap<GrantId, Grant> {
    let mut grants: HashMap<GrantId, Grant> = HashMap::new();
    let mut invoked: HashMap<u32, Nanos> = HashMap::new();
    for stamped in &history.events {
        match &stamped.event {
            ClientEvent::AcquireInvoked { .. } => {
                invoked.insert(stamped.client, stamped.at);
            }
            ClientEvent::Granted { name, grant, token } => {
                grants.insert(
                    grant.clone(),
                    Grant {
                        name: name.clone(),
                        token: *token,
                        invoked: invoked.get(&stamped.client).copied().unwrap_or(stamped.at),
                        granted: stamped.at,
                        believed_until: stamped.at,
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
        }
    }

    fn ev(at: Nanos, client: u32, event: ClientEvent) -> Stamped<ClientEvent> {
        Stamped { at, client, event }
    }

    fn hold(h: &mut History, client: u32, grant: &str, token: u64, from: Nanos, until: Nanos) {
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
}

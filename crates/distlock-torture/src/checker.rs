//! The checker: reads a [`History`] and says whether the lock kept what its backend declares.
//!
//! - **Exclusion** ([`exclusion`]). A holder believes it holds from the moment its acquire
//!   returned until the last moment it affirmed so (a check of its guard, clock read first,
//!   before each write, and before its release); a grant never affirmed (its guard was lost at
//!   the first check) believed nothing. Of one name: two such intervals of its lock that
//!   overlap are two holders at once; a write lock's interval may overlap no other (read or
//!   write); more than `permits` intervals of a semaphore's permits at one instant are one
//!   holder too many (the finding names the `permits + 1` holders). Read locks overlap each
//!   other freely.
//! - **Fencing** ([`fencing`]). The resource accepts a write whose token is at least the
//!   highest it accepted (a read: at least that of the last write; a permit's: always, see
//!   [`crate::resource`]). An accepted write or read whose token was already accepted from
//!   another holder of the name is a stale write. Two grants of one object (of any kind) with
//!   the same token, or a grant whose acquire began after an earlier grant returned and whose
//!   token is not higher, break the token order: on every backend that gives tokens, for
//!   grants within one state epoch (see below).
//! - **Writes no token fences** ([`unfenced`]): writes without a token (Redlock) and permits'
//!   writes are accepted whatever their order, so they are checked against the holders'
//!   intervals: a write that lands after a holder it excludes was granted (for a permit: while
//!   `permits` other holders believe) is a stale write.
//! - **Liveness** ([`liveness`]). After each fault, the time until the hot lock is next granted
//!   (zero if it was granted while the fault lasted) must stay within the stated bound; every
//!   name must be free once the clients stopped.
//!
//! **What is excused.** A fault kind the backend documents as a loss (a restart without
//! persistence, a failover) resets the store's state when it kills the server: it ends a state
//! epoch. A finding about a pair of grants (two holders at once, a stale write, a token out of
//! order) is excused only if the pair straddles that moment (the earlier recorded before it,
//! give or take a reply in flight, the later after it); it is then counted against that fault
//! and shown, not failed. Tokens of a
//! `Monotonic` backend are never excused; those of a `BestEffort` one only across a reset.
//! Nothing else is excused: two grants both after the fault, a slow recovery, a lock left
//! held. Every other finding is attributed to the fault that started last before it.

mod exclusion;
mod fencing;
mod liveness;
mod resets;
#[cfg(test)]
mod tests;
mod unfenced;

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::history::{ClientEvent, FaultRecord, GrantId, History, HoldKind, Nanos};
use resets::Resets;

/// What the backend under test declares, and the run's bounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Judgement {
    /// Whether fencing tokens are declared strictly increasing (`Fencing::Monotonic`).
    pub monotonic_fencing: bool,
    /// Fault kinds under which the backend's docs say a lock can be lost: each resets the
    /// store's state (a restart without persistence, a failover).
    pub documented_losses: HashSet<String>,
    /// The hot lock's name (liveness is measured on it).
    pub hot: String,
    /// The longest time from a fault's end to the hot lock's next grant.
    pub recovery_bound: Nanos,
    /// The fault kinds the run could inject (each gets a row, injected or not).
    pub kinds: Vec<String>,
    /// How many permits of a semaphore may be held at once (the run's `--permits`).
    pub permits: u32,
    /// How long after a store lost its state a grant it gave before may still be recorded (its
    /// reply in flight, read and recorded): a grant recorded later came from the new state.
    #[serde(default)]
    pub in_flight: Nanos,
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// `exclusion`, `stale-write`, `repeated-token`, `token-order`, `liveness`, `left-held`,
    /// `client-crash`, `fault-missed`.
    pub kind: String,
    /// The fault kind it is attributed to (`none` before the first fault).
    pub fault: String,
    /// Whether the backend's docs declare this loss under that fault (then it fails nothing).
    pub documented: bool,
    /// What happened, for a person.
    pub detail: String,
    /// When it happened (the later grant, the write, the fault's end, the stop).
    #[serde(skip)]
    pub at: Nanos,
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
    /// Faults of this kind scheduled (each one not injected is a `fault-missed` finding).
    pub scheduled: usize,
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
    let mut found = Findings {
        started: history.started,
        faults,
        resets: Resets::new(faults, &judgement.documented_losses, judgement.in_flight),
        list: Vec::new(),
    };
    exclusion::check(&grants, judgement, &mut found);
    fencing::check(history, &grants, judgement, &mut found);
    unfenced::check(history, &grants, judgement, &mut found);
    let mut recoveries = liveness::check(history, &grants, judgement, &mut found);
    for name in left_held {
        found.violation(
            "left-held",
            history.stopped,
            format!("{name} was still held after every client stopped"),
            None,
        );
    }
    for fault in faults.iter().filter(|f| !f.injected) {
        found.violation(
            "fault-missed",
            fault.start,
            format!(
                "{} on {} was scheduled but not injected",
                fault.kind, fault.target
            ),
            None,
        );
    }
    for client in crashed {
        found.violation("client-crash", history.stopped, client.clone(), None);
    }
    let attribute = |at: Nanos| found.attribute(at);
    let findings = &found.list;

    // The table.
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    rows.insert("none".to_owned(), Row::default());
    for kind in &judgement.kinds {
        rows.entry(kind.clone()).or_default();
    }
    for fault in faults {
        let row = rows.entry(fault.kind.clone()).or_default();
        row.scheduled += 1;
        row.faults += usize::from(fault.injected);
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
    for finding in findings {
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
        acquisitions: grants.len(),
        findings: found.list,
    }
}

/// The findings so far, and how each is attributed.
struct Findings<'a> {
    /// When the workload started (times in details are from there).
    started: Nanos,
    faults: &'a [FaultRecord],
    resets: Resets<'a>,
    list: Vec<Finding>,
}

impl Findings<'_> {
    /// The kind of the fault that started last before `at` (`none` before the first).
    fn attribute(&self, at: Nanos) -> String {
        self.faults
            .iter()
            .filter(|f| f.start <= at)
            .max_by_key(|f| f.start)
            .map_or_else(|| "none".to_owned(), |f| f.kind.clone())
    }

    /// A finding that breaks a declared guarantee, attributed to the fault before `at`.
    fn violation(&mut self, kind: &str, at: Nanos, detail: String, overlap: Option<(f64, Option<f64>)>) {
        let fault = self.attribute(at);
        self.push(kind, at, fault, false, detail, overlap);
    }

    /// A finding about a pair of grants: excused by `reset` (a documented loss between them),
    /// counted against it; else a violation attributed to the fault before `at`.
    fn pair(
        &mut self,
        kind: &str,
        at: Nanos,
        reset: Option<&FaultRecord>,
        detail: String,
        overlap: Option<(f64, Option<f64>)>,
    ) {
        match reset {
            Some(reset) => {
                let detail = format!(
                    "{detail} (the grants straddle the {} {:.3} s into the run)",
                    reset.kind,
                    ms(reset.start.saturating_sub(self.started)) / 1e3
                );
                self.push(kind, at, reset.kind.clone(), true, detail, overlap);
            }
            None => self.violation(kind, at, detail, overlap),
        }
    }

    fn push(
        &mut self,
        kind: &str,
        at: Nanos,
        fault: String,
        documented: bool,
        detail: String,
        overlap: Option<(f64, Option<f64>)>,
    ) {
        self.list.push(Finding {
            kind: kind.to_owned(),
            at,
            fault,
            documented,
            detail,
            overlap_ms: overlap.map(|(o, _)| o),
            told_after_ms: overlap.and_then(|(_, t)| t),
        });
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

/// One grant as the history shows it, for the picture.
#[derive(Debug, Clone)]
pub struct Hold {
    /// The name it holds.
    pub name: String,
    /// The grant.
    pub grant: GrantId,
    /// The client (task) that holds it.
    pub client: u32,
    /// What it holds.
    pub kind: HoldKind,
    /// Its fencing token.
    pub token: Option<u64>,
    /// When its acquire returned.
    pub granted: Nanos,
    /// The last moment its holder affirmed holding (its grant, if it never did).
    pub believed_until: Nanos,
    /// When its holder was first told it had lost the lock, if it was.
    pub lost_at: Option<Nanos>,
}

/// Every grant of `history`, in the order they were granted.
pub fn holds(history: &History) -> Vec<Hold> {
    let mut list: Vec<Hold> = grants(history)
        .into_iter()
        .map(|(grant, g)| Hold {
            name: g.name,
            grant,
            client: g.client,
            kind: g.kind,
            token: g.token,
            granted: g.granted,
            believed_until: g.believed_until,
            lost_at: g.lost_at,
        })
        .collect();
    list.sort_by(|a, b| (a.granted, &a.grant).cmp(&(b.granted, &b.grant)));
    list
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

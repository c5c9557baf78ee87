//! What a backend's conformance run expects to skip, and the checks that hold it to that.
//!
//! Each backend's test file lists the cases it expects to skip, in full or in part, with the
//! [`Reason`] for each; [`conformance_tests!`](crate::conformance_tests) turns the list into
//! an [`Expectations`]. A case that skips while unlisted (or for another reason), or runs in
//! full while listed, fails its test. Every skip is written to stderr past the test harness's
//! capture, and the binary's `conformance_expected_skips` test prints the backend's one-line
//! summary and checks the backend's row of the guide's table of expected skips
//! (`docs/src/conformance.md`).

use std::collections::BTreeSet;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{short_name, Outcome, CASES};

/// Why a case skips, all of it or a part: what the backend's capabilities exclude, or a
/// fault hook its fixture lacks. The guide's table names each by its variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// `Capabilities::fencing` is `None`: no fencing tokens.
    Fencing,
    /// `Capabilities::expiry` is `Session`: locks have no TTL to renew, extend or run out.
    Ttl,
    /// Neither `Capabilities::semaphores` nor `Capabilities::rw_locks`.
    Primitives,
    /// `Capabilities::semaphores` is false.
    Semaphores,
    /// `Capabilities::rw_locks` is false.
    RwLocks,
    /// `Mechanics::hands_over` is false.
    HandOver,
    /// `Capabilities::cross_process` is false: the store lives in one process.
    CrossProcess,
    /// The mutex's watch is not a notified watch of one waiter (nor is the store's queue
    /// FIFO), or waiters poll: a release wakes every waiter.
    WakeOne,
    /// The semaphore's watch is not a notified watch of one waiter, or waiters poll.
    PermitWakeOne,
    /// `Capabilities::wake_up` is `Polling`: there is no notification to lose.
    Notification,
    /// `Capabilities::fairness` is `Fifo`: waits go through the store's own queue, whose
    /// entry goes with the waiting future.
    StoreQueue,
    /// `Capabilities::fairness` is not `Fifo`: the store keeps no arrival order.
    NoQueue,
    /// The backend polls and names no store, so only its waiters' polls see a release.
    LocalWake,
    /// The backend polls and has no read-write locks: a cut-off wait has no record to leave.
    NoRecord,
    /// The fixture cannot take the store away ([`Fixture::outage`](crate::Fixture::outage)).
    Outage,
    /// The fixture cannot steal a lock ([`Fixture::steal`](crate::Fixture::steal)).
    Steal,
    /// The fixture has no fault proxy between client and store (an embedded or in-process
    /// store): [`Fixture::proxied_backend`](crate::Fixture::proxied_backend).
    FaultProxy,
    /// The fixture's store cannot be reached from a child process.
    ChildEnv,
    /// No test binary to re-run as a child process (`distlock check`).
    ChildEntry,
    /// The store has no members to partition from each other
    /// ([`Fixture::members`](crate::Fixture::members)).
    Members,
    /// The fixture cannot move the store's clock
    /// ([`Fixture::store_clock`](crate::Fixture::store_clock)).
    StoreClock,
    /// The backend's docs page declares that a jump of the store's clock loses a lock, and
    /// the case saw that loss.
    StoreClockDeclared,
    /// The fixture has no replicated store whose replica keeps every acknowledged write to
    /// fail over ([`Fixture::failover`](crate::Fixture::failover)).
    Failover,
    /// `Capabilities::weighted_permits` is false: a semaphore hold takes one permit.
    WeightedPermits,
    /// `Capabilities::upgradeable_reads` is false: no upgradeable read locks.
    UpgradeableReads,
    /// `Capabilities::notes` is false: no note beside a hold, so no leader election.
    Notes,
}

impl Reason {
    /// Every reason.
    pub const ALL: [Reason; 26] = [
        Reason::Fencing,
        Reason::Ttl,
        Reason::Primitives,
        Reason::Semaphores,
        Reason::RwLocks,
        Reason::HandOver,
        Reason::CrossProcess,
        Reason::WakeOne,
        Reason::PermitWakeOne,
        Reason::Notification,
        Reason::StoreQueue,
        Reason::NoQueue,
        Reason::LocalWake,
        Reason::NoRecord,
        Reason::Outage,
        Reason::Steal,
        Reason::FaultProxy,
        Reason::ChildEnv,
        Reason::ChildEntry,
        Reason::Members,
        Reason::StoreClock,
        Reason::StoreClockDeclared,
        Reason::Failover,
        Reason::WeightedPermits,
        Reason::UpgradeableReads,
        Reason::Notes,
    ];

    fn parse(word: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| format!("{r:?}") == word)
    }
}

/// A skip: why, and what the case says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    /// Why.
    pub reason: Reason,
    /// The case's words.
    pub detail: String,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{:?}]", self.detail, self.reason)
    }
}

/// How much of itself a listed case leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Extent {
    /// All of it ([`Outcome::Skipped`]).
    Whole,
    /// A part; the rest ran and passed ([`Outcome::Partial`]).
    Part,
}

/// One entry of a backend's list of expected skips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Expected {
    /// The case's number, `c29`.
    pub case: &'static str,
    /// Why it skips.
    pub reason: Reason,
    /// All of it or a part.
    pub extent: Extent,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.case, self.reason)?;
        if self.extent == Extent::Part {
            f.write_str(" (part)")?;
        }
        Ok(())
    }
}

/// A backend's expected skips, as its test file lists them.
#[derive(Debug, Clone, Copy)]
pub struct Expectations {
    /// The backend's name in the guide's table.
    pub backend: &'static str,
    /// The cases it skips, in full or in part.
    pub skips: &'static [Expected],
}

/// The heading of the guide's table of expected skips.
const TABLE_HEADER: &str = "| backend | expected skips |";

impl Expectations {
    fn listed(&self, name: &str) -> Option<&Expected> {
        self.skips.iter().find(|e| e.case == short_name(name))
    }

    /// Fails (panics) unless `outcome` of the case `name` is what the list says: run in full
    /// when unlisted, skipped in full or in part for the listed reason when listed. Prints
    /// every skip on stderr.
    pub fn settle(&self, name: &str, outcome: &Outcome) {
        let backend = self.backend;
        let (skip, extent) = match outcome {
            Outcome::Passed => {
                if let Some(listed) = self.listed(name) {
                    panic!(
                        "{name} ran in full on {backend}, but its list expects it to skip ({listed}): \
                         take it off the list"
                    );
                }
                return;
            }
            Outcome::Skipped(skip) => (skip, Extent::Whole),
            Outcome::Partial(skip) => (skip, Extent::Part),
        };
        let what = match extent {
            Extent::Whole => "skipped",
            Extent::Part => "skipped a part",
        };
        let _ = writeln!(std::io::stderr(), "conformance {backend}: {name} {what}: {skip}");
        let expected = Expected {
            case: CASES
                .iter()
                .map(|c| short_name(c.name))
                .find(|c| *c == short_name(name))
                .unwrap_or("c??"),
            reason: skip.reason,
            extent,
        };
        match self.listed(name) {
            Some(listed) if *listed == expected => {}
            Some(listed) => panic!("{name} {what} on {backend} ({skip}), but its list expects {listed}"),
            None => panic!(
                "{name} {what} on {backend} ({skip}), but its list does not expect that: either the \
                 case must run here, or list it as `{}: {:?}`",
                expected.case, expected.reason
            ),
        }
    }

    /// Checks the list itself (known cases, each once) and the guide's row for the backend,
    /// and prints the backend's one-line summary on stderr. `manifest_dir` is the calling
    /// crate's, from which the workspace's guide is found.
    pub fn check(&self, manifest_dir: &str) {
        let mut seen = BTreeSet::new();
        for entry in self.skips {
            assert!(
                CASES.iter().any(|c| short_name(c.name) == entry.case),
                "{}: the list names {}, which is no conformance case",
                self.backend,
                entry.case
            );
            assert!(
                seen.insert(entry.case),
                "{}: the list names {} twice",
                self.backend,
                entry.case
            );
        }
        let whole = self.skips.iter().filter(|e| e.extent == Extent::Whole).count();
        let part = self.skips.len() - whole;
        let _ = writeln!(
            std::io::stderr(),
            "conformance {}: {} cases, {} in full, {part} in part, {whole} skipped: {}",
            self.backend,
            CASES.len(),
            CASES.len() - self.skips.len(),
            self.row()
        );
        let page = skips_page(Path::new(manifest_dir));
        let text =
            std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("reading {}: {e}", page.display()));
        let expected = self.row();
        match table_row(&text, self.backend) {
            Some(Ok(row)) => {
                let mut listed: Vec<Expected> = self.skips.to_vec();
                listed.sort();
                assert_eq!(
                    row,
                    listed,
                    "the guide's row for {} (docs/src/conformance.md) disagrees with its test file's list; the row should read:\n\
                     | {} | {expected} |",
                    self.backend,
                    self.backend
                );
            }
            Some(Err(e)) => panic!("the guide's row for {} (docs/src/conformance.md): {e}", self.backend),
            None => panic!(
                "the guide's table of expected skips ({TABLE_HEADER}, docs/src/conformance.md) has no row for {}; add:\n| {} | {expected} |",
                self.backend, self.backend
            ),
        }
    }

    /// The list as the guide's row shows it: sorted, comma-separated, `none` when empty.
    pub fn row(&self) -> String {
        let mut skips: Vec<Expected> = self.skips.to_vec();
        skips.sort();
        if skips.is_empty() {
            return "none".to_owned();
        }
        skips
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The guide's page with the table, `docs/src/conformance.md` of the workspace: the nearest
/// ancestor of `dir` that holds `Cargo.lock`.
fn skips_page(dir: &Path) -> PathBuf {
    dir.ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .unwrap_or(dir)
        .join("docs")
        .join("src")
        .join("conformance.md")
}

/// The expected skips in the table's row for `backend`, sorted; `None` if it has none.
fn table_row(text: &str, backend: &str) -> Option<Result<Vec<Expected>, String>> {
    let table = text.split(TABLE_HEADER).nth(1)?;
    let row = table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .find_map(|l| l.strip_prefix(&format!("| {backend} |")))?;
    let cell = row.trim().trim_end_matches('|').trim();
    if cell == "none" {
        return Some(Ok(Vec::new()));
    }
    let mut entries = Vec::new();
    for item in cell.split(',') {
        let words: Vec<&str> = item.split_whitespace().collect();
        let (case, reason, extent) = match words.as_slice() {
            [case, reason] => (*case, *reason, Extent::Whole),
            [case, reason, "(part)"] => (*case, *reason, Extent::Part),
            _ => {
                return Some(Err(format!(
                    "`{item}` is not `cNN Reason` or `cNN Reason (part)`"
                )))
            }
        };
        let Some(case) = CASES.iter().map(|c| short_name(c.name)).find(|c| *c == case) else {
            return Some(Err(format!("`{case}` is no conformance case")));
        };
        let Some(reason) = Reason::parse(reason) else {
            return Some(Err(format!("`{reason}` is no skip reason")));
        };
        entries.push(Expected { case, reason, extent });
    }
    entries.sort();
    Some(Ok(entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: Expectations = Expectations {
        backend: "test",
        skips: &[
            Expected {
                case: "c29",
                reason: Reason::HandOver,
                extent: Extent::Whole,
            },
            Expected {
                case: "c16",
                reason: Reason::Steal,
                extent: Extent::Part,
            },
        ],
    };

    fn skip(reason: Reason) -> Skip {
        Skip {
            reason,
            detail: "why".to_owned(),
        }
    }

    #[test]
    fn listed_skips_pass_and_others_fail() {
        LIST.settle(
            "c29_release_hands_over_to_the_next_owner",
            &Outcome::Skipped(skip(Reason::HandOver)),
        );
        LIST.settle("c16_lost_lock_signal", &Outcome::Partial(skip(Reason::Steal)));
        LIST.settle("c01_try_acquire_reports_held", &Outcome::Passed);
        let fails = |name: &'static str, outcome: Outcome| {
            std::panic::catch_unwind(|| LIST.settle(name, &outcome)).is_err()
        };
        assert!(fails("c29_release_hands_over_to_the_next_owner", Outcome::Passed));
        assert!(fails(
            "c01_try_acquire_reports_held",
            Outcome::Skipped(skip(Reason::Outage))
        ));
        assert!(fails(
            "c29_release_hands_over_to_the_next_owner",
            Outcome::Skipped(skip(Reason::Fencing))
        ));
        assert!(fails(
            "c16_lost_lock_signal",
            Outcome::Skipped(skip(Reason::Steal))
        ));
        assert!(fails(
            "c29_release_hands_over_to_the_next_owner",
            Outcome::Partial(skip(Reason::HandOver))
        ));
    }

    #[test]
    fn the_table_row_is_parsed_and_compared() {
        let text = format!(
            "{TABLE_HEADER}\n|---|---|\n| other | none |\n| test | c29 HandOver, c16 Steal (part) |\n\nmore"
        );
        let mut listed = LIST.skips.to_vec();
        listed.sort();
        assert_eq!(table_row(&text, "test"), Some(Ok(listed)));
        assert_eq!(table_row(&text, "other"), Some(Ok(Vec::new())));
        assert_eq!(table_row(&text, "absent"), None);
        assert_eq!(LIST.row(), "c16 Steal (part), c29 HandOver");
        let bad = format!("{TABLE_HEADER}\n|---|---|\n| test | c29 Handover |\n");
        assert!(matches!(table_row(&bad, "test"), Some(Err(_))));
    }
}

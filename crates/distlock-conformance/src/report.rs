//! Running many cases outside the test harness (for `distlock check`), with one report each.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{run_in, short_name, Ctx, Fixture, Outcome, CASES};

/// How one case went.
#[derive(Debug, Clone)]
pub struct Report {
    /// The case's name.
    pub case: &'static str,
    /// What it checks.
    pub summary: &'static str,
    /// `Ok` if it passed or was skipped, `Err` with the failure message.
    pub outcome: Result<Outcome, String>,
    /// How long it ran.
    pub elapsed: Duration,
    /// The figures and remarks it noted (handoff time, time to loss, ...).
    pub notes: Vec<String>,
}

/// Runs every case whose name `select` accepts, one after another, calling `done` after each.
/// A failing case is reported with its message (its panic is caught, not propagated); notes
/// are collected instead of printed; the
/// cross-process case is skipped (there is no test binary to re-run as a child).
pub async fn run_cases(
    fixture: Arc<dyn Fixture>,
    select: impl Fn(&str) -> bool,
    mut done: impl FnMut(&Report),
) -> Vec<Report> {
    let mut reports = Vec::new();
    for case in CASES.iter().filter(|c| select(c.name)) {
        let started = Instant::now();
        let ctx = Ctx::new(fixture.clone(), short_name(case.name), None)
            .await
            .quiet();
        let task = tokio::spawn(run_in(case.name, ctx.clone()));
        let outcome = task.await.map_err(|e| match e.try_into_panic() {
            Ok(panic) => panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "the case panicked".to_owned()),
            Err(e) => format!("the case did not finish: {e}"),
        });
        let report = Report {
            case: case.name,
            summary: case.summary,
            outcome,
            elapsed: started.elapsed(),
            notes: ctx.notes(),
        };
        done(&report);
        reports.push(report);
    }
    reports
}

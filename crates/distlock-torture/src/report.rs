//! The report: a table per backend and fault kind, the findings, and JSON.

use std::fmt::Write as _;

use crate::primitive::Primitive;
use crate::run::Outcome;

/// The Markdown table of one run, then its findings.
pub fn table(outcome: &Outcome) -> String {
    let mut out = String::new();
    let verdict = &outcome.verdict;
    let _ = writeln!(
        out,
        "\n{}{} (fencing {}, TTL {} ms, seed {}{}): {} acquisitions in {:.0} s, {} violations of a declared guarantee\n",
        outcome.backend,
        match (outcome.primitive, outcome.permits) {
            (Primitive::Mutex, _) => String::new(),
            (primitive, Some(permits)) => format!(" {} of {permits}", primitive.name()),
            (primitive, None) => format!(" {}", primitive.name()),
        },
        outcome.fencing,
        outcome.ttl_ms,
        outcome.seed,
        outcome.broken.as_ref().map(|b| format!(", broken: {b}")).unwrap_or_default(),
        verdict.acquisitions,
        outcome.seconds,
        verdict.violations().count()
    );
    let _ = writeln!(out, "Workload: {}.\n", outcome.workload);
    let _ = writeln!(
        out,
        "| fault | faults (scheduled) | acquisitions | exclusion violations | overlap p50 / max | holder told after p50 / max | holders told lost (still held) | stale writes accepted | fenced writes rejected | recovery p50 | recovery max | guarantee |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0} ms"));
    for row in &verdict.rows {
        let _ = writeln!(
            out,
            "| {} | {} ({}) | {} | {} | {} / {} | {} / {} | {} ({}) | {} | {} | {} | {} | {} |",
            row.fault,
            row.faults,
            row.scheduled,
            row.acquisitions,
            row.exclusion_violations,
            ms(row.overlap_p50_ms),
            ms(row.overlap_max_ms),
            ms(row.told_after_p50_ms),
            ms(row.told_after_max_ms),
            row.told_lost,
            row.told_lost_but_held,
            row.stale_writes_accepted,
            row.fenced_writes_rejected,
            ms(row.recovery_p50_ms),
            ms(row.recovery_max_ms),
            if row.documented_loss {
                "documented loss"
            } else {
                "declared"
            }
        );
    }
    for finding in verdict.findings.iter().take(20) {
        let _ = writeln!(
            out,
            "- {}{} under {}: {}",
            finding.kind,
            if finding.documented { " (documented)" } else { "" },
            finding.fault,
            finding.detail
        );
    }
    if verdict.findings.len() > 20 {
        let _ = writeln!(out, "- ... and {} more", verdict.findings.len() - 20);
    }
    out
}

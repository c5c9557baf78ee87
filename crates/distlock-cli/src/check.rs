//! `distlock check`: the conformance suite against the store the user points at.

use std::sync::Arc;

use distlock::Result;
use distlock_conformance::{run_cases, LiveFixture, Outcome, Report};
use serde::Serialize;

use crate::cli::CheckArgs;
use crate::exit;

#[derive(Serialize)]
struct Row<'a> {
    case: &'a str,
    checks: &'a str,
    result: &'a str,
    detail: String,
    seconds: f64,
}

pub async fn run(url: &str, args: CheckArgs) -> Result<u8> {
    // Open once up front so a bad URL or a dead store is one clear error, not 20 failures.
    let probe = distlock::open(url).await?;
    probe.ping().await?;
    let url = url.to_owned();
    let fixture = Arc::new(LiveFixture::new(move || {
        let url = url.clone();
        async move { distlock::open(&url).await }
    }));
    // Failing cases panic inside their task; the report carries the message instead.
    std::panic::set_hook(Box::new(|_| {}));
    let json = args.json;
    if !json {
        println!("{:<44} {:<7} {:>8}  detail", "case", "result", "time");
    }
    let select = |name: &str| args.cases.is_empty() || args.cases.iter().any(|c| name.contains(c.as_str()));
    let reports = run_cases(fixture, select, |report| {
        if !json {
            let row = row(report);
            println!(
                "{:<44} {:<7} {:>7.2}s  {}",
                row.case, row.result, row.seconds, row.detail
            );
        }
    })
    .await;
    let _ = std::panic::take_hook();
    let failed = reports.iter().filter(|r| r.outcome.is_err()).count();
    if json {
        let rows: Vec<Row<'_>> = reports.iter().map(row).collect();
        println!("{}", serde_json::to_string_pretty(&rows).unwrap_or_default());
    } else {
        let skipped = reports
            .iter()
            .filter(|r| matches!(r.outcome, Ok(Outcome::Skipped(_) | Outcome::Partial(_))))
            .count();
        println!(
            "{} passed, {failed} failed, {skipped} skipped",
            reports.len() - failed - skipped
        );
    }
    Ok(if failed == 0 { exit::OK } else { exit::CHECK_FAILED })
}

fn row(report: &Report) -> Row<'_> {
    let (result, detail) = match &report.outcome {
        Ok(Outcome::Passed) => ("pass", report.notes.join("; ")),
        Ok(Outcome::Skipped(why)) => ("skip", why.to_string()),
        Ok(Outcome::Partial(why)) => ("partial", why.to_string()),
        Err(message) => ("FAIL", message.lines().next().unwrap_or_default().to_owned()),
    };
    Row {
        case: report.case,
        checks: report.summary,
        result,
        detail,
        seconds: report.elapsed.as_secs_f64(),
    }
}

//! `distlock doctor`: judges the configuration of the store the user points at, one line per
//! setting (ok, warn or unsafe, with the reason and the fix) or JSON, and exits
//! [`exit::UNSAFE`] if a setting is unsafe. The rules live in each backend crate.

use clap::Args;
use distlock::{Finding, Verdict};
use serde::Serialize;

use crate::exit;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print JSON instead of lines.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Report<'a> {
    verdict: &'static str,
    findings: Vec<Row<'a>>,
}

#[derive(Serialize)]
struct Row<'a> {
    item: &'a str,
    server: &'a str,
    verdict: &'static str,
    found: &'a str,
    reason: &'a str,
    fix: &'a str,
}

pub async fn run(url: &str, args: DoctorArgs) -> distlock::Result<u8> {
    let findings = distlock::doctor(url).await?;
    let worst = Verdict::worst(&findings);
    if args.json {
        let report = Report {
            verdict: worst.as_str(),
            findings: findings.iter().map(row).collect(),
        };
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        print!("{}", lines(&findings));
    }
    Ok(if worst == Verdict::Unsafe {
        exit::UNSAFE
    } else {
        exit::OK
    })
}

fn row(finding: &Finding) -> Row<'_> {
    Row {
        item: &finding.item,
        server: &finding.server,
        verdict: finding.verdict.as_str(),
        found: &finding.found,
        reason: &finding.reason,
        fix: &finding.fix,
    }
}

/// `VERDICT ITEM [SERVER] FOUND`, then the reason and the fix indented, then a count.
fn lines(findings: &[Finding]) -> String {
    let mut out = String::new();
    for finding in findings {
        let at = if finding.server.is_empty() {
            String::new()
        } else {
            format!(" [{}]", finding.server)
        };
        out.push_str(&format!(
            "{:<7} {}{at}: {}\n",
            finding.verdict.as_str(),
            finding.item,
            finding.found
        ));
        if !finding.reason.is_empty() {
            out.push_str(&format!("        {}\n", finding.reason));
        }
        if !finding.fix.is_empty() {
            out.push_str(&format!("        fix: {}\n", finding.fix));
        }
    }
    let count = |verdict| findings.iter().filter(|f| f.verdict == verdict).count();
    out.push_str(&format!(
        "{} unsafe, {} warn, {} ok\n",
        count(Verdict::Unsafe),
        count(Verdict::Warn),
        count(Verdict::Ok)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_per_finding_then_the_count() {
        let findings = [
            Finding::new("role", Verdict::Ok, "master").at("h:1"),
            Finding::new("persistence", Verdict::Warn, "appendonly no")
                .because("a restart loses locks")
                .fix("appendfsync always"),
        ];
        assert_eq!(
            lines(&findings),
            "ok      role [h:1]: master\n\
             warn    persistence: appendonly no\n        a restart loses locks\n        fix: appendfsync always\n\
             0 unsafe, 1 warn, 1 ok\n"
        );
    }
}

//! `distlock doctor` for a Sentinel set: whether its Sentinels can fail the primary over.
//! Each Sentinel the URL lists is asked `SENTINEL CKQUORUM <master>` (it answers OK only when
//! enough Sentinels see each other to reach the quorum and elect a leader for a failover).

use std::time::Duration;

use distlock_core::{Finding, Verdict};

use crate::sentinel::SentinelTarget;

/// Asks every Sentinel of `target`, each within `timeout` (one round trip after connecting),
/// and judges: ok if every one of them can authorize a failover, a warning otherwise (a
/// Sentinel that does not answer, or one that cannot reach the quorum).
pub(super) async fn sentinels(target: &SentinelTarget, timeout: Duration, at: &str) -> Finding {
    let asked = target.sentinel_addresses();
    let mut able = 0;
    let mut problems = Vec::new();
    for address in asked {
        let label = address.addr().to_string();
        let answer = tokio::time::timeout(timeout, ckquorum(address.clone(), target.master())).await;
        match answer {
            Ok(Ok(_)) => able += 1,
            Ok(Err(e)) => problems.push(format!("{label}: {}", one_line(&e.to_string()))),
            Err(_) => problems.push(format!("{label}: no answer within {timeout:?}")),
        }
    }
    let found = format!(
        "{able} of {} Sentinels can fail the primary over (SENTINEL CKQUORUM {})",
        asked.len(),
        target.master()
    );
    let finding = Finding::new("sentinels", Verdict::Ok, found).at(at);
    if problems.is_empty() {
        return finding.because("the Sentinels reach their quorum: a primary that fails is replaced");
    }
    finding
        .with_verdict(Verdict::Warn)
        .because(format!(
            "{}: while too few Sentinels can agree, a primary that fails is not replaced and no lock can be taken",
            problems.join("; ")
        ))
        .fix("run at least three Sentinels that reach each other, with a quorum no larger than their number (SENTINEL SET <master> quorum N)")
}

async fn ckquorum(address: redis::ConnectionInfo, master: &str) -> redis::RedisResult<String> {
    let mut conn = redis::Client::open(address)?
        .get_multiplexed_async_connection()
        .await?;
    redis::cmd("SENTINEL")
        .arg("CKQUORUM")
        .arg(master)
        .query_async(&mut conn)
        .await
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

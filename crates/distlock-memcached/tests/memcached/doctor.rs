//! `distlock_memcached::doctor` against real servers started safely (`-M -o
//! no_slab_reassign`) and unsafely (evicting, `-M` with the slab rebalancer, `-C`). memcached
//! takes these settings at start only; none can be changed at runtime.

use crate::support;

use distlock_core::{Error, Finding, Verdict};
use distlock_memcached::{doctor, MemcachedConfig};
use distlock_testkit::MemcachedOptions;

fn started_with(args: &[&str]) -> MemcachedOptions {
    MemcachedOptions {
        extra_args: args.iter().map(|a| (*a).to_owned()).collect(),
        ..MemcachedOptions::default()
    }
}

async fn check(url: &str) -> Vec<Finding> {
    doctor(&MemcachedConfig::from_url(url).expect("url"))
        .await
        .expect("doctor")
}

fn item<'a>(findings: &'a [Finding], name: &str) -> &'a Finding {
    findings
        .iter()
        .find(|f| f.item == name)
        .unwrap_or_else(|| panic!("no {name} finding in {findings:#?}"))
}

#[tokio::test]
async fn a_default_server_evicts_locks() {
    let server = support::start_server(MemcachedOptions::default()).await;
    let findings = check(&server.url()).await;
    assert_eq!(item(&findings, "version").verdict, Verdict::Ok, "{findings:#?}");
    assert_eq!(
        item(&findings, "cas_enabled").verdict,
        Verdict::Ok,
        "{findings:#?}"
    );
    let evictions = item(&findings, "evictions");
    assert_eq!(evictions.verdict, Verdict::Unsafe, "{findings:#?}");
    assert_eq!(evictions.found, "on");
    assert!(evictions.fix.contains("-M -o no_slab_reassign"), "{evictions:?}");
    assert_eq!(item(&findings, "restart").verdict, Verdict::Warn, "{findings:#?}");
}

#[tokio::test]
async fn no_evictions_with_the_slab_rebalancer_still_evict() {
    let server = support::start_server(started_with(&["-M"])).await;
    let findings = check(&server.url()).await;
    let evictions = item(&findings, "evictions");
    assert_eq!(evictions.verdict, Verdict::Unsafe, "{findings:#?}");
    assert!(evictions.reason.contains("rebalancer"), "{evictions:?}");
}

#[tokio::test]
async fn a_dedicated_server_without_evictions_only_warns_of_restarts() {
    let server = support::start_server(started_with(&["-M", "-o", "no_slab_reassign"])).await;
    let findings = check(&server.url()).await;
    assert_eq!(item(&findings, "evictions").verdict, Verdict::Ok, "{findings:#?}");
    assert_eq!(Verdict::worst(&findings), Verdict::Warn, "{findings:#?}");
}

#[tokio::test]
async fn a_server_without_cas_is_unsafe() {
    let server = support::start_server(started_with(&["-C", "-M", "-o", "no_slab_reassign"])).await;
    let findings = check(&server.url()).await;
    let cas = item(&findings, "cas_enabled");
    assert_eq!(cas.verdict, Verdict::Unsafe, "{findings:#?}");
    assert_eq!(cas.found, "no");
}

#[tokio::test]
async fn every_server_is_judged_and_a_silent_one_is_unavailable() {
    let safe = support::start_server(started_with(&["-M", "-o", "no_slab_reassign"])).await;
    let mut evicting = support::start_server(MemcachedOptions::default()).await;
    let url = format!(
        "memcache://127.0.0.1:{},127.0.0.1:{}",
        safe.port(),
        evicting.port()
    );
    let findings = check(&url).await;
    let evictions: Vec<(&str, Verdict)> = findings
        .iter()
        .filter(|f| f.item == "evictions")
        .map(|f| (f.server.as_str(), f.verdict))
        .collect();
    let (safe_at, evicting_at) = (
        format!("127.0.0.1:{}", safe.port()),
        format!("127.0.0.1:{}", evicting.port()),
    );
    assert_eq!(
        evictions,
        [
            (safe_at.as_str(), Verdict::Ok),
            (evicting_at.as_str(), Verdict::Unsafe)
        ],
        "{findings:#?}"
    );
    evicting.kill().expect("kill");
    let error = doctor(&MemcachedConfig::from_url(&url).expect("url"))
        .await
        .expect_err("a server does not answer");
    assert!(matches!(error, Error::Unavailable { .. }), "{error:?}");
    assert!(error.to_string().contains(&evicting_at), "{error}");
}

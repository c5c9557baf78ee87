//! `distlock_zookeeper::doctor` against real servers: the session timeout the server grants
//! (asked in the URL, capped by the server's `maxSessionTimeout`) against its `tickTime` and
//! `syncLimit`, read with `conf`, and the ensemble's size. ZooKeeper takes these from
//! `zoo.cfg` at start (the testkit's options); the session timeout is the client's, per URL.

use std::time::Duration;

use distlock_core::{Finding, Verdict};
use distlock_testkit::{ZooKeeperEnsemble, ZooKeeperOptions, ZooKeeperServer};
use distlock_zookeeper::{doctor, ZooKeeperConfig};

async fn server(options: ZooKeeperOptions) -> ZooKeeperServer {
    tokio::task::spawn_blocking(move || ZooKeeperServer::start_with(options))
        .await
        .expect("joined")
        .expect("zookeeper starts (run scripts/install-test-deps)")
}

async fn check(url: &str) -> Vec<Finding> {
    doctor(&ZooKeeperConfig::from_url(url).expect("url"))
        .await
        .expect("doctor")
}

fn item<'a>(findings: &'a [Finding], name: &str) -> &'a Finding {
    findings
        .iter()
        .find(|f| f.item == name)
        .unwrap_or_else(|| panic!("no {name} finding in {findings:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_server_judges_the_session_in_ticks() {
    // tickTime 500 ms: 5 ticks are 2.5 s.
    let server = server(ZooKeeperOptions::default()).await;
    let findings = check(&format!("{}?session_timeout=2s", server.url())).await;
    let session = item(&findings, "session timeout");
    assert_eq!(session.verdict, Verdict::Unsafe, "{findings:#?}");
    assert!(
        session.found.starts_with("asked 2s, granted 2s, tickTime 500ms"),
        "{session:?}"
    );
    let ensemble = item(&findings, "ensemble");
    assert_eq!(ensemble.verdict, Verdict::Warn, "{findings:#?}");
    assert_eq!(ensemble.found, "1 member (standalone)");

    let findings = check(&format!("{}?session_timeout=4s", server.url())).await;
    assert_eq!(
        item(&findings, "session timeout").verdict,
        Verdict::Ok,
        "{findings:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_cap_on_sessions_decides() {
    let server = server(ZooKeeperOptions {
        max_session_timeout_ms: 2000,
        ..ZooKeeperOptions::default()
    })
    .await;
    let findings = check(&format!("{}?session_timeout=10s", server.url())).await;
    let session = item(&findings, "session timeout");
    assert_eq!(session.verdict, Verdict::Unsafe, "{findings:#?}");
    assert!(session.found.starts_with("asked 10s, granted 2s"), "{session:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_conf_is_a_warning_not_an_error() {
    let server = server(ZooKeeperOptions {
        extra_config: vec!["4lw.commands.whitelist=srvr,ruok".to_owned()],
        ..ZooKeeperOptions::default()
    })
    .await;
    let findings = check(&format!("{}?session_timeout=4s", server.url())).await;
    let session = item(&findings, "session timeout");
    assert_eq!(session.verdict, Verdict::Warn, "{findings:#?}");
    assert!(session.fix.contains("4lw.commands.whitelist"), "{session:?}");
    assert_eq!(
        item(&findings, "ensemble").found,
        "1 member (standalone)",
        "{findings:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensemble_judges_the_session_against_follower_lag() {
    // syncLimit 5 × tickTime 500 ms: a cut-off follower serves for 2.5 s.
    let ensemble = tokio::task::spawn_blocking(ZooKeeperEnsemble::start)
        .await
        .expect("joined")
        .expect("a zookeeper ensemble starts (run scripts/install-test-deps)");
    ensemble
        .wait_for_leader(Duration::from_secs(60))
        .expect("a leader");
    let findings = check(&format!("{}?session_timeout=3s", ensemble.url())).await;
    let session = item(&findings, "session timeout");
    assert_eq!(session.verdict, Verdict::Warn, "{findings:#?}");
    assert!(session.found.ends_with("syncLimit 5"), "{session:?}");
    let size = item(&findings, "ensemble");
    assert_eq!(size.verdict, Verdict::Ok, "{findings:#?}");
    assert_eq!(size.found, "3 voting members");

    let findings = check(&format!("{}?session_timeout=10s", ensemble.url())).await;
    assert_eq!(Verdict::worst(&findings), Verdict::Ok, "{findings:#?}");
}

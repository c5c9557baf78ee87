//! `distlock_redis::doctor` and `doctor_redlock` against real servers configured safely and
//! unsafely, both at start (command-line options) and at runtime (`CONFIG SET`, `REPLICAOF`).

use crate::support;

use std::time::{Duration, Instant};

use distlock_core::{Finding, Verdict};
use distlock_redis::{doctor, doctor_redlock, RedisConfig, RedlockConfig};
use distlock_testkit::{RedisClusterOptions, RedisOptions, RedisServer};

use support::{raw, start_cluster, start_server};

async fn start_with(options: RedisOptions) -> RedisServer {
    tokio::task::spawn_blocking(move || RedisServer::start_with(options))
        .await
        .expect("joined")
        .expect("redis-server starts (run scripts/install-test-deps)")
}

async fn config_set(url: &str, name: &str, value: &str) {
    let mut conn = raw(url).await.expect("connect");
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query_async(&mut conn)
        .await
        .expect("CONFIG SET");
}

async fn check(url: &str) -> Vec<Finding> {
    doctor(&RedisConfig::from_url(url).expect("url"))
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
async fn a_default_server_is_safe_but_loses_locks_on_restart() {
    let server = start_server().await;
    let findings = check(&server.url()).await;
    assert_eq!(item(&findings, "role").verdict, Verdict::Ok, "{findings:#?}");
    assert_eq!(
        item(&findings, "maxmemory-policy").verdict,
        Verdict::Ok,
        "{findings:#?}"
    );
    assert_eq!(item(&findings, "replicas").verdict, Verdict::Ok, "{findings:#?}");
    let persistence = item(&findings, "persistence");
    assert_eq!(persistence.verdict, Verdict::Warn, "{findings:#?}");
    assert_eq!(persistence.found, "appendonly no, appendfsync everysec");
    assert!(persistence.fix.contains("appendfsync always"), "{persistence:?}");
    assert_eq!(Verdict::worst(&findings), Verdict::Warn);
}

#[tokio::test]
async fn an_evicting_policy_set_at_start_is_unsafe_and_aof_always_is_ok() {
    let server = start_with(RedisOptions {
        persistence: true,
        extra_args: ["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"]
            .map(String::from)
            .to_vec(),
        ..RedisOptions::default()
    })
    .await;
    let findings = check(&server.url()).await;
    let eviction = item(&findings, "maxmemory-policy");
    assert_eq!(eviction.verdict, Verdict::Unsafe, "{findings:#?}");
    assert!(eviction.found.starts_with("allkeys-lru"), "{eviction:?}");
    assert!(eviction.fix.contains("noeviction"), "{eviction:?}");
    assert_eq!(
        item(&findings, "persistence").verdict,
        Verdict::Ok,
        "{findings:#?}"
    );
    assert_eq!(Verdict::worst(&findings), Verdict::Unsafe);
}

#[tokio::test]
async fn a_volatile_policy_set_at_runtime_warns_without_a_limit_and_is_unsafe_with_one() {
    let server = start_server().await;
    let url = server.url();
    config_set(&url, "maxmemory-policy", "volatile-lru").await;
    config_set(&url, "maxmemory", "0").await;
    let findings = check(&url).await;
    assert_eq!(
        item(&findings, "maxmemory-policy").verdict,
        Verdict::Warn,
        "{findings:#?}"
    );
    config_set(&url, "maxmemory", "100mb").await;
    let findings = check(&url).await;
    assert_eq!(
        item(&findings, "maxmemory-policy").verdict,
        Verdict::Unsafe,
        "{findings:#?}"
    );
    config_set(&url, "maxmemory-policy", "noeviction").await;
    config_set(&url, "appendonly", "yes").await;
    config_set(&url, "appendfsync", "always").await;
    let findings = check(&url).await;
    assert_eq!(Verdict::worst(&findings), Verdict::Ok, "{findings:#?}");
}

#[tokio::test]
async fn a_replica_is_unsafe_and_its_master_warns_without_replica_acknowledgements() {
    let master = start_server().await;
    let replica = start_server().await;
    let mut conn = raw(&replica.url()).await.expect("connect");
    let () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port())
        .query_async(&mut conn)
        .await
        .expect("REPLICAOF");
    let findings = check(&replica.url()).await;
    let role = item(&findings, "role");
    assert_eq!(role.verdict, Verdict::Unsafe, "{findings:#?}");
    assert_eq!(role.found, "slave");

    // The master counts its replica once the replica has synchronised.
    let deadline = Instant::now() + Duration::from_secs(20);
    let findings = loop {
        let findings = check(&master.url()).await;
        if item(&findings, "replicas").found.starts_with("1 connected") {
            break findings;
        }
        assert!(
            Instant::now() < deadline,
            "the replica never connected: {findings:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(item(&findings, "role").verdict, Verdict::Ok, "{findings:#?}");
    assert_eq!(
        item(&findings, "replicas").verdict,
        Verdict::Warn,
        "{findings:#?}"
    );

    let waiting = RedisConfig::from_url(&master.url())
        .expect("url")
        .with_wait_for_replicas(1, Duration::from_millis(500));
    let findings = doctor(&waiting).await.expect("doctor");
    assert_eq!(item(&findings, "replicas").verdict, Verdict::Ok, "{findings:#?}");
    let too_many = RedisConfig::from_url(&master.url())
        .expect("url")
        .with_wait_for_replicas(2, Duration::from_millis(500));
    let findings = doctor(&too_many).await.expect("doctor");
    let replicas = item(&findings, "replicas");
    assert_eq!(replicas.verdict, Verdict::Warn, "{findings:#?}");
    assert!(
        replicas.reason.contains("every acquisition fails"),
        "{replicas:?}"
    );
}

#[tokio::test]
async fn a_cluster_is_judged_master_by_master() {
    let cluster = start_cluster(RedisClusterOptions::default()).await;
    let evicting = &cluster.nodes()[1];
    config_set(&evicting.url(), "maxmemory", "100mb").await;
    config_set(&evicting.url(), "maxmemory-policy", "allkeys-lru").await;
    let findings = check(&cluster.url()).await;
    let policies: Vec<&Finding> = findings.iter().filter(|f| f.item == "maxmemory-policy").collect();
    assert_eq!(policies.len(), 3, "one per master: {findings:#?}");
    let unsafe_at: Vec<&str> = policies
        .iter()
        .filter(|f| f.verdict == Verdict::Unsafe)
        .map(|f| f.server.as_str())
        .collect();
    assert_eq!(
        unsafe_at,
        [format!("127.0.0.1:{}", evicting.port())],
        "{findings:#?}"
    );
}

#[tokio::test]
async fn a_clusters_replicas_warn_without_offering_what_a_cluster_lacks() {
    let cluster = start_cluster(RedisClusterOptions {
        replicas_per_master: 1,
        ..RedisClusterOptions::default()
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let findings = loop {
        let findings = check(&cluster.url()).await;
        let synced = findings
            .iter()
            .filter(|f| f.item == "replicas")
            .all(|f| f.found.starts_with("1 connected"));
        if synced {
            break findings;
        }
        assert!(
            Instant::now() < deadline,
            "the replicas never connected: {findings:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let replicas: Vec<&Finding> = findings.iter().filter(|f| f.item == "replicas").collect();
    assert_eq!(
        replicas.len(),
        3,
        "one per master, replicas not judged: {findings:#?}"
    );
    for finding in replicas {
        assert_eq!(finding.verdict, Verdict::Warn, "{finding:?}");
        assert_eq!(finding.found, "1 connected, min-replicas-to-write 0");
        assert!(finding.fix.contains("no wait_for_replicas"), "{finding:?}");
    }
}

#[tokio::test]
async fn redlock_without_its_restart_quarantine_needs_aof_always() {
    let masters = [start_server().await, start_server().await, start_server().await];
    let hosts: Vec<String> = masters
        .iter()
        .map(|m| format!("127.0.0.1:{}", m.port()))
        .collect();
    let url = format!("redlock://{}", hosts.join(","));
    let findings = doctor_redlock(&RedlockConfig::from_url(&url).expect("url"))
        .await
        .expect("doctor");
    let persistence: Vec<&Finding> = findings.iter().filter(|f| f.item == "persistence").collect();
    assert_eq!(persistence.len(), 3, "{findings:#?}");
    assert!(
        persistence.iter().all(|f| f.verdict == Verdict::Warn),
        "{findings:#?}"
    );
    assert!(
        persistence[0].fix.contains("delay every restart"),
        "{findings:#?}"
    );

    let off = format!("{url}?restart_quarantine=0s");
    let findings = doctor_redlock(&RedlockConfig::from_url(&off).expect("url"))
        .await
        .expect("doctor");
    assert!(
        findings
            .iter()
            .filter(|f| f.item == "persistence")
            .all(|f| f.verdict == Verdict::Unsafe),
        "{findings:#?}"
    );
    for master in &masters {
        config_set(&master.url(), "appendonly", "yes").await;
        config_set(&master.url(), "appendfsync", "always").await;
    }
    let findings = doctor_redlock(&RedlockConfig::from_url(&off).expect("url"))
        .await
        .expect("doctor");
    assert_eq!(Verdict::worst(&findings), Verdict::Ok, "{findings:#?}");
}

#[tokio::test]
async fn redlock_reports_a_silent_master_and_fails_below_the_quorum() {
    let mut masters = [start_server().await, start_server().await, start_server().await];
    let hosts: Vec<String> = masters
        .iter()
        .map(|m| format!("127.0.0.1:{}", m.port()))
        .collect();
    let config = RedlockConfig::from_url(&format!("redlock://{}", hosts.join(","))).expect("url");
    masters[0].kill().expect("kill");
    let findings = doctor_redlock(&config).await.expect("doctor");
    let silent = item(&findings, "reachable");
    assert_eq!(silent.verdict, Verdict::Warn, "{findings:#?}");
    assert!(silent.server.contains(&hosts[0]), "{silent:?}");
    masters[1].kill().expect("kill");
    let error = doctor_redlock(&config).await.expect_err("below the quorum");
    assert!(error.to_string().contains("only 1 of 3"), "{error}");
}

/// A Sentinel set: every Sentinel is asked whether it can authorize a failover of the primary
/// (`SENTINEL CKQUORUM`). Three that can are ok; a quorum that three Sentinels can never reach
/// warns (the primary would never be replaced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_set_reports_whether_its_sentinels_can_fail_the_primary_over() {
    let set = tokio::task::spawn_blocking(distlock_testkit::RedisSentinelSet::start)
        .await
        .expect("joined")
        .expect("the Sentinel set starts (run scripts/install-test-deps)");
    let findings = check(&set.url(0)).await;
    let sentinels = item(&findings, "sentinels");
    assert_eq!(sentinels.verdict, Verdict::Ok, "{findings:#?}");
    assert!(sentinels.found.contains("3 of 3"), "{sentinels:?}");
    assert_eq!(item(&findings, "role").verdict, Verdict::Ok, "{findings:#?}");

    for port in set.sentinel_ports() {
        set.command(
            std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            &[
                "SENTINEL",
                "SET",
                distlock_testkit::SENTINEL_MASTER_NAME,
                "quorum",
                "4",
            ],
        )
        .expect("SENTINEL SET quorum");
    }
    let findings = check(&set.url(0)).await;
    let sentinels = item(&findings, "sentinels");
    assert_eq!(sentinels.verdict, Verdict::Warn, "{findings:#?}");
    assert!(sentinels.found.contains("0 of 3"), "{sentinels:?}");
    assert!(!sentinels.fix.is_empty(), "{sentinels:?}");
}

//! `distlock doctor` against real Redis servers, an etcd member and a SQLite file: one line per finding,
//! `--json` for machines, exit 0 for ok and warn, 3 when something is unsafe, 69 when the
//! store does not answer, 78 for a bad URL.

use crate::support::{distlock, run, text};
use distlock_testkit::{RedisOptions, RedisServer};

const UNSAFE: i32 = 3;
const UNAVAILABLE: i32 = 69;

#[test]
fn a_safe_store_exits_0_and_prints_a_line_per_finding() {
    let server = RedisServer::start().expect("redis-server starts (run scripts/install-test-deps)");
    let out = run(&mut distlock(&server.url(), &["doctor"]));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    // The test server runs without persistence: a warning, with its fix.
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("warn") && l.contains("persistence")),
        "{stdout}"
    );
    assert!(stdout.contains("fix: "), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("ok") && l.contains("maxmemory-policy")),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("0 unsafe, 1 warn, 3 ok"), "{stdout}");
}

#[test]
fn an_unsafe_store_exits_3_and_json_lists_every_finding() {
    let server = RedisServer::start_with(RedisOptions {
        extra_args: ["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"]
            .map(String::from)
            .to_vec(),
        ..RedisOptions::default()
    })
    .expect("redis-server starts (run scripts/install-test-deps)");
    let out = run(&mut distlock(&server.url(), &["doctor"]));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(UNSAFE), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("unsafe") && l.contains("maxmemory-policy")),
        "{stdout}"
    );

    let out = run(&mut distlock(&server.url(), &["doctor", "--json"]));
    assert_eq!(out.status.code(), Some(UNSAFE), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["verdict"], "unsafe", "{report}");
    let findings = report["findings"].as_array().expect("findings");
    assert_eq!(findings.len(), 4, "{report}");
    for finding in findings {
        for field in ["item", "server", "verdict", "found", "reason", "fix"] {
            assert!(finding[field].is_string(), "{field} in {finding}");
        }
    }
    let eviction = findings
        .iter()
        .find(|f| f["item"] == "maxmemory-policy")
        .expect("the eviction finding");
    assert_eq!(eviction["verdict"], "unsafe");
    assert!(eviction["fix"]
        .as_str()
        .unwrap_or_default()
        .contains("noeviction"));
}

#[test]
fn a_store_that_does_not_answer_exits_69() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener.local_addr().expect("its address").port()
    };
    let out = run(&mut distlock(&format!("redis://127.0.0.1:{port}"), &["doctor"]));
    assert_eq!(out.status.code(), Some(UNAVAILABLE), "{}", text(&out.stderr));
    assert!(text(&out.stdout).is_empty());
    assert!(
        text(&out.stderr).starts_with("distlock: "),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_bad_url_exits_78_and_a_local_sqlite_file_is_judged_without_a_server() {
    let out = run(&mut distlock("nosuch://x", &["doctor"]));
    assert_eq!(out.status.code(), Some(78), "{}", text(&out.stderr));

    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    let out = run(&mut distlock(&url, &["doctor", "--json"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["verdict"], "ok", "{report}");
    let items: Vec<&str> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["item"].as_str())
        .collect();
    assert_eq!(items, ["journal mode", "file system"], "{report}");
}

#[test]
fn etcd_lists_its_members_and_the_lease_ttl_the_cluster_granted() {
    let server = distlock_testkit::EtcdServer::start().expect("etcd starts (run scripts/install-test-deps)");
    // etcd's minimum TTL with the default election timeout (1 s) is 2 s: 1 s is raised.
    let out = run(&mut distlock(
        &format!("{}?lease_ttl=1s", server.url()),
        &["doctor"],
    ));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("warn") && l.contains("lease TTL") && l.contains("granted 2s, asked 1s")),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("warn") && l.contains("members") && l.contains("1 endpoint")),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("0 unsafe, 2 warn, 0 ok"), "{stdout}");

    let out = run(&mut distlock(
        &format!("{}?lease_ttl=5s", server.url()),
        &["doctor", "--json"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let lease = report["findings"]
        .as_array()
        .and_then(|findings| findings.iter().find(|f| f["item"] == "lease TTL"))
        .expect("the lease finding");
    assert_eq!(lease["verdict"], "ok", "{report}");
    assert_eq!(lease["found"], "granted 5s", "{report}");
}

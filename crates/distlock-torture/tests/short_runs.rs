//! CI's torture runs: every backend for 8 s on a seed derived from the commit under test (so
//! successive commits explore different fault schedules, and a failure replays from its
//! commit), which must keep every guarantee the backend declares; semaphores and read-write
//! locks on Redis and read-write locks on PostgreSQL, 8 s each on the same seed; and the
//! deliberately broken backends, which the checker must catch. The runs take turns (each
//! starts a store and eight client processes on a 2-core machine).
//!
//! The long runs (30 s per backend on a fixed and a random seed, 20 s per primitive) are
//! `scripts/torture-soak`.

use std::process::Command;
use std::sync::{Mutex, OnceLock, PoisonError};

const BINARY: &str = env!("CARGO_BIN_EXE_distlock-torture");
/// The fixed seed of the broken-backend proofs, and of CI's runs outside a git checkout.
const FIXED_SEED: &str = "20261124";
/// How long each CI run lasts (the soak runs are longer).
const CI_DURATION: &str = "8s";

/// The seed of CI's runs: `$DISTLOCK_TORTURE_SEED` if set (to replay a run), else the first 32
/// bits of the commit under test, else [`FIXED_SEED`]. Printed, so a failure says how to
/// replay it.
fn seed() -> &'static str {
    static SEED: OnceLock<String> = OnceLock::new();
    SEED.get_or_init(|| {
        if let Ok(seed) = std::env::var("DISTLOCK_TORTURE_SEED") {
            return seed;
        }
        let head = Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned());
        let seed = head
            .as_deref()
            .and_then(|hash| hash.get(..8))
            .and_then(|prefix| u32::from_str_radix(prefix, 16).ok())
            .map_or_else(|| FIXED_SEED.to_owned(), |seed| seed.to_string());
        eprintln!(
            "torture seed {seed} (from commit {}); replay with DISTLOCK_TORTURE_SEED={seed}",
            head.as_deref().unwrap_or("unknown")
        );
        seed
    })
}

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs the harness; returns its exit code and its JSON results.
fn torture(args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let json = dir.path().join("out.json");
    let output = Command::new(BINARY)
        .args(args)
        .args(["--quiet", "--json"])
        .arg(&json)
        .output()
        .expect("the harness runs");
    println!("{}", String::from_utf8_lossy(&output.stdout));
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    let results = std::fs::read(&json)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or(serde_json::Value::Null);
    (output.status.code(), results)
}

fn survives(backend: &str) {
    let seed = seed();
    let (code, results) = torture(&["--backend", backend, "--duration", CI_DURATION, "--seed", seed]);
    assert_eq!(
        code,
        Some(0),
        "{backend} broke a declared guarantee or the harness failed (seed {seed}; the log is above)"
    );
    let acquisitions = results[0]["verdict"]["acquisitions"].as_u64().unwrap_or_default();
    assert!(acquisitions > 20, "{backend}: only {acquisitions} acquisitions");
    faults_were_injected(backend, &results);
}

/// Every fault the run scheduled was injected, kind by kind, and there were some.
fn faults_were_injected(what: &str, results: &serde_json::Value) {
    let rows = results[0]["verdict"]["rows"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut injected = 0;
    for row in &rows {
        let (kind, faults, scheduled) = (&row["fault"], row["faults"].as_u64(), row["scheduled"].as_u64());
        assert!(
            scheduled.is_some() && faults == scheduled,
            "{what}: {kind}: {faults:?} faults injected of {scheduled:?} scheduled"
        );
        injected += faults.unwrap_or_default();
    }
    assert!(injected > 0, "{what}: no fault was injected: {rows:?}");
}

#[test]
fn sqlite_survives() {
    survives("sqlite");
}

#[test]
fn redis_survives() {
    survives("redis");
}

#[test]
fn redis_without_persistence_survives_except_as_documented() {
    survives("redis-volatile");
}

#[test]
fn redlock_survives() {
    survives("redlock");
}

#[test]
fn redlock_without_the_delayed_restart_rule_survives_except_as_documented() {
    survives("redlock-no-delay");
}

#[test]
fn redis_cluster_survives_except_as_documented() {
    survives("redis-cluster");
}

#[test]
fn mariadb_survives() {
    survives("mariadb");
}

#[test]
fn postgres_survives() {
    survives("postgres");
}

#[test]
fn mariadb_with_a_semi_synchronous_replica_survives_failovers() {
    survives("mariadb-semisync-replica");
}

#[test]
fn mariadb_with_an_asynchronous_replica_survives_except_as_documented() {
    survives("mariadb-async-replica");
}

#[test]
fn postgres_with_a_synchronous_standby_survives_failovers() {
    survives("postgres-sync-standby");
}

#[test]
fn postgres_with_an_asynchronous_standby_survives_except_as_documented() {
    survives("postgres-async-standby");
}

#[test]
fn memcached_survives_except_as_documented() {
    survives("memcached");
}

#[test]
fn zookeeper_survives() {
    survives("zookeeper");
}

#[test]
fn zookeeper_ensemble_survives() {
    survives("zookeeper-ensemble");
}

#[test]
fn etcd_survives() {
    survives("etcd");
}

#[test]
fn etcd_cluster_survives() {
    survives("etcd-cluster");
}

/// A run of `backend` with every name a `primitive` (`semaphore` of 2 permits, `rw` with 70%
/// reads), which must keep every declared guarantee.
fn survives_as(backend: &str, primitive: &str) {
    let seed = seed();
    let (code, results) = torture(&[
        "--backend",
        backend,
        "--primitive",
        primitive,
        "--duration",
        CI_DURATION,
        "--seed",
        seed,
    ]);
    assert_eq!(
        code,
        Some(0),
        "{backend} ({primitive}) broke a declared guarantee or the harness failed (seed {seed}): {:?}",
        violations(&results)
    );
    assert_eq!(results[0]["primitive"], primitive, "{results}");
    let acquisitions = results[0]["verdict"]["acquisitions"].as_u64().unwrap_or_default();
    assert!(
        acquisitions > 20,
        "{backend} ({primitive}): only {acquisitions} acquisitions"
    );
    faults_were_injected(&format!("{backend} ({primitive})"), &results);
}

#[test]
fn redis_semaphores_survive() {
    survives_as("redis", "semaphore");
}

#[test]
fn redis_rw_locks_survive() {
    survives_as("redis", "rw");
}

#[test]
fn postgres_rw_locks_survive() {
    survives_as("postgres", "rw");
}

#[test]
fn a_backend_without_the_primitive_is_refused() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    for (primitive, what) in [("semaphore", "semaphores"), ("rw", "read-write locks")] {
        let output = Command::new(BINARY)
            .args([
                "--backend",
                "redlock",
                "--primitive",
                primitive,
                "--duration",
                "5s",
                "--quiet",
            ])
            .output()
            .expect("the harness runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("redlock does not offer {what}")),
            "{stderr}"
        );
        assert!(
            output.stdout.is_empty(),
            "nothing may run: {}",
            String::from_utf8_lossy(&output.stdout)
        );
    }
}

/// The kinds of the findings that break a declared guarantee.
fn violations(results: &serde_json::Value) -> Vec<String> {
    results[0]["verdict"]["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["documented"] == false)
        .filter_map(|f| f["kind"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn the_checker_catches_broken_backends() {
    for (broken, faults, expected) in [
        (
            "repeated-token",
            "holder-kill,holder-pause",
            &["stale-write", "repeated-token"][..],
        ),
        ("overlong-lease", "holder-kill", &["exclusion"]),
        ("unchecked-release", "holder-pause", &["exclusion"]),
    ] {
        let (code, results) = torture(&[
            "--backend",
            "sqlite",
            "--duration",
            "8s",
            "--seed",
            FIXED_SEED,
            "--broken",
            broken,
            "--faults",
            faults,
        ]);
        let found = violations(&results);
        assert_eq!(code, Some(1), "{broken}: the run passed; findings: {found:?}");
        for expected in expected {
            assert!(
                found.iter().any(|k| k == expected),
                "{broken}: no {expected} finding among {found:?}"
            );
        }
    }
}

#[test]
fn the_checker_catches_a_lock_never_freed_and_a_waiter_never_woken() {
    for (broken, faults, duration, expected) in [
        // Every release is a no-op and the store holds each grant for an hour.
        ("never-frees", "holder-kill", "8s", "left-held"),
        // A process that once found a name held never gets it again. A process that had not
        // tried yet may still get it during the first fault (seen), so the run lasts for two.
        ("never-woken", "holder-pause", "20s", "liveness"),
    ] {
        let (code, results) = torture(&[
            "--backend",
            "sqlite",
            "--duration",
            duration,
            "--cold",
            "0",
            "--seed",
            FIXED_SEED,
            "--broken",
            broken,
            "--faults",
            faults,
        ]);
        let found = violations(&results);
        assert_eq!(code, Some(1), "{broken}: the run passed; findings: {found:?}");
        assert!(
            found.iter().any(|k| k == expected),
            "{broken}: no {expected} finding among {found:?}"
        );
    }
}

/// The details of the exclusion findings that break a declared guarantee.
fn exclusions(results: &serde_json::Value) -> Vec<String> {
    results[0]["verdict"]["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["documented"] == false && f["kind"] == "exclusion")
        .filter_map(|f| f["detail"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn the_checker_catches_broken_semaphores_and_rw_locks() {
    // One permit too many: three holders of a semaphore of two.
    let (code, results) = torture(&[
        "--backend",
        "sqlite",
        "--primitive",
        "semaphore",
        "--permits",
        "2",
        "--duration",
        "8s",
        "--seed",
        FIXED_SEED,
        "--broken",
        "over-admit",
        "--faults",
        "holder-pause",
    ]);
    let found = exclusions(&results);
    assert_eq!(
        code,
        Some(1),
        "over-admit: the run passed; findings: {:?}",
        violations(&results)
    );
    assert!(
        found.iter().any(|d| d.contains("3 holders at once")),
        "over-admit: no three holders of two permits among {found:?}"
    );
    // A writer let in as a reader: writers beside readers.
    let (code, results) = torture(&[
        "--backend",
        "sqlite",
        "--primitive",
        "rw",
        "--duration",
        "8s",
        "--seed",
        FIXED_SEED,
        "--broken",
        "writer-as-reader",
        "--faults",
        "holder-pause",
    ]);
    let found = exclusions(&results);
    assert_eq!(
        code,
        Some(1),
        "writer-as-reader: the run passed; findings: {:?}",
        violations(&results)
    );
    assert!(
        found
            .iter()
            .any(|d| d.contains("a read lock") && d.contains("the write lock")),
        "writer-as-reader: no writer beside a reader among {found:?}"
    );
}

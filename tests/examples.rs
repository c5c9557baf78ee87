//! Runs the examples as tests, so they cannot rot. The multi-process examples run their built
//! binaries against a temporary SQLite file.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../examples/fencing.rs"]
mod fencing;

#[allow(dead_code)]
#[path = "../examples/lost_lock.rs"]
mod lost_lock;

#[allow(dead_code)]
#[path = "../examples/any_store.rs"]
mod any_store;

#[allow(dead_code)]
#[path = "../examples/leader_election.rs"]
mod leader_election;

#[allow(dead_code)]
#[path = "../examples/weighted_permits.rs"]
mod weighted_permits;

#[allow(dead_code)]
#[path = "../examples/upgradeable_read.rs"]
mod upgradeable_read;

/// The nested `cargo build` of the examples, with the stores this test was built with:
/// `cargo test` builds examples only as test harnesses, and Cargo releases its build lock
/// before it runs tests. Built with every feature (as `scripts/test-all` builds the
/// workspace), it asks for the workspace's examples with every feature, which reuses
/// everything the test build compiled; otherwise for the features this test has.
fn examples_build() -> Command {
    let features = [
        ("sqlite", cfg!(feature = "sqlite")),
        ("mysql", cfg!(feature = "mysql")),
        ("postgres", cfg!(feature = "postgres")),
        ("redis", cfg!(feature = "redis")),
        ("redis-tls", cfg!(feature = "redis-tls")),
        ("zookeeper", cfg!(feature = "zookeeper")),
        ("memcached", cfg!(feature = "memcached")),
        ("etcd", cfg!(feature = "etcd")),
        ("etcd-tls", cfg!(feature = "etcd-tls")),
        ("metrics", cfg!(feature = "metrics")),
        ("blocking", cfg!(feature = "blocking")),
    ];
    let mut command = Command::new(env!("CARGO"));
    command.args(["build", "--quiet", "--examples"]);
    if features.iter().all(|(_, on)| *on) {
        command.args(["--workspace", "--all-features"]);
    } else {
        let on: Vec<&str> = features.iter().filter(|(_, on)| *on).map(|(f, _)| *f).collect();
        command.args([
            "-p",
            "distlock",
            "--no-default-features",
            "--features",
            &on.join(","),
        ]);
    }
    // In the environment of the build that ran this test, so that it finds that build's
    // artifacts fresh (see `building_the_examples_leaves_the_test_build_fresh`).
    without_test_env(&mut command).current_dir(env!("CARGO_MANIFEST_DIR"));
    command
}

/// `command` without the variables Cargo (or cargo-nextest) sets for a running test, so
/// that it sees the environment the build that ran this test saw.
fn without_test_env(command: &mut Command) -> &mut Command {
    const SET_FOR_TESTS: &[&str] = &[
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "OUT_DIR",
    ];
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if SET_FOR_TESTS.contains(&key) || key.starts_with("CARGO_PKG_") || key.starts_with("CARGO_BIN_EXE_")
        {
            command.env_remove(key);
        }
    }
    command
}

/// The built example `name`, built (or brought up to date) first by [`examples_build`].
fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let status = examples_build().status().expect("cargo runs");
        assert!(status.success(), "building the examples failed");
    });
    let exe = std::env::current_exe().expect("the test binary's path");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("examples").join(name))
        .expect("the target directory");
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// Runs the built example `name` with `args` (and `env` overrides); it must succeed. Returns
/// its standard output.
fn run_example(name: &str, args: &[&str], env: &[(&str, Option<&std::path::Path>)]) -> String {
    let mut command = Command::new(example(name));
    command.args(args);
    for (key, value) in env {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    let output = command.output().expect("the example runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("locks.db").display())
}

/// The nested build of the examples leaves what the build that ran this test compiled as it
/// was: once it has run, the same build in that build's environment finds every artifact
/// fresh. A build script that reads a variable Cargo sets for a running test (ring's reads
/// `CARGO_MANIFEST_DIR`) would otherwise rerun in each in turn, and everything above it be
/// compiled again: TLS, the SQL drivers, gRPC, the backends, the examples.
#[test]
fn building_the_examples_leaves_the_test_build_fresh() {
    example("quickstart");
    let output = without_test_env(&mut examples_build())
        .arg("--message-format=json")
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let rebuilt: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains(r#""reason":"compiler-artifact""#) && line.contains(r#""fresh":false"#))
        .map(|line| {
            line.split(r#""package_id":""#)
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or(line)
        })
        .collect();
    assert!(
        rebuilt.is_empty(),
        "the build that ran this test must find its artifacts fresh after the examples' build; it rebuilt {} of them: {rebuilt:?}",
        rebuilt.len()
    );
}

/// 40 handoffs of one lock across 4 processes on SQLite: about 0.2 s on an idle machine. A
/// waiter whose wake from another process's release were missed would find the lock free only
/// at its next poll (the 2 s safety net of a store that notifies), tens of seconds in all.
#[test]
fn quickstart_counts_exactly_across_processes() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let url = sqlite_url(&dir);
    // Built before the clock starts.
    example("quickstart");
    let started = Instant::now();
    let stdout = run_example(
        "quickstart",
        &["--url", &url, "--workers", "4", "--rounds", "10"],
        &[],
    );
    let took = started.elapsed();
    assert!(stdout.contains("counter = 40 "), "{stdout}");
    assert!(
        took < Duration::from_secs(10),
        "4 processes x 10 locked increments took {took:?}:\n{stdout}"
    );
}

#[test]
fn quickstart_runs_on_the_embedded_default_with_no_arguments() {
    let state = tempfile::tempdir().expect("a temp dir");
    let stdout = run_example(
        "quickstart",
        &["--workers", "2", "--rounds", "5"],
        &[("DISTLOCK_URL", None), ("XDG_STATE_HOME", Some(state.path()))],
    );
    assert!(stdout.contains("counter = 10 "), "{stdout}");
    assert!(
        state.path().join("distlock/locks.db").exists(),
        "the default store is the per-user SQLite file"
    );
}

#[cfg(feature = "etcd")]
#[test]
fn quickstart_counts_exactly_on_etcd() {
    let url = distlock_testkit::shared::etcd_url().expect("etcd for the tests (scripts/install-test-deps)");
    let stdout = run_example(
        "quickstart",
        &["--url", &url, "--workers", "4", "--rounds", "10"],
        &[],
    );
    assert!(stdout.contains("counter = 40 "), "{stdout}");
}

#[test]
fn inventory_is_exact_with_the_lock() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let url = sqlite_url(&dir);
    let stdout = run_example(
        "inventory",
        &[
            "--url",
            &url,
            "--processes",
            "4",
            "--orders",
            "20",
            "--stock",
            "30",
        ],
        &[],
    );
    let locked = stdout
        .lines()
        .find(|l| l.contains("with distlock"))
        .expect("a locked report line");
    assert!(
        locked.contains("sold   30, stock left    0, oversold    0"),
        "{locked}"
    );
}

#[tokio::test]
async fn fencing_rejects_the_paused_clients_late_write() {
    let writes = fencing::run("memory://fencing-example")
        .await
        .expect("the example runs");
    assert_eq!(
        writes,
        vec!["B's write".to_owned()],
        "only the current holder's write is accepted"
    );
}

#[tokio::test]
async fn lost_lock_stops_the_work_at_the_loss() {
    let batches = lost_lock::run("memory://lost-lock-example")
        .await
        .expect("the example runs");
    // A 1 s maximum hold and 100 ms batches: the work stops near 10 batches, not later.
    assert!((5..=15).contains(&batches), "{batches} batches");
}

/// The leaders the election example's observer saw: each replica once, terms rising where
/// the store fences.
fn assert_leaders(url: &str, leaders: &[(String, Option<distlock::FencingToken>)]) {
    let mut values: Vec<&str> = leaders.iter().map(|(value, _)| value.as_str()).collect();
    values.sort_unstable();
    assert_eq!(
        values,
        ["10.0.0.0:8080", "10.0.0.1:8080", "10.0.0.2:8080"],
        "{url}: each replica led once"
    );
    let terms: Vec<_> = leaders.iter().filter_map(|(_, term)| *term).collect();
    assert!(
        terms.is_empty() || (terms.len() == leaders.len() && terms.windows(2).all(|w| w[0] < w[1])),
        "{url}: terms {terms:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_primitives_examples_run_on_the_memory_store() {
    let url = "memory://new-primitives-examples";
    let leaders = leader_election::run(url)
        .await
        .expect("the election example runs");
    assert_leaders(url, &leaders);
    let most = weighted_permits::run(url)
        .await
        .expect("the weighted permits example runs");
    assert_eq!(most, 4, "4 GPUs in use at once (the job of 4), never more");
    let rebuilds = upgradeable_read::run(url)
        .await
        .expect("the upgradeable read example runs");
    assert_eq!(rebuilds, 1, "the catalog is rebuilt once");
}

/// The election, weighted permits and upgradeable read examples on every enabled store: they
/// run where the store declares the capability, and fail with `NotSupported` elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_primitives_examples_run_wherever_the_store_declares_them() {
    let dir = tempfile::tempdir().expect("a temp dir");
    for url in every_enabled_store(&dir) {
        let client = distlock::connect(&url).await.expect("the store opens");
        let caps = client.capabilities().clone();
        let unsupported = |what: &str, outcome: String| {
            assert!(
                outcome.contains("NotSupported"),
                "{url}: {what} without the capability: {outcome}"
            );
        };
        match leader_election::run(&url).await {
            Ok(leaders) if caps.notes => assert_leaders(&url, &leaders),
            outcome if caps.notes => panic!("{url}: the election example: {outcome:?}"),
            outcome => unsupported("the election example", format!("{outcome:?}")),
        }
        match weighted_permits::run(&url).await {
            Ok(most) if caps.weighted_permits => assert!(most <= 4, "{url}: {most} GPUs in use"),
            outcome if caps.weighted_permits => panic!("{url}: the weighted permits example: {outcome:?}"),
            outcome => unsupported("the weighted permits example", format!("{outcome:?}")),
        }
        match upgradeable_read::run(&url).await {
            Ok(rebuilds) if caps.upgradeable_reads => assert_eq!(rebuilds, 1, "{url}: rebuilds"),
            outcome if caps.upgradeable_reads => panic!("{url}: the upgradeable read example: {outcome:?}"),
            outcome => unsupported("the upgradeable read example", format!("{outcome:?}")),
        }
    }
}

/// Every store this build has, on the test servers.
fn every_enabled_store(dir: &tempfile::TempDir) -> Vec<String> {
    #[allow(unused_mut)]
    let mut urls = vec!["memory://any-store".to_owned(), sqlite_url(dir)];
    #[cfg(feature = "mysql")]
    urls.push(
        distlock_testkit::shared::mysql_url().expect("MariaDB for the tests (scripts/install-test-deps)"),
    );
    #[cfg(feature = "postgres")]
    urls.push(
        distlock_testkit::shared::postgres_url()
            .expect("PostgreSQL for the tests (scripts/install-test-deps)"),
    );
    #[cfg(feature = "redis")]
    urls.push(
        distlock_testkit::shared::redis_url()
            .expect("redis-server for the tests (scripts/install-test-deps)"),
    );
    #[cfg(feature = "zookeeper")]
    urls.push(
        distlock_testkit::shared::zookeeper_url()
            .expect("ZooKeeper for the tests (scripts/install-test-deps)"),
    );
    #[cfg(feature = "memcached")]
    urls.push(
        distlock_testkit::shared::memcached_url()
            .expect("memcached for the tests (scripts/install-test-deps)"),
    );
    #[cfg(feature = "etcd")]
    urls.push(distlock_testkit::shared::etcd_url().expect("etcd for the tests (scripts/install-test-deps)"));
    urls
}

/// Whether the store at `url` has semaphores and read-write locks. Only stores listed in
/// [`WITHOUT_SEMAPHORES`] may lack them; any other store that does fails the test.
async fn has_semaphores(url: &str) -> bool {
    let client = distlock::connect(url).await.expect("the store opens");
    let supported = match (client.semaphore("probe", 2), client.rw_lock("probe")) {
        (Ok(_), Ok(_)) => true,
        (Err(distlock::Error::NotSupported { .. }), _) | (_, Err(distlock::Error::NotSupported { .. })) => {
            false
        }
        (Err(error), _) | (_, Err(error)) => panic!("{url}: {error}"),
    };
    assert!(
        supported || WITHOUT_SEMAPHORES.iter().any(|scheme| url.starts_with(scheme)),
        "{url} lost its semaphores or read-write locks"
    );
    supported
}

/// The stores that have no semaphores and read-write locks (their mutex runs every other
/// example here): none today.
const WITHOUT_SEMAPHORES: &[&str] = &[];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_business_code_runs_on_every_enabled_store() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let urls = every_enabled_store(&dir);
    let results = any_store::run(&urls).await.expect("the example runs");
    assert_eq!(results.len(), urls.len());
    for (url, sold, left) in results {
        assert_eq!((sold, left), (30, 0), "{url}: every seat sold exactly once");
    }
}

/// The semaphore across processes, on every enabled store that can be shared between
/// processes: 4 processes x 3 exports under 2 permits never run more than 2 at once, and do
/// run 2 at once (it is not a mutex); the read-write lock keeps every catalog read whole while
/// the publisher rewrites it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_run_at_most_and_at_times_exactly_permits_at_once() {
    let dir = tempfile::tempdir().expect("a temp dir");
    for url in every_enabled_store(&dir) {
        if url.starts_with("memory:") {
            continue;
        }
        if !has_semaphores(&url).await {
            eprintln!("{url}: no semaphores or read-write locks, so no exports");
            continue;
        }
        let stdout = run_example(
            "exports",
            &[
                "--url",
                &url,
                "--processes",
                "4",
                "--exports",
                "3",
                "--permits",
                "2",
            ],
            &[],
        );
        assert!(
            stdout.contains("max concurrent exports = 2 of 2 permits"),
            "{url}: {stdout}"
        );
        assert!(
            stdout.contains("12 exports; every catalog read was whole"),
            "{url}: {stdout}"
        );
    }
}

/// The Prometheus text of the metrics example holds every metric it should, with the bounded
/// labels: the backend, never a lock's name.
#[cfg(feature = "metrics")]
#[test]
fn metrics_reach_the_prometheus_text() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let url = sqlite_url(&dir);
    let text = run_example("metrics", &["--url", &url], &[]);
    for expected in [
        "# TYPE distlock_acquires_total counter",
        r#"distlock_acquires_total{backend="sqlite",primitive="mutex",outcome="acquired"} 6"#,
        r#"distlock_acquires_total{backend="sqlite",primitive="mutex",outcome="busy"} 1"#,
        r#"distlock_acquires_total{backend="sqlite",primitive="mutex",outcome="timeout"} 1"#,
        r#"distlock_acquire_duration_seconds_bucket{backend="sqlite",primitive="mutex",outcome="timeout",le="5"} 1"#,
        r#"distlock_acquire_wait_seconds_count{backend="sqlite",primitive="mutex",outcome="timeout"} 1"#,
        r#"distlock_acquire_attempt_duration_seconds_count{backend="sqlite",primitive="mutex",result="held"}"#,
        r#"distlock_hold_duration_seconds_count{backend="sqlite",primitive="mutex",end="released"} 6"#,
        r#"distlock_hold_duration_seconds_count{backend="sqlite",primitive="semaphore",end="released"} 1"#,
        r#"distlock_renewals_total{backend="sqlite",primitive="mutex",outcome="ok"}"#,
        r#"distlock_locks_held{backend="sqlite",primitive="mutex"} 0"#,
        "# HELP distlock_hold_duration_seconds",
    ] {
        assert!(text.contains(expected), "no {expected:?} in:\n{text}");
    }
    assert!(
        !text.contains("metrics:report"),
        "lock names are no label by default:\n{text}"
    );
}

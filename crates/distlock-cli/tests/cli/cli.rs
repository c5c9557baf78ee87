//! End-to-end tests of the built `distlock` binary on a SQLite file shared by processes.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{distlock, run, sqlite_url, text, wait_exit, BIN};

fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// 20 concurrent `distlock exec` processes each do a non-atomic read-sleep-write of a counter
/// file: the count must be exact. Also used by the server backends' tests.
pub fn counter_is_exact_with_20_processes(url: &str, dir: &Path) {
    let counter = dir.join("counter");
    std::fs::write(&counter, "0").expect("counter");
    let script = format!(
        "n=$(cat '{0}'); sleep 0.02; echo $((n + 1)) > '{0}'",
        counter.display()
    );
    let children: Vec<Child> = (0..20)
        .map(|_| {
            distlock(
                url,
                &[
                    "exec",
                    "--wait",
                    "120s",
                    "--ttl",
                    "10s",
                    "e2e-counter",
                    "--",
                    "sh",
                    "-c",
                    &script,
                ],
            )
            .spawn()
            .expect("distlock starts")
        })
        .collect();
    for mut child in children {
        let status = child.wait().expect("waited");
        assert!(status.success(), "a distlock exec failed: {status}");
    }
    let count = std::fs::read_to_string(&counter).expect("counter");
    assert_eq!(
        count.trim(),
        "20",
        "lost updates: exclusion across processes broke"
    );
}

#[test]
fn twenty_processes_count_exactly_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    counter_is_exact_with_20_processes(&sqlite_url(dir.path()), dir.path());
}

#[test]
fn exit_codes_timeout_child_failure_and_missing_command() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let started = dir.path().join("started");
    let mut holder = distlock(&url, &["exec", "held", "--", "sh", "-c"])
        .arg(format!("touch '{}'; sleep 5", started.display()))
        .spawn()
        .expect("distlock starts");
    wait_for_file(&started);

    let begun = Instant::now();
    let out = run(&mut distlock(
        &url,
        &["exec", "--wait", "300ms", "held", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(75), "timeout: {}", text(&out.stderr));
    assert!(begun.elapsed() >= Duration::from_millis(250));
    assert!(text(&out.stderr).contains("timed out"), "{}", text(&out.stderr));
    let out = run(&mut distlock(&url, &["exec", "--no-wait", "held", "--", "true"]));
    assert_eq!(out.status.code(), Some(75), "no-wait on a held lock");
    let _ = holder.kill();
    let _ = holder.wait();

    let out = run(&mut distlock(&url, &["exec", "free", "--", "sh", "-c", "exit 3"]));
    assert_eq!(
        out.status.code(),
        Some(3),
        "the command's exit code is passed through"
    );
    let out = run(&mut distlock(&url, &["exec", "free", "--", "/no/such/command"]));
    assert_eq!(out.status.code(), Some(127));
    let out = run(&mut distlock(
        &url,
        &[
            "exec",
            "--fencing-token-env",
            "TOKEN",
            "free",
            "--",
            "sh",
            "-c",
            "test -n \"$TOKEN\" && echo \"$TOKEN\"",
        ],
    ));
    assert!(out.status.success());
    assert!(
        text(&out.stdout).trim().parse::<u64>().is_ok(),
        "the fencing token is passed: {}",
        text(&out.stdout)
    );
}

/// Whether process `pid` can still run (zombies, dead and unreaped, cannot).
fn runs(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|end| stat[end + 1..].trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X')
    })
}

/// `distlock` frozen past its lease: on Linux its group leader kills the command at the
/// lease's local deadline (no SIGTERM: `distlock`, which sends it, is frozen), BEFORE the lock
/// is free for another holder; thawed, `distlock` reports the lost lock.
#[test]
fn a_lost_lock_terminates_the_command_and_exits_76() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let started = dir.path().join("started");
    let term = dir.path().join("term");
    let script = format!(
        "trap 'touch \"{}\"; exit 0' TERM; echo $$ > '{}'; while :; do sleep 0.05; done",
        term.display(),
        started.display()
    );
    let mut holder = distlock(
        &url,
        &[
            "exec", "--ttl", "1s", "--grace", "5s", "paused", "--", "sh", "-c", &script,
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .expect("distlock starts");
    wait_for_file(&started);
    let deadline = Instant::now() + Duration::from_secs(30);
    let command = loop {
        let text = std::fs::read_to_string(&started).unwrap_or_default();
        if text.ends_with('\n') {
            break text.trim().to_owned();
        }
        assert!(Instant::now() < deadline, "the command never wrote its pid");
        std::thread::sleep(Duration::from_millis(10));
    };
    // Freeze distlock (not its command) past its TTL, as a GC pause or a stopped VM would.
    let pid = holder.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .expect("kill")
        .success());
    std::thread::sleep(Duration::from_millis(2500));
    #[cfg(target_os = "linux")]
    {
        let alive = runs(&command);
        if alive {
            let _ = Command::new("kill").args(["-KILL", &command]).status();
        }
        assert!(
            !alive,
            "the command of a frozen distlock runs past its lease (TTL 1s, frozen 2.5s)"
        );
    }
    let out = run(&mut distlock(
        &url,
        &["exec", "--no-wait", "paused", "--", "true"],
    ));
    assert_eq!(
        out.status.code(),
        Some(0),
        "the expired lock is free for others: {}",
        text(&out.stderr)
    );
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .expect("kill")
        .success());
    let code = wait_exit(&mut holder, Duration::from_secs(20));
    assert_eq!(code, Some(76), "distlock reports the lost lock");
    assert!(!runs(&command), "the command is gone");
    #[cfg(target_os = "linux")]
    assert!(
        !term.exists(),
        "killed at the lease's deadline by the group leader while distlock was frozen, not by a late SIGTERM"
    );
    #[cfg(not(target_os = "linux"))]
    assert!(term.exists(), "the command got SIGTERM");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut holder.stderr.take().expect("stderr"), &mut stderr).expect("read");
    assert!(stderr.contains("was lost"), "{stderr}");
}

#[test]
fn signals_are_forwarded_to_the_command() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let started = dir.path().join("started");
    let got = dir.path().join("got");
    let script = format!(
        "trap 'echo TERM > \"{}\"; exit 7' TERM; touch '{}'; while :; do sleep 0.05; done",
        got.display(),
        started.display()
    );
    let mut holder = distlock(&url, &["exec", "forward", "--", "sh", "-c", &script])
        .spawn()
        .expect("starts");
    wait_for_file(&started);
    let pid = holder.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
    assert_eq!(
        wait_exit(&mut holder, Duration::from_secs(20)),
        Some(7),
        "the command's own exit code"
    );
    assert_eq!(
        std::fs::read_to_string(&got).expect("the trap ran").trim(),
        "TERM"
    );
    let out = run(&mut distlock(
        &url,
        &["exec", "--no-wait", "forward", "--", "true"],
    ));
    assert!(out.status.success(), "released after the command exited");
}

#[test]
fn bad_input_gives_one_line_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    for (args, code) in [
        (vec!["--url", "not a url", "status", "x"], 78),
        (vec!["--url", "nosuch://host", "status", "x"], 78),
        (vec!["--url", "mysql://", "status", "x"], 78),
        (vec!["--url", &url, "status", ""], 64),
        (vec!["--url", &url, "exec", "--ttl", "0s", "x", "--", "true"], 64),
    ] {
        let out = run(Command::new(BIN).env_remove("DISTLOCK_URL").args(&args));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "{args:?}: one line, got {stderr:?}"
        );
        assert!(stderr.starts_with("distlock: "), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let out = run(Command::new(BIN).args(["exec", "--wait", "soon", "x", "--", "true"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not a duration like 500ms"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn status_reports_holder_and_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    status_reports_holder(&sqlite_url(dir.path()), dir.path());
}

/// `distlock status` of a free lock, then of one a `distlock exec` holds (its fencing token in
/// the JSON, the holder in the line).
fn status_reports_holder(url: &str, dir: &Path) {
    let url = url.to_owned();
    let out = run(&mut distlock(&url, &["status", "--json", "report"]));
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("\"held\":false"),
        "{}",
        text(&out.stdout)
    );
    let started = dir.join("started");
    let mut holder = distlock(&url, &["exec", "report", "--", "sh", "-c"])
        .arg(format!("touch '{}'; sleep 5", started.display()))
        .spawn()
        .expect("starts");
    wait_for_file(&started);
    let out = run(&mut distlock(&url, &["status", "--json", "report"]));
    let json = text(&out.stdout);
    assert!(
        json.contains("\"held\":true") && json.contains("\"fencing_token\":"),
        "{json}"
    );
    let out = run(&mut distlock(&url, &["status", "report"]));
    assert!(
        text(&out.stdout).contains("report: held by "),
        "{}",
        text(&out.stdout)
    );
    let _ = holder.kill();
    let _ = holder.wait();
}

/// `distlock check` against `url` passes and its table lists every case.
fn check_passes(url: &str) {
    let out = run(&mut distlock(url, &["check"]));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for case in distlock_conformance::CASES {
        assert!(stdout.contains(case.name), "{} missing from\n{stdout}", case.name);
    }
    assert!(stdout.contains(" 0 failed"), "{stdout}");
}

/// The cases `distlock check` runs on the server stores here: one of each primitive and of
/// waiting, fencing and the lost signal. Every store runs the whole suite through its own
/// conformance tests, and `check` the whole suite on SQLite; this proves the command opens
/// each store's URL and runs the suite against it.
const CHECK_SELECTION: &[&str] = &["c01_", "c06_", "c08_", "c16_", "c33_", "c36_"];

/// `distlock check --case ...` of [`CHECK_SELECTION`] against `url` passes, runs exactly those
/// cases and nothing else.
fn check_selection_passes(url: &str) {
    let mut args = vec!["check"];
    for case in CHECK_SELECTION {
        args.extend(["--case", case]);
    }
    let out = run(&mut distlock(url, &args));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for case in distlock_conformance::CASES {
        let selected = CHECK_SELECTION.iter().any(|prefix| case.name.starts_with(prefix));
        assert_eq!(
            stdout.contains(case.name),
            selected,
            "{} {} in\n{stdout}",
            case.name,
            if selected { "missing" } else { "unexpected" }
        );
    }
    assert!(stdout.contains(" 0 failed"), "{stdout}");
}

#[test]
fn check_passes_on_sqlite_and_lists_every_case() {
    let dir = tempfile::tempdir().expect("temp dir");
    check_passes(&sqlite_url(dir.path()));
}

#[test]
fn mariadb_counter_and_check() {
    let url =
        distlock_testkit::shared::mysql_url().expect("MariaDB for the tests (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    counter_is_exact_with_20_processes(&url, dir.path());
    check_selection_passes(&url);
}

#[test]
fn postgres_counter_and_check() {
    let url = distlock_testkit::shared::postgres_url()
        .expect("PostgreSQL for the tests (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    counter_is_exact_with_20_processes(&url, dir.path());
    check_selection_passes(&url);
}

#[test]
fn zookeeper_counter_and_check() {
    let url = distlock_testkit::shared::zookeeper_url()
        .expect("ZooKeeper for the tests (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    counter_is_exact_with_20_processes(&url, dir.path());
    check_selection_passes(&url);
}

#[test]
fn redis_counter_and_check() {
    let url = distlock_testkit::shared::redis_url()
        .expect("redis-server for the tests (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    counter_is_exact_with_20_processes(&url, dir.path());
    check_selection_passes(&url);
}

#[test]
fn redis_cluster_counter_and_check() {
    let url = distlock_testkit::shared::redis_cluster_url()
        .expect("a Redis cluster for the tests (scripts/install-test-deps)");
    assert!(url.starts_with("redis+cluster://"), "{url}");
    let dir = tempfile::tempdir().expect("temp dir");
    counter_is_exact_with_20_processes(&url, dir.path());
    check_selection_passes(&url);
}

#[test]
fn redlock_counter_and_check() {
    let masters: Vec<_> = (0..3)
        .map(|_| distlock_testkit::RedisServer::start().expect("redis-server (scripts/install-test-deps)"))
        .collect();
    let hosts: Vec<String> = masters
        .iter()
        .map(|m| format!("127.0.0.1:{}", m.port()))
        .collect();
    let url = format!("redlock://{}", hosts.join(","));
    let dir = tempfile::tempdir().expect("temp dir");
    counter_is_exact_with_20_processes(&url, dir.path());
    check_selection_passes(&url);
}

#[test]
fn memcached_counter_and_check() {
    let url = distlock_testkit::shared::memcached_url()
        .expect("memcached for the tests (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    counter_is_exact_with_20_processes(&url, dir.path());
    check_selection_passes(&url);
}

#[test]
fn etcd_counter_status_and_check() {
    let url = distlock_testkit::shared::etcd_url().expect("etcd for the tests (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    counter_is_exact_with_20_processes(&url, dir.path());
    status_reports_holder(&url, dir.path());
    check_selection_passes(&url);
}

/// On etcd a lock lives as long as the client's lease, which the client keeps alive: a command
/// that runs for three and a half lease TTLs keeps its lock throughout (no lost signal, exit 0)
/// and another client finds it held near the end.
#[test]
fn etcd_exec_keeps_its_lock_past_the_lease_ttl() {
    let url = distlock_testkit::shared::etcd_url().expect("etcd for the tests (scripts/install-test-deps)");
    let url = format!("{url}{}lease_ttl=2s", if url.contains('?') { '&' } else { '?' });
    let dir = tempfile::tempdir().expect("temp dir");
    let started = dir.path().join("started");
    let name = format!("lease-kept-{}", std::process::id());
    let holder = distlock(&url, &["exec", &name, "--", "sh", "-c"])
        .arg(format!("touch '{}'; sleep 7", started.display()))
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    wait_for_file(&started);
    std::thread::sleep(Duration::from_secs(5));
    let out = run(&mut distlock(&url, &["status", "--json", &name]));
    let status = text(&out.stdout);
    let holder = holder.wait_with_output().expect("waited");
    let stderr = text(&holder.stderr);
    assert_eq!(holder.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("lost"), "{stderr}");
    assert!(status.contains("\"held\":true"), "held 5 s in: {status}");
}

#[test]
fn bench_compares_stores_and_writes_csv_and_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = sqlite_url(dir.path());
    let csv = dir.path().join("bench.csv");
    let out = run(Command::new(BIN)
        .env_remove("DISTLOCK_URL")
        .args([
            "bench",
            "--url",
            &sqlite,
            "--url",
            "memory://bench",
            "--iterations",
            "20",
            "--out",
        ])
        .arg(&csv));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("acq+rel (us)") && stdout.contains("memory://bench"),
        "{stdout}"
    );
    assert!(
        stdout.contains("permit (us)") && stdout.contains("write (us)"),
        "the semaphore permit and write lock pairs: {stdout}"
    );
    let written = std::fs::read_to_string(&csv).expect("the CSV");
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(lines.len(), 3, "a header and one row per store: {written}");
    assert!(lines[0].starts_with("url,backend,roundtrip_x2_us"), "{written}");
    assert!(lines[1].starts_with(&format!("{sqlite},sqlite,")), "{written}");

    let json = dir.path().join("bench.json");
    let out = run(Command::new(BIN)
        .env_remove("DISTLOCK_URL")
        .args(["bench", "--url", "memory://bench", "--iterations", "10", "--out"])
        .arg(&json));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(&json).expect("the JSON");
    assert!(
        written.trim_start().starts_with('[')
            && written.contains("\"hot_lock_ops_per_s\"")
            && written.contains("\"permit_us\"")
            && written.contains("\"write_us\""),
        "{written}"
    );
}

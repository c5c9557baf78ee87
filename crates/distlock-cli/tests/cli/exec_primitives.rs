//! `distlock exec --permits N`, `--read` and `--write`, and `distlock status --semaphore` /
//! `--rw`, end to end with the built binary on a SQLite file shared by processes.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{distlock, run, sqlite_url, text, wait_exit};

/// Waits until the command of `child` (a `distlock exec`) has created `path`; fails at once
/// if `distlock` exits first.
fn wait_started(path: &Path, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        if let Some(status) = child.try_wait().expect("waitable") {
            panic!("distlock exited ({status}) before {} appeared", path.display());
        }
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A shell command that touches `started`, then runs until `go` exists.
fn hold_until(started: &Path, go: &Path) -> String {
    format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
        started.display(),
        go.display()
    )
}

/// The most lines between a `start` and its `end` at once, replaying an append-only log.
fn most_at_once(log: &str) -> usize {
    let (mut running, mut most) = (0_usize, 0_usize);
    for line in log.lines() {
        if line.starts_with("start") {
            running += 1;
            most = most.max(running);
        } else if line.starts_with("end") {
            running = running.checked_sub(1).expect("an end without a start");
        }
    }
    most
}

/// 5 concurrent `distlock exec --permits 2` processes: never more than 2 commands at once,
/// and 2 at once at some point (a semaphore, not a mutex); each permit has its own fencing
/// token.
#[test]
fn five_processes_with_two_permits_run_at_most_and_at_times_exactly_two_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    two_of_five_at_once(&sqlite_url(dir.path()), dir.path());
}

#[test]
fn five_processes_with_two_permits_on_mariadb() {
    let url =
        distlock_testkit::shared::mysql_url().expect("MariaDB for the tests (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    two_of_five_at_once(&url, dir.path());
}

#[test]
fn five_processes_with_two_permits_on_postgres() {
    let url = distlock_testkit::shared::postgres_url()
        .expect("PostgreSQL for the tests (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    two_of_five_at_once(&url, dir.path());
}

#[test]
fn five_processes_with_two_permits_on_etcd() {
    let url = distlock_testkit::shared::etcd_url().expect("etcd for the tests (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    two_of_five_at_once(&url, dir.path());
}

/// 5 concurrent `distlock exec --permits 2` processes on `url`, logging to a file in `dir`.
fn two_of_five_at_once(url: &str, dir: &Path) {
    let log = dir.join("log");
    // `>>` opens with O_APPEND and `echo` writes its line in one write: lines never mix.
    let script = format!(
        "echo \"start $TOKEN\" >> '{0}'; sleep 0.5; echo end >> '{0}'",
        log.display()
    );
    let children: Vec<Child> = (0..5)
        .map(|_| {
            distlock(
                url,
                &[
                    "exec",
                    "--permits",
                    "2",
                    "--wait",
                    "120s",
                    "--ttl",
                    "10s",
                    "--fencing-token-env",
                    "TOKEN",
                    "exports",
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
        assert!(status.success(), "a distlock exec --permits failed: {status}");
    }
    let log = std::fs::read_to_string(&log).expect("the log");
    assert_eq!(
        most_at_once(&log),
        2,
        "at most and at times exactly 2 at once:\n{log}"
    );
    let mut tokens: Vec<u64> = log
        .lines()
        .filter_map(|l| l.strip_prefix("start "))
        .map(|t| t.parse().expect("a fencing token"))
        .collect();
    assert_eq!(tokens.len(), 5, "{log}");
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(
        tokens.len(),
        5,
        "every permit has a fencing token of its own:\n{log}"
    );
}

/// Readers hold together and keep the writer out; a waiting writer keeps new readers out; the
/// writer holds alone and keeps a plain exec of the name out; the semaphore of one name is
/// another object.
#[test]
fn readers_overlap_a_waiting_writer_stops_new_readers_and_the_writer_runs_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let path = |name: &str| dir.path().join(name);
    let mut readers: Vec<Child> = ["reader-1", "reader-2"]
        .iter()
        .map(|started| {
            distlock(&url, &["exec", "--read", "doc", "--", "sh", "-c"])
                .arg(hold_until(&path(started), &path("readers-go")))
                .spawn()
                .expect("distlock starts")
        })
        .collect();
    // Both commands run at once: readers share the lock.
    wait_started(&path("reader-1"), &mut readers[0]);
    wait_started(&path("reader-2"), &mut readers[1]);
    let out = run(&mut distlock(&url, &["status", "--rw", "doc"]));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.starts_with("doc (rw-lock): held by 2 readers\n"),
        "{stdout}"
    );
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.trim_start().starts_with("read "))
            .count(),
        2,
        "{stdout}"
    );
    let out = run(&mut distlock(
        &url,
        &["exec", "--write", "--no-wait", "doc", "--", "true"],
    ));
    assert_eq!(
        out.status.code(),
        Some(75),
        "readers keep a writer out: {}",
        text(&out.stderr)
    );
    // `--shared` is `--read`: a third reader gets in while no writer waits.
    let out = run(&mut distlock(
        &url,
        &["exec", "--shared", "--no-wait", "doc", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(0), "readers share: {}", text(&out.stderr));

    let mut writer = distlock(
        &url,
        &["exec", "--write", "--wait", "60s", "doc", "--", "sh", "-c"],
    )
    .arg(hold_until(&path("writer"), &path("writer-go")))
    .spawn()
    .expect("distlock starts");
    // Once the writer waits, a new reader is refused although only readers hold the lock.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = run(&mut distlock(
            &url,
            &["exec", "--read", "--no-wait", "doc", "--", "true"],
        ));
        match out.status.code() {
            Some(75) => break,
            Some(0) => {}
            other => panic!("exec --read --no-wait: {other:?} {}", text(&out.stderr)),
        }
        assert!(
            Instant::now() < deadline,
            "a waiting writer never kept new readers out"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!path("writer").exists(), "the writer ran beside readers");

    std::fs::write(path("readers-go"), "").expect("go");
    wait_started(&path("writer"), &mut writer);
    for mut reader in readers {
        assert_eq!(wait_exit(&mut reader, Duration::from_secs(20)), Some(0));
    }
    let out = run(&mut distlock(
        &url,
        &["exec", "--read", "--no-wait", "doc", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(75), "the writer keeps readers out");
    let out = run(&mut distlock(
        &url,
        &["exec", "--write", "--no-wait", "doc", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(75), "one writer at a time");
    let out = run(&mut distlock(&url, &["status", "--rw", "doc"]));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("doc (rw-lock): held by a writer\n"),
        "{stdout}"
    );
    assert!(stdout.contains("  write  held by "), "{stdout}");
    // A plain exec is the exclusive hold of the name (as flock's): the writer keeps it out.
    let out = run(&mut distlock(&url, &["exec", "--no-wait", "doc", "--", "true"]));
    assert_eq!(out.status.code(), Some(75), "a plain exec: {}", text(&out.stderr));
    // The semaphore `doc` is another object: free.
    let out = run(&mut distlock(
        &url,
        &["exec", "--permits", "1", "--no-wait", "doc", "--", "true"],
    ));
    assert_eq!(
        out.status.code(),
        Some(0),
        "the semaphore doc: {}",
        text(&out.stderr)
    );

    std::fs::write(path("writer-go"), "").expect("go");
    assert_eq!(wait_exit(&mut writer, Duration::from_secs(20)), Some(0));
    let out = run(&mut distlock(
        &url,
        &["exec", "--read", "--no-wait", "doc", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(0), "free again: {}", text(&out.stderr));
    let out = run(&mut distlock(&url, &["status", "--rw", "doc"]));
    assert_eq!(text(&out.stdout), "doc (rw-lock): free\n");
}

/// `status --semaphore` lists the permits' holders (text and JSON); a count other than the
/// holders' is exit 64, as is `--permits 0`; the mutex of the same name stays free.
#[test]
fn status_lists_a_semaphores_holders_and_bad_permits_are_usage_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let path = |name: &str| dir.path().join(name);
    let out = run(&mut distlock(&url, &["status", "--semaphore", "jobs"]));
    assert_eq!(
        text(&out.stdout),
        "jobs (semaphore): free\n",
        "{}",
        text(&out.stderr)
    );
    let mut holders: Vec<Child> = ["one", "two"]
        .iter()
        .map(|started| {
            distlock(&url, &["exec", "--permits", "3", "jobs", "--", "sh", "-c"])
                .arg(hold_until(&path(started), &path("go")))
                .spawn()
                .expect("distlock starts")
        })
        .collect();
    wait_started(&path("one"), &mut holders[0]);
    wait_started(&path("two"), &mut holders[1]);

    let out = run(&mut distlock(&url, &["status", "--semaphore", "jobs"]));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "jobs (semaphore): 2 of 3 permits held", "{stdout}");
    assert_eq!(lines.len(), 3, "{stdout}");
    for line in &lines[1..] {
        assert!(
            line.starts_with("  permit held by ")
                && line.contains("fencing token ")
                && line.contains("s left)"),
            "{stdout}"
        );
    }
    let out = run(&mut distlock(&url, &["status", "--semaphore", "--json", "jobs"]));
    let json = text(&out.stdout);
    assert!(
        json.contains("\"primitive\":\"semaphore\"")
            && json.contains("\"held\":true")
            && json.contains("\"permits\":3")
            && json.matches("\"kind\":\"permit\"").count() == 2,
        "{json}"
    );
    // The mutex `jobs` is another object, and its status output is unchanged.
    let out = run(&mut distlock(&url, &["status", "jobs"]));
    assert_eq!(text(&out.stdout), "jobs: free\n");

    // Another count than the live holders': a usage error, one line, nothing run.
    let out = run(&mut distlock(
        &url,
        &["exec", "--permits", "2", "--no-wait", "jobs", "--", "true"],
    ));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("held with 3 permits, not 2"), "{stderr}");
    // The third permit is free.
    let out = run(&mut distlock(
        &url,
        &["exec", "--permits", "3", "--no-wait", "jobs", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    std::fs::write(path("go"), "").expect("go");
    for mut holder in holders {
        assert_eq!(wait_exit(&mut holder, Duration::from_secs(20)), Some(0));
    }
    let out = run(&mut distlock(&url, &["status", "--semaphore", "--json", "jobs"]));
    assert_eq!(
        text(&out.stdout).trim(),
        "{\"name\":\"jobs\",\"primitive\":\"semaphore\",\"held\":false,\"holders\":[]}"
    );
    // No holder is live: a new count is accepted.
    let out = run(&mut distlock(
        &url,
        &["exec", "--permits", "2", "--no-wait", "jobs", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn zero_permits_and_two_primitives_at_once_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let ran = dir.path().join("ran");
    let touch = format!("touch '{}'", ran.display());
    let out = run(&mut distlock(
        &url,
        &["exec", "--permits", "0", "jobs", "--", "sh", "-c", &touch],
    ));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("distlock: ") && stderr.contains("--permits must be at least 1"),
        "{stderr}"
    );
    for both in [
        ["--permits", "2", "--read"],
        ["--permits", "2", "--write"],
        ["--read", "--write", "--no-wait"],
    ] {
        let mut args = vec!["exec"];
        args.extend(both);
        args.extend(["jobs", "--", "sh", "-c", &touch]);
        let out = run(&mut distlock(&url, &args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("cannot be used with"),
            "{}",
            text(&out.stderr)
        );
    }
    let out = run(&mut distlock(&url, &["status", "--semaphore", "--rw", "jobs"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(!ran.exists(), "no command ran");
}

/// A permit lost while `distlock` is frozen: the group leader kills the command at the
/// lease's local deadline, the permit is free for another holder, and `distlock`, thawed,
/// exits 76 (the exclusive lock's behaviour, for a permit).
#[test]
fn a_lost_permit_kills_the_command_and_exits_76() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let started = dir.path().join("started");
    let script = format!("echo $$ > '{}'; while :; do sleep 0.05; done", started.display());
    let mut holder = distlock(
        &url,
        &[
            "exec",
            "--permits",
            "1",
            "--ttl",
            "1s",
            "--grace",
            "5s",
            "paused",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .expect("distlock starts");
    wait_started(&started, &mut holder);
    let deadline = Instant::now() + Duration::from_secs(30);
    let command = loop {
        let text = std::fs::read_to_string(&started).unwrap_or_default();
        if text.ends_with('\n') {
            break text.trim().to_owned();
        }
        assert!(Instant::now() < deadline, "the command never wrote its pid");
        std::thread::sleep(Duration::from_millis(10));
    };
    let pid = holder.id().to_string();
    let signal = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("kill")
            .success());
    };
    signal("-STOP");
    std::thread::sleep(Duration::from_millis(2500));
    #[cfg(target_os = "linux")]
    {
        let alive = std::path::Path::new(&format!("/proc/{command}")).exists()
            && std::fs::read_to_string(format!("/proc/{command}/stat"))
                .is_ok_and(|stat| !stat.contains(") Z ") && !stat.contains(") X "));
        if alive {
            let _ = Command::new("kill").args(["-KILL", &command]).status();
        }
        assert!(
            !alive,
            "the command of a frozen distlock runs past its permit's lease"
        );
    }
    let out = run(&mut distlock(
        &url,
        &["exec", "--permits", "1", "--no-wait", "paused", "--", "true"],
    ));
    assert_eq!(
        out.status.code(),
        Some(0),
        "the expired permit is free: {}",
        text(&out.stderr)
    );
    signal("-CONT");
    assert_eq!(wait_exit(&mut holder, Duration::from_secs(20)), Some(76));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut holder.stderr.take().expect("stderr"), &mut stderr).expect("read");
    assert!(
        stderr.contains("a permit of semaphore \"paused\" was lost"),
        "{stderr}"
    );
}

//! `distlock exec NAME` and `distlock exec --shared NAME` exclude each other, as `flock` and
//! `flock -s` on one file do, end to end with the built binary on a SQLite file shared by
//! processes.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::support::{distlock, run, sqlite_url, text, wait_exit};

/// A running `distlock exec`, killed (with its command's group) if the test fails first.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Waits until `path` exists; fails at once if `child` exits first.
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

/// `distlock exec FLAGS --no-wait NAME -- touch RAN` on `url`: its exit code, and whether the
/// command ran.
fn try_exec(url: &str, flags: &[&str], name: &str, ran: &Path) -> (Option<i32>, bool) {
    let _ = std::fs::remove_file(ran);
    let mut args = vec!["exec"];
    args.extend(flags);
    args.extend(["--no-wait", name, "--", "touch"]);
    let out = run(distlock(url, &args).arg(ran));
    (out.status.code(), ran.exists())
}

/// A command holding `flags` of `name` (`exec FLAGS NAME`) that touches `started`, then
/// runs until `go` exists.
fn holder(url: &str, flags: &[&str], name: &str, started: &Path, go: &Path) -> Running {
    let mut args = vec!["exec"];
    args.extend(flags);
    args.extend([name, "--", "sh", "-c"]);
    distlock(url, &args)
        .arg(format!(
            "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
            started.display(),
            go.display()
        ))
        .spawn()
        .map(Running)
        .expect("distlock starts")
}

/// Shared holders keep a plain (exclusive) `exec` out, and a plain holder keeps `--shared`,
/// `--read`, `--write` and another plain `exec` out; shared holders run together; a plain
/// holder still holds the lock NAME (`status NAME`, and so library users of the lock).
#[test]
fn a_plain_exec_and_shared_holders_of_one_name_exclude_each_other() {
    let dir = tempfile::tempdir().expect("temp dir");
    plain_and_shared_exclude_each_other(&sqlite_url(dir.path()), dir.path());
}

#[test]
fn a_plain_exec_and_shared_holders_exclude_each_other_on_redis() {
    let url = distlock_testkit::shared::redis_url().expect("redis-server (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    plain_and_shared_exclude_each_other(&url, dir.path());
}

#[test]
fn a_plain_exec_and_shared_holders_exclude_each_other_on_memcached() {
    let url = distlock_testkit::shared::memcached_url().expect("memcached (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    plain_and_shared_exclude_each_other(&url, dir.path());
}

#[test]
fn a_plain_exec_and_shared_holders_exclude_each_other_on_postgres() {
    let url = distlock_testkit::shared::postgres_url().expect("PostgreSQL (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    plain_and_shared_exclude_each_other(&url, dir.path());
}

#[test]
fn a_plain_exec_and_shared_holders_exclude_each_other_on_mariadb() {
    let url = distlock_testkit::shared::mysql_url().expect("MariaDB (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    plain_and_shared_exclude_each_other(&url, dir.path());
}

#[test]
fn a_plain_exec_and_shared_holders_exclude_each_other_on_zookeeper() {
    let url = distlock_testkit::shared::zookeeper_url().expect("ZooKeeper (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    plain_and_shared_exclude_each_other(&url, dir.path());
}

#[test]
fn a_plain_exec_and_shared_holders_exclude_each_other_on_etcd() {
    let url = distlock_testkit::shared::etcd_url().expect("etcd (scripts/install-test-deps)");
    let dir = tempfile::tempdir().expect("temp dir");
    plain_and_shared_exclude_each_other(&url, dir.path());
}

/// The case on the store at `url`, with the commands' files in `dir` (the name is unique to
/// the run, as shared servers outlive it).
fn plain_and_shared_exclude_each_other(url: &str, dir: &Path) {
    let url = url.to_owned();
    let path = |name: &str| dir.join(name);
    let unique = format!(
        "db-{}",
        dir.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("x")
            .replace('.', "")
    );
    let db = unique.as_str();
    let ran = path("ran");

    let mut readers: Vec<Running> = ["reader-1", "reader-2"]
        .iter()
        .map(|started| holder(&url, &["--shared"], db, &path(started), &path("readers-go")))
        .collect();
    wait_started(&path("reader-1"), &mut readers[0].0);
    wait_started(&path("reader-2"), &mut readers[1].0);
    assert_eq!(
        try_exec(&url, &[], db, &ran),
        (Some(75), false),
        "a plain exec ran beside two --shared holders of the same name"
    );
    assert_eq!(
        try_exec(&url, &["--shared"], db, &ran),
        (Some(0), true),
        "shared holders run together"
    );
    std::fs::write(path("readers-go"), "").expect("go");
    for mut reader in readers {
        assert_eq!(wait_exit(&mut reader.0, Duration::from_secs(20)), Some(0));
    }

    let mut exclusive = holder(&url, &[], db, &path("exclusive"), &path("exclusive-go"));
    wait_started(&path("exclusive"), &mut exclusive.0);
    for flags in [&["--shared"][..], &["--read"], &["--write"], &[]] {
        assert_eq!(
            try_exec(&url, flags, db, &ran),
            (Some(75), false),
            "exec {flags:?} ran beside a plain exec of the same name"
        );
    }
    let out = run(&mut distlock(&url, &["status", db]));
    assert!(
        text(&out.stdout).starts_with(&format!("{db}: held by ")),
        "a plain exec holds the lock NAME: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    std::fs::write(path("exclusive-go"), "").expect("go");
    assert_eq!(wait_exit(&mut exclusive.0, Duration::from_secs(20)), Some(0));

    assert_eq!(try_exec(&url, &[], db, &ran), (Some(0), true), "free again");
    assert_eq!(
        try_exec(&url, &["--shared"], db, &ran),
        (Some(0), true),
        "free again"
    );
}

//! `distlock exec` never outlives its lock: the command's whole process group dies with
//! `distlock`, however `distlock` dies (SIGKILL included), and nothing is left behind when it
//! exits normally. End-to-end on a SQLite file; Linux only (the guarantee is Linux's).
#![cfg(target_os = "linux")]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use crate::support::{distlock, sqlite_url, BIN};

/// The hidden argument of `distlock`'s group leader (`src/group.rs`).
const LEADER_ARG: &str = "__exec-group-leader";

/// Well under every TTL used here: the group must be gone within this after distlock dies.
const GONE_WITHIN: Duration = Duration::from_secs(5);

/// Waits until `path` holds a line and returns it.
fn read_when_written(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.ends_with('\n') {
                return text.trim().to_owned();
            }
        }
        assert!(Instant::now() < deadline, "{} never written", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn pid_in(path: &Path) -> i32 {
    let text = read_when_written(path);
    text.parse()
        .unwrap_or_else(|_| panic!("{} holds no pid: {text:?}", path.display()))
}

/// `(state, process group)` of a process, from `/proc/PID/stat`.
fn state_and_group(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) STATE PPID PGRP ...": COMM may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let group = fields.next()?.parse().ok()?;
    Some((state, group))
}

/// Processes of group `pgid` that can still run: zombies (`Z`, dead, waiting to be reaped)
/// do not count.
fn live_members(pgid: i32) -> Vec<String> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if let Some((state, group)) = state_and_group(pid) {
            if group == pgid && state != 'Z' && state != 'X' {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                members.push(format!("{pid} {state} {}", cmdline.trim()));
            }
        }
    }
    members
}

/// Processes that can still run and carry `marker` in their environment.
fn live_with_marker(marker: &str) -> Vec<String> {
    let needle = format!("DISTLOCK_TEST_MARK={marker}\0");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Some((state, _)) = state_and_group(pid) else {
            continue;
        };
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if state != 'Z' && String::from_utf8_lossy(&environ).contains(&needle) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            found.push(format!(
                "{pid} {state} {}",
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            ));
        }
    }
    found
}

/// Waits up to `limit` for group `pgid` to have no live process; returns how long it took.
fn group_gone_within(pgid: i32, limit: Duration) -> Result<Duration, Vec<String>> {
    let begun = Instant::now();
    loop {
        let members = live_members(pgid);
        if members.is_empty() {
            return Ok(begun.elapsed());
        }
        if begun.elapsed() > limit {
            return Err(members);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills what a failed run left behind, so a failing test does not leak writers.
struct GroupCleanup(Option<i32>);

impl Drop for GroupCleanup {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            if !live_members(pgid).is_empty() {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
            }
        }
    }
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// A command whose grandchild ignores SIGTERM and appends a timestamp to `out` every 50 ms;
/// it writes its own pid to `leader` and the grandchild's to `grandchild`.
fn writer_script(dir: &Path) -> (String, PathBuf, PathBuf, PathBuf) {
    let out = dir.join("out");
    let leader = dir.join("leader");
    let grandchild = dir.join("grandchild");
    let script = format!(
        "trap '' TERM INT HUP; echo $$ > '{leader}'; \
         (trap '' TERM INT HUP; while :; do date +%s%N >> '{out}'; sleep 0.05; done) & \
         echo $! > '{grandchild}'; wait",
        leader = leader.display(),
        out = out.display(),
        grandchild = grandchild.display(),
    );
    (script, out, leader, grandchild)
}

/// Starts `distlock exec` of the writer script and returns it with the command's process
/// group once the grandchild is writing.
fn start_writer(url: &str, dir: &Path, name: &str, ttl: &str) -> (Child, i32, PathBuf) {
    let (script, out, leader, grandchild) = writer_script(dir);
    let holder = distlock(url, &["exec", "--ttl", ttl, name, "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .spawn()
        .expect("distlock starts");
    let leader = pid_in(&leader);
    let grandchild = pid_in(&grandchild);
    let (_, pgid) = state_and_group(leader).expect("the command runs");
    let (_, grandchild_group) = state_and_group(grandchild).expect("the grandchild runs");
    assert_eq!(grandchild_group, pgid, "the grandchild is in the command's group");
    let deadline = Instant::now() + Duration::from_secs(30);
    while file_len(&out) == 0 {
        assert!(Instant::now() < deadline, "the grandchild never wrote");
        std::thread::sleep(Duration::from_millis(10));
    }
    (holder, pgid, out)
}

/// Asserts that `out` no longer grows.
fn assert_not_growing(out: &Path) {
    let before = file_len(out);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(file_len(out), before, "{} still grows", out.display());
}

#[test]
fn sigkill_of_distlock_kills_the_commands_whole_group() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let (mut holder, pgid, out) = start_writer(&url, dir.path(), "job", "20s");
    let _cleanup = GroupCleanup(Some(pgid));

    holder.kill().expect("SIGKILL to distlock");
    holder.wait().expect("reaped");
    let took = group_gone_within(pgid, GONE_WITHIN).unwrap_or_else(|survivors| {
        panic!("{GONE_WITHIN:?} after distlock died, its command's group still runs: {survivors:?}")
    });
    eprintln!("the command's group was gone {took:?} after SIGKILL of distlock (TTL 20s)");
    assert_not_growing(&out);
}

/// The reproduced defect: `exec --ttl 2s`, SIGKILL of distlock, and once the TTL has freed
/// the lock a second `exec` of the same lock must run alone.
#[test]
fn after_sigkill_the_next_holder_runs_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let (mut holder, pgid, out) = start_writer(&url, dir.path(), "job", "2s");
    let _cleanup = GroupCleanup(Some(pgid));
    holder.kill().expect("SIGKILL to distlock");
    holder.wait().expect("reaped");

    // The next holder gets the lock after the TTL and watches the first one's file.
    let script = format!(
        "a=$(wc -c < '{0}'); sleep 1; b=$(wc -c < '{0}'); echo \"$a $b\"",
        out.display()
    );
    let begun = Instant::now();
    let next = distlock(&url, &["exec", "--wait", "30s", "job", "--", "sh", "-c", &script])
        .output()
        .expect("distlock runs");
    assert!(next.status.success(), "{}", String::from_utf8_lossy(&next.stderr));
    let sizes = String::from_utf8_lossy(&next.stdout).trim().to_owned();
    let (a, b) = sizes.split_once(' ').expect("two sizes");
    assert_eq!(
        a,
        b,
        "the first command wrote while the next holder ran ({:?} after the kill)",
        begun.elapsed()
    );
}

#[test]
fn forwarded_signals_leave_the_group_protected() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let (mut holder, pgid, out) = start_writer(&url, dir.path(), "job", "20s");
    let _cleanup = GroupCleanup(Some(pgid));

    // The command ignores these; whatever else is in its group must survive them too.
    let pid = Pid::from_raw(i32::try_from(holder.id()).expect("pid"));
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        kill(pid, sig).expect("signal to distlock");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        holder.try_wait().expect("waitable").is_none(),
        "distlock keeps waiting"
    );

    holder.kill().expect("SIGKILL to distlock");
    holder.wait().expect("reaped");
    if let Err(survivors) = group_gone_within(pgid, GONE_WITHIN) {
        panic!("after forwarded signals and SIGKILL of distlock, the group still runs: {survivors:?}");
    }
    assert_not_growing(&out);
}

#[test]
fn a_normal_exit_leaves_no_process_of_the_group_behind() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let leader = dir.path().join("leader");
    let background = dir.path().join("background");
    let go = dir.path().join("go");
    let script = format!(
        "echo $$ > '{}'; sleep 1000 & echo $! > '{}'; while [ ! -e '{}' ]; do sleep 0.02; done; exit 3",
        leader.display(),
        background.display(),
        go.display()
    );
    let mut holder = distlock(&url, &["exec", "job", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .spawn()
        .expect("distlock starts");
    let command = pid_in(&leader);
    let _ = pid_in(&background);
    let (_, pgid) = state_and_group(command).expect("the command runs");
    let _cleanup = GroupCleanup(Some(pgid));
    let members = live_members(pgid);
    let leader = std::fs::read(format!("/proc/{pgid}/cmdline")).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&leader).contains(LEADER_ARG),
        "a distlock group leader leads the command's group: {members:?}"
    );

    std::fs::write(&go, "").expect("go");
    let status = holder.wait().expect("distlock exits");
    assert_eq!(status.code(), Some(3), "the command's exit code");
    // distlock has exited: nothing of the command's group may run on, be it a process the
    // command left in the background or one distlock started to guard the group.
    let left = live_members(pgid);
    assert!(
        left.is_empty(),
        "left behind after distlock exited: {left:?} (the group while running: {members:?})"
    );
    let free = distlock(&url, &["exec", "--no-wait", "job", "--", "true"])
        .status()
        .expect("distlock runs");
    assert!(free.success(), "the lock was released");
}

#[test]
fn the_group_leader_refuses_to_run_outside_exec_and_kills_only_its_own_group() {
    // Each run is isolated in a group of its own, so a leader that wrongly kills its group
    // cannot reach the test runner.
    let out = Command::new(BIN)
        .arg(LEADER_ARG)
        .process_group(0)
        .stdin(Stdio::null())
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(64), "stdin is not a pipe: refused");

    let out = Command::new("sh")
        .args(["-c", ": | \"$0\" \"$1\"; echo \"exit $?\"", BIN, LEADER_ARG])
        .process_group(0)
        .output()
        .expect("runs");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "exit 64",
        "not the leader of its group: refused, nothing killed"
    );

    // Run as `exec` runs it: the end of its stdin kills its group, itself included.
    let mut leader = Command::new(BIN)
        .arg(LEADER_ARG)
        .process_group(0)
        .stdin(Stdio::piped())
        .spawn()
        .expect("runs");
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        leader.try_wait().expect("waitable").is_none(),
        "it waits on its pipe"
    );
    drop(leader.stdin.take());
    let status = leader.wait().expect("waited");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "SIGKILL to its own group: {status}"
    );
}

/// Whatever way `exec` ends, nothing it started (group leader, command, leftovers) runs on.
#[test]
fn no_process_is_left_behind_on_any_exit_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let marker = dir.path().display().to_string();
    let run = |args: &[&str]| {
        distlock(&url, args)
            .env("DISTLOCK_TEST_MARK", &marker)
            // Not piped: a leftover holding a pipe would make the wait its own.
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .expect("distlock runs")
            .code()
    };
    let started = dir.path().join("started");
    let mut holder = distlock(&url, &["exec", "held", "--", "sh", "-c"])
        .arg(format!("touch '{}'; sleep 30", started.display()))
        .spawn()
        .expect("distlock starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the holder never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    for (args, code) in [
        (&["exec", "job", "--", "true"][..], 0),
        (&["exec", "job", "--", "sh", "-c", "sleep 30 & exit 3"][..], 3),
        (&["exec", "job", "--", "/no/such/command"][..], 127),
        (&["exec", "--no-wait", "held", "--", "true"][..], 75),
    ] {
        assert_eq!(run(args), Some(code), "{args:?}");
        let left = live_with_marker(&marker);
        assert!(left.is_empty(), "{args:?} left behind: {left:?}");
    }
    let _ = holder.kill();
    let _ = holder.wait();
}

/// Sends SIGCONT and SIGKILL to a stopped `distlock` when dropped, so a failing test leaves
/// no frozen process behind.
struct Stopped<'a>(&'a mut Child);

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The timestamps (nanoseconds) in a file of `date +%s%N` lines.
fn timestamps(path: &Path) -> Vec<u128> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// The defect: `distlock` frozen (SIGSTOP, a long pause, a starved host) past its lease left
/// its command running beside the next holder. Its group leader enforces the lease's local
/// deadline: the first command's last write comes before the next holder's first write.
#[test]
fn a_frozen_distlock_cannot_outlive_its_lease() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let (mut holder, pgid, out) = start_writer(&url, dir.path(), "job", "2s");
    let _cleanup = GroupCleanup(Some(pgid));
    let pid = Pid::from_raw(i32::try_from(holder.id()).expect("pid"));
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP to distlock");
    let stopped = Stopped(&mut holder);

    // The next holder gets the lock once the lease has expired and writes while it holds it.
    let next_out = dir.path().join("next");
    let script = format!(
        "date +%s%N >> '{0}'; sleep 1; date +%s%N >> '{0}'",
        next_out.display()
    );
    let next = distlock(&url, &["exec", "--wait", "30s", "job", "--", "sh", "-c", &script])
        .output()
        .expect("distlock runs");
    assert!(next.status.success(), "{}", String::from_utf8_lossy(&next.stderr));
    let first = timestamps(&out);
    let second = timestamps(&next_out);
    let (Some(first_last), Some(second_first)) = (first.last(), second.first()) else {
        panic!("no writes: {first:?} {second:?}");
    };
    assert!(
        first_last < second_first,
        "the frozen holder's command wrote {} ms after the next holder's first write",
        (first_last - second_first) / 1_000_000
    );
    eprintln!(
        "the frozen holder's last write came {} ms before the next holder's first (TTL 2s)",
        (second_first - first_last) / 1_000_000
    );
    let left = live_members(pgid);
    assert!(left.is_empty(), "the frozen holder's group still runs: {left:?}");

    // Thawed, distlock finds its lock lost and its command dead.
    kill(pid, Signal::SIGCONT).expect("SIGCONT to distlock");
    let status = stopped.0.wait().expect("distlock exits");
    assert_eq!(status.code(), Some(76), "distlock reports the lost lock");
}

/// A lost lock gets SIGTERM, then SIGKILL at the lease's local deadline if that comes before
/// `--grace`: nothing of the command runs past the lease, whatever `--grace` says.
#[test]
fn a_lost_lock_kills_the_group_by_the_leases_deadline_not_after_grace() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let out = dir.path().join("out");
    let term = dir.path().join("term");
    let leader = dir.path().join("leader");
    // The grandchild ignores SIGTERM and writes on; the shell notes SIGTERM and waits.
    let script = format!(
        "trap 'touch \"{term}\"' TERM; echo $$ > '{leader}'; \
         (trap '' TERM INT HUP; while :; do date +%s%N >> '{out}'; sleep 0.05; done) & \
         while :; do wait; done",
        term = term.display(),
        leader = leader.display(),
        out = out.display(),
    );
    let mut holder = distlock(
        &url,
        &[
            "exec", "--ttl", "3s", "--grace", "30s", "job", "--", "sh", "-c", &script,
        ],
    )
    .stdin(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("distlock starts");
    let (_, pgid) = state_and_group(pid_in(&leader)).expect("the command runs");
    let _cleanup = GroupCleanup(Some(pgid));
    let deadline = Instant::now() + Duration::from_secs(30);
    while file_len(&out) == 0 {
        assert!(Instant::now() < deadline, "the grandchild never wrote");
        std::thread::sleep(Duration::from_millis(10));
    }

    // Another owner takes the lock in the store: the next renewal finds it gone.
    let db = dir.path().join("locks.db");
    let stolen = Command::new("sqlite3")
        .arg("-cmd")
        .arg(".timeout 10000")
        .arg(&db)
        .arg("UPDATE distlock_locks SET owner = 'thief' WHERE lock_name = 'job';")
        .status()
        .expect("the sqlite3 command-line tool runs (apt-get install sqlite3)");
    assert!(stolen.success(), "sqlite3 updated the lock");
    // The lease was renewed at most now, so its local deadline is within the TTL (3 s).
    let limit = Duration::from_secs(3) + Duration::from_secs(2);
    let took = group_gone_within(pgid, limit).unwrap_or_else(|survivors| {
        panic!("{limit:?} after the lock was lost (TTL 3s, --grace 30s) the group still runs: {survivors:?}")
    });
    eprintln!("the group was gone {took:?} after the lock was taken (TTL 3s, --grace 30s)");
    assert_not_growing(&out);
    assert!(term.exists(), "the command got SIGTERM first");
    let status = holder.wait().expect("distlock exits");
    assert_eq!(status.code(), Some(76), "distlock reports the lost lock");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut holder.stderr.take().expect("stderr"), &mut stderr).expect("read");
    assert!(stderr.contains("was lost"), "{stderr}");
}

/// Renewals keep pushing the leader's deadline later: a command that runs for many TTLs is
/// not killed while distlock runs normally.
#[test]
fn a_command_outliving_many_ttls_is_not_killed_while_renewed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let begun = Instant::now();
    let status = distlock(
        &url,
        &["exec", "--ttl", "1s", "job", "--", "sh", "-c", "sleep 4; exit 5"],
    )
    .stdin(Stdio::null())
    .status()
    .expect("distlock runs");
    assert_eq!(
        status.code(),
        Some(5),
        "the command ran to its end ({:?})",
        begun.elapsed()
    );
}

/// `CLOCK_BOOTTIME` in nanoseconds, the clock of the leader's deadlines.
fn boottime_nanos() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).expect("clock");
    u64::try_from(now.tv_sec()).expect("secs") * 1_000_000_000 + u64::try_from(now.tv_nsec()).expect("nanos")
}

/// The leader's protocol on its own: 8-byte deadlines (`CLOCK_BOOTTIME` nanoseconds,
/// little-endian); a later one replaces the earlier; when the latest passes, the leader kills
/// its group, itself included, though its pipe is still open.
#[test]
fn the_group_leader_kills_its_group_when_the_latest_deadline_passes() {
    use std::io::Write;
    let mut leader = Command::new(BIN)
        .arg(LEADER_ARG)
        .process_group(0)
        .stdin(Stdio::piped())
        .spawn()
        .expect("runs");
    let mut pipe = leader.stdin.take().expect("pipe");
    let begun = Instant::now();
    let first = boottime_nanos() + 300_000_000;
    pipe.write_all(&first.to_le_bytes()).expect("first deadline");
    std::thread::sleep(Duration::from_millis(100));
    let second = boottime_nanos() + 1_000_000_000;
    pipe.write_all(&second.to_le_bytes()).expect("later deadline");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        leader.try_wait().expect("waitable").is_none(),
        "the later deadline replaced the earlier"
    );
    let status = leader.wait().expect("waited");
    let took = begun.elapsed();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "SIGKILL to its own group: {status}"
    );
    assert!(
        took >= Duration::from_millis(1000) && took < Duration::from_millis(3000),
        "killed {took:?} after start, the deadline was 1.1 s"
    );
    drop(pipe);
}

//! `distlock leader` and `distlock exec --weight`, end to end with the built binary: on the
//! memory store (one process) and on a SQLite file shared by processes, each for what the
//! store offers (a store without notes or weighted permits refuses with exit 78).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::support::{capabilities, distlock, run, sqlite_url, text, wait_exit};

/// An address nothing listens on: a command that reaches the store fails there (69), so a
/// usage error (64) shows the input was refused before the store was contacted.
const NOWHERE: &str = "redis://127.0.0.1:1";

/// Waits until the command of `child` has created `path`; fails at once if `distlock` exits
/// first.
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

/// The lines `child` prints, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

#[test]
fn the_leader_runs_its_command_which_learns_its_term_and_distlock_exits_with_its_code() {
    let script = r#"echo "$DISTLOCK_LOCK_NAME term=$TERM_NO"; exit 7"#;
    let out = run(&mut distlock(
        "memory://leader",
        &[
            "leader",
            "scheduler",
            "--value",
            "host-a:80",
            "--term-env",
            "TERM_NO",
            "--",
            "sh",
            "-c",
            script,
        ],
    ));
    assert_eq!(out.status.code(), Some(7), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let term = stdout
        .trim_end()
        .strip_prefix("scheduler term=")
        .unwrap_or_else(|| panic!("the command printed {stdout:?}"));
    assert!(term.parse::<u64>().is_ok(), "the term {term:?} is not a number");
}

/// Whether the process `pid` runs (not a zombie).
fn runs(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|end| stat[end + 1..].trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X')
    })
}

/// A leader frozen past its TTL loses its leadership: its command is killed at the lease's
/// local deadline (as `exec`'s is), and once thawed `distlock` says so and exits 76.
#[test]
fn a_lost_leadership_stops_the_command_and_exits_76() {
    let dir = tempfile::tempdir().expect("temp dir");
    let started = dir.path().join("started");
    let script = format!(
        "echo $$ > '{}.tmp' && mv '{0}.tmp' '{0}'; while :; do sleep 0.05; done",
        started.display()
    );
    let mut leader = distlock(
        "memory://leader",
        &[
            "leader",
            "scheduler",
            "--value",
            "host-a:80",
            "--ttl",
            "1s",
            "--grace",
            "5s",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .expect("distlock runs");
    wait_started(&started, &mut leader);
    let command = std::fs::read_to_string(&started)
        .expect("the pid")
        .trim()
        .to_owned();
    let pid = leader.id().to_string();
    let signal = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("kill")
            .success());
    };
    signal("-STOP");
    std::thread::sleep(Duration::from_millis(2500));
    let alive = cfg!(target_os = "linux") && runs(&command);
    signal("-CONT");
    let code = wait_exit(&mut leader, Duration::from_secs(20));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut leader.stderr.take().expect("piped"), &mut stderr).expect("stderr");
    if runs(&command) {
        let _ = Command::new("kill").args(["-KILL", &command]).status();
    }
    assert!(
        !alive,
        "the command of a frozen leader ran past its lease (TTL 1s, frozen 2.5s)"
    );
    assert_eq!(code, Some(76), "stderr: {stderr}");
    assert!(
        stderr.contains("the leadership of \"scheduler\" was lost"),
        "stderr: {stderr}"
    );
}

#[test]
fn show_says_when_no_one_leads_and_bad_input_is_refused_before_the_store_is_contacted() {
    let out = run(&mut distlock(
        "memory://leader",
        &["leader", "scheduler", "--show"],
    ));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "scheduler: no leader\n");

    let long = "x".repeat(2000);
    let out = run(&mut distlock(
        NOWHERE,
        &["leader", "scheduler", "--value", &long, "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(64), "stderr: {}", text(&out.stderr));
    let out = run(&mut distlock(NOWHERE, &["leader", "", "--show"]));
    assert_eq!(out.status.code(), Some(64), "stderr: {}", text(&out.stderr));
    // A campaign needs a value and a command; --show takes neither.
    for args in [
        &["leader", "scheduler", "--", "true"][..],
        &["leader", "scheduler", "--value", "a"],
        &["leader", "scheduler", "--show", "--value", "a"],
    ] {
        let out = run(&mut distlock("memory://leader", args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
    }
}

/// On a store shared by processes: one leader at a time (a second candidate with `--no-wait`
/// exits 75), `--show` and `--observe` in other processes read its value, and once its command
/// ends the next candidate leads. A store without notes refuses with 78, naming what it lacks.
#[test]
fn one_leader_among_processes_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    if !capabilities(&url).notes {
        for args in [
            &["leader", "scheduler", "--value", "a", "--", "true"][..],
            &["leader", "scheduler", "--show"],
        ] {
            let out = run(&mut distlock(&url, args));
            assert_eq!(out.status.code(), Some(78), "{args:?}: {}", text(&out.stderr));
            assert!(
                text(&out.stderr).contains("leader election"),
                "{args:?}: {}",
                text(&out.stderr)
            );
        }
        return;
    }
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    let mut observer = distlock(&url, &["leader", "scheduler", "--observe"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("distlock runs");
    let changes = lines_of(&mut observer);
    let mut leader = distlock(
        &url,
        &[
            "leader",
            "scheduler",
            "--value",
            "host-a:80",
            "--",
            "sh",
            "-c",
            &hold_until(&started, &go),
        ],
    )
    .spawn()
    .expect("distlock runs");
    wait_started(&started, &mut leader);
    let out = run(&mut distlock(&url, &["leader", "scheduler", "--show"]));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("scheduler: led by host-a:80"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&mut distlock(
        &url,
        &[
            "leader",
            "scheduler",
            "--value",
            "host-b:80",
            "--no-wait",
            "--",
            "true",
        ],
    ));
    assert_eq!(
        out.status.code(),
        Some(75),
        "a second leader: {}",
        text(&out.stderr)
    );
    let first = changes
        .recv_timeout(Duration::from_secs(30))
        .expect("the observer prints the leader");
    assert!(first.contains("host-a:80"), "{first}");

    std::fs::write(&go, "").expect("go");
    assert_eq!(wait_exit(&mut leader, Duration::from_secs(30)), Some(0));
    let out = run(&mut distlock(
        &url,
        &[
            "leader",
            "scheduler",
            "--value",
            "host-b:80",
            "--wait",
            "10s",
            "--",
            "sleep",
            "1",
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let second = changes
        .recv_timeout(Duration::from_secs(30))
        .expect("the observer prints the next leader");
    assert!(second.contains("host-b:80"), "{second}");
    let _ = observer.kill();
    let _ = observer.wait();
}

#[test]
fn exec_with_a_weight_holds_that_many_permits_and_refuses_impossible_weights_before_the_store() {
    let out = run(&mut distlock(
        "memory://weights",
        &["exec", "--permits", "3", "--weight", "2", "jobs", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    for weight in ["0", "4"] {
        let out = run(&mut distlock(
            NOWHERE,
            &["exec", "--permits", "3", "--weight", weight, "jobs", "--", "true"],
        ));
        assert_eq!(
            out.status.code(),
            Some(64),
            "weight {weight}: {}",
            text(&out.stderr)
        );
    }
    let out = run(&mut distlock(
        "memory://weights",
        &["exec", "--weight", "2", "jobs", "--", "true"],
    ));
    assert_eq!(
        out.status.code(),
        Some(2),
        "--weight without --permits: {}",
        text(&out.stderr)
    );
}

/// On a store shared by processes: while one command holds 2 of 3 permits, another of weight
/// 2 cannot run (75 with `--no-wait`) and one of weight 1 can. A store without weighted
/// permits refuses a weight above 1 with 78.
#[test]
fn weighted_exec_among_processes_on_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(dir.path());
    let weighted = |weight: &str, command: &[&str]| {
        let mut args = vec![
            "exec",
            "--permits",
            "3",
            "--weight",
            weight,
            "--no-wait",
            "jobs",
            "--",
        ];
        args.extend_from_slice(command);
        distlock(&url, &args)
    };
    if !capabilities(&url).weighted_permits {
        let out = run(&mut weighted("2", &["true"]));
        assert_eq!(out.status.code(), Some(78), "{}", text(&out.stderr));
        let out = run(&mut weighted("1", &["true"]));
        assert_eq!(
            out.status.code(),
            Some(0),
            "a weight of 1 is a plain permit: {}",
            text(&out.stderr)
        );
        return;
    }
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    let hold = hold_until(&started, &go);
    let mut heavy = weighted("2", &["sh", "-c", &hold])
        .spawn()
        .expect("distlock runs");
    wait_started(&started, &mut heavy);
    let out = run(&mut weighted("2", &["true"]));
    assert_eq!(
        out.status.code(),
        Some(75),
        "4 of 3 permits held: {}",
        text(&out.stderr)
    );
    let out = run(&mut weighted("1", &["true"]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "the third permit: {}",
        text(&out.stderr)
    );
    std::fs::write(&go, "").expect("go");
    assert_eq!(wait_exit(&mut heavy, Duration::from_secs(30)), Some(0));
    let out = run(&mut weighted("2", &["true"]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "2 permits once given back: {}",
        text(&out.stderr)
    );
}

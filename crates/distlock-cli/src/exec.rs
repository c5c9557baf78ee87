//! `distlock exec`: run a command while holding a lock, like `flock(1)` across hosts.
//!
//! What is held is, by default, the exclusive hold of `NAME`: the write lock of the
//! read-write lock `NAME` and the lock `NAME` (the lock alone on a store without read-write
//! locks), so that it excludes `--shared` holders as `flock` excludes `flock -s`; one permit
//! of the semaphore `NAME` with `--permits N` (`W` of them with `--weight W`); or a side of the read-write lock `NAME` with
//! `--read` (alias `--shared`) / `--write`. Only how the hold is obtained differs
//! ([`hold`]): every hold is made of the same `LockGuard`s, so all that follows (renewal, the
//! lost-lock stop, the process group and its deadline, the exit codes) is the same for each.
//!
//! The command runs in a process group of its own, apart from `distlock`'s (as `timeout(1)`
//! runs it), so that SIGINT, SIGTERM and SIGHUP reach it exactly once: `distlock` forwards
//! them to the whole group. While it runs, the watchdog renews the lock every TTL/3. If the
//! lock is lost anyway, the group gets SIGTERM, then SIGKILL after `--grace` or at the lease's
//! local deadline, whichever comes first, and `distlock` exits with [`exit::LOST`]. When the
//! command exits, the lock is released and its exit code returned.
//!
//! # The command never outlives the lock (Linux)
//!
//! `flock(1)` cannot run a command without its lock: the lock lives as long as the command.
//! Here the lock lives in a store and expires after its TTL once `distlock` stops renewing
//! it, so the command must not outlive `distlock`. On Linux:
//! - **the command's process group is killed with SIGKILL when `distlock` dies, however it
//!   dies** (an error, a panic, `kill -9`, the OOM killer): a group leader process watches
//!   `distlock` and kills the group within milliseconds, long before the TTL frees the lock
//!   for another holder (see [`crate::group`] for the mechanism);
//! - **the command's process group is killed with SIGKILL at the lease's local deadline
//!   unless a renewal has pushed it later, even if `distlock` is frozen** (SIGSTOP, a long
//!   pause, a starved host): `distlock` tells the group leader the deadline before the
//!   command starts and after each renewal (checked every TTL/6), and the leader enforces it
//!   with a timer of its own. The local deadline is the TTL counted from when the acquire or
//!   renewal request was sent, minus the safety margin, so it comes before the store can
//!   expire the lock: the command never runs past the lease's local deadline. This needs the
//!   leader to run; a leader frozen along with `distlock` (a cgroup freeze of both, or a host
//!   that schedules neither) kills the group only when it runs again, which is out of scope.
//!   Session-bound leases (ZooKeeper) have no local deadline: their loss comes from the
//!   session, so there only a dead `distlock`, not a frozen one, kills the group;
//! - on a lost lock, SIGKILL never comes after the lease's local deadline, whatever
//!   `--grace` says: the grace is cut to the time the lease has left (none if the lock was
//!   lost by running out its lease);
//! - when the command ends (by itself, on a forwarded signal or on a lost lock), whatever it
//!   left running in its group gets SIGKILL before the lock is released, so no background
//!   process of the command runs on outside the lock;
//! - a process that leaves the group (`setsid`, a daemon that detaches) escapes both; only a
//!   cgroup (`systemd-run --scope`, a systemd unit) contains those.
//!
//! On other platforms only the normal paths hold: signal forwarding, the lost-lock SIGTERM
//! then SIGKILL (also cut to the lease's remaining time), and the release when the command
//! exits. If `distlock` is killed or frozen there, the command runs on until it ends while
//! the lock expires after its TTL, so another holder can run beside it; and what the command
//! leaves in its group when it exits is not killed.

use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use distlock::{AcquireOptions, Error, LockKind, Result, Wait};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::ExecArgs;
use crate::exit;
use crate::group::CommandGroup;

mod hold;
pub(crate) use hold::Hold;

/// The shortest period at which the group leader hears of renewals.
const PROMISE_MIN_PERIOD: Duration = Duration::from_millis(10);

/// The variable that tells the command which lock it runs under.
const LOCK_NAME_ENV: &str = "DISTLOCK_LOCK_NAME";

pub async fn run(url: &str, args: ExecArgs) -> Result<u8> {
    // Bad arguments are reported before the store is contacted.
    let held = Held {
        name: &args.name,
        kind: kind(&args)?,
    };
    let client = distlock::connect(url).await?;
    let opts = AcquireOptions::new()
        .ttl(args.ttl)
        .wait(wait(args.no_wait, args.wait));
    let hold = Hold::acquire(&client, held, &opts).await?;
    let command = Run {
        name: &args.name,
        command: &args.command,
        token_env: args
            .fencing_token_env
            .as_deref()
            .map(|v| (v, "fencing tokens (--fencing-token-env)")),
        ttl: args.ttl,
        grace: args.grace,
    };
    run_under(&client, hold, &held, &command).await
}

/// The wait `--no-wait` and `--wait` ask for: by default, as long as it takes.
pub(crate) fn wait(no_wait: bool, wait: Option<Duration>) -> Wait {
    match (no_wait, wait) {
        (true, _) => Wait::No,
        (false, Some(d)) => Wait::For(d),
        (false, None) => Wait::Forever,
    }
}

/// The command to run under a hold, and how.
pub(crate) struct Run<'a> {
    /// The name held, passed to the command in `DISTLOCK_LOCK_NAME`.
    pub(crate) name: &'a str,
    /// The command and its arguments.
    pub(crate) command: &'a [String],
    /// The variable to pass the hold's fencing token in, and what to call the token when the
    /// store has none (naming the flag that asked for it).
    pub(crate) token_env: Option<(&'a str, &'static str)>,
    /// The hold's TTL (the group leader hears of renewals every TTL/6).
    pub(crate) ttl: Duration,
    /// How long the command gets between SIGTERM and SIGKILL after a loss.
    pub(crate) grace: Duration,
}

/// Runs `run`'s command while `guard` holds (`held` names it in messages): kills it if the
/// hold is lost ([`exit::LOST`]), releases the hold when it exits and returns its exit code.
/// Used by `exec` and by `leader`, whose hold is a leadership.
pub(crate) async fn run_under(
    client: &distlock::LockClient,
    guard: Hold,
    held: &dyn fmt::Display,
    args: &Run<'_>,
) -> Result<u8> {
    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]).env(LOCK_NAME_ENV, args.name);
    if let Some((variable, missing)) = args.token_env {
        let Some(token) = guard.fencing_token() else {
            let _ = guard.release().await;
            return Err(Error::NotSupported {
                backend: client.backend().backend(),
                what: missing,
            });
        };
        command.env(variable, token.to_string());
    }
    // From here on, an early return drops `group` (killing it) before `guard`.
    let mut group = match CommandGroup::start() {
        Ok(group) => group,
        Err(error) => {
            let _ = guard.release().await;
            eprintln!("distlock: cannot start the command's process group: {error}");
            return Ok(exit::SOFTWARE);
        }
    };
    // The leader knows the lease's deadline before the command exists.
    group.promise(|| guard.remaining());
    group.enroll(&mut command);
    // Install the handlers before the child exists, so no signal slips through.
    let mut signals = Signals::install()?;
    let lost = guard.lost_signal();
    // A lease that ran out before the command started (distlock paused since the acquire):
    // the command must not start, and the leader has already ended the group.
    if lost.is_lost() {
        group.end().await;
        let reason = lost.lost().await;
        eprintln!("distlock: {held} was lost ({reason}) before the command started");
        drop(guard);
        return Ok(exit::LOST);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) if lost.is_lost() => {
            // The lease ran out between the check and the spawn: the leader's group was gone.
            group.end().await;
            let reason = lost.lost().await;
            eprintln!("distlock: {held} was lost ({reason}) before the command started ({error})");
            drop(guard);
            return Ok(exit::LOST);
        }
        Err(error) => {
            group.end().await;
            let _ = guard.release().await;
            eprintln!("distlock: cannot run {:?}: {error}", args.command[0]);
            return Ok(match error.kind() {
                std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_EXECUTE,
            });
        }
    };
    let pgid = group.id(&child);

    // Renewals happen every TTL/3; the leader hears of each within TTL/6.
    let mut tell_leader = tokio::time::interval((args.ttl / 6).max(PROMISE_MIN_PERIOD));
    tell_leader.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ended = loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(|e| Error::backend("process", e))?;
                // The leader killed the group at the lease's deadline (distlock was frozen).
                if status.signal() == Some(Signal::SIGKILL as i32) && lost.is_lost() {
                    let reason = lost.lost().await;
                    eprintln!(
                        "distlock: {held} was lost ({reason}); the command was killed at the lease's deadline"
                    );
                    break Ended::Lost;
                }
                break Ended::Exited(status);
            }
            Some(sig) = signals.next() => forward(pgid, sig),
            _ = tell_leader.tick() => {
                if !lost.is_lost() {
                    group.promise(|| guard.remaining());
                }
            }
            reason = lost.lost() => {
                eprintln!("distlock: {held} was lost ({reason}); stopping the command");
                // Never past the lease's deadline (the leader kills the group then anyway).
                let grace = guard.remaining().map_or(args.grace, |left| left.min(args.grace));
                terminate(&mut child, pgid, grace).await;
                break Ended::Lost;
            }
        }
    };
    // Nothing of the command's group may run on outside the lock.
    group.end().await;
    match ended {
        Ended::Lost => {
            drop(guard);
            Ok(exit::LOST)
        }
        Ended::Exited(status) => {
            match guard.release().await {
                Ok(true) => {}
                Ok(false) => eprintln!("distlock: warning: {held} was no longer held when the command ended"),
                Err(error) => {
                    eprintln!("distlock: warning: releasing {held} failed ({error}); its TTL frees it")
                }
            }
            Ok(exit_code(status))
        }
    }
}

/// What the command runs under: a hold of `kind` on the object `name` (for the lock, with
/// the write lock of the read-write lock `name`: see [`hold`]).
#[derive(Clone, Copy)]
struct Held<'a> {
    name: &'a str,
    kind: LockKind,
}

/// The hold `--permits`, `--read` or `--write` ask for (clap lets at most one through), else
/// the lock of the name.
///
/// # Errors
/// [`Error::InvalidOptions`] for `--permits 0`, or a `--weight` of 0 or above `--permits`.
fn kind(args: &ExecArgs) -> Result<LockKind> {
    Ok(match args.permits {
        Some(0) => {
            return Err(Error::invalid_options(
                "--permits must be at least 1 (the number of commands that may run at once)",
            ))
        }
        Some(permits) => {
            let weight = args.weight.unwrap_or(1);
            if weight == 0 || weight > permits {
                return Err(Error::invalid_options(format!(
                    "--weight must be from 1 to --permits ({permits}), not {weight}"
                )));
            }
            LockKind::permits(permits, weight)
        }
        None if args.read => LockKind::Read,
        None if args.write => LockKind::Write,
        None => LockKind::Exclusive,
    })
}

impl fmt::Display for Held<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.name;
        match self.kind {
            LockKind::Permit { weight: 1, .. } => write!(f, "a permit of semaphore {name:?}"),
            LockKind::Permit { weight, .. } => write!(f, "{weight} permits of semaphore {name:?}"),
            LockKind::Read => write!(f, "the read lock of {name:?}"),
            LockKind::Write => write!(f, "the write lock of {name:?}"),
            _ => write!(f, "lock {name:?}"),
        }
    }
}

enum Ended {
    Exited(ExitStatus),
    Lost,
}

/// The command's exit code, or 128 + N if signal N killed it.
fn exit_code(status: ExitStatus) -> u8 {
    let code = status
        .code()
        .or_else(|| status.signal().map(|sig| 128 + sig))
        .unwrap_or(1);
    u8::try_from(code & 0xff).unwrap_or(1)
}

fn forward(group: Option<Pid>, sig: Signal) {
    if let Some(group) = group {
        tracing::debug!(?sig, "distlock: forwarding a signal to the command");
        let _ = killpg(group, sig);
    }
}

/// SIGTERM to the command's group, then SIGKILL after `grace` (already cut to the lease's
/// remaining time).
async fn terminate(child: &mut Child, group: Option<Pid>, grace: Duration) {
    forward(group, Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        eprintln!("distlock: the command did not end within {grace:?} of SIGTERM; killing it");
        forward(group, Signal::SIGKILL);
        let _ = child.kill().await;
    }
}

/// The signals `distlock` forwards to the command.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Self> {
        let install = |kind| signal(kind).map_err(|e| Error::backend("signals", e));
        Ok(Self {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
            hangup: install(SignalKind::hangup())?,
        })
    }

    async fn next(&mut self) -> Option<Signal> {
        tokio::select! {
            Some(()) = self.interrupt.recv() => Some(Signal::SIGINT),
            Some(()) = self.terminate.recv() => Some(Signal::SIGTERM),
            Some(()) = self.hangup.recv() => Some(Signal::SIGHUP),
            else => None,
        }
    }
}

//! The command's process group, and what keeps it from outliving `distlock exec`.
//!
//! This module owns the group the command runs in: how it is created, how the command joins
//! it, and how it ends. It does not decide when to signal the command (that is [`crate::exec`]).
//!
//! # Linux: a group leader that kills the group when `distlock` dies
//!
//! Before the command starts, `distlock` starts a *group leader*: itself, re-executed from
//! `/proc/self/exe` with a hidden first argument ([`LEADER_ARG`]), in a new process group.
//! The command then joins that group, and so do its children unless they leave it. The
//! leader blocks every signal it can from before it is executed (a signal sent to the group
//! while it starts up must not end it), and reads its stdin: the read end of a pipe whose only
//! write end `distlock` holds (close-on-exec, so neither the leader nor the command inherits
//! it). When `distlock` ends, however it ends (exit, panic, SIGKILL, the OOM killer), the
//! kernel closes that write end; the leader reads end-of-file and sends SIGKILL to its whole
//! group: the command, every descendant still in the group, and itself.
//!
//! Why a separate process, and why it leads the group:
//! - Nothing inside `distlock` runs after SIGKILL, so the killer must be another process, and
//!   a pipe's end-of-file is the one notice the kernel gives for every way a process dies.
//! - A re-executed binary, not a bare `fork`: a child forked from the multi-threaded runtime
//!   may only run async-signal-safe code and would inherit every descriptor (store
//!   connections included); after `exec` it is a fresh single-threaded process that holds
//!   nothing but the pipe.
//! - A process group's id stays reserved while its leader lives or is an unreaped zombie.
//!   The leader signals its own group, and `distlock` reaps the leader only after the group
//!   is dead, so a SIGKILL can never reach a reused group id. (Were the command the leader,
//!   its id could be reused once `distlock` had reaped it.)
//!
//! As a second line, the command itself gets `PR_SET_PDEATHSIG(SIGKILL)`: it dies with
//! `distlock` even if the leader was killed first. That covers the command, not its children,
//! and the kernel clears it when the command executes a set-user-ID or set-capability binary.
//!
//! # Linux: the group dies at the lease's local deadline, even if `distlock` is frozen
//!
//! A dead `distlock` closes the pipe; a *frozen* one (SIGSTOP, a long pause, a starved or
//! overloaded host) does not, yet its lease expires in the store all the same and the next
//! holder may start. So the pipe also carries the lease's deadline: `distlock` writes
//! "the lock is ours until T" ([`CommandGroup::promise`]) before the command starts and again
//! each time a renewal pushes the deadline later. T is the lease's local deadline (the lock's
//! TTL counted from when the acquire or renewal request was sent, minus the safety margin,
//! the instant the lost-lock signal fires at the latest), as an absolute instant of
//! `CLOCK_BOOTTIME`: the clock is read before the lease's remaining time, so T errs early,
//! never late, and neither a slow pipe nor a late-reading leader moves it; `CLOCK_BOOTTIME`
//! keeps counting while the host is suspended, as the store's TTL does. The leader arms a
//! timer (`timerfd`, absolute) at T; if T passes without a later one, it kills the group with
//! SIGKILL, itself included, exactly as on end-of-file.
//!
//! Messages are 8 bytes (T in nanoseconds, little-endian), written whole or not at all (a
//! pipe write of up to `PIPE_BUF` bytes is atomic; the write end is non-blocking, so a leader
//! that does not read can never stall `distlock`). The leader takes each new T as its
//! deadline.
//!
//! Session-bound leases (ZooKeeper) have no local deadline of their own: the lock is lost when
//! the session ends, which the client learns from the session. For them `distlock` sends
//! nothing and the leader kills the group only when `distlock` dies; a frozen `distlock`
//! holding a session-bound lock is not covered.
//!
//! What this guarantees: **the command's group does not run past the lease's local deadline,
//! even if `distlock` is frozen**, provided the leader itself runs. The leader is a small
//! process that only waits on its pipe and its timer; should it be frozen too (a cgroup
//! freeze of `distlock` and the leader, SIGSTOP of the leader, a host so starved that
//! neither is scheduled), the kill comes only when it runs again. That case is out of scope:
//! no process on the host can act on time then. (A cgroup freeze usually freezes the
//! command as well; it runs on, past the lease, once thawed, until the leader kills it.)
//!
//! When the command ends (exit, lost lock, forwarded signal), [`CommandGroup::end`] kills
//! what is left of the group with SIGKILL and reaps the leader, BEFORE the lock is released:
//! nothing of the group runs on outside the lock, and no leader is left behind.
//!
//! Limits: a process that leaves the group (`setsid`, `setpgid`, a daemon that double-forks
//! into its own session) is out of reach; only a cgroup (e.g. `systemd-run --scope`) contains
//! those. A process stuck in uninterruptible sleep dies when its system call returns.
//!
//! # Other platforms
//!
//! The command leads its own group, as `timeout(1)` runs it; signals are forwarded to that
//! group and a lost lock stops it (SIGTERM, then SIGKILL after `--grace`). But if `distlock`
//! itself is killed, nothing stops the command: it runs on until it ends while the lock
//! expires after its TTL, so another holder can run beside it. Processes the command leaves
//! in its group when it exits are not killed either.

use std::time::Duration;

use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// The hidden first argument that makes `distlock` a group leader.
#[cfg(target_os = "linux")]
pub const LEADER_ARG: &str = "__exec-group-leader";

/// The process group the command runs in.
pub struct CommandGroup {
    #[cfg(target_os = "linux")]
    leader: linux::Leader,
}

impl CommandGroup {
    /// Creates the group: on Linux, starts its leader; elsewhere, the command will lead it.
    pub fn start() -> std::io::Result<Self> {
        Ok(Self {
            #[cfg(target_os = "linux")]
            leader: linux::Leader::start()?,
        })
    }

    /// Makes `command` join the group when it is spawned.
    pub fn enroll(&self, command: &mut Command) {
        #[cfg(target_os = "linux")]
        self.leader.enroll(command);
        #[cfg(not(target_os = "linux"))]
        command.process_group(0);
    }

    /// The group's id, to signal it: the leader's pid, or the command's where it leads.
    pub fn id(&self, command: &Child) -> Option<Pid> {
        #[cfg(target_os = "linux")]
        {
            let _ = command;
            Some(self.leader.pgid)
        }
        #[cfg(not(target_os = "linux"))]
        command
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw)
    }

    /// Tells the group leader that the lock is ours for `remaining()` more (Linux; elsewhere
    /// nothing): once that passes without a later promise, the leader kills the group. Sent
    /// only when it pushes the deadline later than the last promise. `remaining` returning
    /// `None` (a session-bound lease) sends nothing.
    pub fn promise(&mut self, remaining: impl FnOnce() -> Option<Duration>) {
        #[cfg(target_os = "linux")]
        self.leader.promise(remaining);
        #[cfg(not(target_os = "linux"))]
        let _ = remaining;
    }

    /// Kills every process left in the group and reaps the leader (Linux). Call it once the
    /// command has ended and before the lock is released. Elsewhere it does nothing: once the
    /// command is reaped its group id may be reused, so signalling the group is not safe.
    ///
    /// Dropping the group without `end` (an early error return) still sends the SIGKILL.
    pub async fn end(self) {
        #[cfg(target_os = "linux")]
        self.leader.end().await;
        #[cfg(not(target_os = "linux"))]
        let _ = self;
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::os::fd::{AsFd, OwnedFd};
    use std::process::{ExitCode, Stdio};
    use std::time::Duration;

    use nix::errno::Errno;
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::signal::{killpg, sigprocmask, SigSet, SigmaskHow, Signal};
    use nix::sys::time::TimeSpec;
    use nix::sys::timerfd::{self, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
    use nix::time::{clock_gettime, ClockId};
    use nix::unistd::{getpgrp, getpid, getppid, Pid};
    use tokio::process::{Child, Command};

    use super::LEADER_ARG;

    /// How long `end` waits for the SIGKILLed leader before leaving it to the kernel.
    const REAP_BOUND: Duration = Duration::from_secs(5);

    /// A running group leader, from `distlock`'s side.
    pub(super) struct Leader {
        pub(super) pgid: Pid,
        pub(super) process: Child,
        /// The pipe's only write end: dropping it (or dying) tells the leader to kill.
        pub(super) alive: Option<OwnedFd>,
        /// The latest deadline sent to the leader (`CLOCK_BOOTTIME` nanoseconds; 0: none).
        promised: u64,
    }

    impl Leader {
        pub(super) fn start() -> std::io::Result<Self> {
            let mut leader = Command::new("/proc/self/exe");
            leader.arg0("distlock").arg(LEADER_ARG);
            Self::spawn(leader)
        }

        /// Starts `program` as the group's leader (`distlock` itself, but for tests).
        pub(super) fn spawn(mut program: Command) -> std::io::Result<Self> {
            let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
            // Ours only (the leader's end stays blocking): a full pipe never stalls us.
            fcntl(&write, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
            // Born with every signal blocked (the mask survives exec): a signal forwarded to
            // the group before the leader's `main` runs must not end it, and on a loaded host
            // the command can start and be signalled before the leader is first scheduled.
            // SAFETY: the closure runs in the forked child before exec and calls only
            // `sigprocmask` on a set filled in place, async-signal-safe; it neither
            // allocates nor takes locks.
            #[allow(unsafe_code)]
            unsafe {
                program.pre_exec(|| {
                    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), None)?;
                    Ok(())
                });
            }
            let process = program
                .process_group(0)
                // Dup'd onto fd 0, so the leader keeps it across exec; our copy closes here.
                .stdin(Stdio::from(read))
                .stdout(Stdio::null())
                .current_dir("/")
                .kill_on_drop(false)
                .spawn()?;
            // `spawn` returns once the leader has executed, so its group exists.
            let pgid = process
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .map(Pid::from_raw)
                .ok_or_else(|| std::io::Error::other("the group leader exited at once"))?;
            Ok(Self {
                pgid,
                process,
                alive: Some(write),
                promised: 0,
            })
        }

        pub(super) fn promise(&mut self, remaining: impl FnOnce() -> Option<Duration>) {
            let Some(alive) = &self.alive else { return };
            // The clock first, then the remaining time: the deadline errs early, never late.
            let now = match boottime_nanos() {
                Ok(now) => now,
                Err(error) => {
                    tracing::warn!(%error, "cannot read CLOCK_BOOTTIME; the lease's deadline is not enforced");
                    return;
                }
            };
            let Some(remaining) = remaining() else { return };
            let remaining = u64::try_from(remaining.as_nanos()).unwrap_or(u64::MAX);
            let deadline = now.saturating_add(remaining).max(1);
            if deadline <= self.promised {
                return;
            }
            match nix::unistd::write(alive, &deadline.to_le_bytes()) {
                Ok(_) => self.promised = deadline,
                // A full pipe (the leader does not read): the next promise retries.
                Err(Errno::EAGAIN) => {}
                Err(error) => tracing::warn!(%error, "cannot send the lease's deadline to the group leader"),
            }
        }

        pub(super) fn enroll(&self, command: &mut Command) {
            command.process_group(self.pgid.as_raw());
            // PR_SET_PDEATHSIG fires when the *thread* that forked the child ends: the command
            // is spawned from `exec::run`, which runs in `block_on` on the main thread, and
            // that thread lives as long as `distlock`.
            let parent = getpid();
            // SAFETY: the closure runs in the forked child before exec and calls only
            // `prctl` and `getppid`, async-signal-safe system calls; it neither allocates
            // nor takes locks (its errors are raw errno values).
            #[allow(unsafe_code)]
            unsafe {
                command.pre_exec(move || {
                    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                    // `distlock` died before the prctl took effect: it will never fire.
                    if getppid() != parent {
                        return Err(std::io::Error::from_raw_os_error(Errno::ESRCH as i32));
                    }
                    Ok(())
                });
            }
        }

        pub(super) async fn end(mut self) {
            self.kill_group();
            match tokio::time::timeout(REAP_BOUND, self.process.wait()).await {
                Ok(Ok(status)) if status.code().is_some() => {
                    tracing::warn!(%status, "the command's group leader had exited on its own");
                }
                Ok(Ok(_)) => {}
                Ok(Err(error)) => tracing::warn!(%error, "cannot reap the command's group leader"),
                Err(_) => tracing::warn!("the command's group leader outlived SIGKILL by {REAP_BOUND:?}"),
            }
        }

        /// SIGKILL to the whole group, then the pipe closes (the leader would do the same).
        fn kill_group(&mut self) {
            if let Some(alive) = self.alive.take() {
                // The leader is not reaped yet, so this group id is still ours.
                let _ = killpg(self.pgid, Signal::SIGKILL);
                drop(alive);
            }
        }
    }

    impl Drop for Leader {
        fn drop(&mut self) {
            self.kill_group();
        }
    }

    /// The group leader's whole life: wait for `distlock` to end or the lease's deadline to
    /// pass, then kill the group.
    pub fn lead() -> ExitCode {
        // Forwarded signals (SIGTERM, SIGINT, SIGHUP) reach the whole group, and the command
        // may signal its own group: none of them may end the leader before the group. They are
        // blocked from before exec (`Leader::spawn`); blocking them again costs nothing.
        let _ = SigSet::all().thread_block();
        if getpgrp() != getpid() || !stdin_is_a_pipe() {
            eprintln!("distlock: {LEADER_ARG} is for `distlock exec`'s own use");
            return ExitCode::from(crate::exit::USAGE);
        }
        watch();
        let _ = killpg(getpgrp(), Signal::SIGKILL);
        // Not reached: SIGKILL ended this process with its group.
        ExitCode::from(crate::exit::SOFTWARE)
    }

    /// Returns when the group must die: the pipe reached end-of-file (`distlock` ended), the
    /// latest deadline passed, or something failed (then failing safe).
    fn watch() {
        let stdin = std::io::stdin();
        let pipe = stdin.as_fd();
        let Ok(timer) = TimerFd::new(timerfd::ClockId::CLOCK_BOOTTIME, TimerFlags::TFD_CLOEXEC) else {
            eprintln!("distlock: the command's group leader cannot create its timer");
            return;
        };
        let mut deadline = None;
        let mut pending = Vec::with_capacity(2 * MESSAGE);
        let mut buf = [0_u8; 64];
        loop {
            let mut fds = [
                PollFd::new(pipe, PollFlags::POLLIN),
                PollFd::new(timer.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => return,
            }
            // End-of-file, an error or a hang-up all show as readable (or as errors).
            if fds[0].revents().is_none_or(|r| !r.is_empty()) {
                match nix::unistd::read(pipe, &mut buf) {
                    Ok(0) => return,
                    Ok(n) => pending.extend_from_slice(&buf[..n]),
                    Err(Errno::EINTR | Errno::EAGAIN) => {}
                    // An unreadable pipe cannot tell us `distlock` lives: fail safe.
                    Err(_) => return,
                }
                let whole = pending.len() - pending.len() % MESSAGE;
                if let Some(last) = pending[..whole].chunks_exact(MESSAGE).last() {
                    let mut bytes = [0_u8; MESSAGE];
                    bytes.copy_from_slice(last);
                    let next = u64::from_le_bytes(bytes).max(1);
                    if arm(&timer, next).is_err() {
                        return;
                    }
                    deadline = Some(next);
                }
                pending.drain(..whole);
                // Look again: a newer deadline counts before an older one's timer.
                continue;
            }
            if fds[1].revents().is_none_or(|r| !r.is_empty()) {
                let Some(deadline) = deadline else { return };
                match boottime_nanos() {
                    Ok(now) if now < deadline => {
                        // Early (cannot happen with an absolute timer): re-arm, which also
                        // clears the expiration.
                        if arm(&timer, deadline).is_err() {
                            return;
                        }
                    }
                    _ => return,
                }
            }
        }
    }

    /// The size of a deadline message on the pipe.
    const MESSAGE: usize = 8;

    /// Arms `timer` to fire at `deadline` (`CLOCK_BOOTTIME` nanoseconds), at once if passed.
    fn arm(timer: &TimerFd, deadline: u64) -> nix::Result<()> {
        let secs = i64::try_from(deadline / 1_000_000_000).unwrap_or(i64::MAX);
        let nanos = i64::try_from(deadline % 1_000_000_000).unwrap_or(0);
        timer.set(
            Expiration::OneShot(TimeSpec::new(secs, nanos)),
            TimerSetTimeFlags::TFD_TIMER_ABSTIME,
        )
    }

    /// `CLOCK_BOOTTIME` in nanoseconds: monotonic, and counting while the host is suspended.
    fn boottime_nanos() -> nix::Result<u64> {
        let now = clock_gettime(ClockId::CLOCK_BOOTTIME)?;
        let secs = u64::try_from(now.tv_sec()).map_err(|_| Errno::EOVERFLOW)?;
        let nanos = u64::try_from(now.tv_nsec()).map_err(|_| Errno::EOVERFLOW)?;
        Ok(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
    }

    fn stdin_is_a_pipe() -> bool {
        use std::os::fd::AsFd;
        use std::os::unix::fs::FileTypeExt;
        std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .map(std::fs::File::from)
            .and_then(|file| file.metadata())
            .is_ok_and(|meta| meta.file_type().is_fifo())
    }
}

#[cfg(target_os = "linux")]
pub use linux::lead;

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::time::Duration;

    use nix::sys::signal::{killpg, Signal};
    use tokio::process::Command;

    use super::linux::Leader;

    /// Signals forwarded to the group can come before the leader's `main` has run at all (a
    /// slow start on a loaded host): it must be born with them blocked, or they kill it and
    /// leave the group unguarded. A leader that only sleeps stands in for one slow to start.
    #[tokio::test]
    async fn the_leader_is_born_with_forwarded_signals_blocked() {
        let mut sleeper = Command::new("sleep");
        sleeper.arg("0.5");
        let mut leader = Leader::spawn(sleeper).expect("the stand-in leader starts");
        for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
            killpg(leader.pgid, signal).expect("signals the group");
        }
        let status = tokio::time::timeout(Duration::from_secs(10), leader.process.wait())
            .await
            .expect("the stand-in leader ends")
            .expect("reaped");
        assert_eq!(
            (status.code(), status.signal()),
            (Some(0), None),
            "the forwarded signals ended the leader: {status}"
        );
        // Reaped: its group id is no longer ours to signal, so nothing is sent on drop.
        leader.alive = None;
    }
}

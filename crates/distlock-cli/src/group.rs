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
//! leader blocks every signal it can, and reads its stdin: the read end of a pipe whose only
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
    use std::os::fd::OwnedFd;
    use std::process::{ExitCode, Stdio};
    use std::time::Duration;

    use nix::errno::Errno;
    use nix::fcntl::OFlag;
    use nix::sys::signal::{killpg, SigSet, Signal};
    use nix::unistd::{getpgrp, getpid, getppid, Pid};
    use tokio::process::{Child, Command};

    use super::LEADER_ARG;

    /// How long `end` waits for the SIGKILLed leader before leaving it to the kernel.
    const REAP_BOUND: Duration = Duration::from_secs(5);

    /// A running group leader, from `distlock`'s side.
    pub(super) struct Leader {
        pub(super) pgid: Pid,
        process: Child,
        /// The pipe's only write end: dropping it (or dying) tells the leader to kill.
        alive: Option<OwnedFd>,
    }

    impl Leader {
        pub(super) fn start() -> std::io::Result<Self> {
            let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
            let process = Command::new("/proc/self/exe")
                .arg0("distlock")
                .arg(LEADER_ARG)
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
            })
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

    /// The group leader's whole life: wait for `distlock` to end, then kill the group.
    pub fn lead() -> ExitCode {
        // Forwarded signals (SIGTERM, SIGINT, SIGHUP) reach the whole group, and the command
        // may signal its own group: none of them may end the leader before the group.
        let _ = SigSet::all().thread_block();
        if getpgrp() != getpid() || !stdin_is_a_pipe() {
            eprintln!("distlock: {LEADER_ARG} is for `distlock exec`'s own use");
            return ExitCode::from(crate::exit::USAGE);
        }
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0_u8; 64];
        loop {
            match std::io::Read::read(&mut stdin, &mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // An unreadable pipe cannot tell us `distlock` lives: fail safe.
                Err(_) => break,
            }
        }
        let _ = killpg(getpgrp(), Signal::SIGKILL);
        // Not reached: SIGKILL ended this process with its group.
        ExitCode::from(crate::exit::SOFTWARE)
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

//! The few raw libc calls the testkit needs. This is the only module where
//! `unsafe` is allowed; every block says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Signals the harness sends.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Signal {
    Term,
    Int,
    Kill,
    Stop,
    Cont,
}

impl Signal {
    fn raw(self) -> libc::c_int {
        match self {
            Signal::Term => libc::SIGTERM,
            Signal::Int => libc::SIGINT,
            Signal::Kill => libc::SIGKILL,
            Signal::Stop => libc::SIGSTOP,
            Signal::Cont => libc::SIGCONT,
        }
    }
}

/// Arranges for the kernel to SIGKILL the spawned process as soon as the
/// *thread* that spawned it exits (`PR_SET_PDEATHSIG`), which includes the
/// whole test process dying, even by `kill -9`.
pub(crate) fn kill_when_parent_dies(cmd: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child between fork and exec. It
    // only calls prctl(2) and getppid(2), which are async-signal-safe, and
    // builds errors with `last_os_error`/`from_raw_os_error`, which do not
    // allocate; it takes no locks and touches no shared state.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl; then the
            // signal will never come, so refuse to become an orphan.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Sends `signal` to process `pid`.
pub(crate) fn send_signal(pid: u32, signal: Signal) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill(2) has no memory-safety preconditions. The pid is one of
    // our own (unreaped) children, or a backend of one checked to be its
    // child just before, so it has not been recycled.
    if unsafe { libc::kill(pid, signal.raw()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Registers `handler` to run when the process exits through `exit(3)`,
/// which is how libtest ends (returning from `main` or
/// `std::process::exit`). Returns false if registration failed.
pub(crate) fn run_at_exit(handler: extern "C" fn()) -> bool {
    // SAFETY: atexit(3) only stores the function pointer; `handler` is a
    // plain `extern "C" fn` with no arguments that never unwinds (callers
    // wrap their body in `catch_unwind`).
    unsafe { libc::atexit(handler) == 0 }
}

/// The user and group ids of the user `name`, if it exists.
pub(crate) fn user_ids(name: &str) -> Option<(u32, u32)> {
    let name = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: an all-zero `passwd` is a valid value (null pointers, zero ids) for
    // getpwnam_r(3) to fill in; `buf` outlives the call and its length is passed with it, and
    // the strings the entry points to (into `buf`) are not read. `found` is either null or
    // points at `entry`, which is read only after the call returned.
    unsafe {
        let mut entry: libc::passwd = std::mem::zeroed();
        let rc = libc::getpwnam_r(name.as_ptr(), &mut entry, buf.as_mut_ptr(), buf.len(), &mut found);
        if rc != 0 || found.is_null() {
            return None;
        }
        Some((entry.pw_uid, entry.pw_gid))
    }
}

/// Gives `path` to the user and group `ids` (not following a symlink).
pub(crate) fn chown(path: &std::path::Path, (uid, gid): (u32, u32)) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
}

/// True when the harness runs as root (servers then need `--user=root`).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid(2) always succeeds and has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Takes an exclusive `flock(2)` on `file` without waiting: `Ok(false)` if another open file
/// description holds it. The lock lasts until `file` is closed, or its process ends however it
/// ends (`kill -9` included).
pub(crate) fn try_lock_exclusive(file: &std::fs::File) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock(2) on a file descriptor `file` owns and keeps open for the call; it reads
    // and writes no memory of ours.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Ok(false);
    }
    Err(error)
}

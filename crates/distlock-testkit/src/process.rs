//! [`ServerProcess`]: one OS process of a test server, with the controls
//! tests need (stop, kill -9, pause, resume, restart).

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::sys::{self, Signal};
use crate::{spawner, HarnessError};

/// How long [`ServerProcess::stop`] waits after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often readiness is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// How many log lines error messages include.
const LOG_TAIL_LINES: usize = 40;

/// A readiness check: `Ok` when ready, `Err(why not)` otherwise. It must be
/// bounded in time (use connect/read timeouts).
pub(crate) type Probe = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Everything needed to (re)start one server process.
pub(crate) struct ProcessSpec {
    /// For messages, e.g. `redis-server on 127.0.0.1:40001`.
    pub(crate) name: String,
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<OsString>,
    /// Working directory.
    pub(crate) cwd: PathBuf,
    /// stdout and stderr are appended here.
    pub(crate) log_path: PathBuf,
    pub(crate) ready_timeout: Duration,
    pub(crate) probe: Probe,
    /// Extra environment variables (a [`StoreClock`](crate::StoreClock)'s).
    pub(crate) env: Vec<(OsString, OsString)>,
}

/// How a server process is launched and stopped, beyond its command line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Launch {
    /// Run as this user and group id (a server that refuses to run as root, started by root).
    pub(crate) run_as: Option<(u32, u32)>,
    /// The signal of a graceful [`stop`](ServerProcess::stop).
    pub(crate) stop_signal: Signal,
    /// Called with the working directory before every launch: waits until what an earlier
    /// run left behind (processes of a server killed with `kill -9`) is gone.
    pub(crate) settle: Option<fn(&Path)>,
}

impl Default for Launch {
    fn default() -> Self {
        Self {
            run_as: None,
            stop_signal: Signal::Term,
            settle: None,
        }
    }
}

/// One running (or stopped) server process.
///
/// The process was spawned with `PR_SET_PDEATHSIG = SIGKILL`, so it dies with
/// the test process; it is also killed (SIGKILL) when this value is dropped.
/// Its stdout and stderr are appended to [`log_path`](Self::log_path).
///
/// [`restart`](Self::restart) starts the same command line again (same port,
/// same data directory) and blocks until the server answers its readiness
/// check.
pub struct ServerProcess {
    spec: ProcessSpec,
    how: Launch,
    /// Behind a mutex so `&self` methods can poll it and exit handlers can
    /// kill shared servers they only hold by `&'static`.
    child: Mutex<Option<Child>>,
    paused: bool,
}

impl fmt::Debug for ServerProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerProcess")
            .field("name", &self.spec.name)
            .field("program", &self.spec.program)
            .field("args", &self.spec.args)
            .field("pid", &self.pid())
            .field("paused", &self.paused)
            .finish()
    }
}

impl ServerProcess {
    /// Spawns the process and waits until it is ready.
    pub(crate) fn start(spec: ProcessSpec) -> Result<Self, HarnessError> {
        Self::start_with(spec, Launch::default())
    }

    /// Spawns the process as `launch` says and waits until it is ready.
    pub(crate) fn start_with(spec: ProcessSpec, launch: Launch) -> Result<Self, HarnessError> {
        let mut process = ServerProcess {
            spec,
            how: launch,
            child: Mutex::new(None),
            paused: false,
        };
        process.launch()?;
        process.wait_ready()?; // on error, dropping `process` kills it
        Ok(process)
    }

    /// Spawns the process without waiting for it to be ready.
    pub(crate) fn spawn(spec: ProcessSpec) -> Result<Self, HarnessError> {
        let mut process = ServerProcess {
            spec,
            how: Launch::default(),
            child: Mutex::new(None),
            paused: false,
        };
        process.launch()?;
        Ok(process)
    }

    fn launch(&mut self) -> Result<(), HarnessError> {
        let spec = &self.spec;
        if let Some(settle) = self.how.settle {
            settle(&spec.cwd);
        }
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log_path)
            .map_err(|e| HarnessError::io(format!("opening {}", spec.log_path.display()), e))?;
        // A marker between runs, so a restarted server's log reads clearly.
        // Best effort: the log is only for humans.
        let _ = writeln!(log, "--- distlock-testkit: starting {}", self.command_line());
        let stderr = log
            .try_clone()
            .map_err(|e| HarnessError::io("duplicating the log file handle", e))?;
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .current_dir(&spec.cwd)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .envs(spec.env.iter().map(|(k, v)| (k, v)));
        if let Some((uid, gid)) = self.how.run_as {
            cmd.uid(uid).gid(gid);
        }
        let child = spawner::spawn(cmd)
            .map_err(|e| HarnessError::io(format!("starting {}", spec.program.display()), e))?;
        *self.child_mut() = Some(child);
        self.paused = false;
        Ok(())
    }

    /// Blocks until the readiness check passes; fails if the process exits
    /// or the check keeps failing for the server's ready timeout (10 s for
    /// redis/memcached, 30 s for MariaDB/ZooKeeper).
    pub fn wait_ready(&self) -> Result<(), HarnessError> {
        let timeout = self.spec.ready_timeout;
        let deadline = Instant::now() + timeout;
        loop {
            match self.exit_status() {
                Ok(Some(status)) => {
                    return Err(self.not_ready(format!("it exited ({status}) before it was ready")))
                }
                Ok(None) => {}
                Err(e) => return Err(self.not_ready(e.to_string())),
            }
            let failure = match (self.spec.probe)() {
                Ok(()) => return Ok(()),
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                return Err(self.not_ready(format!(
                    "still not ready after {timeout:?}; last check: {failure}"
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    fn not_ready(&self, reason: String) -> HarnessError {
        HarnessError::NotReady {
            server: self.spec.name.clone(),
            reason,
            log_tail: self.log_tail(),
        }
    }

    /// `Ok(Some(status))` once the process has exited, `Ok(None)` while it
    /// runs (or is paused); an error if it was never started.
    fn exit_status(&self) -> Result<Option<ExitStatus>, HarnessError> {
        match self.lock_child().as_mut() {
            Some(child) => child
                .try_wait()
                .map_err(|e| HarnessError::io("polling the server process", e)),
            None => Err(HarnessError::Other(format!("{} is not started", self.spec.name))),
        }
    }

    /// The OS process id, or `None` when the process is not running.
    pub fn pid(&self) -> Option<u32> {
        let mut child = self.lock_child();
        let child = child.as_mut()?;
        match child.try_wait() {
            Ok(None) => Some(child.id()),
            _ => None,
        }
    }

    /// True while the process exists (also while paused).
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// True between [`pause`](Self::pause) and [`resume`](Self::resume).
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Graceful stop: SIGTERM (SIGINT for PostgreSQL, its fast shutdown; and
    /// SIGCONT, in case it is paused), wait up to 10 s for it to exit, then
    /// SIGKILL. Does nothing if not running.
    pub fn stop(&mut self) -> Result<(), HarnessError> {
        let Some(pid) = self.pid() else {
            self.paused = false;
            return Ok(());
        };
        // Errors mean it exited meanwhile, which is what we want anyway.
        let _ = sys::send_signal(pid, self.how.stop_signal);
        let _ = sys::send_signal(pid, Signal::Cont);
        self.paused = false;
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if !self.is_running() {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(10));
        }
        self.kill()
    }

    /// `kill -9`: SIGKILL, then reap the process. Does nothing if not
    /// running.
    pub fn kill(&mut self) -> Result<(), HarnessError> {
        self.paused = false;
        let name = self.spec.name.clone();
        if let Some(child) = self.child_mut().as_mut() {
            child
                .kill()
                .map_err(|e| HarnessError::io(format!("killing {name}"), e))?;
            child
                .wait()
                .map_err(|e| HarnessError::io(format!("reaping {name}"), e))?;
        }
        Ok(())
    }

    /// Freezes the process with SIGSTOP (it keeps its sockets open but
    /// answers nothing) and waits until the kernel reports it stopped.
    pub fn pause(&mut self) -> Result<(), HarnessError> {
        let pid = self.running_pid("pause")?;
        sys::send_signal(pid, Signal::Stop)
            .map_err(|e| HarnessError::io(format!("sending SIGSTOP to {}", self.spec.name), e))?;
        self.paused = true;
        self.wait_for_state(pid, |state| state == 'T', "stopped")
    }

    /// Thaws a process frozen by [`pause`](Self::pause) (SIGCONT).
    pub fn resume(&mut self) -> Result<(), HarnessError> {
        let pid = self.running_pid("resume")?;
        sys::send_signal(pid, Signal::Cont)
            .map_err(|e| HarnessError::io(format!("sending SIGCONT to {}", self.spec.name), e))?;
        self.paused = false;
        self.wait_for_state(pid, |state| state != 'T', "running again")
    }

    /// Stops the process if it runs (see [`stop`](Self::stop)), starts the
    /// same command line again (same port, same data directory) and blocks
    /// until it is ready.
    pub fn restart(&mut self) -> Result<(), HarnessError> {
        self.restart_no_wait()?;
        self.wait_ready()
    }

    /// Like [`restart`](Self::restart) but returns right after spawning;
    /// call [`wait_ready`](Self::wait_ready) later. Useful when several
    /// processes must come back together (e.g. a ZooKeeper quorum).
    pub fn restart_no_wait(&mut self) -> Result<(), HarnessError> {
        self.stop()?;
        self.launch()
    }

    /// The file the process's stdout and stderr are appended to.
    pub fn log_path(&self) -> &Path {
        &self.spec.log_path
    }

    /// The last lines of the log file (empty if it cannot be read).
    pub fn log_tail(&self) -> String {
        read_tail(&self.spec.log_path, LOG_TAIL_LINES)
    }

    /// A short description, e.g. `redis-server on 127.0.0.1:40001`.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The command line, for messages.
    pub fn command_line(&self) -> String {
        let mut line = self.spec.program.display().to_string();
        for arg in &self.spec.args {
            line.push(' ');
            line.push_str(&arg.to_string_lossy());
        }
        line
    }

    /// Kills the process through a shared reference; for exit handlers.
    pub(crate) fn kill_now(&self) {
        if let Some(child) = self.lock_child().as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn running_pid(&self, action: &str) -> Result<u32, HarnessError> {
        self.pid().ok_or_else(|| {
            HarnessError::Other(format!("cannot {action} {}: it is not running", self.spec.name))
        })
    }

    fn wait_for_state(
        &self,
        pid: u32,
        wanted: impl Fn(char) -> bool,
        description: &str,
    ) -> Result<(), HarnessError> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match process_state(pid) {
                Some(state) if wanted(state) => return Ok(()),
                None => {
                    return Err(HarnessError::Other(format!(
                        "{} vanished while waiting for it to be {description}",
                        self.spec.name
                    )))
                }
                Some(_) if Instant::now() >= deadline => {
                    return Err(HarnessError::Other(format!(
                        "{} was not {description} after 5 s",
                        self.spec.name
                    )))
                }
                Some(_) => thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    fn lock_child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn child_mut(&mut self) -> &mut Option<Child> {
        self.child.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `T`, `Z`, ...), or
/// `None` if there is no such process.
pub(crate) fn process_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) STATE ..." where COMM may contain spaces and parentheses.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.trim_start().chars().next()
}

/// The parent of process `pid`, from `/proc/<pid>/stat`; `None` if it is gone.
pub(crate) fn parent_pid(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) STATE PPID ..."
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The last `lines` lines of a text file (at most 16 KiB of it).
pub(crate) fn read_tail(path: &Path, lines: usize) -> String {
    let Ok(bytes) = fs::read(path) else {
        return String::new();
    };
    let start = bytes.len().saturating_sub(16 * 1024);
    let text = String::from_utf8_lossy(&bytes[start..]);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Finds an executable: a path containing `/` is used as is, a bare name is
/// looked up in `PATH` and in the sbin directories (`mariadbd` lives in
/// `/usr/sbin`, which is not on every user's `PATH`).
pub(crate) fn find_program(program: &Path, package: &str) -> Result<PathBuf, HarnessError> {
    let missing = || HarnessError::missing(program.display().to_string(), package);
    if program.components().count() > 1 || program.is_absolute() {
        return if is_executable(program) {
            Ok(program.to_path_buf())
        } else {
            Err(missing())
        };
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_var)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(missing)
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs a one-off setup command (e.g. `mariadb-install-db`) to completion,
/// output appended to `log_path`, killing it after `timeout`.
pub(crate) fn run_setup_command(
    program: &Path,
    args: &[OsString],
    cwd: &Path,
    log_path: &Path,
    timeout: Duration,
) -> Result<(), HarnessError> {
    run_setup_command_as(program, args, cwd, log_path, timeout, None)
}

/// [`run_setup_command`], as the user and group `run_as` when given.
pub(crate) fn run_setup_command_as(
    program: &Path,
    args: &[OsString],
    cwd: &Path,
    log_path: &Path,
    timeout: Duration,
    run_as: Option<(u32, u32)>,
) -> Result<(), HarnessError> {
    let what = program.display().to_string();
    let log = File::create(log_path)
        .map_err(|e| HarnessError::io(format!("creating {}", log_path.display()), e))?;
    let stderr = log
        .try_clone()
        .map_err(|e| HarnessError::io("duplicating the log file handle", e))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(stderr);
    if let Some((uid, gid)) = run_as {
        cmd.uid(uid).gid(gid);
    }
    let mut child = spawner::spawn(cmd).map_err(|e| HarnessError::io(format!("starting {what}"), e))?;
    let deadline = Instant::now() + timeout;
    let failure = loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => break format!("{what} failed ({status})"),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break format!("{what} did not finish within {timeout:?}");
            }
            Ok(None) => thread::sleep(POLL_INTERVAL),
            Err(e) => return Err(HarnessError::io(format!("waiting for {what}"), e)),
        }
    };
    Err(HarnessError::Other(format!(
        "{failure}\n--- last lines of {} ---\n{}",
        log_path.display(),
        read_tail(log_path, LOG_TAIL_LINES)
    )))
}

/// Adds the process controls to a server type that has
/// `process(&self) -> &ServerProcess` and
/// `process_mut(&mut self) -> &mut ServerProcess`.
macro_rules! delegate_process_controls {
    ($server:ty) => {
        impl $server {
            /// The server's OS process id, `None` when it is not running.
            pub fn pid(&self) -> Option<u32> {
                self.process().pid()
            }

            /// True while the server process exists (also while paused).
            pub fn is_running(&self) -> bool {
                self.process().is_running()
            }

            /// Graceful stop (SIGTERM, then SIGKILL after 10 s); see
            /// [`ServerProcess::stop`](crate::ServerProcess::stop).
            pub fn stop(&mut self) -> Result<(), $crate::HarnessError> {
                self.process_mut().stop()
            }

            /// `kill -9` the server and reap it.
            pub fn kill(&mut self) -> Result<(), $crate::HarnessError> {
                self.process_mut().kill()
            }

            /// Freeze the server with SIGSTOP.
            pub fn pause(&mut self) -> Result<(), $crate::HarnessError> {
                self.process_mut().pause()
            }

            /// Thaw the server with SIGCONT.
            pub fn resume(&mut self) -> Result<(), $crate::HarnessError> {
                self.process_mut().resume()
            }

            /// Start the server again on the same port with the same data
            /// directory (stopping it first if it runs); blocks until ready.
            pub fn restart(&mut self) -> Result<(), $crate::HarnessError> {
                self.process_mut().restart()
            }
        }
    };
}
pub(crate) use delegate_process_controls;

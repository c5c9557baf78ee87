//! PostgreSQL (`postgres`) on a free loopback port, initialised by `initdb`
//! in a temporary directory.
//!
//! PostgreSQL refuses to run as root: when the tests run as root, `initdb`,
//! `postgres` and the data directory belong to the unprivileged `postgres`
//! user that Debian's package creates.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tempfile::TempDir;

use crate::client_run::run_bounded;
use crate::port::{free_port, retry_if_port_taken};
use crate::probe::loopback;
use crate::process::{
    delegate_process_controls, parent_pid, process_state, run_setup_command_as, Launch, ProcessSpec,
};
use crate::sys::{self, Signal};
use crate::{temp_dir, HarnessError, ServerProcess};

/// How long `start`/`restart` wait for the server to accept logins.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on `initdb`.
const INITDB_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on one run of `psql`.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// The Debian package with the server programs.
const PACKAGE: &str = "postgresql";
/// The unprivileged user the server runs as when the tests run as root.
const SERVER_USER: &str = "postgres";

/// The superuser that [`PostgresServer::url`] logs in as.
pub const POSTGRES_USER: &str = "distlock";
/// The password of [`POSTGRES_USER`].
pub const POSTGRES_PASSWORD: &str = "distlock";
/// The database created for the tests.
pub const POSTGRES_DATABASE: &str = "distlock_test";

/// Options for [`PostgresServer::start_with`].
#[derive(Debug, Clone, Default)]
pub struct PostgresOptions {
    /// Extra `postgres` arguments, e.g. `["-c", "max_connections=20"]`.
    pub extra_args: Vec<String>,
    /// The directory holding `initdb`, `postgres` and `psql`; default the
    /// newest `/usr/lib/postgresql/*/bin` (Debian's layout), else `PATH`.
    pub bin_dir: Option<PathBuf>,
    /// Run the server on this wall clock, which the test can move
    /// ([`StoreClock::jump`](crate::StoreClock::jump)). Default: the true clock.
    pub clock: Option<crate::StoreClock>,
}

/// A PostgreSQL server owned by one test.
///
/// `start` runs `initdb` in a fresh temporary directory (superuser
/// [`POSTGRES_USER`] / [`POSTGRES_PASSWORD`], MD5 password logins over TCP,
/// trust on the Unix socket), starts `postgres` on `127.0.0.1` without
/// `fsync` and `full_page_writes` (a commit still reaches the OS before it is
/// acknowledged, so it survives `kill -9`, though not a power cut) and
/// creates the database [`POSTGRES_DATABASE`]. Logs: `initdb.log` and
/// `server.log` in [`dir`](Self::dir). Killed and removed when dropped.
///
/// [`stop`](Self::stop) is PostgreSQL's fast shutdown (SIGINT: sessions are
/// cut, not waited for); [`kill`](Self::kill) is `kill -9` of the postmaster,
/// whose backends then exit on their own; [`restart`](Self::restart) reuses
/// the port and the data directory.
///
/// ```no_run
/// use distlock_testkit::PostgresServer;
///
/// let mut pg = PostgresServer::start().expect("start postgres");
/// let url = pg.url(); // postgres://distlock:distlock@127.0.0.1:PORT/distlock_test
/// assert_eq!(pg.sql("SELECT 1").expect("psql").trim(), "1");
/// pg.restart().expect("restart on the same port");
/// # drop(url);
/// ```
#[derive(Debug)]
pub struct PostgresServer {
    // Field order matters: the process is killed before the directory goes.
    process: ServerProcess,
    port: u16,
    psql: PathBuf,
    dir: TempDir,
}

impl PostgresServer {
    /// Initialises and starts a server with default options; blocks until
    /// `SELECT 1` works over TCP (typically one to two seconds).
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(PostgresOptions::default())
    }

    /// Initialises and starts a server with `options`; blocks until
    /// `SELECT 1` works over TCP.
    pub fn start_with(options: PostgresOptions) -> Result<Self, HarnessError> {
        let programs = Programs::find(options.bin_dir.as_deref())?;
        retry_if_port_taken(|| {
            let dir = programs.owned_temp_dir("postgres")?;
            init(&programs.initdb, dir.path(), programs.run_as)?;
            let server = Self::launch(
                &programs,
                dir,
                free_port()?,
                &options.extra_args,
                options.clock.as_ref(),
            )?;
            server
                .psql("postgres", &format!("CREATE DATABASE {POSTGRES_DATABASE}"))
                .map_err(HarnessError::Other)?;
            // initdb stored the password for SCRAM; stored as MD5, a TCP login costs one
            // hash instead of SCRAM's 4096 rounds, which an unoptimized (debug) client takes
            // tens of milliseconds for, per connection.
            server
                .psql(
                    "postgres",
                    &format!(
                        "SET password_encryption = 'md5'; \
                         ALTER ROLE {POSTGRES_USER} PASSWORD '{POSTGRES_PASSWORD}'"
                    ),
                )
                .map_err(HarnessError::Other)?;
            Ok(server)
        })
    }

    /// Starts `postgres` on `port` over the data directory `dir/data` that is already there
    /// (from `initdb`, or a base backup for a standby); blocks until `SELECT 1` works over TCP.
    pub(crate) fn launch(
        programs: &Programs,
        dir: TempDir,
        port: u16,
        extra_args: &[String],
        clock: Option<&crate::StoreClock>,
    ) -> Result<Self, HarnessError> {
        let mut args: Vec<OsString> = [
            "-D".to_owned(),
            dir.path().join("data").display().to_string(),
            "-p".into(),
            port.to_string(),
        ]
        .map(OsString::from)
        .into();
        for setting in [
            "listen_addresses=127.0.0.1".to_owned(),
            format!("unix_socket_directories={}", dir.path().display()),
            "fsync=off".into(),
            "full_page_writes=off".into(),
            "max_connections=300".into(),
            "shared_buffers=16MB".into(),
            "log_min_messages=warning".into(),
        ] {
            args.push("-c".into());
            args.push(setting.into());
        }
        args.extend(extra_args.iter().map(OsString::from));
        let probe_psql = programs.psql.clone();
        let process = ServerProcess::start_with(
            ProcessSpec {
                name: format!("postgres on 127.0.0.1:{port}"),
                program: programs.postgres.clone(),
                args,
                cwd: dir.path().to_path_buf(),
                log_path: dir.path().join("server.log"),
                ready_timeout: READY_TIMEOUT,
                probe: Box::new(move || ready(&probe_psql, port)),
                env: crate::clock::env_of(clock),
            },
            Launch {
                run_as: programs.run_as,
                stop_signal: Signal::Int,
                settle: Some(shared_memory_released),
            },
        )?;
        Ok(PostgresServer {
            process,
            port,
            psql: programs.psql.clone(),
            dir,
        })
    }

    /// The TCP port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    /// `postgres://distlock:distlock@127.0.0.1:PORT/distlock_test`.
    pub fn url(&self) -> String {
        format!(
            "postgres://{POSTGRES_USER}:{POSTGRES_PASSWORD}@127.0.0.1:{}/{POSTGRES_DATABASE}",
            self.port
        )
    }

    /// The temporary directory: `data/`, the Unix socket and the logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs SQL as [`POSTGRES_USER`] through `psql` over the Unix socket, in
    /// database [`POSTGRES_DATABASE`]; returns the output (tab-separated, no
    /// column names), stopping at the first error. Blocks up to 10 s.
    pub fn sql(&self, statements: &str) -> Result<String, HarnessError> {
        self.psql(POSTGRES_DATABASE, statements)
            .map_err(HarnessError::Other)
    }

    fn psql(&self, database: &str, statements: &str) -> Result<String, String> {
        let host = self.dir.path().display().to_string();
        let port = self.port.to_string();
        run_psql(
            &self.psql,
            &[
                "-X",
                "-A",
                "-t",
                "-q",
                "-F",
                "\t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                &host,
                "-p",
                &port,
                "-U",
                POSTGRES_USER,
                "-d",
                database,
                "-c",
                statements,
            ],
        )
    }

    /// Freezes one backend of this server (SIGSTOP), `pid` as `pg_stat_activity.pid` or
    /// `pg_backend_pid()` gives it: its client's connection stays open but hears nothing
    /// more, as behind a silent partition, while every other session works on. The backend
    /// thaws (SIGCONT) when the returned value is dropped. A `pid` that is not a child of this
    /// server's postmaster is refused.
    ///
    /// ```no_run
    /// use distlock_testkit::PostgresServer;
    ///
    /// let pg = PostgresServer::start().expect("start postgres");
    /// let pid: u32 = pg
    ///     .sql("SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN%'")
    ///     .expect("psql")
    ///     .trim()
    ///     .parse()
    ///     .expect("one listening backend");
    /// let paused = pg.pause_backend(pid).expect("paused");
    /// // ... its client hears nothing now ...
    /// drop(paused); // thawed
    /// ```
    pub fn pause_backend(&self, pid: u32) -> Result<PausedBackend, HarnessError> {
        let postmaster = self.process.pid();
        if postmaster.is_none() || parent_pid(pid) != postmaster {
            return Err(HarnessError::Other(format!(
                "process {pid} is not a backend of the PostgreSQL server on port {}",
                self.port
            )));
        }
        sys::send_signal(pid, Signal::Stop)
            .map_err(|e| HarnessError::io(format!("sending SIGSTOP to backend {pid}"), e))?;
        let paused = PausedBackend { pid };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while process_state(pid) != Some('T') {
            if std::time::Instant::now() >= deadline {
                return Err(HarnessError::Other(format!(
                    "backend {pid} was not stopped after 5 s"
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(paused)
    }

    /// The server process and its controls.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }

    /// The server process and its controls, mutably.
    pub fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }
}

delegate_process_controls!(PostgresServer);

/// A backend frozen by [`PostgresServer::pause_backend`]; dropping it thaws the backend.
#[derive(Debug)]
#[must_use = "dropping it thaws the backend at once"]
pub struct PausedBackend {
    pid: u32,
}

impl PausedBackend {
    /// The backend's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

impl Drop for PausedBackend {
    fn drop(&mut self) {
        // An error means the backend is gone (its server was stopped): nothing to thaw.
        let _ = sys::send_signal(self.pid, Signal::Cont);
    }
}

/// The server programs of one PostgreSQL installation, and the user they run as.
#[derive(Debug, Clone)]
pub(crate) struct Programs {
    pub(crate) initdb: PathBuf,
    pub(crate) postgres: PathBuf,
    pub(crate) psql: PathBuf,
    /// The directory of them all (`pg_basebackup` is there too).
    pub(crate) bin: PathBuf,
    /// The unprivileged user the server runs as when the tests run as root.
    pub(crate) run_as: Option<(u32, u32)>,
}

impl Programs {
    /// The programs in `bin_dir` (default: see `bin_dir`), run as [`SERVER_USER`] when the
    /// tests run as root.
    pub(crate) fn find(bin_dir: Option<&Path>) -> Result<Self, HarnessError> {
        let bin = self::bin_dir(bin_dir)?;
        let run_as = if sys::is_root() {
            Some(sys::user_ids(SERVER_USER).ok_or_else(|| {
                HarnessError::Other(format!(
                    "postgres refuses to run as root and there is no {SERVER_USER:?} user to run \
                     it as: run scripts/install-test-deps (or: apt-get install -y {PACKAGE})"
                ))
            })?)
        } else {
            None
        };
        Ok(Self {
            initdb: bin.join("initdb"),
            postgres: bin.join("postgres"),
            psql: bin.join("psql"),
            bin,
            run_as,
        })
    }

    /// A fresh temporary directory `distlock-KIND-XXXXXX` that the server's user owns.
    pub(crate) fn owned_temp_dir(&self, kind: &str) -> Result<TempDir, HarnessError> {
        let dir = temp_dir(kind)?;
        self.give(dir.path())?;
        Ok(dir)
    }

    /// Makes `path` the server's user's (when the tests run as root).
    pub(crate) fn give(&self, path: &Path) -> Result<(), HarnessError> {
        match self.run_as {
            Some(ids) => {
                sys::chown(path, ids).map_err(|e| HarnessError::io(format!("chown {}", path.display()), e))
            }
            None => Ok(()),
        }
    }
}

/// The directory of the server programs: `given`, else the newest
/// `/usr/lib/postgresql/<version>/bin` with a `postgres` in it, else the
/// directory of `postgres` on `PATH`.
fn bin_dir(given: Option<&Path>) -> Result<PathBuf, HarnessError> {
    let complete = |dir: &Path| {
        ["initdb", "postgres", "psql"]
            .iter()
            .all(|p| is_executable(&dir.join(p)))
    };
    if let Some(dir) = given {
        return if complete(dir) {
            Ok(dir.to_path_buf())
        } else {
            Err(HarnessError::missing(
                dir.join("postgres").display().to_string(),
                PACKAGE,
            ))
        };
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| complete(bin))
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_var)
        .find(|dir| complete(dir))
        .ok_or_else(|| HarnessError::missing("postgres (with initdb and psql)", PACKAGE))
}

/// Waits (up to 10 s) until no process is attached to the shared memory of the server last
/// run in `dir`: backends of a postmaster killed with `kill -9` live on until they notice, and
/// a new postmaster refuses to start while they do ("pre-existing shared memory block is still
/// in use"). Returns at once when no server ran there yet.
fn shared_memory_released(dir: &Path) {
    // The seventh line of postmaster.pid is the segment's key and id.
    let Ok(pid_file) = std::fs::read_to_string(dir.join("data").join("postmaster.pid")) else {
        return;
    };
    let Some(id) = pid_file
        .lines()
        .nth(6)
        .and_then(|line| line.split_whitespace().nth(1))
        .map(str::to_owned)
    else {
        return;
    };
    let attached = || {
        std::fs::read_to_string("/proc/sysvipc/shm")
            .unwrap_or_default()
            .lines()
            .skip(1)
            .map(|row| row.split_whitespace().collect::<Vec<_>>())
            // Columns: key shmid perms size cpid lpid nattch ...
            .any(|cols| cols.get(1) == Some(&id.as_str()) && cols.get(6).is_some_and(|n| *n != "0"))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while attached() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `initdb` into `dir/data`: the test superuser with its password (MD5 over
/// TCP), trust on the Unix socket, UTF-8, no fsync.
fn init(initdb: &Path, dir: &Path, run_as: Option<(u32, u32)>) -> Result<(), HarnessError> {
    let pwfile = dir.join("pwfile");
    std::fs::write(&pwfile, format!("{POSTGRES_PASSWORD}\n"))
        .map_err(|e| HarnessError::io(format!("writing {}", pwfile.display()), e))?;
    if let Some(ids) = run_as {
        sys::chown(&pwfile, ids).map_err(|e| HarnessError::io(format!("chown {}", pwfile.display()), e))?;
    }
    let args: Vec<OsString> = [
        "-D".to_owned(),
        dir.join("data").display().to_string(),
        "-U".into(),
        POSTGRES_USER.into(),
        format!("--pwfile={}", pwfile.display()),
        "--auth-host=md5".into(),
        "--auth-local=trust".into(),
        "--encoding=UTF8".into(),
        "--locale=C".into(),
        "--no-sync".into(),
    ]
    .map(OsString::from)
    .into();
    run_setup_command_as(
        initdb,
        &args,
        dir,
        &dir.join("initdb.log"),
        INITDB_TIMEOUT,
        run_as,
    )
}

/// Ready when the test user can run `SELECT 1` over TCP with its password.
fn ready(psql: &Path, port: u16) -> Result<(), String> {
    let port = port.to_string();
    let output = run_psql(
        psql,
        &[
            "-X",
            "-A",
            "-t",
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            POSTGRES_USER,
            "-d",
            "postgres",
            "-c",
            "SELECT 1",
        ],
    )?;
    if output.trim() == "1" {
        Ok(())
    } else {
        Err(format!("SELECT 1 returned {output:?}"))
    }
}

/// Runs `psql`, bounded by [`CLIENT_TIMEOUT`]; `Ok(stdout)` on success,
/// `Err(message with stderr)` otherwise.
fn run_psql(psql: &Path, args: &[&str]) -> Result<String, String> {
    let mut command = Command::new(psql);
    command
        .args(args)
        .env("PGPASSWORD", POSTGRES_PASSWORD)
        .env("PGCONNECT_TIMEOUT", "2");
    run_bounded(command, "psql", CLIENT_TIMEOUT)
}

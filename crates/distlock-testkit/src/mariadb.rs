//! MariaDB (`mariadbd`) on a free loopback port, initialised in a
//! temporary data directory.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tempfile::TempDir;

use crate::client_run::run_bounded;
use crate::port::{free_port, retry_if_port_taken};
use crate::probe::{self, loopback, PROBE_TIMEOUT};
use crate::process::{delegate_process_controls, find_program, run_setup_command, ProcessSpec};
use crate::sys;
use crate::{temp_dir, HarnessError, ServerProcess};

/// How long `start`/`restart` wait for the server to accept logins.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on `mariadb-install-db`.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on one run of the `mariadb` client.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// The user with all privileges that [`MariaDbServer::url`] logs in as.
pub const MARIADB_USER: &str = "distlock";
/// The password of [`MARIADB_USER`].
pub const MARIADB_PASSWORD: &str = "distlock";
/// The database created for the tests.
pub const MARIADB_DATABASE: &str = "distlock_test";

/// Options for [`MariaDbServer::start_with`].
#[derive(Debug, Clone, Default)]
pub struct MariaDbOptions {
    /// Extra `mariadbd` arguments, e.g. `["--max-connections=20"]`.
    pub extra_args: Vec<String>,
    /// The `mariadbd` executable; default `mariadbd` (also found in
    /// `/usr/sbin` when that is not on `PATH`).
    pub mariadbd: Option<PathBuf>,
    /// The `mariadb-install-db` executable; default `mariadb-install-db`.
    pub install_db: Option<PathBuf>,
    /// The `mariadb` command-line client; default `mariadb`.
    pub client: Option<PathBuf>,
    /// Run the server on this wall clock, which the test can move
    /// ([`StoreClock::jump`](crate::StoreClock::jump)). Default: the true clock.
    pub clock: Option<crate::StoreClock>,
}

/// A MariaDB server owned by one test.
///
/// `start` initialises a fresh data directory with `mariadb-install-db`
/// (system tables, no test database, root without password on the local
/// socket), creates the database [`MARIADB_DATABASE`] and the user
/// [`MARIADB_USER`] / [`MARIADB_PASSWORD`] with all privileges, then runs
/// `mariadbd` on `127.0.0.1` with a small buffer pool and no binary log.
/// Logs: `install.log` and `server.log` in [`dir`](Self::dir). Killed and
/// removed when dropped.
#[derive(Debug)]
pub struct MariaDbServer {
    // Field order matters: the process is killed before the directory goes.
    process: ServerProcess,
    port: u16,
    client: PathBuf,
    dir: TempDir,
}

impl MariaDbServer {
    /// Initialises and starts a server with default options; blocks until
    /// `SELECT 1` works over TCP (typically about a second).
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(MariaDbOptions::default())
    }

    /// Initialises and starts a server with `options`; blocks until
    /// `SELECT 1` works over TCP.
    pub fn start_with(options: MariaDbOptions) -> Result<Self, HarnessError> {
        let program = |given: &Option<PathBuf>, default: &str, package: &str| {
            let name = given.clone().unwrap_or_else(|| PathBuf::from(default));
            find_program(&name, package)
        };
        let mariadbd = program(&options.mariadbd, "mariadbd", "mariadb-server")?;
        let install_db = program(&options.install_db, "mariadb-install-db", "mariadb-server")?;
        let client = program(&options.client, "mariadb", "mariadb-client")?;
        retry_if_port_taken(|| {
            let dir = temp_dir("mariadb")?;
            install(&install_db, dir.path())?;
            let port = free_port()?;
            let mut args: Vec<OsString> = vec!["--no-defaults".into()];
            args.extend(common_args(dir.path()));
            args.extend(
                [
                    format!("--socket={}", socket_path(dir.path()).display()),
                    format!("--pid-file={}", dir.path().join("mariadbd.pid").display()),
                    format!("--tmpdir={}", dir.path().display()),
                    format!("--port={port}"),
                    "--bind-address=127.0.0.1".into(),
                    "--skip-log-bin".into(),
                    "--innodb-flush-log-at-trx-commit=2".into(),
                    "--innodb-doublewrite=0".into(),
                    "--character-set-server=utf8mb4".into(),
                    "--collation-server=utf8mb4_general_ci".into(),
                    "--max-connections=500".into(),
                ]
                .map(OsString::from),
            );
            args.extend(options.extra_args.iter().map(OsString::from));
            let probe_client = client.clone();
            let process = ServerProcess::start(ProcessSpec {
                name: format!("mariadbd on 127.0.0.1:{port}"),
                program: mariadbd.clone(),
                args,
                cwd: dir.path().to_path_buf(),
                log_path: dir.path().join("server.log"),
                ready_timeout: READY_TIMEOUT,
                probe: Box::new(move || ready(&probe_client, port)),
                env: crate::clock::env_of(options.clock.as_ref()),
            })?;
            Ok(MariaDbServer {
                process,
                port,
                client: client.clone(),
                dir,
            })
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

    /// `mysql://distlock:distlock@127.0.0.1:PORT/distlock_test`.
    pub fn url(&self) -> String {
        format!(
            "mysql://{MARIADB_USER}:{MARIADB_PASSWORD}@127.0.0.1:{}/{MARIADB_DATABASE}",
            self.port
        )
    }

    /// The server's Unix socket (root can log in there without password).
    pub fn socket_path(&self) -> PathBuf {
        socket_path(self.dir.path())
    }

    /// The temporary directory: `data/`, the socket and the logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs SQL as root through the `mariadb` client over the socket, in
    /// database [`MARIADB_DATABASE`]; returns the output (tab-separated,
    /// no column names). Blocks up to 10 s.
    pub fn sql(&self, statements: &str) -> Result<String, HarnessError> {
        self.run_sql(statements, "--skip-column-names")
    }

    /// As [`sql`](Self::sql), each row printed vertically as `name: value` lines (for
    /// statements such as `SHOW SLAVE STATUS`, whose columns are many and vary by version).
    pub(crate) fn sql_vertical(&self, statements: &str) -> Result<String, HarnessError> {
        self.run_sql(statements, "--vertical")
    }

    fn run_sql(&self, statements: &str, layout: &str) -> Result<String, HarnessError> {
        let socket = format!("--socket={}", self.socket_path().display());
        run_client(
            &self.client,
            &[
                "--no-defaults",
                &socket,
                "--user=root",
                "--batch",
                layout,
                "--execute",
                statements,
                MARIADB_DATABASE,
            ],
        )
        .map_err(|e| {
            // Named, not quoted whole: a batch of statements can be long.
            let shown: String = statements.chars().take(200).collect();
            let more = if shown.len() < statements.len() { "..." } else { "" };
            HarnessError::Other(format!("{e} (running `{shown}{more}`)"))
        })
    }

    /// Writes a consistent snapshot of `database` to `file` with `mariadb-dump` (one
    /// transaction, no table locks), its binary log position and GTID in comments
    /// (`--master-data=2 --gtid`); blocks up to 10 s.
    pub(crate) fn dump(&self, database: &str, file: &Path) -> Result<(), HarnessError> {
        // The client's package has the dump tool too, beside it.
        let beside = self.client.with_file_name("mariadb-dump");
        let program = match beside.is_file() {
            true => beside,
            false => find_program(Path::new("mariadb-dump"), "mariadb-client")?,
        };
        let mut command = Command::new(program);
        command
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket_path().display()))
            .args(["--user=root", "--single-transaction", "--master-data=2", "--gtid"])
            .arg(format!("--result-file={}", file.display()))
            .arg(database);
        run_bounded(command, "mariadb-dump", CLIENT_TIMEOUT)
            .map(drop)
            .map_err(HarnessError::Other)
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

delegate_process_controls!(MariaDbServer);

fn socket_path(dir: &Path) -> PathBuf {
    dir.join("mariadbd.sock")
}

/// Arguments shared by `mariadb-install-db` (which passes them on to its
/// bootstrap `mariadbd`) and `mariadbd`.
fn common_args(dir: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        format!("--datadir={}", dir.join("data").display()),
        // A temporary directory of its own: installs running at once in the default one
        // collide on the bootstrap's temporary tables.
        format!("--tmpdir={}", dir.display()),
        "--skip-name-resolve".into(),
        "--innodb-buffer-pool-size=16M".into(),
        "--innodb-log-file-size=8M".into(),
    ]
    .map(OsString::from)
    .into();
    if sys::is_root() {
        // mariadbd refuses to run as root unless told to.
        args.push("--user=root".into());
    }
    args
}

/// Creates the system tables, the test database and the test user.
fn install(install_db: &Path, dir: &Path) -> Result<(), HarnessError> {
    let init_sql = dir.join("init.sql");
    // Bootstrap mode starts without grant tables; FLUSH PRIVILEGES loads them
    // so CREATE USER works.
    let sql = format!(
        "CREATE DATABASE IF NOT EXISTS {MARIADB_DATABASE};\n\
         FLUSH PRIVILEGES;\n\
         CREATE USER '{MARIADB_USER}'@'%' IDENTIFIED BY '{MARIADB_PASSWORD}';\n\
         GRANT ALL PRIVILEGES ON *.* TO '{MARIADB_USER}'@'%' WITH GRANT OPTION;\n"
    );
    std::fs::write(&init_sql, sql)
        .map_err(|e| HarnessError::io(format!("writing {}", init_sql.display()), e))?;
    let mut args: Vec<OsString> = vec!["--no-defaults".into()];
    args.extend(common_args(dir));
    args.extend(
        [
            "--auth-root-authentication-method=normal".to_string(),
            "--skip-test-db".into(),
            format!("--extra-file={}", init_sql.display()),
        ]
        .map(OsString::from),
    );
    run_setup_command(install_db, &args, dir, &dir.join("install.log"), INSTALL_TIMEOUT)
}

/// Ready when the server sends its greeting and the test user can run
/// `SELECT 1` over TCP.
fn ready(client: &Path, port: u16) -> Result<(), String> {
    probe::mysql_greeting(loopback(port), PROBE_TIMEOUT)?;
    let port = format!("--port={port}");
    let password = format!("--password={MARIADB_PASSWORD}");
    let user = format!("--user={MARIADB_USER}");
    let output = run_client(
        client,
        &[
            "--no-defaults",
            "--protocol=TCP",
            "--host=127.0.0.1",
            &port,
            &user,
            &password,
            "--connect-timeout=2",
            "--batch",
            "--skip-column-names",
            "--execute",
            "SELECT 1",
            MARIADB_DATABASE,
        ],
    )?;
    if output.trim() == "1" {
        Ok(())
    } else {
        Err(format!("SELECT 1 returned {output:?}"))
    }
}

/// Runs the `mariadb` client, bounded by [`CLIENT_TIMEOUT`]; `Ok(stdout)` on
/// success, `Err(message with stderr)` otherwise.
fn run_client(client: &Path, args: &[&str]) -> Result<String, String> {
    let mut command = Command::new(client);
    command.args(args);
    run_bounded(command, "the mariadb client", CLIENT_TIMEOUT)
}

//! `redis-server` on a free loopback port.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use crate::port::{free_port, retry_if_port_taken};
use crate::probe::{self, loopback};
use crate::process::{delegate_process_controls, find_program, ProcessSpec};
use crate::{temp_dir, HarnessError, ServerProcess};

/// How long `start`/`restart` wait for `PING` to answer `+PONG`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Options for [`RedisServer::start_with`].
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    /// Keep data across restarts: append-only file, fsync'ed on every write
    /// (survives `kill -9`). Off by default (`--save "" --appendonly no`).
    pub persistence: bool,
    /// Extra command-line arguments, e.g. `["--maxmemory", "10mb"]`.
    pub extra_args: Vec<String>,
    /// The `redis-server` executable; a bare name is looked up in `PATH`.
    /// Default: `redis-server`.
    pub binary: Option<PathBuf>,
    /// Run the server on this wall clock, which the test can move
    /// ([`StoreClock::jump`](crate::StoreClock::jump)). Default: the true clock.
    pub clock: Option<crate::StoreClock>,
}

/// A `redis-server` owned by one test: listens on `127.0.0.1` on a free
/// port, works in its own temporary directory (log: `server.log`), and is
/// killed and the directory removed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    // Field order matters: the process is killed before the directory goes.
    process: ServerProcess,
    port: u16,
    dir: TempDir,
}

impl RedisServer {
    /// Starts a server with default options; blocks until it answers `PING`.
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(RedisOptions::default())
    }

    /// Starts a server with `options`; blocks until it answers `PING`.
    pub fn start_with(options: RedisOptions) -> Result<Self, HarnessError> {
        let binary = options
            .binary
            .clone()
            .unwrap_or_else(|| PathBuf::from("redis-server"));
        let binary = find_program(&binary, "redis-server")?;
        retry_if_port_taken(|| {
            let dir = temp_dir("redis")?;
            let port = free_port()?;
            let mut args: Vec<OsString> = vec![
                "--port".into(),
                port.to_string().into(),
                "--bind".into(),
                "127.0.0.1".into(),
                "--dir".into(),
                dir.path().into(),
                "--daemonize".into(),
                "no".into(),
                "--logfile".into(),
                "".into(),
                "--save".into(),
                "".into(),
            ];
            if options.persistence {
                args.extend(["--appendonly", "yes", "--appendfsync", "always"].map(OsString::from));
            } else {
                args.extend(["--appendonly", "no"].map(OsString::from));
            }
            args.extend(options.extra_args.iter().map(OsString::from));
            let process = ServerProcess::start(ProcessSpec {
                name: format!("redis-server on 127.0.0.1:{port}"),
                program: binary.clone(),
                args,
                cwd: dir.path().to_path_buf(),
                log_path: dir.path().join("server.log"),
                ready_timeout: READY_TIMEOUT,
                probe: Box::new(move || ping(loopback(port))),
                env: crate::clock::env_of(options.clock.as_ref()),
            })?;
            Ok(RedisServer { process, port, dir })
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

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's temporary working directory (data and `server.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
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

delegate_process_controls!(RedisServer);

/// `PING` -> `+PONG`.
fn ping(addr: SocketAddr) -> Result<(), String> {
    probe::expect_line(addr, b"PING\r\n", b"+PONG")
}

//! `memcached` on a free loopback port.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use crate::port::{free_port, retry_if_port_taken};
use crate::probe::{self, loopback};
use crate::process::{delegate_process_controls, find_program, ProcessSpec};
use crate::{sys, temp_dir, HarnessError, ServerProcess};

/// How long `start`/`restart` wait for `version` to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Options for [`MemcachedServer::start_with`].
#[derive(Debug, Clone)]
pub struct MemcachedOptions {
    /// Item memory in megabytes (`-m`). Default 64.
    pub memory_mb: u32,
    /// Extra command-line arguments, e.g. `["-M"]` (error instead of
    /// evicting when memory is full).
    pub extra_args: Vec<String>,
    /// The `memcached` executable; a bare name is looked up in `PATH`.
    /// Default: `memcached`.
    pub binary: Option<PathBuf>,
    /// Run the server on this wall clock, which the test can move
    /// ([`StoreClock::jump`](crate::StoreClock::jump)). Default: the true clock.
    pub clock: Option<crate::StoreClock>,
}

impl Default for MemcachedOptions {
    fn default() -> Self {
        MemcachedOptions {
            memory_mb: 64,
            extra_args: Vec::new(),
            binary: None,
            clock: None,
        }
    }
}

/// A `memcached` owned by one test: listens on `127.0.0.1` only (TCP, no
/// UDP) on a free port, logs to `server.log` in its own temporary directory,
/// and is killed and the directory removed when dropped. Memcached keeps no
/// data across restarts.
#[derive(Debug)]
pub struct MemcachedServer {
    // Field order matters: the process is killed before the directory goes.
    process: ServerProcess,
    port: u16,
    dir: TempDir,
}

impl MemcachedServer {
    /// Starts a server with default options; blocks until it answers
    /// `version`.
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(MemcachedOptions::default())
    }

    /// Starts a server with `options`; blocks until it answers `version`.
    pub fn start_with(options: MemcachedOptions) -> Result<Self, HarnessError> {
        let binary = options
            .binary
            .clone()
            .unwrap_or_else(|| PathBuf::from("memcached"));
        let binary = find_program(&binary, "memcached")?;
        retry_if_port_taken(|| {
            let dir = temp_dir("memcached")?;
            let port = free_port()?;
            let mut args: Vec<OsString> = vec![
                "-l".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string().into(),
                "-U".into(),
                "0".into(),
                "-m".into(),
                options.memory_mb.to_string().into(),
            ];
            if sys::is_root() {
                // memcached refuses to run as root without naming a user.
                args.extend(["-u", "root"].map(OsString::from));
            }
            args.extend(options.extra_args.iter().map(OsString::from));
            let process = ServerProcess::start(ProcessSpec {
                name: format!("memcached on 127.0.0.1:{port}"),
                program: binary.clone(),
                args,
                cwd: dir.path().to_path_buf(),
                log_path: dir.path().join("server.log"),
                ready_timeout: READY_TIMEOUT,
                probe: Box::new(move || version(loopback(port))),
                env: crate::clock::env_of(options.clock.as_ref()),
            })?;
            Ok(MemcachedServer { process, port, dir })
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

    /// `memcache://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("memcache://127.0.0.1:{}", self.port)
    }

    /// The server's temporary directory (holds `server.log`).
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

delegate_process_controls!(MemcachedServer);

/// `version` -> `VERSION x.y.z`.
fn version(addr: SocketAddr) -> Result<(), String> {
    probe::expect_line(addr, b"version\r\n", b"VERSION ")
}

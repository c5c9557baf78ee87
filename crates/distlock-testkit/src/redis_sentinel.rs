//! [`RedisSentinelSet`]: a Redis primary, one replica and three Sentinels, all `redis-server`
//! (Sentinel mode is `redis-server sentinel.conf --sentinel`; Debian's `redis-sentinel`
//! package is only a symlink to it), on free loopback ports in one temporary directory.
//!
//! The replica replicates as a user of its own (`masteruser`), so a test can cut the
//! replication link ([`RedisSentinelSet::cut_replication`]: the primary turns that user off
//! and drops its connections; a replica that falls behind) while clients and Sentinels still
//! reach both servers. The link does not go through a [`FaultProxy`](crate::FaultProxy): a
//! Sentinel sees the replica's `master_port` (the proxy's) differ from the primary's and,
//! after the failover timeout, reconfigures the replica to replicate from the primary directly
//! (`+fix-slave-config`), around the proxy. The Sentinels use short timeouts
//! (`down-after-milliseconds` 2000, `failover-timeout` 3000), so a failover takes a few
//! seconds. A Sentinel drops its link to a server that has not answered for half the
//! down-after time and counts the reconnection against it, so a pause of the primary meant
//! not to be a failover must stay well below 1 s.
//!
//! "Primary unreachable" ([`RedisSentinelSet::isolate_primary`]) is a `SIGSTOP` of the
//! primary: every peer (the replica, the Sentinels, every client) then sees it as a real
//! unreachable host sees it, with open sockets that answer nothing, and no proxy is needed
//! between the Sentinels and the data servers (the Sentinels learn the servers' addresses
//! from each other and from `INFO replication`, which a proxy in between would contradict).

use std::ffi::OsString;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::port::{free_port, retry_if_port_taken};
use crate::probe::{self, loopback};
use crate::process::{find_program, ProcessSpec};
use crate::{temp_dir, HarnessError, ServerProcess};

/// The name the Sentinels monitor the primary under.
pub const SENTINEL_MASTER_NAME: &str = "distlock";
/// How many Sentinels a set runs (a quorum of two).
pub const SENTINELS: usize = 3;

/// The user replicas replicate as (on every data server, so that any can be the primary).
const REPLICATION_USER: &str = "replicator";
/// Its password.
const REPLICATION_PASSWORD: &str = "replicator-password";

/// How long a start waits for a server or Sentinel to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a start waits for the replica's link and the Sentinels' view to settle.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);

/// A primary, a replica behind a replication proxy, and three Sentinels; everything is
/// killed and the directory removed when dropped.
#[derive(Debug)]
pub struct RedisSentinelSet {
    // Field order matters: the processes are killed before the directory goes.
    /// Each Sentinel and its port.
    sentinels: Vec<(ServerProcess, u16)>,
    /// Index 0 started as the primary, index 1 as the replica.
    data: Vec<DataServer>,
    /// Which of `data` the set last knew as primary.
    primary: usize,
    dir: TempDir,
}

/// One data server: its process, port and configuration file.
#[derive(Debug)]
struct DataServer {
    process: ServerProcess,
    port: u16,
    conf: PathBuf,
}

impl RedisSentinelSet {
    /// Starts the set; blocks until the replica is in sync and every Sentinel knows the
    /// replica and the other Sentinels.
    pub fn start() -> Result<Self, HarnessError> {
        let binary = find_program(Path::new("redis-server"), "redis-server")?;
        retry_if_port_taken(|| Self::start_once(&binary))
    }

    fn start_once(binary: &Path) -> Result<Self, HarnessError> {
        let dir = temp_dir("redis-sentinel")?;
        let primary = DataServer::start(binary, dir.path(), "primary", None)?;
        let replica = DataServer::start(binary, dir.path(), "replica", Some(loopback(primary.port)))?;
        let mut set = Self {
            sentinels: Vec::new(),
            data: vec![primary, replica],
            primary: 0,
            dir,
        };
        set.wait_until(SETTLE_TIMEOUT, "the replica to be in sync", |set| {
            set.replica_in_sync()
        })?;
        for i in 0..SENTINELS {
            let sentinel = start_sentinel(binary, set.dir.path(), i, set.data[0].port)?;
            set.sentinels.push(sentinel);
        }
        set.wait_until(
            SETTLE_TIMEOUT,
            "every Sentinel to know the replica and its peers",
            |set| {
                set.sentinel_ports().iter().all(|&port| {
                    let master = command(loopback(port), &["SENTINEL", "master", SENTINEL_MASTER_NAME]);
                    let field = |name: &str| {
                        master
                            .as_ref()
                            .ok()
                            .and_then(|fields| field(fields, name))
                            .and_then(|value| value.parse::<usize>().ok())
                            .unwrap_or(0)
                    };
                    field("num-slaves") >= 1 && field("num-other-sentinels") >= SENTINELS - 1
                })
            },
        )?;
        Ok(set)
    }

    /// The set's URL: `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/distlock`,
    /// with `?wait_for_replicas=N` when `replicas` is above 0.
    pub fn url(&self, replicas: u32) -> String {
        let hosts: Vec<String> = self
            .sentinel_ports()
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        let mut url = format!("redis+sentinel://{}/{SENTINEL_MASTER_NAME}", hosts.join(","));
        if replicas > 0 {
            url.push_str(&format!("?wait_for_replicas={replicas}"));
        }
        url
    }

    /// The Sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|(_, port)| *port).collect()
    }

    /// The server the set last knew as primary (started as it, or promoted by
    /// [`wait_for_failover`](Self::wait_for_failover)).
    pub fn primary(&self) -> &ServerProcess {
        &self.data[self.primary].process
    }

    /// The server the set last knew as replica.
    pub fn replica(&self) -> &ServerProcess {
        &self.data[1 - self.primary].process
    }

    /// `127.0.0.1:PORT` of the server the set last knew as primary.
    pub fn primary_addr(&self) -> SocketAddr {
        loopback(self.data[self.primary].port)
    }

    /// `127.0.0.1:PORT` of the server the set last knew as replica.
    pub fn replica_addr(&self) -> SocketAddr {
        loopback(self.data[1 - self.primary].port)
    }

    /// Cuts the replication link: the primary turns the replica's user off and drops its
    /// connections, so the replica falls behind (it retries and is refused) while clients
    /// and Sentinels still reach both servers. [`heal_replication`](Self::heal_replication)
    /// lets it in again.
    pub fn cut_replication(&self) -> Result<(), HarnessError> {
        let primary = self.primary_addr();
        self.command(primary, &["ACL", "SETUSER", REPLICATION_USER, "off"])?;
        self.command(primary, &["CLIENT", "KILL", "USER", REPLICATION_USER])?;
        Ok(())
    }

    /// Lets the replica replicate again after [`cut_replication`](Self::cut_replication).
    pub fn heal_replication(&self) -> Result<(), HarnessError> {
        self.command(self.primary_addr(), &["ACL", "SETUSER", REPLICATION_USER, "on"])?;
        Ok(())
    }

    /// `kill -9` of the primary (no persistence: it comes back empty).
    pub fn kill_primary(&mut self) -> Result<(), HarnessError> {
        self.data[self.primary].process.kill()
    }

    /// Freezes the primary (`SIGSTOP`): the replica, the Sentinels and the clients reach an
    /// open socket that answers nothing. [`heal_primary`](Self::heal_primary) thaws it.
    pub fn isolate_primary(&mut self) -> Result<(), HarnessError> {
        self.data[self.primary].process.pause()
    }

    /// Thaws a primary frozen by [`isolate_primary`](Self::isolate_primary) (after a
    /// failover, the set's replica); after a failover the Sentinels turn it into a replica of
    /// the new primary, about ten seconds later: until then it still serves as a primary.
    pub fn heal_primary(&mut self) -> Result<(), HarnessError> {
        for server in &mut self.data {
            if server.process.is_paused() {
                server.process.resume()?;
            }
        }
        Ok(())
    }

    /// `kill -9` of both data servers (no persistence: they come back empty); the Sentinels
    /// stay.
    pub fn kill_data_servers(&mut self) -> Result<(), HarnessError> {
        self.data.iter_mut().try_for_each(|server| server.process.kill())
    }

    /// Restarts the data servers that are not running, each in the role its configuration
    /// gives it, and waits until the replica is in sync.
    pub fn restart_data_servers(&mut self) -> Result<(), HarnessError> {
        for server in &mut self.data {
            if !server.process.is_running() {
                server.process.restart()?;
            }
        }
        self.wait_until(SETTLE_TIMEOUT, "the replica to be in sync again", |set| {
            set.replica_in_sync()
        })
    }

    /// Waits until a majority of the Sentinels name a primary other than the one the set
    /// knew and that server answers `ROLE` as a master; returns its address and from then on
    /// calls it the primary.
    pub fn wait_for_failover(&mut self, timeout: Duration) -> Result<SocketAddr, HarnessError> {
        let old = self.primary_addr();
        let new = self.replica_addr();
        self.wait_until(timeout, "the Sentinels to promote the replica", |set| {
            let named = set
                .sentinel_ports()
                .iter()
                .filter(|&&port| set.named_primary(port) == Some(new))
                .count();
            named > SENTINELS / 2 && role(new).as_deref() == Some("master")
        })?;
        debug_assert_ne!(old, new);
        self.primary = 1 - self.primary;
        Ok(new)
    }

    /// Starts the old primary (killed or frozen before a failover) again as a replica of
    /// the new primary (its configuration says `replicaof`, so it never serves as a primary
    /// with empty data), and waits until it is in sync.
    pub fn restart_old_primary_as_replica(&mut self) -> Result<(), HarnessError> {
        let primary = self.data[self.primary].port;
        let old = &mut self.data[1 - self.primary];
        let mut conf = fs::read_to_string(&old.conf)
            .map_err(|e| HarnessError::io(format!("reading {}", old.conf.display()), e))?;
        conf.push_str(&format!("\nreplicaof 127.0.0.1 {primary}\n"));
        fs::write(&old.conf, conf)
            .map_err(|e| HarnessError::io(format!("writing {}", old.conf.display()), e))?;
        old.process.kill()?;
        old.process.restart()?;
        self.wait_until(
            SETTLE_TIMEOUT,
            "the old primary to be in sync as a replica",
            |set| set.replica_in_sync(),
        )
    }

    /// Sends one command to the server or Sentinel at `addr` and reads its reply (strings,
    /// arrays flattened).
    pub fn command(&self, addr: SocketAddr, args: &[&str]) -> Result<Vec<String>, HarnessError> {
        command(addr, args).map_err(|e| HarnessError::Other(format!("{args:?} at {addr}: {e}")))
    }

    /// Which primary the Sentinel at `port` names.
    fn named_primary(&self, port: u16) -> Option<SocketAddr> {
        let reply = command(
            loopback(port),
            &["SENTINEL", "get-master-addr-by-name", SENTINEL_MASTER_NAME],
        )
        .ok()?;
        let port: u16 = reply.get(1)?.parse().ok()?;
        (reply.first()? == "127.0.0.1").then(|| loopback(port))
    }

    /// Whether the replica's link to its primary is up.
    fn replica_in_sync(&self) -> bool {
        command(self.replica_addr(), &["INFO", "replication"])
            .ok()
            .and_then(|reply| reply.into_iter().next())
            .is_some_and(|info| info.contains("master_link_status:up"))
    }

    fn wait_until(
        &mut self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&Self) -> bool,
    ) -> Result<(), HarnessError> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if done(self) {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(50));
        }
        Err(HarnessError::Other(format!(
            "timed out after {timeout:?} waiting for {what}; the Sentinels' log:\n{}",
            self.sentinels
                .first()
                .map(|(sentinel, _)| sentinel.log_tail())
                .unwrap_or_default()
        )))
    }
}

impl DataServer {
    /// Starts a data server named `name` in `dir`, a replica of `primary` if given.
    fn start(
        binary: &Path,
        dir: &Path,
        name: &str,
        primary: Option<SocketAddr>,
    ) -> Result<Self, HarnessError> {
        let port = free_port()?;
        let data = dir.join(name);
        fs::create_dir_all(&data).map_err(|e| HarnessError::io(format!("creating {}", data.display()), e))?;
        let mut conf = format!(
            "port {port}\nbind 127.0.0.1\ndir {}\ndaemonize no\nlogfile \"\"\nsave \"\"\nappendonly no\n\
             repl-diskless-sync-delay 0\n\
             user {REPLICATION_USER} on >{REPLICATION_PASSWORD} ~* &* +@all\n\
             masteruser {REPLICATION_USER}\nmasterauth {REPLICATION_PASSWORD}\n",
            data.display()
        );
        if let Some(primary) = primary {
            conf.push_str(&format!("replicaof {} {}\n", primary.ip(), primary.port()));
        }
        let conf_path = data.join("redis.conf");
        fs::write(&conf_path, conf)
            .map_err(|e| HarnessError::io(format!("writing {}", conf_path.display()), e))?;
        let process = ServerProcess::start(ProcessSpec {
            name: format!("redis-server ({name}) on 127.0.0.1:{port}"),
            program: binary.to_path_buf(),
            args: vec![OsString::from(&conf_path)],
            cwd: data.clone(),
            log_path: data.join("server.log"),
            ready_timeout: READY_TIMEOUT,
            probe: Box::new(move || probe::expect_line(loopback(port), b"PING\r\n", b"+PONG")),
            env: Vec::new(),
        })?;
        Ok(Self {
            process,
            port,
            conf: conf_path,
        })
    }
}

/// Starts Sentinel `index` in `dir`, monitoring the primary on `primary_port`.
fn start_sentinel(
    binary: &Path,
    dir: &Path,
    index: usize,
    primary_port: u16,
) -> Result<(ServerProcess, u16), HarnessError> {
    let port = free_port()?;
    let home = dir.join(format!("sentinel-{index}"));
    fs::create_dir_all(&home).map_err(|e| HarnessError::io(format!("creating {}", home.display()), e))?;
    let conf = format!(
        "port {port}\nbind 127.0.0.1\ndir {}\ndaemonize no\nlogfile \"\"\n\
         sentinel monitor {SENTINEL_MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
         sentinel down-after-milliseconds {SENTINEL_MASTER_NAME} 2000\n\
         sentinel failover-timeout {SENTINEL_MASTER_NAME} 3000\n\
         sentinel parallel-syncs {SENTINEL_MASTER_NAME} 1\n",
        home.display()
    );
    // Sentinel rewrites its configuration file, so it must be its own and writable.
    let conf_path = home.join("sentinel.conf");
    fs::write(&conf_path, conf)
        .map_err(|e| HarnessError::io(format!("writing {}", conf_path.display()), e))?;
    let process = ServerProcess::start(ProcessSpec {
        name: format!("redis-server --sentinel on 127.0.0.1:{port}"),
        program: binary.to_path_buf(),
        args: vec![OsString::from(&conf_path), OsString::from("--sentinel")],
        cwd: home.clone(),
        log_path: home.join("server.log"),
        ready_timeout: READY_TIMEOUT,
        probe: Box::new(move || probe::expect_line(loopback(port), b"PING\r\n", b"+PONG")),
        env: Vec::new(),
    })?;
    Ok((process, port))
}

/// The value after `name` in a flattened list of field names and values.
fn field<'a>(fields: &'a [String], name: &str) -> Option<&'a str> {
    fields
        .chunks(2)
        .find(|pair| pair[0] == name)
        .and_then(|pair| pair.get(1))
        .map(String::as_str)
}

/// `ROLE`'s first word at `addr` (`master`, `slave`), if it answers.
fn role(addr: SocketAddr) -> Option<String> {
    command(addr, &["ROLE"]).ok()?.into_iter().next()
}

/// Sends one command and reads its reply: a simple or bulk string as one element, an array
/// of strings (nested arrays flattened) as its elements; an error reply as `Err`.
pub(crate) fn command(addr: SocketAddr, args: &[&str]) -> Result<Vec<String>, String> {
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    let reply = probe::exchange(
        addr,
        request.as_bytes(),
        |reply| parse(reply).is_some(),
        probe::PROBE_TIMEOUT,
    )
    .map_err(|e| e.to_string())?;
    match parse(&reply) {
        Some((Ok(values), _)) => Ok(values),
        Some((Err(e), _)) => Err(e),
        None => Err(format!(
            "an incomplete reply: {:?}",
            String::from_utf8_lossy(&reply)
        )),
    }
}

type Parsed<'a> = Option<(Result<Vec<String>, String>, &'a [u8])>;

/// One RESP value from the start of `input`, and the rest; `None` if incomplete.
fn parse(input: &[u8]) -> Parsed<'_> {
    let end = input.windows(2).position(|w| w == b"\r\n")?;
    let line = String::from_utf8_lossy(&input[1..end]).into_owned();
    let rest = &input[end + 2..];
    match input.first()? {
        b'+' | b':' => Some((Ok(vec![line]), rest)),
        b'-' => Some((Err(line), rest)),
        b'$' => {
            let Ok(len) = usize::try_from(line.parse::<i64>().ok()?) else {
                return Some((Ok(Vec::new()), rest));
            };
            if rest.len() < len + 2 {
                return None;
            }
            Some((
                Ok(vec![String::from_utf8_lossy(&rest[..len]).into_owned()]),
                &rest[len + 2..],
            ))
        }
        b'*' => {
            let Ok(count) = usize::try_from(line.parse::<i64>().ok()?) else {
                return Some((Ok(Vec::new()), rest));
            };
            let mut values = Vec::new();
            let mut rest = rest;
            for _ in 0..count {
                let (value, after) = parse(rest)?;
                values.extend(value.unwrap_or_default());
                rest = after;
            }
            Some((Ok(values), rest))
        }
        _ => Some((Err(format!("an unexpected reply {line:?}")), rest)),
    }
}

//! ZooKeeper: a standalone server or a 3-node ensemble on loopback, run
//! with the machine's `java` and the jars of the Debian `zookeeper` package.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use crate::port::{free_port, retry_if_port_taken};
use crate::probe::{self, loopback, PROBE_TIMEOUT};
use crate::process::{delegate_process_controls, find_program, ProcessSpec};
use crate::{temp_dir, HarnessError, ServerProcess};

mod links;
mod partition;

pub use links::PeerLink;
use links::PeerLinks;

/// How long `start`/`restart` wait for a server to serve (for an ensemble:
/// to join a quorum).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The package's environment file, which holds its `CLASSPATH`.
const DEBIAN_ENVIRONMENT: &str = "/etc/zookeeper/conf/environment";
/// The ZooKeeper jar of the Debian package (`libzookeeper-java`).
const DEBIAN_JAR: &str = "/usr/share/java/zookeeper.jar";
/// The package's classpath has no SLF4J binding (logging would be silently
/// dropped); these are its dependencies and route logs through log4j 1.2.
const DEBIAN_LOG_JARS: [&str; 2] = [
    "/usr/share/java/slf4j-log4j12.jar",
    "/usr/share/java/log4j-1.2.jar",
];
/// Overrides the classpath (e.g. `/opt/zookeeper/lib/*` for an Apache
/// tarball) when [`ZooKeeperOptions::classpath`] is not set.
const CLASSPATH_ENV: &str = "DISTLOCK_TEST_ZOOKEEPER_CLASSPATH";

/// Options for [`ZooKeeperServer::start_with`] and
/// [`ZooKeeperEnsemble::start_with`].
#[derive(Debug, Clone)]
pub struct ZooKeeperOptions {
    /// `tickTime` in ms. Default 500, so session expiry and failure
    /// detection are quick (`initLimit` is 10 ticks).
    pub tick_time_ms: u32,
    /// `syncLimit` in ticks: how long a follower keeps serving (reads
    /// included) after it last heard from its leader, and the leader keeps
    /// a silent follower. Default 5.
    pub sync_limit: u32,
    /// An ensemble only: put a [`FaultProxy`](crate::FaultProxy) on every
    /// link between two members (see [`ZooKeeperEnsemble::cut_off`] and
    /// [`ZooKeeperEnsemble::peer_link`]). Default off.
    pub peer_proxies: bool,
    /// `minSessionTimeout` in ms. Default 1000.
    pub min_session_timeout_ms: u32,
    /// `maxSessionTimeout` in ms. Default 60000.
    pub max_session_timeout_ms: u32,
    /// Extra `zoo.cfg` lines, e.g. `"globalOutstandingLimit=100"`.
    pub extra_config: Vec<String>,
    /// Extra JVM arguments (placed before the class name).
    pub jvm_args: Vec<String>,
    /// The `java` executable; default `java` from `PATH`.
    pub java: Option<PathBuf>,
    /// The Java classpath. Default: `$DISTLOCK_TEST_ZOOKEEPER_CLASSPATH`,
    /// else the jars of the Debian package's `CLASSPATH` (from
    /// `/etc/zookeeper/conf/environment`) plus its log4j binding.
    pub classpath: Option<String>,
    /// Run the server on this wall clock, which the test can move
    /// ([`StoreClock::jump`](crate::StoreClock::jump)). Default: the true clock.
    pub clock: Option<crate::StoreClock>,
}

impl Default for ZooKeeperOptions {
    fn default() -> Self {
        ZooKeeperOptions {
            tick_time_ms: 500,
            sync_limit: 5,
            peer_proxies: false,
            min_session_timeout_ms: 1000,
            max_session_timeout_ms: 60_000,
            extra_config: Vec::new(),
            jvm_args: Vec::new(),
            java: None,
            classpath: None,
            clock: None,
        }
    }
}

/// The role a server reports in `srvr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZkMode {
    /// A single server without quorum.
    Standalone,
    /// The ensemble's leader.
    Leader,
    /// A follower in a formed quorum.
    Follower,
    /// A non-voting observer.
    Observer,
}

/// Sends a ZooKeeper four-letter command (`ruok`, `srvr`, `stat`, `mntr`,
/// ...) and returns the answer. Bounded by `timeout` per step.
pub fn four_letter_word(addr: SocketAddr, command: &str, timeout: Duration) -> io::Result<String> {
    let reply = probe::exchange(addr, command.as_bytes(), |_| false, timeout)?;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// The server's mode according to `srvr`; `None` if it does not answer or
/// is not serving (e.g. no quorum).
pub fn zk_mode(addr: SocketAddr) -> Option<ZkMode> {
    let reply = four_letter_word(addr, "srvr", PROBE_TIMEOUT).ok()?;
    let mode = reply.lines().find_map(|line| line.strip_prefix("Mode: "))?;
    match mode.trim() {
        "standalone" => Some(ZkMode::Standalone),
        "leader" => Some(ZkMode::Leader),
        "follower" => Some(ZkMode::Follower),
        "observer" => Some(ZkMode::Observer),
        _ => None,
    }
}

/// A standalone ZooKeeper server owned by one test, on `127.0.0.1` with a
/// free client port, data and logs (`server.log`) in a temporary directory
/// that is removed, after killing the JVM, on drop.
#[derive(Debug)]
pub struct ZooKeeperServer {
    // Field order matters: the process is killed before the directory goes.
    process: ServerProcess,
    port: u16,
    dir: TempDir,
}

impl ZooKeeperServer {
    /// Starts a server with default options; blocks until `srvr` reports
    /// `Mode: standalone` (typically under a second).
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(ZooKeeperOptions::default())
    }

    /// Starts a server with `options`; blocks until it serves.
    pub fn start_with(options: ZooKeeperOptions) -> Result<Self, HarnessError> {
        let launcher = Launcher::new(&options)?;
        retry_if_port_taken(|| {
            let dir = temp_dir("zookeeper")?;
            let port = free_port()?;
            let spec = launcher.spec(&options, dir.path(), 1, port, &[])?;
            let process = ServerProcess::start(spec)?;
            Ok(ZooKeeperServer { process, port, dir })
        })
    }

    /// The client port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    /// `127.0.0.1:PORT`, the form ZooKeeper clients take.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `zk://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// The mode from `srvr` (`Standalone` when healthy).
    pub fn mode(&self) -> Option<ZkMode> {
        zk_mode(self.addr())
    }

    /// The temporary directory (`zoo.cfg`, `data/`, `server.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The JVM process and its controls.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }

    /// The JVM process and its controls, mutably.
    pub fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }
}

delegate_process_controls!(ZooKeeperServer);

/// How many servers [`ZooKeeperEnsemble`] runs.
pub const ENSEMBLE_SIZE: usize = 3;

/// Three ZooKeeper servers forming one quorum on loopback, owned by one
/// test. Each node has its own client, quorum and election port and its own
/// directory (`node1/`, `node2/`, `node3/` under [`dir`](Self::dir)); each
/// can be stopped, killed, paused, resumed and restarted on its own.
#[derive(Debug)]
pub struct ZooKeeperEnsemble {
    // Field order matters: the processes are killed before the directory goes.
    nodes: Vec<ZooKeeperNode>,
    links: Option<PeerLinks>,
    dir: TempDir,
}

/// One member of a [`ZooKeeperEnsemble`].
#[derive(Debug)]
pub struct ZooKeeperNode {
    process: ServerProcess,
    id: u32,
    port: u16,
    dir: PathBuf,
}

impl ZooKeeperEnsemble {
    /// Starts three servers with default options; blocks until all of them
    /// serve as leader or follower (a quorum formed, typically 2-4 s).
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(ZooKeeperOptions::default())
    }

    /// Starts three servers with `options`; blocks until a quorum formed
    /// and every node serves.
    pub fn start_with(options: ZooKeeperOptions) -> Result<Self, HarnessError> {
        let launcher = Launcher::new(&options)?;
        retry_if_port_taken(|| {
            let dir = temp_dir("zookeeper-ensemble")?;
            let mut peers = Vec::with_capacity(ENSEMBLE_SIZE);
            for id in 1..=ENSEMBLE_SIZE as u32 {
                peers.push(Peer {
                    id,
                    client_port: free_port()?,
                    quorum_port: free_port()?,
                    election_port: free_port()?,
                });
            }
            let links = options
                .peer_proxies
                .then(|| PeerLinks::start(&peers))
                .transpose()?;
            // Launch all JVMs first so they start up in parallel.
            let mut nodes = Vec::with_capacity(ENSEMBLE_SIZE);
            for (index, peer) in peers.iter().enumerate() {
                let node_dir = dir.path().join(format!("node{}", peer.id));
                fs::create_dir(&node_dir)
                    .map_err(|e| HarnessError::io(format!("creating {}", node_dir.display()), e))?;
                let view = match &links {
                    Some(links) => links.view_of(index, &peers),
                    None => peers.clone(),
                };
                let spec = launcher.spec(&options, &node_dir, peer.id, peer.client_port, &view)?;
                nodes.push(ZooKeeperNode {
                    process: ServerProcess::spawn(spec)?,
                    id: peer.id,
                    port: peer.client_port,
                    dir: node_dir,
                });
            }
            for node in &nodes {
                node.process.wait_ready()?;
            }
            Ok(ZooKeeperEnsemble { nodes, links, dir })
        })
    }

    /// The link member `from` reaches member `to` through (indexes, not `myid`s), if the
    /// ensemble was started with [`ZooKeeperOptions::peer_proxies`].
    pub fn peer_link(&self, from: usize, to: usize) -> Option<&PeerLink> {
        self.links.as_ref()?.link(from, to)
    }

    /// Cuts member `index` off from the other members: every link from and to it black-holed
    /// (silent, nothing closed). Its clients still reach it; it keeps serving them until its
    /// `syncLimit` passes without word from the leader.
    ///
    /// # Errors
    /// If the ensemble was not started with [`ZooKeeperOptions::peer_proxies`].
    pub fn cut_off(&self, index: usize) -> Result<(), HarnessError> {
        self.links()?.cut_off(index);
        Ok(())
    }

    /// Heals every link between members.
    ///
    /// # Errors
    /// If the ensemble was not started with [`ZooKeeperOptions::peer_proxies`].
    pub fn heal_links(&self) -> Result<(), HarnessError> {
        self.links()?.heal();
        Ok(())
    }

    fn links(&self) -> Result<&PeerLinks, HarnessError> {
        self.links
            .as_ref()
            .ok_or_else(|| HarnessError::Other("the ensemble was started without peer_proxies".to_owned()))
    }

    /// The nodes, in id order (index 0 has `myid` 1).
    pub fn nodes(&self) -> &[ZooKeeperNode] {
        &self.nodes
    }

    /// Node by index (0, 1 or 2; not the 1-based `myid`).
    ///
    /// # Panics
    /// If `index >= 3`.
    pub fn node(&self, index: usize) -> &ZooKeeperNode {
        &self.nodes[index]
    }

    /// Node by index, mutably (to kill, pause, restart it ...).
    ///
    /// # Panics
    /// If `index >= 3`.
    pub fn node_mut(&mut self, index: usize) -> &mut ZooKeeperNode {
        &mut self.nodes[index]
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn connect_string(&self) -> String {
        self.nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `zk://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn url(&self) -> String {
        format!("zk://{}", self.connect_string())
    }

    /// The index of the node that currently reports `Mode: leader`, if any.
    /// Paused nodes are not asked (they would not answer).
    pub fn leader(&self) -> Option<usize> {
        self.nodes
            .iter()
            .position(|node| !node.process.is_paused() && node.mode() == Some(ZkMode::Leader))
    }

    /// Polls until some node is leader and returns its index; fails after
    /// `timeout`.
    pub fn wait_for_leader(&self, timeout: Duration) -> Result<usize, HarnessError> {
        probe::poll(
            timeout,
            "no ZooKeeper leader",
            || self.leader(),
            || {
                self.nodes
                    .iter()
                    .map(|node| format!("node {}: {:?}", node.id, node.mode()))
                    .collect()
            },
        )
    }

    /// The ensemble's temporary directory (one subdirectory per node).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl ZooKeeperNode {
    /// The node's `myid` (1, 2 or 3).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The node's client port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    /// The mode from `srvr`; `None` when down, paused or without quorum.
    pub fn mode(&self) -> Option<ZkMode> {
        zk_mode(self.addr())
    }

    /// The node's directory (`zoo.cfg`, `data/`, `server.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The JVM process and its controls. Its `restart` waits until the node
    /// serves as leader or follower again, which needs a quorum: restart
    /// several dead nodes with `restart_no_wait` then `wait_ready`.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }

    /// The JVM process and its controls, mutably.
    pub fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }
}

delegate_process_controls!(ZooKeeperNode);

/// One server's place in the ensemble configuration.
#[derive(Debug, Clone, Copy)]
struct Peer {
    id: u32,
    client_port: u16,
    quorum_port: u16,
    election_port: u16,
}

/// The resolved `java` and classpath.
struct Launcher {
    java: PathBuf,
    classpath: String,
}

impl Launcher {
    fn new(options: &ZooKeeperOptions) -> Result<Self, HarnessError> {
        let java = options.java.clone().unwrap_or_else(|| PathBuf::from("java"));
        let java = find_program(&java, "default-jre-headless")?;
        let classpath = match (&options.classpath, std::env::var(CLASSPATH_ENV)) {
            (Some(classpath), _) => classpath.clone(),
            (None, Ok(classpath)) if !classpath.is_empty() => classpath,
            _ => debian_classpath()?,
        };
        Ok(Launcher { java, classpath })
    }

    /// Writes `zoo.cfg` (and `myid`, logging config) into `dir` and returns
    /// the process spec. `peers` is empty for a standalone server.
    fn spec(
        &self,
        options: &ZooKeeperOptions,
        dir: &Path,
        id: u32,
        client_port: u16,
        peers: &[Peer],
    ) -> Result<ProcessSpec, HarnessError> {
        let data = dir.join("data");
        fs::create_dir_all(&data).map_err(|e| HarnessError::io(format!("creating {}", data.display()), e))?;
        let mut cfg = String::new();
        let tick = options.tick_time_ms;
        // Writing to a String cannot fail.
        let sync = options.sync_limit;
        let _ = writeln!(cfg, "tickTime={tick}\ninitLimit=10\nsyncLimit={sync}");
        let _ = writeln!(cfg, "dataDir={}", data.display());
        let _ = writeln!(cfg, "clientPort={client_port}\nclientPortAddress=127.0.0.1");
        let _ = writeln!(cfg, "minSessionTimeout={}", options.min_session_timeout_ms);
        let _ = writeln!(cfg, "maxSessionTimeout={}", options.max_session_timeout_ms);
        let _ = writeln!(cfg, "maxClientCnxns=0\n4lw.commands.whitelist=*");
        let _ = writeln!(cfg, "admin.enableServer=false");
        for peer in peers {
            let _ = writeln!(
                cfg,
                "server.{}=127.0.0.1:{}:{}",
                peer.id, peer.quorum_port, peer.election_port
            );
        }
        for line in &options.extra_config {
            let _ = writeln!(cfg, "{line}");
        }
        let mut files = vec![
            (dir.join("zoo.cfg"), cfg),
            (dir.join("log4j.properties"), LOG4J_PROPERTIES.to_string()),
            (dir.join("logback.xml"), LOGBACK_XML.to_string()),
        ];
        if !peers.is_empty() {
            files.push((data.join("myid"), format!("{id}\n")));
        }
        for (path, contents) in files {
            fs::write(&path, contents)
                .map_err(|e| HarnessError::io(format!("writing {}", path.display()), e))?;
        }

        let mut args: Vec<OsString> = [
            "-Xmx256m",
            "-Xms32m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xshare:auto",
            "-XX:-UsePerfData",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-Dzookeeper.admin.enableServer=false",
            // A node killed before its first snapshot must still restart.
            "-Dzookeeper.snapshot.trust.empty=true",
        ]
        .map(OsString::from)
        .into();
        args.push(
            format!(
                "-Dlog4j.configuration=file:{}",
                dir.join("log4j.properties").display()
            )
            .into(),
        );
        args.push(
            format!(
                "-Dlogback.configurationFile={}",
                dir.join("logback.xml").display()
            )
            .into(),
        );
        args.extend(options.jvm_args.iter().map(OsString::from));
        args.extend(["-cp".into(), OsString::from(&self.classpath)]);
        args.push("org.apache.zookeeper.server.quorum.QuorumPeerMain".into());
        args.push(dir.join("zoo.cfg").into());

        let standalone = peers.is_empty();
        let name = if standalone {
            format!("ZooKeeper on 127.0.0.1:{client_port}")
        } else {
            format!("ZooKeeper node {id} on 127.0.0.1:{client_port}")
        };
        Ok(ProcessSpec {
            name,
            program: self.java.clone(),
            args,
            cwd: dir.to_path_buf(),
            log_path: dir.join("server.log"),
            ready_timeout: READY_TIMEOUT,
            probe: Box::new(move || serving(loopback(client_port), standalone)),
            env: crate::clock::env_of(options.clock.as_ref()),
        })
    }
}

/// Ready when `ruok` answers `imok` and `srvr` reports the expected mode.
fn serving(addr: SocketAddr, standalone: bool) -> Result<(), String> {
    let ruok = four_letter_word(addr, "ruok", PROBE_TIMEOUT).map_err(|e| e.to_string())?;
    if ruok != "imok" {
        return Err(format!("ruok answered {ruok:?}"));
    }
    match (zk_mode(addr), standalone) {
        (Some(ZkMode::Standalone), true) => Ok(()),
        (Some(ZkMode::Leader | ZkMode::Follower | ZkMode::Observer), false) => Ok(()),
        (mode, _) => Err(format!("srvr reports mode {mode:?} (no quorum yet?)")),
    }
}

/// The jars of the Debian package's `CLASSPATH` plus a log4j binding.
fn debian_classpath() -> Result<String, HarnessError> {
    let from_environment = fs::read_to_string(DEBIAN_ENVIRONMENT)
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.trim().strip_prefix("CLASSPATH="))
                .map(|value| value.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| DEBIAN_JAR.to_string());
    // Keep jars only: the package's conf directory carries a log4j config
    // that logs to /var/log/zookeeper.
    let mut jars: Vec<&str> = from_environment
        .split(':')
        .filter(|entry| entry.ends_with(".jar") && Path::new(entry).is_file())
        .collect();
    if jars.is_empty() {
        return Err(HarnessError::missing(DEBIAN_JAR, "zookeeper"));
    }
    jars.extend(DEBIAN_LOG_JARS.iter().filter(|jar| Path::new(jar).is_file()));
    Ok(jars.join(":"))
}

/// log4j 1.2 (Debian): everything to the console, which goes to server.log.
const LOG4J_PROPERTIES: &str = "\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
";

/// logback (upstream ZooKeeper 3.8 tarballs): the same.
const LOGBACK_XML: &str = r#"<configuration>
  <appender name="CONSOLE" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="CONSOLE"/></root>
</configuration>
"#;

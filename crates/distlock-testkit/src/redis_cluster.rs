//! A Redis Cluster of three masters on free loopback ports, each a [`RedisServer`] in its own
//! temporary directory (its `nodes.conf` there too), joined by `CLUSTER ADDSLOTSRANGE` and
//! `CLUSTER MEET` over raw TCP (no `redis-cli`), ready once every node reports
//! `cluster_state:ok`, knows the master of every slot and sees every other master.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::port::{free_port, retry_if_port_taken};
use crate::probe::{self, loopback};
use crate::proxy::{FaultProxies, FaultProxy};
use crate::{HarnessError, RedisOptions, RedisServer};

/// How many masters [`RedisCluster::start`] starts.
pub const CLUSTER_MASTERS: usize = 3;
/// How long `start` and [`RedisCluster::wait_until_ok`] wait for `cluster_state:ok`.
const OK_TIMEOUT: Duration = Duration::from_secs(30);
/// Redis Cluster's hash slots.
const SLOTS: u16 = 16384;
/// One raw command's connect/read/write bound.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// Options for [`RedisCluster::start_with`].
#[derive(Debug, Clone, Default)]
pub struct RedisClusterOptions {
    /// Announce no address (`cluster-preferred-endpoint-type unknown-endpoint`): `CLUSTER
    /// SLOTS` then names every node by an empty host and its port, and clients use the host
    /// they asked, so a client that reached the cluster through [`RedisCluster::proxies`]
    /// (proxies on another loopback address, on the nodes' own ports) stays behind them for
    /// every node. `MOVED`/`ASK` redirects then name no host either (`MOVED 12 :7001`), which
    /// clients follow by refreshing their slot map; keep it off for tests of redirects.
    pub proxyable: bool,
    /// Extra arguments for every node, e.g. `["--cluster-node-timeout", "1000"]`.
    pub extra_args: Vec<String>,
}

/// Three cluster masters (no replicas) owned by one test, slots split evenly in node order;
/// `cluster-require-full-coverage no`, so a dead master's slots fail while the others keep
/// serving. Every node is killed and its directory removed when dropped.
///
/// ```no_run
/// use distlock_testkit::RedisCluster;
///
/// let mut cluster = RedisCluster::start().expect("start the cluster");
/// let url = cluster.url(); // redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
/// cluster.node_mut(1).kill().expect("kill -9 one master");
/// cluster.node_mut(1).restart().expect("restart it");
/// cluster.wait_until_ok().expect("the cluster is whole again");
/// # drop(url);
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// Each node's cluster bus port.
    bus_ports: Vec<u16>,
    proxyable: bool,
}

impl RedisCluster {
    /// Starts three masters and joins them; blocks until the cluster is ok on every node.
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(RedisClusterOptions::default())
    }

    /// As [`start`](Self::start), with `options`.
    pub fn start_with(options: RedisClusterOptions) -> Result<Self, HarnessError> {
        let (nodes, bus_ports) = (0..CLUSTER_MASTERS)
            .map(|_| start_node(&options))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        let cluster = Self {
            nodes,
            bus_ports,
            proxyable: options.proxyable,
        };
        cluster.join()?;
        cluster.wait_until_ok()?;
        Ok(cluster)
    }

    /// Assigns each node its third of the slots and introduces the others to the first.
    fn join(&self) -> Result<(), HarnessError> {
        let n = u16::try_from(self.nodes.len()).unwrap_or(1);
        for (i, node) in (0u16..).zip(&self.nodes) {
            let first = SLOTS / n * i;
            let last = if i + 1 == n {
                SLOTS - 1
            } else {
                SLOTS / n * (i + 1) - 1
            };
            expect_ok(
                node.port(),
                &["CLUSTER", "ADDSLOTSRANGE", &first.to_string(), &last.to_string()],
            )?;
        }
        let first = self.nodes[0].port();
        for (node, bus) in self.nodes.iter().zip(&self.bus_ports).skip(1) {
            expect_ok(
                first,
                &[
                    "CLUSTER",
                    "MEET",
                    "127.0.0.1",
                    &node.port().to_string(),
                    &bus.to_string(),
                ],
            )?;
        }
        Ok(())
    }

    /// Waits until every running, unpaused node reports `cluster_state:ok`, knows the master
    /// of every slot and lists every running master as connected (at most 30 s).
    pub fn wait_until_ok(&self) -> Result<(), HarnessError> {
        let deadline = Instant::now() + OK_TIMEOUT;
        loop {
            match self.check_ok() {
                Ok(()) => return Ok(()),
                Err(reason) if Instant::now() >= deadline => {
                    return Err(HarnessError::Other(format!(
                        "the Redis cluster did not become ok within {OK_TIMEOUT:?}: {reason}"
                    )))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn check_ok(&self) -> Result<(), String> {
        let live: Vec<&RedisServer> = self
            .nodes
            .iter()
            .filter(|n| n.is_running() && !n.process().is_paused())
            .collect();
        for node in &live {
            let info = command(node.port(), &["CLUSTER", "INFO"])?;
            if !info.contains("cluster_state:ok") {
                return Err(format!("127.0.0.1:{} is not ok", node.port()));
            }
            // A node lists a master as connected once their handshake is done, but learns the
            // slots it serves only from its next message: until then a client reading the slot
            // map from this node would not know that master at all.
            if !info.contains(&format!("cluster_slots_assigned:{SLOTS}")) {
                return Err(format!(
                    "127.0.0.1:{} does not yet know the master of every slot",
                    node.port()
                ));
            }
            let nodes = command(node.port(), &["CLUSTER", "NODES"])?;
            for other in &live {
                let connected = nodes.lines().any(|line| {
                    line.contains(&format!(":{}@", other.port()))
                        && line.contains("master")
                        && line.contains("connected")
                        && !line.contains("fail")
                });
                if !connected {
                    return Err(format!(
                        "127.0.0.1:{} does not see 127.0.0.1:{} as a connected master",
                        node.port(),
                        other.port()
                    ));
                }
            }
        }
        Ok(())
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The masters, in slot order (node 0 serves slots 0-5460).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Master `i`, to kill, pause, resume or restart it (its `nodes.conf` survives a restart,
    /// so it rejoins with its slots; call [`wait_until_ok`](Self::wait_until_ok) after).
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// Which master serves `slot`, by asking the first running node (`CLUSTER SLOTS` is not
    /// parsed: the slot ranges are those `start` assigned unless a test moved slots).
    pub fn node_of_slot(&self, slot: u16) -> Option<usize> {
        let asked = self.nodes.iter().find(|n| n.is_running())?;
        let nodes = command(asked.port(), &["CLUSTER", "NODES"]).ok()?;
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            if fields.len() < 9 || !fields[2].contains("master") {
                continue;
            }
            let owns = fields[8..].iter().any(|range| {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
            });
            if owns {
                let port = fields[1].split(['@', ':']).nth(1)?.parse::<u16>().ok()?;
                return self.nodes.iter().position(|n| n.port() == port);
            }
        }
        None
    }

    /// Runs one command on master `i` over a raw connection; the reply as text (`+OK`'s
    /// `OK`, a bulk string's content, an integer's digits); an error reply is an `Err`.
    pub fn command(&self, i: usize, args: &[&str]) -> Result<String, HarnessError> {
        command(self.nodes[i].port(), args).map_err(HarnessError::Other)
    }

    /// A fresh [`FaultProxy`] in front of every master, each on the master's own port on a
    /// loopback address of its own (`127.0.0.2`, `127.0.0.3`, ... one per call), and the
    /// `redis+cluster://` URL through them. Only for a cluster started
    /// [`proxyable`](RedisClusterOptions::proxyable): a client of that URL then reaches every
    /// node, also after a redirect, through these proxies, while other clients go direct.
    pub fn proxies(&self) -> Result<(String, FaultProxies), HarnessError> {
        if !self.proxyable {
            return Err(HarnessError::Other(
                "a cluster's proxies need RedisClusterOptions::proxyable (clients would follow the announced addresses around them)".into(),
            ));
        }
        static NEXT: AtomicU8 = AtomicU8::new(2);
        let host = NEXT.fetch_add(1, Ordering::Relaxed);
        if host == u8::MAX {
            return Err(HarnessError::Other(
                "out of loopback addresses for cluster proxies".into(),
            ));
        }
        let ip = Ipv4Addr::new(127, 0, 0, host);
        let proxies = self
            .nodes
            .iter()
            .map(|n| FaultProxy::start_on(SocketAddr::from((ip, n.port())), n.addr()))
            .collect::<Result<Vec<_>, _>>()?;
        let proxies = FaultProxies(proxies);
        Ok((format!("redis+cluster://{}", proxies.host_ports()), proxies))
    }
}

/// One cluster-enabled node with a cluster bus port of its own choosing.
fn start_node(options: &RedisClusterOptions) -> Result<(RedisServer, u16), HarnessError> {
    retry_if_port_taken(|| {
        let bus = free_port()?;
        let mut extra_args: Vec<String> = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
            "--cluster-require-full-coverage",
            "no",
            "--cluster-port",
        ]
        .map(String::from)
        .into();
        extra_args.push(bus.to_string());
        if options.proxyable {
            extra_args.extend(["--cluster-preferred-endpoint-type", "unknown-endpoint"].map(String::from));
        }
        extra_args.extend(options.extra_args.iter().cloned());
        let server = RedisServer::start_with(RedisOptions {
            extra_args,
            ..RedisOptions::default()
        })?;
        Ok((server, bus))
    })
}

fn expect_ok(port: u16, args: &[&str]) -> Result<(), HarnessError> {
    match command(port, args) {
        Ok(reply) if reply == "OK" => Ok(()),
        Ok(reply) => Err(HarnessError::Other(format!(
            "{} answered {reply:?}",
            args.join(" ")
        ))),
        Err(e) => Err(HarnessError::Other(e)),
    }
}

/// One command as a RESP array on a fresh connection; the reply as text (see
/// [`RedisCluster::command`]).
fn command(port: u16, args: &[&str]) -> Result<String, String> {
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
    }
    let reply = probe::exchange(loopback(port), &request, |r| parse(r).is_some(), COMMAND_TIMEOUT)
        .map_err(|e| format!("127.0.0.1:{port}: {} : {e}", args.join(" ")))?;
    parse(&reply).unwrap_or_else(|| {
        Err(format!(
            "127.0.0.1:{port}: a truncated reply to {}",
            args.join(" ")
        ))
    })
}

/// A complete one-level reply (`+`, `-`, `:`, `$`), or `None` while more is to come.
fn parse(reply: &[u8]) -> Option<Result<String, String>> {
    let end = reply.windows(2).position(|w| w == b"\r\n")?;
    let line = String::from_utf8_lossy(&reply[1..end]).into_owned();
    match reply.first()? {
        b'+' | b':' => Some(Ok(line)),
        b'-' => Some(Err(line)),
        b'$' => {
            if line == "-1" {
                return Some(Ok(String::new()));
            }
            let len: usize = line.parse().ok()?;
            let body = reply.get(end + 2..end + 2 + len)?;
            Some(Ok(String::from_utf8_lossy(body).into_owned()))
        }
        _ => Some(Err(format!(
            "an unexpected reply {:?}",
            String::from_utf8_lossy(reply)
        ))),
    }
}

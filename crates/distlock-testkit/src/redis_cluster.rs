//! A Redis Cluster of three masters on free loopback ports (and optionally replicas of each),
//! each node a [`RedisServer`] in its own temporary directory (its `nodes.conf` there too),
//! joined by `CLUSTER ADDSLOTSRANGE`, `CLUSTER MEET` and `CLUSTER REPLICATE` over raw TCP (no
//! `redis-cli`), ready once every node reports `cluster_state:ok`, knows the master of every
//! slot and sees every other node in the role it has, and every replica's link is up.

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
    /// Replicas of each master (default none). Each joins by `CLUSTER REPLICATE`; a master
    /// killed for longer than the node timeout (2 s) is then replaced by its replica
    /// (automatic failover, see [`RedisCluster::fail_over`]).
    pub replicas_per_master: usize,
}

/// Three cluster masters owned by one test, slots split evenly in node order, and
/// [`replicas_per_master`](RedisClusterOptions::replicas_per_master) replicas of each (none by
/// default); `cluster-require-full-coverage no`, so a dead master's slots fail while the others
/// keep serving. Every node is killed and its directory removed when dropped.
///
/// Node indices are fixed at start: the masters first (`0..CLUSTER_MASTERS`, in slot order),
/// then the replicas (replica `r` of master `m` at `CLUSTER_MASTERS + m * replicas_per_master
/// + r`). Roles change with failovers: ask [`role`](RedisCluster::role),
/// [`node_of_slot`](RedisCluster::node_of_slot) or [`replica_of`](RedisCluster::replica_of).
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
///
/// With a replica per master, a failover:
///
/// ```no_run
/// use distlock_testkit::{RedisCluster, RedisClusterOptions};
///
/// let mut cluster = RedisCluster::start_with(RedisClusterOptions {
///     replicas_per_master: 1,
///     ..RedisClusterOptions::default()
/// })
/// .expect("start the cluster");
/// let promoted = cluster.fail_over(0).expect("master 0 killed, its replica promoted");
/// assert_eq!(cluster.node_of_slot(0), Some(promoted));
/// cluster.rejoin(0).expect("the old master back, as a replica of the new one");
/// assert_eq!(cluster.replica_of(promoted), Some(0));
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// Each node's cluster bus port.
    bus_ports: Vec<u16>,
    /// Each node's id (`CLUSTER MYID`; kept in `nodes.conf` across restarts).
    ids: Vec<String>,
    replicas_per_master: usize,
    proxyable: bool,
}

/// A node's role in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterRole {
    /// A master (with or without slots).
    Master,
    /// A replica of the node with this index.
    Replica(usize),
}

impl RedisCluster {
    /// Starts three masters and joins them; blocks until the cluster is ok on every node.
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(RedisClusterOptions::default())
    }

    /// As [`start`](Self::start), with `options`.
    pub fn start_with(options: RedisClusterOptions) -> Result<Self, HarnessError> {
        let count = CLUSTER_MASTERS * (1 + options.replicas_per_master);
        let (nodes, bus_ports): (Vec<RedisServer>, Vec<u16>) = (0..count)
            .map(|_| start_node(&options))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        let ids = nodes
            .iter()
            .map(|n| command(n.port(), &["CLUSTER", "MYID"]).map_err(HarnessError::Other))
            .collect::<Result<Vec<_>, _>>()?;
        let cluster = Self {
            nodes,
            bus_ports,
            ids,
            replicas_per_master: options.replicas_per_master,
            proxyable: options.proxyable,
        };
        cluster.join()?;
        cluster.wait_until_ok()?;
        Ok(cluster)
    }

    /// Assigns each master its third of the slots, introduces the others to the first, and
    /// makes each replica replicate its master once it has heard of it.
    fn join(&self) -> Result<(), HarnessError> {
        let n = u16::try_from(CLUSTER_MASTERS).unwrap_or(1);
        for (i, node) in (0u16..).zip(&self.nodes[..CLUSTER_MASTERS]) {
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
        for replica in CLUSTER_MASTERS..self.nodes.len() {
            let master = (replica - CLUSTER_MASTERS) / self.replicas_per_master.max(1);
            let port = self.nodes[replica].port();
            let deadline = Instant::now() + OK_TIMEOUT;
            // A replica may replicate only a master it has heard of through the cluster bus.
            loop {
                match expect_ok(port, &["CLUSTER", "REPLICATE", &self.ids[master]]) {
                    Ok(()) => break,
                    Err(error) if Instant::now() >= deadline => return Err(error),
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        Ok(())
    }

    /// Waits until every running, unpaused node reports `cluster_state:ok`, knows the master
    /// of every slot and lists every other running node as connected, in the role that node
    /// gives itself (a replica: of the same master), and every running replica's link to its
    /// master is up (at most 30 s).
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
        let live: Vec<usize> = (0..self.nodes.len()).filter(|&i| self.is_live(i)).collect();
        let mut views = Vec::new();
        for &i in &live {
            let port = self.nodes[i].port();
            let info = command(port, &["CLUSTER", "INFO"])?;
            if !info.contains("cluster_state:ok") {
                return Err(format!("127.0.0.1:{port} is not ok"));
            }
            // A node lists a master as connected once their handshake is done, but learns the
            // slots it serves only from its next message: until then a client reading the slot
            // map from this node would not know that master at all.
            if !info.contains(&format!("cluster_slots_assigned:{SLOTS}")) {
                return Err(format!(
                    "127.0.0.1:{port} does not yet know the master of every slot"
                ));
            }
            views.push(parse_nodes(&command(port, &["CLUSTER", "NODES"])?));
        }
        // What each node says of itself.
        let mut selves = Vec::new();
        for (&i, view) in live.iter().zip(&views) {
            let own = view
                .iter()
                .find(|line| line.flags.contains("myself"))
                .ok_or_else(|| format!("127.0.0.1:{} does not list itself", self.nodes[i].port()))?;
            selves.push((i, own.is_master(), own.master.clone()));
            if !own.is_master() {
                let info = command(self.nodes[i].port(), &["INFO", "replication"])?;
                if !info.contains("master_link_status:up") {
                    return Err(format!(
                        "replica 127.0.0.1:{} is not linked to its master",
                        self.nodes[i].port()
                    ));
                }
            }
        }
        for (&i, view) in live.iter().zip(&views) {
            for (j, master, of) in &selves {
                let port = self.nodes[*j].port();
                let agrees = view.iter().any(|line| {
                    line.port == port
                        && line.link == "connected"
                        && !line.flags.contains("fail")
                        && line.is_master() == *master
                        && line.master == *of
                });
                if !agrees {
                    return Err(format!(
                        "127.0.0.1:{} does not see 127.0.0.1:{port} as a connected {}",
                        self.nodes[i].port(),
                        if *master { "master" } else { "replica" }
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether node `i` runs and is not paused (so it answers).
    fn is_live(&self, i: usize) -> bool {
        self.nodes[i].is_running() && !self.nodes[i].process().is_paused()
    }

    /// Node `i`'s role, as it says itself (it must be running and not paused).
    pub fn role(&self, i: usize) -> Result<ClusterRole, HarnessError> {
        let nodes = self.command(i, &["CLUSTER", "NODES"])?;
        let own = parse_nodes(&nodes)
            .into_iter()
            .find(|line| line.flags.contains("myself"))
            .ok_or_else(|| HarnessError::Other(format!("node {i} does not list itself")))?;
        if own.is_master() {
            return Ok(ClusterRole::Master);
        }
        self.ids
            .iter()
            .position(|id| *id == own.master)
            .map(ClusterRole::Replica)
            .ok_or_else(|| HarnessError::Other(format!("node {i} replicates an unknown node {}", own.master)))
    }

    /// A running, unpaused replica of node `master`, as the replicas say themselves.
    pub fn replica_of(&self, master: usize) -> Option<usize> {
        (0..self.nodes.len())
            .filter(|&j| j != master && self.is_live(j))
            .find(|&j| matches!(self.role(j), Ok(ClusterRole::Replica(m)) if m == master))
    }

    /// Cuts master `master` off from its replica: the replica is paused (SIGSTOP) and its
    /// replication link closed by the master (`CLIENT KILL TYPE replica`), so a write the master
    /// accepts after this returns reaches no replica until the replica is resumed
    /// (`node_mut(replica).resume()`) and the master is still there to resend it. Returns the
    /// replica. With [`fail_over`](Self::fail_over)'s steps (kill the master, resume the
    /// replica, [`wait_for_promotion`](Self::wait_for_promotion)) such writes are lost, as
    /// with a replica lagging behind its master.
    pub fn stall_replication(&mut self, master: usize) -> Result<usize, HarnessError> {
        let replica = self
            .replica_of(master)
            .ok_or_else(|| HarnessError::Other(format!("node {master} has no live replica")))?;
        self.nodes[replica].pause()?;
        self.command(master, &["CLIENT", "KILL", "TYPE", "replica"])?;
        Ok(replica)
    }

    /// Kills master `master` (`kill -9`) and waits until its replica took its slots over (the
    /// cluster's automatic failover, after the node timeout of 2 s: about 3 to 5 s in all).
    /// Returns the promoted node.
    pub fn fail_over(&mut self, master: usize) -> Result<usize, HarnessError> {
        let replica = self
            .replica_of(master)
            .ok_or_else(|| HarnessError::Other(format!("node {master} has no live replica")))?;
        self.nodes[master].kill()?;
        self.wait_for_promotion(replica)?;
        Ok(replica)
    }

    /// Waits until node `replica` is a master serving slots and the cluster is ok again (see
    /// [`wait_until_ok`](Self::wait_until_ok); at most 30 s each).
    pub fn wait_for_promotion(&self, replica: usize) -> Result<(), HarnessError> {
        let deadline = Instant::now() + OK_TIMEOUT;
        loop {
            let promoted = self
                .command(replica, &["CLUSTER", "NODES"])
                .ok()
                .is_some_and(|nodes| {
                    parse_nodes(&nodes).iter().any(|line| {
                        line.flags.contains("myself") && line.is_master() && !line.slots.is_empty()
                    })
                });
            if promoted {
                return self.wait_until_ok();
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Other(format!(
                    "node {replica} was not promoted within {OK_TIMEOUT:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Restarts node `i` (killed before) and waits until the cluster is ok again. A master
    /// whose slots another node took over while it was down comes back as that node's replica
    /// (its `nodes.conf` says who it was; the cluster tells it it was replaced): this waits for
    /// that too.
    pub fn rejoin(&mut self, i: usize) -> Result<(), HarnessError> {
        let replaced = self.replicas_per_master > 0
            && (0..self.nodes.len())
                .filter(|&j| j != i && self.is_live(j))
                .find_map(|j| self.command(j, &["CLUSTER", "NODES"]).ok())
                .is_some_and(|nodes| {
                    parse_nodes(&nodes)
                        .iter()
                        .any(|line| line.port == self.nodes[i].port() && line.slots.is_empty())
                });
        self.nodes[i].restart()?;
        if replaced {
            let deadline = Instant::now() + OK_TIMEOUT;
            while !matches!(self.role(i), Ok(ClusterRole::Replica(_))) {
                if Instant::now() >= deadline {
                    return Err(HarnessError::Other(format!(
                        "node {i} did not become a replica within {OK_TIMEOUT:?}"
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.wait_until_ok()
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

    /// Every node: the masters as started first, in slot order (node 0 serves slots 0-5460),
    /// then the replicas (see [`RedisCluster`]).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `i`, to kill, pause, resume or restart it (its `nodes.conf` survives a restart,
    /// so it rejoins with its slots; call [`wait_until_ok`](Self::wait_until_ok) after, or
    /// [`rejoin`](Self::rejoin) for a master that may have been replaced).
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// Which node serves `slot` as master, by asking the first running, unpaused node.
    pub fn node_of_slot(&self, slot: u16) -> Option<usize> {
        let asked = (0..self.nodes.len()).find(|&i| self.is_live(i))?;
        let nodes = command(self.nodes[asked].port(), &["CLUSTER", "NODES"]).ok()?;
        let line = parse_nodes(&nodes)
            .into_iter()
            .find(|line| line.is_master() && line.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))?;
        self.nodes.iter().position(|n| n.port() == line.port)
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`, asked of the first running, unpaused node).
    pub fn slot_of(&self, key: &str) -> Result<u16, HarnessError> {
        let asked = (0..self.nodes.len())
            .find(|&i| self.is_live(i))
            .ok_or_else(|| HarnessError::Other("no node of the cluster runs".into()))?;
        let slot = self.command(asked, &["CLUSTER", "KEYSLOT", key])?;
        slot.parse()
            .map_err(|_| HarnessError::Other(format!("CLUSTER KEYSLOT answered {slot:?}")))
    }

    /// Runs one command on node `i` over a raw connection; the reply as text (`+OK`'s
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

/// One line of `CLUSTER NODES`.
#[derive(Debug)]
struct NodeLine {
    port: u16,
    flags: String,
    /// The master's id for a replica, `-` for a master.
    master: String,
    link: String,
    /// The slot ranges served (importing and migrating marks left out).
    slots: Vec<(u16, u16)>,
}

impl NodeLine {
    fn is_master(&self) -> bool {
        self.flags.split(',').any(|f| f == "master")
    }
}

/// `CLUSTER NODES`'s lines: `<id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch>
/// <link> <slot>...`.
fn parse_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            if fields.len() < 8 {
                return None;
            }
            let port = fields[1].split(['@', ':']).nth(1)?.parse::<u16>().ok()?;
            let slots = fields[8..]
                .iter()
                .filter(|range| !range.starts_with('['))
                .filter_map(|range| {
                    let (a, b) = range.split_once('-').unwrap_or((range, range));
                    Some((a.parse().ok()?, b.parse().ok()?))
                })
                .collect();
            Some(NodeLine {
                port,
                flags: fields[2].to_owned(),
                master: fields[3].to_owned(),
                link: fields[7].to_owned(),
                slots,
            })
        })
        .collect()
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

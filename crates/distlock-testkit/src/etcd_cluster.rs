//! [`EtcdCluster`]: three etcd members forming one raft group on loopback, each with its own
//! client and peer port and directory, each killed, paused and restarted on its own, and (with
//! [`EtcdOptions::peer_links`]) partitioned from the others.

mod links;
mod partition;

pub use links::EtcdPeerLink;
use links::EtcdPeerLinks;

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;

use crate::etcd::{cluster_token, etcd_binary, etcd_status, member_spec, EtcdStatus, Member};
use crate::port::retry_if_port_taken;
use crate::probe::{self, loopback};
use crate::process::delegate_process_controls;
use crate::{temp_dir, EtcdOptions, HarnessError, ServerProcess};

/// How many members [`EtcdCluster`] runs.
pub const ETCD_CLUSTER_SIZE: usize = 3;

/// Three etcd members forming one cluster on loopback (`--initial-cluster`), owned by one
/// test. Member `i` is named `member{i}` and lives in `member{i}/` under [`dir`](Self::dir);
/// each can be stopped, killed, paused, resumed and restarted (same ports, same data) on its
/// own. Dropping the cluster kills every member and removes the directory.
#[derive(Debug)]
pub struct EtcdCluster {
    // Field order matters: the processes are killed before the directory goes.
    members: Vec<EtcdMember>,
    links: Option<EtcdPeerLinks>,
    dir: TempDir,
}

/// One member of an [`EtcdCluster`].
#[derive(Debug)]
pub struct EtcdMember {
    process: ServerProcess,
    name: String,
    port: u16,
    peer_port: u16,
    dir: PathBuf,
}

impl EtcdCluster {
    /// Starts three members with default options; blocks until every member sees a leader.
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(EtcdOptions::default())
    }

    /// Starts three members with `options`; blocks until every member sees a leader.
    pub fn start_with(options: EtcdOptions) -> Result<Self, HarnessError> {
        let binary = etcd_binary(&options)?;
        retry_if_port_taken(|| {
            let dir = temp_dir("etcd-cluster")?;
            let token = cluster_token(&dir);
            let mut peers = (0..ETCD_CLUSTER_SIZE)
                .map(|i| Member::with_free_ports(format!("member{i}")))
                .collect::<Result<Vec<_>, _>>()?;
            let mut dirs = Vec::with_capacity(ETCD_CLUSTER_SIZE);
            for peer in &peers {
                let member_dir = dir.path().join(&peer.name);
                fs::create_dir(&member_dir)
                    .map_err(|e| HarnessError::io(format!("creating {}", member_dir.display()), e))?;
                // The fronts compare it with each process's working directory, which the
                // kernel reports resolved.
                let member_dir = member_dir
                    .canonicalize()
                    .map_err(|e| HarnessError::io(format!("resolving {}", member_dir.display()), e))?;
                dirs.push(member_dir);
            }
            let links = if options.peer_links {
                let ports: Vec<u16> = peers.iter().map(|p| p.peer_port).collect();
                let links = EtcdPeerLinks::start(&ports, &dirs)?;
                for (index, peer) in peers.iter_mut().enumerate() {
                    peer.advertised_peer_port = links.advertised_port(index);
                }
                Some(links)
            } else {
                None
            };
            // Launch every member first: none is ready before a quorum has booted.
            let mut members = Vec::with_capacity(ETCD_CLUSTER_SIZE);
            for (peer, member_dir) in peers.iter().zip(dirs) {
                let spec = member_spec(&binary, &options, &member_dir, peer, &peers, &token);
                members.push(EtcdMember {
                    process: ServerProcess::spawn(spec)?,
                    name: peer.name.clone(),
                    port: peer.client_port,
                    peer_port: peer.peer_port,
                    dir: member_dir,
                });
            }
            for member in &members {
                member.process.wait_ready()?;
            }
            Ok(EtcdCluster { members, links, dir })
        })
    }

    /// The members, in index order.
    pub fn nodes(&self) -> &[EtcdMember] {
        &self.members
    }

    /// Member by index (0, 1 or 2).
    ///
    /// # Panics
    /// If `index >= 3`.
    pub fn node(&self, index: usize) -> &EtcdMember {
        &self.members[index]
    }

    /// Member by index, mutably (to kill, pause, restart it ...).
    ///
    /// # Panics
    /// If `index >= 3`.
    pub fn node_mut(&mut self, index: usize) -> &mut EtcdMember {
        &mut self.members[index]
    }

    /// `etcd://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`, every member's client address.
    pub fn url(&self) -> String {
        let addrs: Vec<String> = self.members.iter().map(|m| m.addr().to_string()).collect();
        format!("etcd://{}", addrs.join(","))
    }

    /// `http://127.0.0.1:P1,http://127.0.0.1:P2,...`, the form `etcdctl --endpoints` takes.
    pub fn endpoints(&self) -> String {
        let endpoints: Vec<String> = self.members.iter().map(EtcdMember::endpoint).collect();
        endpoints.join(",")
    }

    /// The index of the member that reports itself as leader, if any. Paused and stopped
    /// members are not asked (they would not answer).
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().position(|member| {
            member.is_running()
                && !member.process.is_paused()
                && member.status().is_ok_and(|status| status.is_leader())
        })
    }

    /// Polls until some member is leader and returns its index; fails after `timeout`, with
    /// what each member said.
    pub fn wait_for_leader(&self, timeout: Duration) -> Result<usize, HarnessError> {
        probe::poll(
            timeout,
            "no etcd leader",
            || self.leader(),
            || {
                self.members
                    .iter()
                    .map(|member| format!("{}: {:?}", member.name, member.status()))
                    .collect()
            },
        )
    }

    /// The cluster's temporary directory (one subdirectory per member).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl EtcdMember {
    /// The member's name (`member0`, `member1`, `member2`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The member's client port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The member's peer port on `127.0.0.1`.
    pub fn peer_port(&self) -> u16 {
        self.peer_port
    }

    /// `127.0.0.1:PORT`, the client address.
    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    /// `etcd://127.0.0.1:PORT`, this member alone.
    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT`, the form `etcdctl --endpoints` takes.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What the member says of itself and its leader; an error when it does not answer.
    pub fn status(&self) -> Result<EtcdStatus, String> {
        etcd_status(self.addr())
    }

    /// The member's directory (`data/`, `server.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The etcd process and its controls. Its `restart` waits until the member sees a leader
    /// again, which needs a quorum: restart several dead members with `restart_no_wait`
    /// then `wait_ready`.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }

    /// The etcd process and its controls, mutably.
    pub fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }
}

delegate_process_controls!(EtcdMember);

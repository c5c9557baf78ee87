//! [`EtcdPeerLinks`]: a [`FaultProxy`] on every link between two members of an
//! [`EtcdCluster`](super::EtcdCluster), so that a test can cut members off from each other (a
//! follower alone, one direction only) while clients still reach every member.
//!
//! etcd derives each member's id from its advertised peer URL, and every member must be
//! told the same URLs, so member `i` cannot be told its own address for member `j` the way
//! ZooKeeper members can. Instead each member advertises one front listener, and the front
//! tells its callers apart by the process that owns the calling socket (the socket's inode in
//! `/proc/net/tcp`, found among the members' open descriptors): every loopback connection
//! comes from `127.0.0.1` whatever address the member listens on, so the source address says
//! nothing. The front then splices the connection through the proxy of the link `caller →
//! member`, and a connection it cannot place is closed (the caller dials again). Owns the
//! fronts and the proxies; knows nothing of the processes but their directories.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::probe::loopback;
use crate::{Direction, FaultProxy, HarnessError};

/// The proxy through which one member reaches another's peer port.
#[derive(Debug)]
pub struct EtcdPeerLink {
    from: usize,
    to: usize,
    proxy: FaultProxy,
}

impl EtcdPeerLink {
    /// The index of the member that connects through this link.
    pub fn from(&self) -> usize {
        self.from
    }

    /// The index of the member this link leads to.
    pub fn to(&self) -> usize {
        self.to
    }

    /// The proxy (traffic counts, finer faults).
    pub fn proxy(&self) -> &FaultProxy {
        &self.proxy
    }

    /// Silences the link ([`FaultProxy::blackhole`]): no byte moves, nothing is closed.
    pub fn blackhole(&self) {
        self.proxy.blackhole();
    }

    /// Silences the link one way only: toward [`to`](Self::to) with
    /// [`Direction::ToServer`], toward [`from`](Self::from) with [`Direction::ToClient`].
    pub fn blackhole_toward(&self, direction: Direction) {
        self.proxy.blackhole_toward(direction);
    }

    /// Undoes every fault on the link.
    pub fn heal(&self) {
        self.proxy.heal();
    }
}

/// Every ordered pair of members' link, and one front per member.
#[derive(Debug)]
pub(super) struct EtcdPeerLinks {
    links: Vec<EtcdPeerLink>,
    fronts: Vec<Front>,
}

impl EtcdPeerLinks {
    /// Starts the links to the members whose real peer ports are `peer_ports`, each member's
    /// process running in the matching directory of `dirs` (how a front recognises it).
    pub(super) fn start(peer_ports: &[u16], dirs: &[PathBuf]) -> Result<Self, HarnessError> {
        let mut links = Vec::new();
        let mut fronts = Vec::with_capacity(peer_ports.len());
        for (to, port) in peer_ports.iter().enumerate() {
            let mut routes = vec![None; peer_ports.len()];
            for from in (0..peer_ports.len()).filter(|from| *from != to) {
                let proxy = FaultProxy::start(loopback(*port))?;
                routes[from] = Some(proxy.addr());
                links.push(EtcdPeerLink { from, to, proxy });
            }
            fronts.push(Front::start(routes, dirs.to_vec())?);
        }
        Ok(Self { links, fronts })
    }

    /// The port member `index` advertises to its peers (its front).
    pub(super) fn advertised_port(&self, index: usize) -> u16 {
        self.fronts[index].addr.port()
    }

    /// The link from member `from` to member `to`.
    pub(super) fn link(&self, from: usize, to: usize) -> Option<&EtcdPeerLink> {
        self.links.iter().find(|l| l.from == from && l.to == to)
    }

    /// Every link, both ways between every pair of members.
    pub(super) fn all(&self) -> &[EtcdPeerLink] {
        &self.links
    }

    /// Heals every link.
    pub(super) fn heal(&self) {
        self.links.iter().for_each(EtcdPeerLink::heal);
    }
}

/// The listener a member advertises as its peer URL: places each caller and splices it
/// through that caller's link.
#[derive(Debug)]
struct Front {
    addr: SocketAddr,
    shutdown: Option<watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
}

impl Front {
    /// `routes[i]`: the proxy of the link from member `i` (`None` for the member itself);
    /// `dirs[i]`: member `i`'s working directory.
    fn start(routes: Vec<Option<SocketAddr>>, dirs: Vec<PathBuf>) -> Result<Self, HarnessError> {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| HarnessError::io("binding an etcd peer front", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| HarnessError::io("configuring an etcd peer front", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading an etcd peer front's address", e))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| HarnessError::io("starting an etcd peer front's runtime", e))?;
        let (shutdown, mut stop) = watch::channel(false);
        let thread = std::thread::Builder::new()
            .name(format!("etcd-peer-front-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    loop {
                        tokio::select! {
                            _ = stop.wait_for(|stop| *stop) => return,
                            accepted = listener.accept() => {
                                let Ok((caller, from)) = accepted else { continue };
                                let route = caller_index(from, addr, &dirs)
                                    .and_then(|i| routes.get(i).copied().flatten());
                                if let Some(route) = route {
                                    tokio::spawn(splice(caller, route));
                                }
                            }
                        }
                    }
                });
            })
            .map_err(|e| HarnessError::io("spawning an etcd peer front's thread", e))?;
        Ok(Self {
            addr,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(true);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Copies both ways between `caller` and the link's proxy at `route` until either side ends.
async fn splice(mut caller: TcpStream, route: SocketAddr) {
    let Ok(mut upstream) = TcpStream::connect(route).await else {
        return;
    };
    let _ = (caller.set_nodelay(true), upstream.set_nodelay(true));
    let _ = tokio::io::copy_bidirectional(&mut caller, &mut upstream).await;
}

/// The index of the member (by working directory in `dirs`) whose process owns the socket
/// connected from `caller` to `front`; `None` when none does (or it is gone already).
fn caller_index(caller: SocketAddr, front: SocketAddr, dirs: &[PathBuf]) -> Option<usize> {
    let inode = socket_inode(caller, front)?;
    let target = format!("socket:[{inode}]");
    // The socket was connected a moment ago; its owner's descriptors show it at once, but a
    // process that is still starting may be seen between two reads: look twice.
    for _ in 0..2 {
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(cwd) = std::fs::read_link(format!("/proc/{pid}/cwd")) else {
                continue;
            };
            let Some(index) = dirs.iter().position(|dir| *dir == cwd) else {
                continue;
            };
            let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                continue;
            };
            let owns = fds.flatten().any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|link| link.as_os_str() == target.as_str())
            });
            if owns {
                return Some(index);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// The inode of the IPv4 TCP socket whose local end is `local` and remote end `remote`
/// (`/proc/net/tcp`: addresses as little-endian hex, then ports as hex).
fn socket_inode(local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    let hex = |addr: SocketAddr| match addr {
        SocketAddr::V4(v4) => Some(format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(v4.ip().octets()),
            v4.port()
        )),
        SocketAddr::V6(_) => None,
    };
    let (local, remote) = (hex(local)?, hex(remote)?);
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&local.as_str()) && fields.get(2) == Some(&remote.as_str()))
            .then(|| fields.get(9)?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::socket_inode;

    #[test]
    fn finds_the_inode_of_a_loopback_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let caller = std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (_accepted, from) = listener.accept().expect("accept");
        let inode = socket_inode(from, listener.local_addr().expect("addr")).expect("an inode");
        let own = std::fs::read_dir("/proc/self/fd")
            .expect("fds")
            .flatten()
            .any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|l| l.to_string_lossy() == format!("socket:[{inode}]"))
            });
        assert!(own, "this process owns socket {inode}");
        drop(caller);
    }
}

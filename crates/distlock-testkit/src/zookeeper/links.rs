//! [`PeerLinks`]: a [`FaultProxy`] on every link between two members of a
//! [`ZooKeeperEnsemble`](super::ZooKeeperEnsemble), so that a test can cut members off from
//! each other (a follower alone, one direction only) while clients still reach every member.
//!
//! Each member's `zoo.cfg` names the others by their proxies: member `i` reaches member `j`'s
//! quorum and election ports through the proxies of the link `i → j`, and only its own entry
//! carries its real ports (it binds them). A follower connects to its leader, and a member to
//! another's election port, through its own links, so black-holing every link from and to a
//! member isolates it from the ensemble, and nothing else. Owns the proxies; knows nothing of
//! the processes.

use std::time::Duration;

use super::Peer;
use crate::probe::loopback;
use crate::{Direction, FaultProxy, HarnessError};

/// The two proxies through which one member reaches another.
#[derive(Debug)]
pub struct PeerLink {
    from: usize,
    to: usize,
    quorum: FaultProxy,
    election: FaultProxy,
}

impl PeerLink {
    /// The index of the member that connects through this link.
    pub fn from(&self) -> usize {
        self.from
    }

    /// The index of the member this link leads to.
    pub fn to(&self) -> usize {
        self.to
    }

    /// The proxy in front of the target's quorum port (follower to leader traffic).
    pub fn quorum(&self) -> &FaultProxy {
        &self.quorum
    }

    /// The proxy in front of the target's election port.
    pub fn election(&self) -> &FaultProxy {
        &self.election
    }

    /// Silences both proxies ([`FaultProxy::blackhole`]): no byte moves, nothing is closed.
    pub fn blackhole(&self) {
        self.quorum.blackhole();
        self.election.blackhole();
    }

    /// Silences both proxies one way only ([`FaultProxy::blackhole_toward`]): toward
    /// [`to`](Self::to) with [`Direction::ToServer`], toward [`from`](Self::from) with
    /// [`Direction::ToClient`].
    pub fn blackhole_toward(&self, direction: Direction) {
        self.quorum.blackhole_toward(direction);
        self.election.blackhole_toward(direction);
    }

    /// Delays every chunk of bytes on both proxies one way by `latency`
    /// ([`FaultProxy::set_latency`], order kept): toward [`to`](Self::to) with
    /// [`Direction::ToServer`], toward [`from`](Self::from) with [`Direction::ToClient`].
    pub fn delay_toward(&self, direction: Direction, latency: Duration) {
        self.quorum.set_latency(direction, latency, Duration::ZERO);
        self.election.set_latency(direction, latency, Duration::ZERO);
    }

    /// Undoes every fault on both proxies.
    pub fn heal(&self) {
        self.quorum.heal();
        self.election.heal();
    }
}

/// Every ordered pair of members' link, each through its own proxies.
#[derive(Debug)]
pub(super) struct PeerLinks {
    links: Vec<PeerLink>,
}

impl PeerLinks {
    /// Starts the proxies of every link between `peers` (indexed as the ensemble's nodes).
    pub(super) fn start(peers: &[Peer]) -> Result<Self, HarnessError> {
        let mut links = Vec::with_capacity(peers.len() * peers.len().saturating_sub(1));
        for from in 0..peers.len() {
            for (to, target) in peers.iter().enumerate().filter(|(to, _)| *to != from) {
                links.push(PeerLink {
                    from,
                    to,
                    quorum: FaultProxy::start(loopback(target.quorum_port))?,
                    election: FaultProxy::start(loopback(target.election_port))?,
                });
            }
        }
        Ok(Self { links })
    }

    /// The ensemble as member `index` is told of it: itself with its real ports, every other
    /// member behind the proxies of the link from `index`.
    pub(super) fn view_of(&self, index: usize, peers: &[Peer]) -> Vec<Peer> {
        peers
            .iter()
            .enumerate()
            .map(|(to, peer)| match self.link(index, to) {
                Some(link) => Peer {
                    id: peer.id,
                    client_port: peer.client_port,
                    quorum_port: link.quorum.addr().port(),
                    election_port: link.election.addr().port(),
                },
                None => *peer,
            })
            .collect()
    }

    /// The link from member `from` to member `to`.
    pub(super) fn link(&self, from: usize, to: usize) -> Option<&PeerLink> {
        self.links.iter().find(|l| l.from == from && l.to == to)
    }

    /// Black-holes every link from and to member `index`.
    pub(super) fn cut_off(&self, index: usize) {
        self.links
            .iter()
            .filter(|l| l.from == index || l.to == index)
            .for_each(PeerLink::blackhole);
    }

    /// Every link, both ways between every pair of members.
    pub(super) fn all(&self) -> &[PeerLink] {
        &self.links
    }

    /// Heals every link.
    pub(super) fn heal(&self) {
        self.links.iter().for_each(PeerLink::heal);
    }
}

//! Partitions between the members of a [`ZooKeeperEnsemble`] started with
//! [`ZooKeeperOptions::peer_proxies`](super::ZooKeeperOptions::peer_proxies): one member
//! alone, a minority split from the majority, one direction of one pair cut or delayed. Clients still reach
//! every member; only the members' links to each other ([`PeerLink`]s) are silenced, never
//! closed, so each member learns of a partition by its own timeouts (`syncLimit × tickTime`).
//! Owns no state: every operation acts on the links, and [`ZooKeeperEnsemble::heal_links`]
//! undoes them all.

use std::time::Duration;

use super::{PeerLink, ZooKeeperEnsemble};
use crate::{Direction, HarnessError};

impl ZooKeeperEnsemble {
    /// Isolates member `index` from every other member, both ways (the same as
    /// [`cut_off`](Self::cut_off)). A follower keeps serving its clients until `syncLimit`
    /// passes without word from its leader; an isolated leader steps down (goes LOOKING) when
    /// `syncLimit` passes without a quorum of followers, and the others elect a new leader.
    ///
    /// # Errors
    /// If `index` is not a member, or the ensemble was started without `peer_proxies`.
    pub fn isolate(&self, index: usize) -> Result<(), HarnessError> {
        self.split(&[index])
    }

    /// Splits the members in `minority` from the others: every link between a member in it
    /// and a member outside it is black-holed both ways; links within each side still flow.
    ///
    /// # Errors
    /// If `minority` names no member or one that does not exist, or the ensemble was started
    /// without `peer_proxies`.
    pub fn split(&self, minority: &[usize]) -> Result<(), HarnessError> {
        self.members_exist(minority)?;
        let links = self.links()?;
        links
            .all()
            .iter()
            .filter(|l| minority.contains(&l.from()) != minority.contains(&l.to()))
            .for_each(PeerLink::blackhole);
        Ok(())
    }

    /// Cuts one direction between two members: nothing `from` sends reaches `to` (on any of
    /// their connections, whichever member opened it), while everything `to` sends still
    /// reaches `from`. Nothing is closed.
    ///
    /// # Errors
    /// If either is not a member, they are the same, or the ensemble was started without
    /// `peer_proxies`.
    pub fn cut_one_way(&self, from: usize, to: usize) -> Result<(), HarnessError> {
        self.toward(from, to, PeerLink::blackhole_toward)
    }

    /// Delays one direction between two members by `latency`: everything `from` sends
    /// reaches `to` that much later (in order), while everything `to` sends flows at once. A
    /// follower whose leader's words come late keeps answering its clients' reads from what it
    /// has applied so far: a lagging follower, not a cut-off one. [`heal_links`](Self::heal_links)
    /// removes it.
    ///
    /// # Errors
    /// If either is not a member, they are the same, or the ensemble was started without
    /// `peer_proxies`.
    pub fn delay_one_way(&self, from: usize, to: usize, latency: Duration) -> Result<(), HarnessError> {
        self.toward(from, to, |link, direction| link.delay_toward(direction, latency))
    }

    /// Applies `fault` to the bytes `from` sends to `to`, on every connection between them,
    /// whichever member opened it.
    fn toward(
        &self,
        from: usize,
        to: usize,
        fault: impl Fn(&PeerLink, Direction),
    ) -> Result<(), HarnessError> {
        self.members_exist(&[from, to])?;
        if from == to {
            return Err(HarnessError::Other(format!(
                "member {from} has no link to itself"
            )));
        }
        let links = self.links()?;
        // On the link `from → to`, `from` is the client: its bytes go toward the server.
        if let Some(link) = links.link(from, to) {
            fault(link, Direction::ToServer);
        }
        // On the link `to → from`, `from` is the server: its bytes go toward the client.
        if let Some(link) = links.link(to, from) {
            fault(link, Direction::ToClient);
        }
        Ok(())
    }

    fn members_exist(&self, members: &[usize]) -> Result<(), HarnessError> {
        match members.iter().find(|m| **m >= self.nodes.len()) {
            _ if members.is_empty() => Err(HarnessError::Other("no member named".to_owned())),
            Some(m) => Err(HarnessError::Other(format!(
                "no member {m} in an ensemble of {}",
                self.nodes.len()
            ))),
            None => Ok(()),
        }
    }
}

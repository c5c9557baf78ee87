//! Partitions between the members of an [`EtcdCluster`] started with
//! [`EtcdOptions::peer_links`](crate::EtcdOptions::peer_links): one member alone, a minority
//! split from the majority, one direction of one pair cut. Clients still reach every member;
//! only the members' links to each other ([`EtcdPeerLink`]s) are silenced, never closed, so
//! each member learns of a partition by its own timeouts (a follower stands for election after
//! `--election-timeout` without its leader, a leader steps down after one election timeout
//! without a quorum: etcd always runs raft's check-quorum). Owns no state: every operation acts
//! on the links, and [`EtcdCluster::heal_links`] undoes them all.

use super::links::EtcdPeerLinks;
use super::{EtcdCluster, EtcdPeerLink};
use crate::{Direction, HarnessError};

impl EtcdCluster {
    /// Isolates member `index` from every other member, both ways.
    ///
    /// # Errors
    /// If `index` is not a member, or the cluster was started without `peer_links`.
    pub fn isolate(&self, index: usize) -> Result<(), HarnessError> {
        self.split(&[index])
    }

    /// Splits the members in `minority` from the others: every link between a member in it
    /// and a member outside it is black-holed both ways; links within each side still flow.
    ///
    /// # Errors
    /// If `minority` names no member or one that does not exist, or the cluster was started
    /// without `peer_links`.
    pub fn split(&self, minority: &[usize]) -> Result<(), HarnessError> {
        self.members_exist(minority)?;
        self.links()?
            .all()
            .iter()
            .filter(|l| minority.contains(&l.from()) != minority.contains(&l.to()))
            .for_each(EtcdPeerLink::blackhole);
        Ok(())
    }

    /// Cuts one direction between two members: nothing `from` sends reaches `to` (on any of
    /// their connections, whichever member opened it), while everything `to` sends still
    /// reaches `from`. Nothing is closed.
    ///
    /// # Errors
    /// If either is not a member, they are the same, or the cluster was started without
    /// `peer_links`.
    pub fn cut_one_way(&self, from: usize, to: usize) -> Result<(), HarnessError> {
        self.members_exist(&[from, to])?;
        if from == to {
            return Err(HarnessError::Other(format!(
                "member {from} has no link to itself"
            )));
        }
        let links = self.links()?;
        // On the link `from → to`, `from` is the client: its bytes go toward the server.
        if let Some(link) = links.link(from, to) {
            link.blackhole_toward(Direction::ToServer);
        }
        // On the link `to → from`, `from` is the server: its bytes go toward the client.
        if let Some(link) = links.link(to, from) {
            link.blackhole_toward(Direction::ToClient);
        }
        Ok(())
    }

    /// Undoes every partition: every link forwards again.
    ///
    /// # Errors
    /// If the cluster was started without `peer_links`.
    pub fn heal_links(&self) -> Result<(), HarnessError> {
        self.links()?.heal();
        Ok(())
    }

    /// The link from member `from` to member `to` (`None` without `peer_links`, or when
    /// either is not a member or they are the same).
    pub fn peer_link(&self, from: usize, to: usize) -> Option<&EtcdPeerLink> {
        self.links.as_ref()?.link(from, to)
    }

    fn links(&self) -> Result<&EtcdPeerLinks, HarnessError> {
        self.links.as_ref().ok_or_else(|| {
            HarnessError::Other("the etcd cluster was started without EtcdOptions::peer_links".into())
        })
    }

    fn members_exist(&self, members: &[usize]) -> Result<(), HarnessError> {
        match members.iter().find(|m| **m >= self.members.len()) {
            _ if members.is_empty() => Err(HarnessError::Other("no member named".to_owned())),
            Some(m) => Err(HarnessError::Other(format!(
                "no member {m} in a cluster of {}",
                self.members.len()
            ))),
            None => Ok(()),
        }
    }
}

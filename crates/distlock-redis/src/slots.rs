//! The slot map: which master of a Redis Cluster serves which hash slot, as `CLUSTER SLOTS`
//! said: [`SlotMap`], cached, so that a batch of renewals can go to each master as one
//! pipeline, and the [`Ranges`] a [`crate::node::Node`] reads as it opens a cluster
//! connection, to find the master a timed-out request went to.
//!
//! It owns the map and its reading and nothing else; it may be stale: whoever uses it sends by it,
//! and a command that lands on the wrong master comes back `MOVED` or `ASK`, which the user
//! then sends through the routed path (the cluster client follows redirects there) and calls
//! [`SlotMap::forget`]. Routing of single commands never uses it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use distlock_core::{Error, Result};
use redis::Value;
use tokio::time::Instant;

use crate::node::{Node, BACKEND};

/// How long a map is used before it is read again even if nothing came back `MOVED`.
const MAX_AGE: Duration = Duration::from_secs(30);

/// A master's address as the cluster client names its connection: host and port.
pub(crate) type Master = Arc<(String, u16)>;

/// `(first slot, last slot, master)` ranges, as `CLUSTER SLOTS` lists them.
pub(crate) type Ranges = Vec<(u16, u16, Master)>;

/// The master serving `slot` in `ranges`, if any.
pub(crate) fn master_of(ranges: &[(u16, u16, Master)], slot: u16) -> Option<&Master> {
    ranges
        .iter()
        .find(|(first, last, _)| (first..=last).contains(&&slot))
        .map(|(_, _, master)| master)
}

/// The cached slot map of one cluster client.
#[derive(Debug, Default)]
pub(crate) struct SlotMap {
    cached: Mutex<Option<Cached>>,
}

#[derive(Debug)]
struct Cached {
    /// `(first slot, last slot, master)`, as `CLUSTER SLOTS` lists them.
    ranges: Vec<(u16, u16, Master)>,
    read_at: Instant,
}

impl SlotMap {
    /// The master serving each of `slots` (`None` for a slot no master serves), reading the
    /// map first (one round trip) if there is none or it is old. `answering_host`: the host
    /// to use for a master listed without one (`cluster-preferred-endpoint-type
    /// unknown-endpoint`: the client uses the address it asked, as the cluster client does).
    pub(crate) async fn masters_of(
        &self,
        node: &Node,
        answering_host: &str,
        slots: &[u16],
    ) -> Result<Vec<Option<Master>>> {
        let fresh = {
            let cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
            cached
                .as_ref()
                .filter(|c| c.read_at.elapsed() < MAX_AGE)
                .map(|c| c.ranges.clone())
        };
        let ranges = match fresh {
            Some(ranges) => ranges,
            None => {
                let ranges = read(node, answering_host).await?;
                *self.cached.lock().unwrap_or_else(PoisonError::into_inner) = Some(Cached {
                    ranges: ranges.clone(),
                    read_at: Instant::now(),
                });
                ranges
            }
        };
        Ok(slots
            .iter()
            .map(|&slot| master_of(&ranges, slot).cloned())
            .collect())
    }

    /// Every master, once each (for a `SCAN` of the whole cluster).
    pub(crate) async fn masters(&self, node: &Node, answering_host: &str) -> Result<Vec<Master>> {
        self.forget();
        let mut masters: Vec<Master> = self.masters_of(node, answering_host, &[]).await.map(|_| {
            let cached = self.cached.lock().unwrap_or_else(PoisonError::into_inner);
            cached
                .as_ref()
                .map(|c| c.ranges.iter().map(|(_, _, m)| m.clone()).collect())
                .unwrap_or_default()
        })?;
        masters.sort();
        masters.dedup();
        Ok(masters)
    }

    /// Drops the map (a reply came back `MOVED` or `ASK`): the next batch reads it again.
    pub(crate) fn forget(&self) {
        *self.cached.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// `CLUSTER SLOTS`, one round trip to any node.
async fn read(node: &Node, answering_host: &str) -> Result<Vec<(u16, u16, Master)>> {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("SLOTS");
    let reply: Value = node.query(&cmd).await?;
    parse(reply, answering_host)
}

/// A `CLUSTER SLOTS` reply as `(first slot, last slot, master)` ranges (`answering_host`: see
/// [`SlotMap::masters_of`]).
pub(crate) fn parse(reply: Value, answering_host: &str) -> Result<Vec<(u16, u16, Master)>> {
    let bad = |what: &str| Error::backend(BACKEND, format!("an unexpected CLUSTER SLOTS reply ({what})"));
    let Value::Array(entries) = reply else {
        return Err(bad("not an array"));
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(parts) = entry else {
            return Err(bad("an entry is not an array"));
        };
        let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            return Err(bad("an entry without a range and a master"));
        };
        let host = match master.first() {
            Some(Value::BulkString(host)) if !host.is_empty() && host.as_slice() != b"?" => {
                String::from_utf8_lossy(host).into_owned()
            }
            _ => answering_host.to_owned(),
        };
        let Some(Value::Int(port)) = master.get(1) else {
            return Err(bad("a master without a port"));
        };
        let (Ok(first), Ok(last), Ok(port)) =
            (u16::try_from(*first), u16::try_from(*last), u16::try_from(*port))
        else {
            return Err(bad("a number out of range"));
        };
        ranges.push((first, last, Arc::new((host, port))));
    }
    Ok(ranges)
}

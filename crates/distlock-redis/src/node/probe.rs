//! The probe of a cluster master after a request to it timed out (see [`Node`]): a `PING`
//! on a fresh connection of its own decides whether the cluster connection is reopened. It
//! owns that decision; opening and replacing connections is [`Node`]'s.

use redis::{RedisError, Value};
use std::sync::PoisonError;

use super::Node;
use crate::config::Target;
use crate::slots;

/// Where a request goes, so that a master that timed out can be probed alone.
#[derive(Debug, Clone)]
pub(super) enum At {
    /// Wherever the cluster client routes it (or one server).
    Unknown,
    /// The master of this hash slot.
    Slot(u16),
    /// The node at this host and port.
    Address(String, u16),
}

impl Node {
    /// A request to `at` on the connection of `generation` timed out. On one server the
    /// connection is replaced; on a cluster the request's master is probed first, once for all
    /// callers (see [`Node`]), and the connection reopened only if the probe does not time out.
    pub(super) fn timed_out(&self, generation: u64, at: &At) {
        let Target::Cluster(seeds) = &self.target else {
            return self.replace(generation);
        };
        let master = {
            let mut current = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
            if current.generation != generation {
                return; // already replaced
            }
            let master = match at {
                At::Unknown => None,
                At::Address(host, port) => Some((host.clone(), *port)),
                At::Slot(slot) => current
                    .masters
                    .as_ref()
                    .and_then(|masters| slots::master_of(masters, *slot))
                    .map(|master| (master.0.clone(), master.1)),
            };
            let probe =
                master.and_then(|(host, port)| seeds.node(&host, port).map(|info| (host, port, info)));
            if probe.is_some() {
                if current.probing {
                    return; // another caller's probe decides
                }
                current.probing = true;
            }
            probe
        };
        let Some((host, port, info)) = master else {
            return self.replace(generation);
        };
        let node = self.clone();
        tokio::spawn(async move {
            let answered = node.probe(info).await;
            node.conn.lock().unwrap_or_else(PoisonError::into_inner).probing = false;
            if answered {
                node.replace(generation);
            } else {
                tracing::debug!(url = %node.url, %host, port, "distlock-redis: a master timed out on a fresh connection too; keeping the cluster connection");
            }
        });
    }

    /// Whether the node `info` names is reachable: `false` if a `PING` on a fresh connection of
    /// its own (connected within the connect timeout) gets no reply within the operation
    /// timeout; `true` if it answers, or fails at once (refused, reset: not a slow node, but
    /// one no longer there, which a new slot map may route around).
    async fn probe(&self, info: redis::ConnectionInfo) -> bool {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.timeout));
        let ping = async {
            let client = redis::Client::open(info)?;
            let mut conn = tokio::time::timeout(
                self.connect_timeout,
                client.get_multiplexed_async_connection_with_config(&config),
            )
            .await
            .map_err(|_| RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)))??;
            tokio::time::timeout(self.timeout, redis::cmd("PING").query_async::<Value>(&mut conn))
                .await
                .map_err(|_| RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)))?
        };
        match ping.await {
            Ok(_) => true,
            Err(e) => !e.is_timeout(),
        }
    }
}

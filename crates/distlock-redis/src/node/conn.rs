//! [`Conn`]: the connection a [`Node`](super::Node) sends on (one server's connection
//! manager, or a cluster's connection) and how it is opened.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{RedisFuture, Value};

use super::Opened;
use crate::config::Target;
use crate::slots;

/// One server's connection manager, a cluster's connection, or one connection to the
/// primary the Sentinels named (not reconnecting by itself: a new connection is opened after
/// asking the Sentinels again).
#[derive(Clone)]
pub(crate) enum Conn {
    Server(ConnectionManager),
    Cluster(ClusterConnection),
    Primary(MultiplexedConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Server(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
            Conn::Primary(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Server(conn) => conn.req_packed_commands(cmd, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
            Conn::Primary(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Server(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
            Conn::Primary(conn) => conn.get_db(),
        }
    }
}

/// Opens the connection to `target`: a connection manager, a connection to the primary the
/// Sentinels name (asking them first), or a cluster connection (which
/// reads the slot map from the seeds and connects to every master), then reads which master
/// serves which slots (`CLUSTER SLOTS`, one round trip; `None` if it fails).
pub(super) async fn open(
    target: &Target,
    timeout: Duration,
    connect_timeout: Duration,
) -> redis::RedisResult<Opened> {
    match target {
        Target::Server(client) => {
            let config = manager_config(timeout, connect_timeout);
            Ok((
                Conn::Server(ConnectionManager::new_with_config(client.clone(), config).await?),
                None,
            ))
        }
        Target::Sentinel(sentinels) => {
            let client = sentinels.primary().await?;
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(Some(timeout));
            let conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            Ok((Conn::Primary(conn), None))
        }
        Target::Cluster(seeds) => {
            let client = seeds.client(timeout, connect_timeout, None)?;
            let mut conn = client.get_async_connection().await?;
            let masters = tokio::time::timeout(
                timeout,
                redis::cmd("CLUSTER").arg("SLOTS").query_async::<Value>(&mut conn),
            )
            .await
            .ok()
            .and_then(Result::ok)
            .and_then(|reply| slots::parse(reply, &seeds.first_host()).ok())
            .map(Arc::new);
            Ok((Conn::Cluster(conn), masters))
        }
    }
}

pub(super) fn manager_config(timeout: Duration, connect_timeout: Duration) -> ConnectionManagerConfig {
    // Few reconnection retries: our own timeouts bound every call, and the next call after a
    // failure starts a fresh reconnection anyway.
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(200))
}

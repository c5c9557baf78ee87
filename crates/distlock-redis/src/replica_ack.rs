//! Replica acknowledgement ([`RedisConfig::with_wait_for_replicas`]): the scripts of one
//! acquisition, or of renewals, and `WAIT count timeout` behind them in one pipeline, on a
//! connection of their own. `WAIT` blocks its connection, so it must hold up neither the
//! requests on the shared one (releases, other renewals) nor other acquisitions.
//!
//! Owns those connections and the reading of the replies; what the scripts do and what a
//! missing acknowledgement means for each operation is for [`RedisLock`](crate::RedisLock).

use std::time::Duration;

use distlock_core::{Error, Result};
use redis::Value;

use crate::config::{RedisConfig, ReplicaAck, Target};
use crate::lua::LuaScript;
use crate::node::{self, Nonce, Publish, BACKEND};

/// One script to run in an acknowledged pipeline, with its keys and arguments.
pub(crate) struct ScriptCall<'a> {
    pub(crate) script: &'static LuaScript,
    pub(crate) keys: Vec<&'a [u8]>,
    pub(crate) args: Vec<&'a [u8]>,
}

/// The connections for `WAIT` and the acknowledgement asked for.
pub(crate) struct ReplicaAcks {
    connections: AckConnections,
    ack: ReplicaAck,
    /// The operation timeout: the pipeline may take it plus the acknowledgement's timeout.
    timeout: Duration,
}

impl ReplicaAcks {
    /// `None` without [`RedisConfig::with_wait_for_replicas`], and on a cluster (refused by
    /// the configuration's validation).
    pub(crate) fn new(config: &RedisConfig) -> Option<Self> {
        let ack = config.replicas?;
        let primary = match &config.target {
            Target::Server(client) => Primary::Server(client.clone()),
            Target::Sentinel(sentinels) => Primary::Sentinel(sentinels.clone()),
            Target::Cluster(_) => return None,
        };
        Some(Self {
            connections: AckConnections {
                primary,
                url: config.url.clone(),
                connect_timeout: config.connect_timeout,
                idle: std::sync::Mutex::default(),
            },
            ack,
            timeout: config.operation_timeout,
        })
    }

    /// Whether `acknowledged` replicas (the reply to `WAIT`) are enough.
    pub(crate) fn enough(&self, acknowledged: i64) -> bool {
        acknowledged >= i64::from(self.ack.count)
    }

    /// The error for a write the master applied but too few replicas acknowledged in time;
    /// `what` names it ("the lock", "the renewal"), `then` says what follows.
    pub(crate) fn too_few(&self, what: &str, then: &str) -> Error {
        Error::unavailable(
            BACKEND,
            format!(
                "fewer than {} replicas acknowledged {what} within {:?}{then}",
                self.ack.count, self.ack.timeout
            ),
        )
    }

    /// Runs `calls` and `WAIT` behind them in one pipeline (one round trip plus the replicas'
    /// delay; a second one with `EVAL` only if the server did not know a script, sending
    /// every script again: each is safe to run twice). Returns each script's reply (an error
    /// reply as a [`Value::ServerError`]) and how many replicas acknowledged.
    ///
    /// # Errors
    /// [`Error::Unavailable`] if the pipeline failed or timed out, or a reply is not its
    /// request's own: the scripts' outcome is unknown.
    pub(crate) async fn run(&self, calls: &[ScriptCall<'_>]) -> Result<(Vec<Value>, i64)> {
        let nonces: Vec<Nonce> = calls.iter().map(|_| Nonce::new()).collect();
        let wait_ms = u64::try_from(self.ack.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let build = |use_eval: bool| {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for (call, nonce) in calls.iter().zip(&nonces) {
                pipe.add_command(node::script_cmd(
                    call.script,
                    &call.keys,
                    &call.args,
                    Publish::Plain,
                    nonce,
                    use_eval,
                ));
            }
            pipe.cmd("WAIT").arg(self.ack.count).arg(wait_ms);
            pipe
        };
        // The replicas' delay is part of the round trip.
        let limit = self.timeout + self.ack.timeout;
        let mut replies = self.connections.pipeline(limit, &build(false)).await?;
        let unknown_script = |replies: &[Value]| {
            replies
                .iter()
                .any(|v| matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT"))
        };
        if unknown_script(&replies) {
            replies = self.connections.pipeline(limit, &build(true)).await?;
        }
        if replies.len() != calls.len() + 1 {
            return Err(Error::backend(
                BACKEND,
                format!("{} replies to a pipeline of {}", replies.len(), calls.len() + 1),
            ));
        }
        let wait = replies.pop().map_or(Ok(0), |v| node::int_reply(&v))?;
        // The connection is the pipeline's own, and dropped after any timeout, so it never
        // lags behind; a reply to another request would still be refused.
        let opened = replies
            .into_iter()
            .zip(&nonces)
            .map(|(reply, nonce)| {
                node::open_reply(reply, nonce).ok_or_else(|| {
                    Error::unavailable(
                        BACKEND,
                        "a reply to another request arrived; the outcome is unknown",
                    )
                })
            })
            .collect::<Result<Vec<Value>>>()?;
        Ok((opened, wait))
    }
}

/// Idle connections for `WAIT`: a pipeline takes one (or opens one) and gives it back after
/// a clean answer, so concurrent acquisitions and renewals wait for their replicas in
/// parallel. A connection that failed or timed out is dropped, not reused.
struct AckConnections {
    primary: Primary,
    url: String,
    connect_timeout: Duration,
    /// Each with the switches of the primary announced when it was opened (behind Sentinel).
    idle: std::sync::Mutex<Vec<(redis::aio::MultiplexedConnection, u64)>>,
}

/// The server acknowledgement connections go to: one server, or the primary the Sentinels
/// name when the connection is opened.
enum Primary {
    Server(redis::Client),
    Sentinel(crate::sentinel::SentinelTarget),
}

impl AckConnections {
    /// Behind Sentinel: the primary discovered is forgotten (see
    /// [`SentinelTarget::forget`](crate::sentinel::SentinelTarget::forget)).
    fn switches(&self) -> u64 {
        match &self.primary {
            Primary::Sentinel(sentinels) => sentinels.switches(),
            Primary::Server(_) => 0,
        }
    }

    fn forget(&self) {
        if let Primary::Sentinel(sentinels) = &self.primary {
            sentinels.forget();
        }
    }
}

/// At most this many idle acknowledgement connections are kept.
const MAX_IDLE_ACK_CONNECTIONS: usize = 16;

impl AckConnections {
    /// Runs `pipe` on a connection of its own, bounded by `limit` (plus connecting if no
    /// connection is idle).
    async fn pipeline(&self, limit: Duration, pipe: &redis::Pipeline) -> Result<Vec<Value>> {
        let switches = self.switches();
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
            .filter(|(_, opened)| *opened == switches);
        let mut conn = match idle {
            Some((conn, _)) => conn,
            None => {
                let config = ack_connection_config(self.connect_timeout);
                let open = async {
                    match &self.primary {
                        Primary::Server(client) => {
                            client.get_multiplexed_async_connection_with_config(&config).await
                        }
                        Primary::Sentinel(sentinels) => {
                            let client = sentinels.primary().await?;
                            client.get_multiplexed_async_connection_with_config(&config).await
                        }
                    }
                };
                node::bounded(self.connect_timeout, &self.url, open)
                    .await
                    .inspect_err(|_| self.forget())?
            }
        };
        let replies: Vec<Value> = match node::bounded(limit, &self.url, pipe.query_async(&mut conn)).await {
            Ok(replies) => replies,
            Err(e) => {
                self.forget();
                return Err(e);
            }
        };
        if replies.iter().any(|reply| matches!(reply, Value::ServerError(_))) {
            // Perhaps no longer the primary (`READONLY`, `WAIT` refused on a replica): a new
            // connection goes where the Sentinels point then.
            self.forget();
            return Ok(replies);
        }
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if idle.len() < MAX_IDLE_ACK_CONNECTIONS {
            idle.push((conn, switches));
        }
        Ok(replies)
    }
}

/// An acknowledgement connection's settings: no response timeout of its own (the client
/// library's default, 500 ms, would cut off a `WAIT` that may last its whole timeout); every
/// pipeline on it is bounded by [`AckConnections::pipeline`]'s limit instead.
fn ack_connection_config(connect_timeout: Duration) -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(None)
}

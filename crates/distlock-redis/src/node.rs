//! [`Node`]: one Redis server, or one Redis Cluster, as the lock code sees it: a multiplexed,
//! self-reconnecting connection whose every call is bounded in time, scripts run by `EVALSHA`
//! with an `EVAL` fallback and their replies checked to be their own (a [`Nonce`] each), and
//! the mapping of Redis errors onto [`distlock_core::Error`].
//!
//! On a cluster the connection is the `redis` crate's cluster connection (one multiplexed
//! connection per master): it routes each script by its first key's slot and follows `MOVED`
//! and `ASK` redirects itself. A pipeline goes to one node named by address
//! ([`Node::pipeline_to`]).
//!
//! It knows nothing about locks; [`RedisLock`](crate::RedisLock) and
//! [`Redlock`](crate::Redlock) decide what to send.
//!
//! This file owns the connection's life (opening, replacing, bounding every call, retrying
//! once on a broken connection); its parts live beside it: [`conn`] (the connection types and
//! their opening), [`script`] (scripts on the wire and their replies), [`probe`] (the probe of
//! a cluster master that timed out), [`errors`] (the mapping of errors). Which master serves
//! which slot is [`crate::slots`]'.

use std::future::Future;

use futures::future::{BoxFuture, FutureExt, Shared};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use distlock_core::{Error, Result};
use redis::aio::ConnectionManager;
use redis::cluster_routing::SingleNodeRoutingInfo;
use redis::{ErrorKind, FromRedisValue, ServerErrorKind, Value};

use crate::config::Target;
use crate::server_run::ServerRun;
use crate::slots;

mod conn;
mod errors;
mod probe;
mod script;

pub(crate) use conn::Conn;
use conn::{manager_config, open};
use errors::with_context;
pub(crate) use errors::{bounded, detail, int_reply, map_error};
use probe::At;
pub(crate) use script::{open_reply, script_cmd, Nonce, Publish};

pub(crate) const BACKEND: &str = "redis";

/// The connection in use and how many times it was replaced.
struct Current {
    generation: u64,
    /// `None`: a cluster connection to open with the next request (opening one is a round
    /// trip to the seeds and one connection per master, so it is not done under the lock).
    conn: Option<Conn>,
    /// The opening of that connection, shared by every caller that finds it gone, so that
    /// many callers failing at once open one connection, not one each.
    opening: Option<Opening>,
    /// On a cluster: which master served which slots when the connection was opened (`None`
    /// if `CLUSTER SLOTS` did not answer then), to find the master a timed-out request went to.
    masters: Option<Masters>,
    /// Whether a master is being probed after a timeout (one probe for every caller).
    probing: bool,
    /// Behind Sentinel: the switches of the primary announced when the connection was
    /// opened (see [`SentinelTarget::switches`](crate::sentinel::SentinelTarget::switches)).
    switches: u64,
}

/// Which master served which slots when a cluster connection was opened.
type Masters = Arc<slots::Ranges>;

/// A connection opened, with its cluster's masters.
type Opened = (Conn, Option<Masters>);

/// A cluster connection being opened, awaited by every caller that needs it.
type Opening = Shared<BoxFuture<'static, std::result::Result<Opened, Arc<Error>>>>;

/// One server: a shared multiplexed connection (clones share it).
///
/// A connection whose request timed out is replaced by a fresh one (connected on first use):
/// behind a silent partition the old one may never answer again, and neither the client
/// library nor the kernel (before its keepalive probes give up) would drop it. Requests
/// already sent on the old connection finish or time out on it. On a cluster the whole
/// cluster connection is opened again (the slot map and every master), once for all the
/// callers that find it gone. Reconnecting one master alone is beyond the `redis` crate's
/// cluster connection (1.2): it offers no call to drop or reconnect one master's connection,
/// and reconnects one by itself only after finding it dropped (reset, closed); a request that
/// timed out it sends again on the same connection, which behind a silent partition never
/// answers. So before reopening, the master the request went to (by its key's slot, as
/// `CLUSTER SLOTS` said when the connection was opened) is probed: a `PING` on a fresh
/// connection of its own, bounded by the connect and operation timeouts, one probe at a time
/// for all callers. If the probe answers (or fails at once: refused, reset), the old
/// connection is the broken one and the cluster connection is reopened; if it times out too,
/// the master itself is slow or cut off, reopening every master's connection would not help
/// (and would wait for that master), and nothing is reopened: the cluster client's own
/// failover handling and later requests take it from there. A request whose master is not
/// known (no slot map, a command routed by the cluster client) reopens at once.
#[derive(Clone)]
pub(crate) struct Node {
    target: Target,
    conn: Arc<Mutex<Current>>,
    timeout: Duration,
    connect_timeout: Duration,
    url: String,
    /// Which run of the server the connection talks to (one server only).
    run: Arc<ServerRun>,
}

impl Node {
    /// Connects within `connect_timeout`.
    pub(crate) async fn connect(
        target: Target,
        url: String,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self> {
        let switches = match &target {
            Target::Sentinel(sentinels) => {
                sentinels.listen();
                sentinels.switches()
            }
            _ => 0,
        };
        let (conn, masters) = bounded(connect_timeout, &url, open(&target, timeout, connect_timeout)).await?;
        Ok(Self {
            target,
            conn: Arc::new(Mutex::new(Current {
                generation: 0,
                conn: Some(conn),
                opening: None,
                masters,
                probing: false,
                switches,
            })),
            timeout,
            connect_timeout,
            url,
            run: Arc::default(),
        })
    }

    /// A node that connects on first use (Redlock: a master that is down at start-up must not
    /// stop the others from working).
    pub(crate) fn lazy(
        client: redis::Client,
        url: String,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self> {
        let config = manager_config(timeout, connect_timeout);
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| Error::invalid_config(format!("{url}: {e}")))?;
        Ok(Self {
            target: Target::Server(client),
            conn: Arc::new(Mutex::new(Current {
                generation: 0,
                conn: Some(Conn::Server(conn)),
                opening: None,
                masters: None,
                probing: false,
                switches: 0,
            })),
            timeout,
            connect_timeout,
            url,
            run: Arc::default(),
        })
    }

    /// The server's URL without password.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The server or cluster it talks to.
    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    /// Whether it talks to a cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(_))
    }

    /// How its scripts announce releases.
    pub(crate) fn publish(&self) -> Publish {
        match self.target {
            Target::Server(_) | Target::Sentinel(_) => Publish::Plain,
            Target::Cluster(_) => Publish::Sharded,
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// One command, bounded by the operation timeout.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        self.query_within(self.timeout, cmd).await
    }

    /// One command, bounded by `limit`.
    pub(crate) async fn query_within<T: FromRedisValue>(
        &self,
        limit: Duration,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        self.run(limit, |mut conn| async move { cmd.query_async(&mut conn).await })
            .await
    }

    /// A pipeline (one round trip) bounded by the operation timeout, with the generation of
    /// the connection it ran on (for [`checked`](Self::checked)).
    pub(crate) async fn pipeline_on(&self, pipe: &redis::Pipeline) -> Result<(Vec<Value>, u64)> {
        self.run_on(self.timeout, |mut conn| async move {
            pipe.query_async(&mut conn).await
        })
        .await
    }

    /// On a cluster: a pipeline (one round trip) to the master at `host:port`, whatever the
    /// slots of its keys, bounded by the operation timeout, with the generation of the
    /// connection; `None` if the master redirected it (`MOVED`, `ASK`: the cluster client
    /// reports a redirect of any command as the pipeline's error). On one server, as
    /// [`pipeline_on`](Self::pipeline_on).
    pub(crate) async fn pipeline_to(
        &self,
        host: &str,
        port: u16,
        pipe: &redis::Pipeline,
    ) -> Result<(Option<Vec<Value>>, u64)> {
        let at = At::Address(host.to_owned(), port);
        self.run_tracked(self.timeout, at, |conn| async move {
            match conn {
                Conn::Cluster(mut conn) => {
                    let route = SingleNodeRoutingInfo::ByAddress {
                        host: host.to_owned(),
                        port,
                    };
                    match conn.route_pipeline(pipe.clone(), 0, pipe.len(), route).await {
                        Err(e)
                            if matches!(
                                e.kind(),
                                ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask)
                            ) =>
                        {
                            Ok(None)
                        }
                        other => other.map(Some),
                    }
                }
                mut conn => pipe.query_async(&mut conn).await.map(Some),
            }
        })
        .await
        .map(|(value, generation, _)| (value, generation))
    }

    /// On a cluster: one command to the master at `host:port` (a `SCAN` of that node, say).
    pub(crate) async fn query_at<T: FromRedisValue>(
        &self,
        host: &str,
        port: u16,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        let at = At::Address(host.to_owned(), port);
        let value = self
            .run_tracked(self.timeout, at, |conn| async move {
                match conn {
                    Conn::Cluster(mut conn) => {
                        let route = redis::cluster_routing::RoutingInfo::SingleNode(
                            SingleNodeRoutingInfo::ByAddress {
                                host: host.to_owned(),
                                port,
                            },
                        );
                        conn.route_command(cmd.clone(), route).await
                    }
                    mut conn => cmd.query_async(&mut conn).await,
                }
            })
            .await?
            .0;
        redis::from_redis_value(value).map_err(|e| with_context(map_error(e.into()), &self.url))
    }

    /// Runs `request` on the current connection within `limit`; on a timeout, replaces the
    /// connection (unless another caller already did). A request that fails because the
    /// connection was found broken (reset, closed, broken pipe) is sent once more on the
    /// reconnected connection within what is left of `limit`: every request this crate sends
    /// may run twice (the scripts are idempotent for one owner token; a second acquire by the
    /// same token reports the lock acquired), and a reset between two waits must not end a
    /// wait with an error.
    async fn run<T, F, Fut>(&self, limit: Duration, request: F) -> Result<T>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.run_on(limit, request).await.map(|(value, _)| value)
    }

    /// As [`run`](Self::run), also returning the generation of the connection that answered.
    async fn run_on<T, F, Fut>(&self, limit: Duration, request: F) -> Result<(T, u64)>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.run_tracked(limit, At::Unknown, request)
            .await
            .map(|(value, generation, _)| (value, generation))
    }

    /// As [`run_on`](Self::run_on), also telling whether the request was sent again.
    /// `at`: where the request goes (see [`timed_out`](Self::timed_out)).
    async fn run_tracked<T, F, Fut>(&self, limit: Duration, at: At, request: F) -> Result<(T, u64, bool)>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let deadline = tokio::time::Instant::now() + limit;
        let mut retried = false;
        loop {
            let (generation, conn) = self.current(deadline, limit).await?;
            let outcome = tokio::time::timeout_at(deadline, request(conn)).await;
            match outcome {
                Ok(Ok(value)) => return Ok((value, generation, retried)),
                Ok(Err(e)) if e.is_timeout() => {
                    self.timed_out(generation, &at);
                    return Err(with_context(map_error(e), &self.url));
                }
                Ok(Err(e)) => {
                    let stale = self.stale_primary(&e);
                    if stale {
                        // Behind Sentinel: the next connection goes to the primary they name.
                        self.replace(generation);
                    }
                    if retried || !(e.is_connection_dropped() || e.is_io_error() || stale) {
                        return Err(with_context(map_error(e), &self.url));
                    }
                    tracing::debug!(url = %self.url, error = %e, "distlock-redis: connection broken or not the primary; sending once more");
                    retried = true;
                }
                Err(_) => {
                    self.timed_out(generation, &at);
                    return Err(Error::unavailable(
                        BACKEND,
                        format!("{} did not answer within {limit:?}", self.url),
                    ));
                }
            }
        }
    }

    /// Behind Sentinel: whether `e` says the connection no longer reaches the primary (it
    /// broke, was refused, or the server answered as a replica: `READONLY`, or `MASTERDOWN`),
    /// so that the Sentinels must be asked again. A request refused so did not run (a script
    /// on a replica stops at its first write), and a broken connection's is sent once more
    /// anyway, so such a request is sent once more on the new connection.
    fn stale_primary(&self, e: &redis::RedisError) -> bool {
        matches!(self.target, Target::Sentinel(_))
            && (e.is_connection_dropped()
                || e.is_io_error()
                || e.is_connection_refusal()
                || matches!(
                    e.kind(),
                    ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
                ))
    }

    /// The connection to use and its generation; a cluster connection that was dropped is
    /// opened again first, within `deadline`: once for every caller waiting for it (the
    /// opening goes on, bounded by the connect and operation timeouts, if the caller that
    /// started it gives up first and another still waits).
    async fn current(&self, deadline: tokio::time::Instant, limit: Duration) -> Result<(u64, Conn)> {
        let (generation, opening) = {
            let mut current = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
            if let Target::Sentinel(sentinels) = &self.target {
                let switches = sentinels.switches();
                if current.switches != switches {
                    // The Sentinels replaced the primary this connection goes to.
                    tracing::debug!(url = %self.url, "distlock-redis: the primary was switched; reconnecting");
                    current.switches = switches;
                    current.generation += 1;
                    current.conn = None;
                    current.opening = None;
                }
            }
            if let Some(conn) = &current.conn {
                return Ok((current.generation, conn.clone()));
            }
            let opening = current.opening.get_or_insert_with(|| self.opening()).clone();
            (current.generation, opening)
        };
        let opened = match tokio::time::timeout_at(deadline, opening).await {
            Ok(Ok(opened)) => opened,
            Ok(Err(e)) => {
                // The next caller tries afresh.
                let mut current = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
                if current.generation == generation {
                    current.opening = None;
                }
                return Err(e.duplicate());
            }
            Err(_) => {
                return Err(Error::unavailable(
                    BACKEND,
                    format!("{} did not answer within {limit:?}", self.url),
                ))
            }
        };
        let (opened, masters) = opened;
        let mut current = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        if current.generation == generation && current.conn.is_none() {
            current.conn = Some(opened.clone());
            current.opening = None;
            current.masters = masters;
        }
        Ok((current.generation, current.conn.clone().unwrap_or(opened)))
    }

    /// Opens the connection to the target, bounded by the connect and operation timeouts.
    fn opening(&self) -> Opening {
        let (target, url) = (self.target.clone(), self.url.clone());
        let (timeout, connect_timeout) = (self.timeout, self.connect_timeout);
        async move {
            match tokio::time::timeout(connect_timeout + timeout, open(&target, timeout, connect_timeout))
                .await
            {
                Ok(opened) => opened.map_err(|e| Arc::new(with_context(map_error(e), &url))),
                Err(_) => Err(Arc::new(Error::unavailable(
                    BACKEND,
                    format!("{url} did not answer within {:?}", connect_timeout + timeout),
                ))),
            }
        }
        .boxed()
        .shared()
    }

    /// Swaps in a fresh connection (connected on first use) for the one of `generation`.
    fn replace(&self, generation: u64) {
        let mut current = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        if current.generation != generation {
            return; // already replaced
        }
        let client = match &self.target {
            Target::Server(client) => client,
            Target::Cluster(_) | Target::Sentinel(_) => {
                if let Target::Sentinel(sentinels) = &self.target {
                    sentinels.forget();
                }
                tracing::debug!(url = %self.url, "distlock-redis: reopening the connection (a cluster's, or to the primary the Sentinels name)");
                current.generation += 1;
                current.conn = None;
                current.opening = None;
                current.probing = false;
                return;
            }
        };
        let config = manager_config(self.timeout, self.connect_timeout);
        match ConnectionManager::new_lazy_with_config(client.clone(), config) {
            Ok(conn) => {
                tracing::debug!(url = %self.url, "distlock-redis: a request timed out; replacing its connection");
                current.generation += 1;
                current.conn = Some(Conn::Server(conn));
            }
            Err(e) => {
                tracing::debug!(url = %self.url, error = %e, "distlock-redis: cannot replace a connection")
            }
        }
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("url", &self.url)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

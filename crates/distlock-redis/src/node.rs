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

use std::future::Future;

use futures::future::{BoxFuture, FutureExt, Shared};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use distlock_core::{Error, Result};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::SingleNodeRoutingInfo;
use redis::{ErrorKind, FromRedisValue, RedisError, RedisFuture, ServerErrorKind, Value};

use crate::config::Target;
use crate::keys::key_slot;
use crate::lua::LuaScript;
use crate::server_run::{fresh_name, parse_run_id, ServerRun};
use crate::slots::{self, Master};

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
}

/// `(first slot, last slot, master)`, as `CLUSTER SLOTS` lists them.
type Masters = Arc<Vec<(u16, u16, Master)>>;

/// A connection opened, with its cluster's masters.
type Opened = (Conn, Option<Masters>);

/// A cluster connection being opened, awaited by every caller that needs it.
type Opening = Shared<BoxFuture<'static, std::result::Result<Opened, Arc<Error>>>>;

/// Where a request goes, so that a master that timed out can be probed alone.
#[derive(Debug, Clone)]
enum At {
    /// Wherever the cluster client routes it (or one server).
    Unknown,
    /// The master of this hash slot.
    Slot(u16),
    /// The node at this host and port.
    Address(String, u16),
}

/// One server's connection manager, or a cluster's connection.
#[derive(Clone)]
pub(crate) enum Conn {
    Server(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Server(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
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
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Server(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// What the scripts announce a release with: `PUBLISH` on one server, `SPUBLISH` (sharded
/// pub/sub: the message goes to the shard of the channel's slot, which is the lock's) on a
/// cluster. Every script takes it as its last argument but one (see [`script_cmd`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Publish {
    Plain,
    Sharded,
}

impl Publish {
    fn command(self) -> &'static str {
        match self {
            Publish::Plain => "PUBLISH",
            Publish::Sharded => "SPUBLISH",
        }
    }
}

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
        let (conn, masters) = bounded(connect_timeout, &url, open(&target, timeout, connect_timeout)).await?;
        Ok(Self {
            target,
            conn: Arc::new(Mutex::new(Current {
                generation: 0,
                conn: Some(conn),
                opening: None,
                masters,
                probing: false,
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
            Target::Server(_) => Publish::Plain,
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

    /// Runs `script` by `EVALSHA`, falling back to `EVAL` (which also caches it on the
    /// server) on `NOSCRIPT`: one round trip once the server knows it. Bounded by the
    /// operation timeout.
    pub(crate) async fn script<T: FromRedisValue>(
        &self,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<T> {
        self.script_within(self.timeout, script, keys, args).await
    }

    /// As [`script`](Self::script), bounded by `limit`. A reply that is not the request's
    /// own (see [`open_reply`]) is an error, and the connection is replaced.
    pub(crate) async fn script_within<T: FromRedisValue>(
        &self,
        limit: Duration,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<T> {
        self.script_sent_within(limit, script, keys, args)
            .await
            .map(|(value, _)| value)
    }

    /// As [`script_within`](Self::script_within), also telling whether this client sent the
    /// script again after its connection broke, so that it may have run twice: a second run
    /// sees what the first one did (a release sent again finds its lock gone). On a cluster
    /// the cluster client also sends a request again after a dropped connection, without
    /// saying so: that is not seen here (the release scripts' marker answers it, see
    /// [`released`](crate::released)).
    pub(crate) async fn script_sent_within<T: FromRedisValue>(
        &self,
        limit: Duration,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<(T, bool)> {
        let nonce = Nonce::new();
        let nonce = &nonce;
        let publish = self.publish();
        let at = keys.first().map_or(At::Unknown, |key| At::Slot(key_slot(key)));
        let (reply, generation, resent) = self
            .run_tracked(limit, at, |mut conn| async move {
                match script_cmd(script, keys, args, publish, nonce, false)
                    .query_async::<Value>(&mut conn)
                    .await
                {
                    Err(e) if is_noscript(&e) => {
                        script_cmd(script, keys, args, publish, nonce, true)
                            .query_async(&mut conn)
                            .await
                    }
                    other => other,
                }
            })
            .await?;
        let reply = self.checked(reply, nonce, generation)?;
        let value =
            redis::from_redis_value(reply).map_err(|e| with_context(map_error(e.into()), &self.url))?;
        Ok((value, resent))
    }

    /// As [`script_within`](Self::script_within) on one server, also naming the run of the
    /// server that ran it (its run id, new with every restart; see [`ServerRun`]): the script
    /// is pipelined after `CLIENT GETNAME`, one round trip. On a connection this client has
    /// not named (its first request, or the connection was reopened, perhaps to a restarted
    /// server) a second round trip names it, reads `INFO server` and runs the script again on
    /// it: the scripts sent here must be idempotent for their arguments. `None` on a cluster,
    /// or if the server did not say.
    pub(crate) async fn script_naming_run<T: FromRedisValue>(
        &self,
        limit: Duration,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<(T, Option<String>)> {
        if self.is_cluster() {
            return Ok((self.script_within(limit, script, keys, args).await?, None));
        }
        let started = tokio::time::Instant::now();
        if self.run.named() {
            let mut getname = redis::cmd("CLIENT");
            getname.arg("GETNAME");
            let (before, reply) = self.script_after(limit, &[getname], script, keys, args).await?;
            let run_id = match before.first() {
                Some(Value::BulkString(name)) => self.run.run_id(name),
                _ => None,
            };
            if let Some(run_id) = run_id {
                return Ok((self.value(reply)?, Some(run_id)));
            }
        }
        let left = limit.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(Error::unavailable(
                BACKEND,
                format!("{} did not answer within {limit:?}", self.url),
            ));
        }
        let name = fresh_name();
        let mut setname = redis::cmd("CLIENT");
        setname.arg("SETNAME").arg(&name);
        let mut info = redis::cmd("INFO");
        info.arg("server");
        let (before, reply) = self
            .script_after(left, &[setname, info], script, keys, args)
            .await?;
        let run_id = before
            .get(1)
            .and_then(|info| redis::from_redis_value::<String>(info.clone()).ok())
            .and_then(|info| parse_run_id(&info));
        if let Some(run_id) = &run_id {
            self.run.record(name, run_id.clone());
        }
        Ok((self.value(reply)?, run_id))
    }

    /// `before`'s commands and `script` in one pipeline (with the `EVAL` fallback), bounded
    /// by `limit`: their replies, and the script's opened (see [`checked`](Self::checked)).
    async fn script_after(
        &self,
        limit: Duration,
        before: &[redis::Cmd],
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<(Vec<Value>, Value)> {
        let nonce = Nonce::new();
        let nonce = &nonce;
        let publish = self.publish();
        let pipeline = |use_eval| {
            let mut pipe = redis::pipe();
            for cmd in before {
                pipe.add_command(cmd.clone());
            }
            pipe.add_command(script_cmd(script, keys, args, publish, nonce, use_eval));
            pipe
        };
        let (mut replies, generation) = self
            .run_on(limit, |mut conn| {
                let (evalsha, eval) = (pipeline(false), pipeline(true));
                async move {
                    match evalsha.query_async::<Vec<Value>>(&mut conn).await {
                        Err(e) if is_noscript(&e) => eval.query_async(&mut conn).await,
                        other => other,
                    }
                }
            })
            .await?;
        let reply = replies
            .pop()
            .ok_or_else(|| Error::backend(BACKEND, format!("{}: an empty reply to a pipeline", self.url)))?;
        Ok((replies, self.checked(reply, nonce, generation)?))
    }

    fn value<T: FromRedisValue>(&self, reply: Value) -> Result<T> {
        redis::from_redis_value(reply).map_err(|e| with_context(map_error(e.into()), &self.url))
    }

    /// `reply` opened (see [`open_reply`]); a reply to another request means the connection of
    /// `generation` lost one and is out of step: it is replaced, and the request's outcome is
    /// unknown.
    pub(crate) fn checked(&self, reply: Value, nonce: &Nonce, generation: u64) -> Result<Value> {
        open_reply(reply, nonce).ok_or_else(|| {
            tracing::warn!(url = %self.url, "distlock-redis: a reply to another request; replacing the connection");
            self.replace(generation);
            Error::unavailable(
                BACKEND,
                format!(
                    "{}: a reply to another request arrived (one was lost on the way); the outcome is unknown",
                    self.url
                ),
            )
        })
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
                Ok(Err(e)) if !retried && (e.is_connection_dropped() || e.is_io_error()) => {
                    tracing::debug!(url = %self.url, error = %e, "distlock-redis: connection broken; sending once more");
                    retried = true;
                }
                Ok(Err(e)) => return Err(with_context(map_error(e), &self.url)),
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

    /// The connection to use and its generation; a cluster connection that was dropped is
    /// opened again first, within `deadline`: once for every caller waiting for it (the
    /// opening goes on, bounded by the connect and operation timeouts, if the caller that
    /// started it gives up first and another still waits).
    async fn current(&self, deadline: tokio::time::Instant, limit: Duration) -> Result<(u64, Conn)> {
        let (generation, opening) = {
            let mut current = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
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

    /// A request to `at` on the connection of `generation` timed out. On one server the
    /// connection is replaced; on a cluster the request's master is probed first, once for all
    /// callers (see [`Node`]), and the connection reopened only if the probe does not time out.
    fn timed_out(&self, generation: u64, at: &At) {
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
                At::Slot(slot) => current.masters.as_ref().and_then(|masters| {
                    masters
                        .iter()
                        .find(|(first, last, _)| (first..=last).contains(&slot))
                        .map(|(_, _, master)| (master.0.clone(), master.1))
                }),
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

    /// Swaps in a fresh connection (connected on first use) for the one of `generation`.
    fn replace(&self, generation: u64) {
        let mut current = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        if current.generation != generation {
            return; // already replaced
        }
        let client = match &self.target {
            Target::Server(client) => client,
            Target::Cluster(_) => {
                tracing::debug!(url = %self.url, "distlock-redis: a request timed out; reopening the cluster connection");
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

/// Opens the connection to `target`: a connection manager, or a cluster connection (which
/// reads the slot map from the seeds and connects to every master), then reads which master
/// serves which slots (`CLUSTER SLOTS`, one round trip; `None` if it fails).
async fn open(target: &Target, timeout: Duration, connect_timeout: Duration) -> redis::RedisResult<Opened> {
    match target {
        Target::Server(client) => {
            let config = manager_config(timeout, connect_timeout);
            Ok((
                Conn::Server(ConnectionManager::new_with_config(client.clone(), config).await?),
                None,
            ))
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

fn manager_config(timeout: Duration, connect_timeout: Duration) -> ConnectionManagerConfig {
    // Few reconnection retries: our own timeouts bound every call, and the next call after a
    // failure starts a fresh reconnection anyway.
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(200))
}

/// A request's nonce: unique in this process, and counted from a random start so that two
/// processes' nonces meet only by chance (a cluster's release marker holds one, see
/// [`released`](crate::released)); every script returns it beside its reply.
#[derive(Debug, Clone)]
pub(crate) struct Nonce(String);

impl Nonce {
    pub(crate) fn new() -> Self {
        static NEXT: LazyLock<AtomicU64> = LazyLock::new(|| AtomicU64::new(rand::random()));
        Self(format!("{:x}", NEXT.fetch_add(1, Ordering::Relaxed)))
    }
}

/// `EVALSHA sha numkeys keys... args... publish nonce`, or with `use_eval`
/// `EVAL code numkeys keys... args... publish nonce` (`publish`: the command that announces
/// a release, see [`Publish`]).
pub(crate) fn script_cmd(
    script: &LuaScript,
    keys: &[&[u8]],
    args: &[&[u8]],
    publish: Publish,
    nonce: &Nonce,
    use_eval: bool,
) -> redis::Cmd {
    let mut cmd = match use_eval {
        true => {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(script.code(publish == Publish::Sharded));
            cmd
        }
        false => {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(script.sha1(publish == Publish::Sharded));
            cmd
        }
    };
    cmd.arg(keys.len())
        .arg(keys)
        .arg(args)
        .arg(publish.command())
        .arg(nonce.0.as_bytes());
    cmd
}

/// A script's reply `{nonce, reply}` opened: `reply` if the nonce is `nonce`. An error reply
/// (`NOSCRIPT`, a script error) comes back as it is: it never confirms anything. `None` for a
/// reply to another request: on one connection replies are matched to requests in order, so
/// one lost on the way hands every later request the reply of the request after it.
pub(crate) fn open_reply(reply: Value, nonce: &Nonce) -> Option<Value> {
    match reply {
        Value::ServerError(_) => Some(reply),
        Value::Array(mut parts) if !parts.is_empty() => {
            let ours = matches!(&parts[0], Value::BulkString(n) if n.as_slice() == nonce.0.as_bytes());
            if !ours {
                return None;
            }
            Some(if parts.len() > 1 {
                parts.swap_remove(1)
            } else {
                Value::Nil
            })
        }
        _ => None,
    }
}

pub(crate) fn is_noscript(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

/// Awaits `fut` for at most `limit`; a timeout is [`Error::Unavailable`].
pub(crate) async fn bounded<T>(
    limit: Duration,
    url: &str,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(limit, fut).await {
        Ok(result) => result.map_err(|e| with_context(map_error(e), url)),
        Err(_) => Err(Error::unavailable(
            BACKEND,
            format!("{url} did not answer within {limit:?}"),
        )),
    }
}

/// Unreachable, timed out, loading or failing over: [`Error::Unavailable`]; anything else:
/// [`Error::Backend`].
pub(crate) fn map_error(e: RedisError) -> Error {
    // A redirect that outlived the cluster client's retries (a slot migrating, a failover)
    // and a master the cluster client has no connection to are as transient as a reset.
    let transient = e.is_io_error()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_connection_dropped()
        || matches!(
            e.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                        | ServerErrorKind::Moved
                        | ServerErrorKind::Ask
                )
        );
    if transient {
        Error::unavailable(BACKEND, e)
    } else {
        Error::backend(BACKEND, e)
    }
}

fn with_context(error: Error, url: &str) -> Error {
    match error {
        Error::Unavailable { backend, source } => Error::unavailable(backend, format!("{url}: {source}")),
        Error::Backend { backend, source } => Error::backend(backend, format!("{url}: {source}")),
        other => other,
    }
}

/// The underlying message of `e`, without the "redis is unavailable:" wrapping.
pub(crate) fn detail(e: &Error) -> String {
    match e {
        Error::Unavailable { source, .. } | Error::Backend { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

/// A reply that should have been an integer.
pub(crate) fn int_reply(value: &Value) -> Result<i64> {
    match value {
        Value::Int(n) => Ok(*n),
        Value::ServerError(e) => Err(map_error(RedisError::from(e.clone()))),
        other => Err(Error::backend(BACKEND, format!("unexpected reply {other:?}"))),
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

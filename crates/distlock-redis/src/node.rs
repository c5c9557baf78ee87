//! [`Node`]: one Redis server as the lock code sees it: a multiplexed, self-reconnecting
//! connection whose every call is bounded in time, scripts run by `EVALSHA` with an `EVAL`
//! fallback and their replies checked to be their own (a [`Nonce`] each), and the mapping of
//! Redis errors onto [`distlock_core::Error`].
//!
//! It knows nothing about locks; [`RedisLock`](crate::RedisLock) and
//! [`Redlock`](crate::Redlock) decide what to send.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use distlock_core::{Error, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, FromRedisValue, RedisError, ServerErrorKind, Value};

use crate::scripts::LuaScript;

pub(crate) const BACKEND: &str = "redis";

/// The connection in use and how many times it was replaced.
struct Current {
    generation: u64,
    conn: ConnectionManager,
}

/// One server: a shared multiplexed connection (clones share it).
///
/// A connection whose request timed out is replaced by a fresh one (connected on first use):
/// behind a silent partition the old one may never answer again, and neither the client
/// library nor the kernel (before its keepalive probes give up) would drop it. Requests
/// already sent on the old connection finish or time out on it.
#[derive(Clone)]
pub(crate) struct Node {
    client: redis::Client,
    conn: Arc<Mutex<Current>>,
    timeout: Duration,
    connect_timeout: Duration,
    url: String,
}

impl Node {
    /// Connects within `connect_timeout`.
    pub(crate) async fn connect(
        client: redis::Client,
        url: String,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self> {
        let config = manager_config(timeout, connect_timeout);
        let conn = bounded(
            connect_timeout,
            &url,
            ConnectionManager::new_with_config(client.clone(), config),
        )
        .await?;
        Ok(Self {
            client,
            conn: Arc::new(Mutex::new(Current { generation: 0, conn })),
            timeout,
            connect_timeout,
            url,
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
            client,
            conn: Arc::new(Mutex::new(Current { generation: 0, conn })),
            timeout,
            connect_timeout,
            url,
        })
    }

    /// The server's URL without password.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
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

    /// A pipeline (one round trip), bounded by the operation timeout; each command's reply
    /// comes back as a [`Value`], errors included, in order.
    pub(crate) async fn pipeline(&self, pipe: &redis::Pipeline) -> Result<Vec<Value>> {
        self.pipeline_within(self.timeout, pipe).await
    }

    /// As [`pipeline`](Self::pipeline), bounded by `limit`.
    pub(crate) async fn pipeline_within(
        &self,
        limit: Duration,
        pipe: &redis::Pipeline,
    ) -> Result<Vec<Value>> {
        self.run(limit, |mut conn| async move { pipe.query_async(&mut conn).await })
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
        let nonce = Nonce::new();
        let nonce = &nonce;
        let (reply, generation) = self
            .run_on(limit, |mut conn| async move {
                match script_cmd(script, keys, args, nonce, false)
                    .query_async::<Value>(&mut conn)
                    .await
                {
                    Err(e) if is_noscript(&e) => {
                        script_cmd(script, keys, args, nonce, true)
                            .query_async(&mut conn)
                            .await
                    }
                    other => other,
                }
            })
            .await?;
        let reply = self.checked(reply, nonce, generation)?;
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

    /// Runs `request` on the current connection within `limit`; on a timeout, replaces the
    /// connection (unless another caller already did). A request that fails because the
    /// connection was found broken (reset, closed, broken pipe) is sent once more on the
    /// reconnected connection within what is left of `limit`: every request this crate sends
    /// may run twice (the scripts are idempotent for one owner token; a second acquire by the
    /// same token reports the lock acquired), and a reset between two waits must not end a
    /// wait with an error.
    async fn run<T, F, Fut>(&self, limit: Duration, request: F) -> Result<T>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.run_on(limit, request).await.map(|(value, _)| value)
    }

    /// As [`run`](Self::run), also returning the generation of the connection that answered.
    async fn run_on<T, F, Fut>(&self, limit: Duration, request: F) -> Result<(T, u64)>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let deadline = tokio::time::Instant::now() + limit;
        let mut retried = false;
        loop {
            let (generation, conn) = {
                let current = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
                (current.generation, current.conn.clone())
            };
            let outcome = tokio::time::timeout_at(deadline, request(conn)).await;
            match outcome {
                Ok(Ok(value)) => return Ok((value, generation)),
                Ok(Err(e)) if e.is_timeout() => {
                    self.replace(generation);
                    return Err(with_context(map_error(e), &self.url));
                }
                Ok(Err(e)) if !retried && (e.is_connection_dropped() || e.is_io_error()) => {
                    tracing::debug!(url = %self.url, error = %e, "distlock-redis: connection broken; sending once more");
                    retried = true;
                }
                Ok(Err(e)) => return Err(with_context(map_error(e), &self.url)),
                Err(_) => {
                    self.replace(generation);
                    return Err(Error::unavailable(
                        BACKEND,
                        format!("{} did not answer within {limit:?}", self.url),
                    ));
                }
            }
        }
    }

    /// Swaps in a fresh connection (connected on first use) for the one of `generation`.
    fn replace(&self, generation: u64) {
        let mut current = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        if current.generation != generation {
            return; // already replaced
        }
        let config = manager_config(self.timeout, self.connect_timeout);
        match ConnectionManager::new_lazy_with_config(self.client.clone(), config) {
            Ok(conn) => {
                tracing::debug!(url = %self.url, "distlock-redis: a request timed out; replacing its connection");
                current.generation += 1;
                current.conn = conn;
            }
            Err(e) => {
                tracing::debug!(url = %self.url, error = %e, "distlock-redis: cannot replace a connection")
            }
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

/// A request's nonce: unique in this process; every script returns it beside its reply.
#[derive(Debug, Clone)]
pub(crate) struct Nonce(String);

impl Nonce {
    pub(crate) fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(format!("{:x}", NEXT.fetch_add(1, Ordering::Relaxed)))
    }
}

/// `EVALSHA sha numkeys keys... args... nonce`, or with `use_eval`
/// `EVAL code numkeys keys... args... nonce`.
pub(crate) fn script_cmd(
    script: &LuaScript,
    keys: &[&[u8]],
    args: &[&[u8]],
    nonce: &Nonce,
    use_eval: bool,
) -> redis::Cmd {
    let mut cmd = match use_eval {
        true => {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(script.code());
            cmd
        }
        false => {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(script.sha1());
            cmd
        }
    };
    cmd.arg(keys.len()).arg(keys).arg(args).arg(nonce.0.as_bytes());
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
    let transient = e.is_io_error()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_connection_dropped()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
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

/// A copy of `e` (errors are not `Clone`): same variant, same message.
pub(crate) fn copy_error(e: &Error) -> Error {
    match e {
        Error::Unavailable { backend, .. } => Error::unavailable(backend, detail(e)),
        Error::Backend { backend, .. } => Error::backend(backend, detail(e)),
        Error::InvalidOptions { reason } => Error::invalid_options(reason.clone()),
        other => Error::backend(BACKEND, other.to_string()),
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

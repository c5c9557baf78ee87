//! [`Node`]: one Redis server as the lock code sees it: a multiplexed, self-reconnecting
//! connection whose every call is bounded in time, scripts run by `EVALSHA` with an `EVAL`
//! fallback, and the mapping of Redis errors onto [`distlock_core::Error`].
//!
//! It knows nothing about locks; [`RedisLock`](crate::RedisLock) and
//! [`Redlock`](crate::Redlock) decide what to send.

use std::future::Future;
use std::time::Duration;

use distlock_core::{Error, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, FromRedisValue, RedisError, ServerErrorKind, Value};

use crate::scripts::LuaScript;

pub(crate) const BACKEND: &str = "redis";

/// One server: a shared multiplexed connection (clones share it).
#[derive(Clone)]
pub(crate) struct Node {
    client: redis::Client,
    conn: ConnectionManager,
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
            conn,
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
            conn,
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
        let mut conn = self.conn.clone();
        bounded(limit, &self.url, cmd.query_async(&mut conn)).await
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
        let mut conn = self.conn.clone();
        bounded(limit, &self.url, pipe.query_async(&mut conn)).await
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

    /// As [`script`](Self::script), bounded by `limit`.
    pub(crate) async fn script_within<T: FromRedisValue>(
        &self,
        limit: Duration,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<T> {
        let mut conn = self.conn.clone();
        let run = async move {
            match evalsha(script, keys, args).query_async(&mut conn).await {
                Err(e) if is_noscript(&e) => eval(script, keys, args).query_async(&mut conn).await,
                other => other,
            }
        };
        bounded(limit, &self.url, run).await
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

/// `EVALSHA sha numkeys keys... args...`.
pub(crate) fn evalsha(script: &LuaScript, keys: &[&[u8]], args: &[&[u8]]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.sha1()).arg(keys.len()).arg(keys).arg(args);
    cmd
}

/// `EVAL code numkeys keys... args...`.
pub(crate) fn eval(script: &LuaScript, keys: &[&[u8]], args: &[&[u8]]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script.code()).arg(keys.len()).arg(keys).arg(args);
    cmd
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

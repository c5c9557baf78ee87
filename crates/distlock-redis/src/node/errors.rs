//! The mapping of Redis errors onto [`distlock_core::Error`], and the bounding of a call in
//! time.

use std::future::Future;
use std::time::Duration;

use distlock_core::{Error, Result};
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use super::BACKEND;

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

pub(super) fn with_context(error: Error, url: &str) -> Error {
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

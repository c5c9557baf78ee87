//! [`Rpc`]: the gRPC channel to the cluster's endpoints, the authentication token, and the
//! typed clients of the services this crate calls; how their errors map to distlock's.
//! Knows nothing of locks.

use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use distlock_core::{Error, Result};
use tonic::metadata::AsciiMetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};

use crate::proto::auth_client::AuthClient;
use crate::proto::kv_client::KvClient;
use crate::proto::lease_client::LeaseClient;
use crate::proto::maintenance_client::MaintenanceClient;
use crate::proto::watch_client::WatchClient;
use crate::proto::AuthenticateRequest;
use crate::EtcdConfig;

pub(crate) const BACKEND: &str = "etcd";

/// The channel every call goes through, with the authentication token (if the cluster asks
/// for one) added to each request.
pub(crate) type Authed = InterceptedService<Channel, Token>;

/// The channel to the cluster and the token its calls carry. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Rpc {
    channel: Channel,
    token: Token,
    credentials: Option<(String, String)>,
    timeout: Duration,
}

/// The authentication token added to each request (`token` metadata), if any.
#[derive(Clone, Default)]
pub(crate) struct Token(Arc<RwLock<Option<AsciiMetadataValue>>>);

impl tonic::service::Interceptor for Token {
    fn call(&mut self, mut request: Request<()>) -> std::result::Result<Request<()>, Status> {
        if let Some(token) = self.0.read().unwrap_or_else(PoisonError::into_inner).clone() {
            request.metadata_mut().insert("token", token);
        }
        Ok(request)
    }
}

impl Rpc {
    /// A channel balanced over the configured endpoints (connected lazily: a member that is
    /// down does not stop the others), authenticated if the configuration has credentials.
    pub(crate) async fn connect(config: &EtcdConfig) -> Result<Self> {
        let timeout = config.operation_timeout();
        let mut endpoints = Vec::new();
        for url in config.endpoints() {
            let endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| Error::invalid_config(format!("{url}: {e}")))?
                .connect_timeout(timeout)
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(10))
                .keep_alive_timeout(timeout)
                .keep_alive_while_idle(true);
            endpoints.push(tls(endpoint, config)?);
        }
        let rpc = Self {
            channel: Channel::balance_list(endpoints.into_iter()),
            token: Token::default(),
            credentials: config.credentials().cloned(),
            timeout,
        };
        if rpc.credentials.is_some() {
            rpc.authenticate().await?;
        }
        Ok(rpc)
    }

    /// Asks for a new token with the configured credentials.
    pub(crate) async fn authenticate(&self) -> Result<()> {
        let Some((name, password)) = self.credentials.clone() else {
            return Ok(());
        };
        let mut auth = AuthClient::new(self.channel.clone());
        let reply = bounded(self.timeout, "authenticate", async {
            auth.authenticate(AuthenticateRequest { name, password })
                .await
                .map_err(map_status)
        })
        .await?
        .into_inner();
        let token = AsciiMetadataValue::try_from(reply.token.as_str())
            .map_err(|_| Error::backend(BACKEND, "the server's auth token is not ASCII"))?;
        *self.token.0.write().unwrap_or_else(PoisonError::into_inner) = Some(token);
        Ok(())
    }

    pub(crate) fn kv(&self) -> KvClient<Authed> {
        KvClient::with_interceptor(self.channel.clone(), self.token.clone())
    }

    pub(crate) fn lease(&self) -> LeaseClient<Authed> {
        LeaseClient::with_interceptor(self.channel.clone(), self.token.clone())
    }

    pub(crate) fn watch(&self) -> WatchClient<Authed> {
        WatchClient::with_interceptor(self.channel.clone(), self.token.clone())
    }

    pub(crate) fn maintenance(&self) -> MaintenanceClient<Authed> {
        MaintenanceClient::with_interceptor(self.channel.clone(), self.token.clone())
    }

    /// The bound on one operation.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs `call` within the operation timeout; an expired token is renewed and the call
    /// sent once more (a call refused for its token did not run).
    pub(crate) async fn call<T, F, Fut>(&self, what: &str, call: F) -> Result<T>
    where
        F: Fn(Self) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        let started = tokio::time::Instant::now();
        let first = bounded(self.timeout, what, async { Ok(call(self.clone()).await) }).await?;
        let status = match first {
            Ok(reply) => return Ok(reply.into_inner()),
            Err(status) => status,
        };
        if self.credentials.is_none() || !token_refused(&status) {
            return Err(map_status(status));
        }
        self.authenticate().await?;
        let left = self.timeout.saturating_sub(started.elapsed());
        bounded(left, what, async { call(self.clone()).await.map_err(map_status) })
            .await
            .map(tonic::Response::into_inner)
    }
}

#[cfg(feature = "tls")]
fn tls(endpoint: Endpoint, config: &EtcdConfig) -> Result<Endpoint> {
    use tonic::transport::{Certificate, ClientTlsConfig};
    if !config.tls() {
        return Ok(endpoint);
    }
    let mut tls = ClientTlsConfig::new();
    tls = match config.ca() {
        Some(path) => {
            let pem = std::fs::read(path)
                .map_err(|e| Error::invalid_config(format!("the CA file {path:?}: {e}")))?;
            tls.ca_certificate(Certificate::from_pem(pem))
        }
        None => tls.with_native_roots(),
    };
    endpoint
        .tls_config(tls)
        .map_err(|e| Error::invalid_config(format!("TLS: {e}")))
}

#[cfg(not(feature = "tls"))]
fn tls(endpoint: Endpoint, config: &EtcdConfig) -> Result<Endpoint> {
    if config.tls() {
        return Err(Error::invalid_config(
            "etcds:// needs distlock-etcd's `tls` feature (distlock's `etcd-tls`)",
        ));
    }
    Ok(endpoint)
}

/// Whether the server refused the call for its token (expired or unknown): it did not run.
pub(crate) fn token_refused(status: &Status) -> bool {
    status.code() == Code::Unauthenticated || status.message().contains("invalid auth token")
}

/// `operation` within `limit`, else [`Error::Unavailable`].
pub(crate) async fn bounded<T>(
    limit: Duration,
    what: &str,
    operation: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, operation)
        .await
        .map_err(|_| Error::unavailable(BACKEND, format!("{what}: no answer within {limit:?}")))?
}

/// A gRPC status by meaning: the ones after which the call may or may not have been applied,
/// or that a retry may get past (no leader, a leader change, a timeout, a broken connection),
/// are [`Error::Unavailable`]; the others (bad arguments, permissions, a missing lease) are
/// backend errors.
pub(crate) fn map_status(status: Status) -> Error {
    let message = format!("{}: {}", code_name(status.code()), status.message());
    match status.code() {
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Cancelled
        | Code::Unknown
        | Code::Aborted
        | Code::Internal
        | Code::ResourceExhausted => Error::unavailable(BACKEND, message),
        _ => Error::backend(BACKEND, message),
    }
}

/// Whether the server said that the lease is gone (expired or revoked).
pub(crate) fn lease_not_found(status: &Status) -> bool {
    status.code() == Code::NotFound && status.message().contains("lease not found")
}

fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid argument",
        Code::DeadlineExceeded => "deadline exceeded",
        Code::NotFound => "not found",
        Code::AlreadyExists => "already exists",
        Code::PermissionDenied => "permission denied",
        Code::ResourceExhausted => "resource exhausted",
        Code::FailedPrecondition => "failed precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out of range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

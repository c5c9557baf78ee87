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
    /// One channel per endpoint, in the configured order: the lease keeper moves to the next
    /// after a keep-alive went unconfirmed, so a member paused or cut off costs it one try.
    members: Arc<[Channel]>,
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
    /// A channel balanced over the configured endpoints (connected lazily, and a call that
    /// finds a member down goes to another: see [`call`](Self::call)), authenticated if the
    /// configuration has credentials.
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
        let members: Arc<[Channel]> = endpoints.iter().map(Endpoint::connect_lazy).collect();
        let rpc = Self {
            channel: Channel::balance_list(endpoints.into_iter()),
            members,
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

    /// The lease service on the `index`th endpoint (modulo their number).
    pub(crate) fn lease_on(&self, index: usize) -> LeaseClient<Authed> {
        let member = self.members[index % self.members.len()].clone();
        LeaseClient::with_interceptor(member, self.token.clone())
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
    /// sent once more (a call refused for its token did not run). A call whose connection
    /// could not be made (a member down) was never sent: it goes again at once, and the
    /// balanced channel picks an endpoint again, until the timeout.
    pub(crate) async fn call<T, F, Fut>(&self, what: &str, call: F) -> Result<T>
    where
        F: Fn(Self) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        self.call_as(what, Resend::IfNeverSent, &mut false, call).await
    }

    /// As [`call`](Self::call), for a call that may be applied twice with the effect of once
    /// (a read, a delete of one key, a transaction that finds its own earlier write): also
    /// sent again, within the operation timeout, after a failure that may have come after it
    /// was sent (a connection broken under it, a member without a leader), so that a member
    /// paused or cut off costs one try, not the operation.
    pub(crate) async fn call_idempotent<T, F, Fut>(&self, what: &str, call: F) -> Result<T>
    where
        F: Fn(Self) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        self.call_as(what, Resend::AfterAnyTransientFailure, &mut false, call)
            .await
    }

    /// As [`call_idempotent`](Self::call_idempotent), also telling whether the call was sent
    /// again after a try that may have been applied (its answer then may not be the first
    /// try's: a delete sent again finds its key gone).
    pub(crate) async fn call_idempotent_noting<T, F, Fut>(&self, what: &str, call: F) -> Result<(T, bool)>
    where
        F: Fn(Self) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        let mut resent = false;
        let reply = self
            .call_as(what, Resend::AfterAnyTransientFailure, &mut resent, call)
            .await?;
        Ok((reply, resent))
    }

    async fn call_as<T, F, Fut>(&self, what: &str, resend: Resend, resent: &mut bool, call: F) -> Result<T>
    where
        F: Fn(Self) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let status = match self.send(what, deadline, resend, resent, &call).await? {
            Ok(reply) => return Ok(reply),
            Err(status) => status,
        };
        if self.credentials.is_none() || !token_refused(&status) {
            return Err(map_status(status));
        }
        self.authenticate().await?;
        self.send(what, deadline, resend, resent, &call)
            .await?
            .map_err(map_status)
    }

    /// Sends `call` until it is answered, fails in a way `resend` does not send again after,
    /// or `deadline` passes.
    async fn send<T, F, Fut>(
        &self,
        what: &str,
        deadline: tokio::time::Instant,
        resend: Resend,
        resent: &mut bool,
        call: &F,
    ) -> Result<std::result::Result<T, Status>>
    where
        F: Fn(Self) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            // An idempotent call gets a third of the operation timeout per try: a try that
            // went to a member paused or cut off (its connection still looks open) leaves time
            // for another on a fresh connection.
            let this_try = match resend {
                Resend::IfNeverSent => left,
                Resend::AfterAnyTransientFailure => left.min(self.timeout / 3),
            };
            let sent = match bounded(this_try, what, async { Ok(call(self.clone()).await) }).await {
                Ok(sent) => sent,
                Err(_) if this_try < left => {
                    tracing::debug!(what, "distlock-etcd: no answer to one try; sending again");
                    *resent = true;
                    continue;
                }
                Err(error) => return Err(error),
            };
            match sent {
                Ok(reply) => return Ok(Ok(reply.into_inner())),
                Err(status)
                    if resend.again(&status) && tokio::time::Instant::now() + RESEND_PAUSE < deadline =>
                {
                    tracing::debug!(what, %status, "distlock-etcd: sending again");
                    *resent |= !never_sent(&status);
                    tokio::time::sleep(RESEND_PAUSE).await;
                }
                Err(status) => return Ok(Err(status)),
            }
        }
    }
}

/// Which failures a call is sent again after.
#[derive(Debug, Clone, Copy)]
enum Resend {
    /// Only a call that was never sent (no connection could be made).
    IfNeverSent,
    /// Any failure that a retry may get past (see [`map_status`]): the call is idempotent.
    AfterAnyTransientFailure,
}

impl Resend {
    fn again(self, status: &Status) -> bool {
        match self {
            Resend::IfNeverSent => never_sent(status),
            Resend::AfterAnyTransientFailure => {
                never_sent(status)
                    || matches!(
                        status.code(),
                        Code::Unavailable | Code::Unknown | Code::Internal | Code::Cancelled | Code::Aborted
                    )
            }
        }
    }
}

/// The pause before a call that found no connection goes again (the channel's endpoint for
/// a member that is down fails at once, so without it a cluster that is all down would be
/// asked in a busy loop until the timeout).
const RESEND_PAUSE: Duration = Duration::from_millis(10);

/// Whether the call failed before it was sent: its connection could not be made (refused,
/// or not made within the connect timeout). tonic's channel balanced over several
/// endpoints hands out a down member's endpoint like any other and returns its connect
/// error as the call's.
fn never_sent(status: &Status) -> bool {
    if status.code() != Code::Unavailable {
        return false;
    }
    if status.message().contains("tcp connect error") {
        return true;
    }
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if error
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        source = error.source();
    }
    false
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connection_was_never_sent_and_a_lost_leader_may_have_been() {
        assert!(never_sent(&Status::unavailable("tcp connect error")));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let mut status = Status::unavailable("transport error");
        status.set_source(Arc::new(refused));
        assert!(never_sent(&status));
        assert!(!never_sent(&Status::unavailable("etcdserver: no leader")));
        assert!(!never_sent(&Status::deadline_exceeded("tcp connect error")));
    }
}

//! Configuration of the single-instance and cluster [`RedisLock`](crate::RedisLock) and of
//! [`Redlock`](crate::Redlock): URLs, key prefix, timeouts, replica acknowledgement.
//!
//! Owns parsing and validation; it may not connect (that is `build`'s job). A malformed URL is
//! an [`Error::InvalidConfig`], never a panic, and `Debug` never shows a password.

use std::fmt;
use std::time::Duration;

use distlock_core::{Error, Result};

/// How long any one operation may take before it fails with [`Error::Unavailable`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(2);
/// How long connecting may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How to reach one Redis server, or one Redis Cluster, and how to use it for locks.
///
/// URLs: `redis://[user:pass@]host:port[/db]`, `redis+unix:///path[?db=N]`, and `rediss://`
/// when the crate is built with the `tls-rustls` feature (rustls with the `ring` provider and
/// the webpki root certificates; no OpenSSL). Without it a `rediss://` URL is an
/// [`Error::InvalidConfig`].
///
/// A cluster: `redis+cluster://[user:pass@]host1:port1[,host2:port2...]` (`rediss+cluster://`
/// for TLS), naming one or more seed nodes (the client learns the others from them). The
/// scheme, not a query flag, says "cluster", so a tool that does not know it refuses the URL
/// instead of talking to one master as if it were the whole store.
///
/// A primary behind Redis Sentinel:
/// `redis+sentinel://[user:pass@]s1:p1[,s2:p2...]/<master-name>[?db=N&wait_for_replicas=N&replica_timeout=1s]`
/// (`rediss+sentinel://` for TLS), naming the Sentinels and the name they monitor the primary
/// under; the credentials and database are the data servers'. `wait_for_replicas=N` is
/// [`with_wait_for_replicas`](Self::with_wait_for_replicas)`(N, replica_timeout)`
/// (default timeout 1 s). Every new connection goes to the primary the Sentinels name (and
/// that confirms its role); a connection that breaks, times out or meets a replica
/// (`READONLY`), or that was opened before the Sentinels announced a switch of the primary
/// (`+switch-master`), is dropped and the Sentinels asked again, so after a failover the
/// client reaches the promoted replica.
///
/// ```
/// use distlock_redis::RedisConfig;
/// use std::time::Duration;
///
/// let config = RedisConfig::from_url("redis://:secret@127.0.0.1:6379/0")?
///     .with_prefix("locks:")
///     .with_operation_timeout(Duration::from_millis(500));
/// assert!(!format!("{config:?}").contains("secret"));
/// assert!(RedisConfig::from_url("not a url").is_err());
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    pub(crate) target: Target,
    pub(crate) url: String,
    pub(crate) prefix: String,
    pub(crate) operation_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) replicas: Option<ReplicaAck>,
    pub(crate) notifications: bool,
    pub(crate) require_noeviction: bool,
}

/// Where the lock's data lives: one server, a cluster, or the primary of a Sentinel set.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)] // one per client, cloned only at connect time
pub(crate) enum Target {
    Server(redis::Client),
    Cluster(ClusterSeeds),
    /// The primary the Sentinels name, discovered again for every new connection.
    Sentinel(crate::sentinel::SentinelTarget),
}

/// A cluster's seed nodes, and the client settings every cluster connection shares.
#[derive(Clone)]
pub(crate) struct ClusterSeeds {
    nodes: Vec<redis::ConnectionInfo>,
}

impl ClusterSeeds {
    /// The first seed's host: the host of a master that `CLUSTER SLOTS` lists without one
    /// (the cluster client then uses the host it asked, which is a seed's).
    pub(crate) fn first_host(&self) -> String {
        match self.nodes.first().map(redis::ConnectionInfo::addr) {
            Some(redis::ConnectionAddr::Tcp(host, _)) => host.clone(),
            Some(redis::ConnectionAddr::TcpTls { host, .. }) => host.clone(),
            _ => String::new(),
        }
    }

    /// How to reach the node at `host:port` alone, with the seeds' credentials and TLS
    /// settings; `None` if the seeds are not reached over TCP.
    pub(crate) fn node(&self, host: &str, port: u16) -> Option<redis::ConnectionInfo> {
        let seed = self.nodes.first()?;
        let addr = match seed.addr() {
            redis::ConnectionAddr::Tcp(..) => redis::ConnectionAddr::Tcp(host.to_owned(), port),
            redis::ConnectionAddr::TcpTls {
                insecure, tls_params, ..
            } => redis::ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => return None,
        };
        Some(seed.clone().set_addr(addr))
    }

    /// A cluster client of these seeds: responses bounded by `timeout`, connecting by
    /// `connect_timeout`, few retries of redirects (every call is bounded by our own timeouts
    /// anyway) with a 1 ms first pause (with the client's 10 ms, 1-2% of the operations on a
    /// healthy cluster took 4-8 ms, in `distlock bench`'s p99); with `push`, over RESP3 with
    /// pushes (sharded pub/sub messages) sent there.
    pub(crate) fn client(
        &self,
        timeout: Duration,
        connect_timeout: Duration,
        push: Option<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>,
    ) -> redis::RedisResult<redis::cluster::ClusterClient> {
        let builder = redis::cluster::ClusterClientBuilder::new(self.nodes.clone())
            .connection_timeout(connect_timeout)
            .response_timeout(timeout)
            .retries(4)
            .min_retry_wait(1)
            .max_retry_wait(200)
            .tcp_settings(tcp_settings());
        match push {
            Some(push) => builder
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(push)
                .build(),
            None => builder.build(),
        }
    }
}

/// Wait for `count` replicas to acknowledge each acquisition and renewal, at most `timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaAck {
    pub(crate) count: u32,
    pub(crate) timeout: Duration,
}

impl RedisConfig {
    /// Parses `url`. Nothing connects yet.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if the URL is malformed or names an unsupported scheme.
    pub fn from_url(url: &str) -> Result<Self> {
        let (target, replicas) = match url.split_once("://") {
            Some(("redis+cluster" | "rediss+cluster", _)) => (Target::Cluster(parse_cluster_url(url)?), None),
            Some(("redis+sentinel" | "rediss+sentinel", _)) => {
                let (target, replicas) = crate::sentinel::parse_url(url)?;
                (Target::Sentinel(target), replicas)
            }
            _ => (Target::Server(parse_url(url)?), None),
        };
        Ok(Self {
            target,
            url: redact(url),
            prefix: String::new(),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            replicas,
            notifications: true,
            require_noeviction: false,
        })
    }

    /// Puts every lock key under `prefix` (default: none, so the key is the lock name itself,
    /// as other clients of the same layout expect).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Bounds every operation (default [`DEFAULT_OPERATION_TIMEOUT`]); past it the operation
    /// fails with [`Error::Unavailable`] even if the server hangs (for example when paused).
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Bounds connecting (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// After each acquisition and each renewal (`extend`, and each pipeline of `extend_many`),
    /// `WAIT` until `count` replicas acknowledged it, at most `timeout` (as Redisson's
    /// `checkLockSyncedSlaves`). If fewer do, an acquisition's lock is released again and the
    /// attempt fails with [`Error::Unavailable`]; a renewal fails with [`Error::Unavailable`]
    /// too, an unknown outcome rather than a success (the master extended the TTL, a promoted
    /// replica may still hold the old one), so the watchdog retries it and the lost signal
    /// fires at the local deadline if none is acknowledged. It costs no extra round trip
    /// (the `WAIT` is pipelined behind the scripts, on a connection of its own) but the
    /// replicas' delay.
    ///
    /// This **narrows, not closes**, the failover window: replication stays asynchronous, a
    /// replica that acknowledged may still not be the one promoted, and a failover between
    /// the write and the acknowledgement loses the lock as before. Use it to make a lost lock
    /// after a failover rarer, not impossible; for that, fence the protected resource.
    pub fn with_wait_for_replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.replicas = (count > 0).then_some(ReplicaAck { count, timeout });
        self
    }

    /// Whether waiters subscribe to release announcements (default `true`). With `false`
    /// waiters poll with backoff, as a comparison for the benchmarks; releases still publish.
    pub fn with_notifications(mut self, on: bool) -> Self {
        self.notifications = on;
        self
    }

    /// Whether to refuse a server whose `maxmemory-policy` may evict lock keys (default
    /// `false`: connect, with a `tracing` warning).
    ///
    /// Under any `volatile-*` policy (lock keys have a TTL) or `allkeys-*` policy, Redis
    /// evicts lock keys when it runs out of memory, freeing locks that are held: another
    /// client can then acquire while the holder works on until its next renewal reports the
    /// loss. [`build`](Self::build) reads the policy (`CONFIG GET maxmemory-policy`) and, unless
    /// it is `noeviction`, logs a warning, or with `true` fails with
    /// [`Error::InvalidConfig`]. A server that hides `CONFIG` (managed services often rename
    /// it) gets a warning that the policy could not be checked, or with `true` is refused too.
    /// The policy can change after connecting; this is a check at start-up only.
    pub fn with_require_noeviction(mut self, on: bool) -> Self {
        self.require_noeviction = on;
        self
    }

    /// Connects: see [`RedisLock::build`](crate::RedisLock::build).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for bad settings, [`Error::Unavailable`] if the server cannot
    /// be reached within the connect timeout.
    pub async fn build(self) -> Result<crate::RedisLock> {
        crate::RedisLock::build(self).await
    }

    /// Whether this names a cluster (`redis+cluster://`).
    pub fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(_))
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.operation_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(Error::invalid_config("timeouts must be greater than zero"));
        }
        if self.is_cluster() && self.replicas.is_some() {
            return Err(Error::invalid_config(
                "waiting for replicas (with_wait_for_replicas) is not offered on a cluster: its WAIT must run on the master of each lock's slot",
            ));
        }
        if let Some(ack) = self.replicas {
            if ack.timeout.is_zero() {
                return Err(Error::invalid_config(
                    "the replica acknowledgement timeout must be greater than zero (WAIT 0 waits forever)",
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.url)
            .field("prefix", &self.prefix)
            .field("operation_timeout", &self.operation_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("replicas", &self.replicas)
            .field("notifications", &self.notifications)
            .field("require_noeviction", &self.require_noeviction)
            .finish()
    }
}

/// Redlock over N independent masters (N odd: 3 or 5).
///
/// ```
/// use distlock_redis::RedlockConfig;
///
/// let config = RedlockConfig::new(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])?;
/// assert_eq!(config.quorum(), 2);
/// assert!(RedlockConfig::new(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002"]).is_err(), "even N");
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Clone)]
pub struct RedlockConfig {
    pub(crate) nodes: Vec<RedisConfig>,
    pub(crate) node_timeout: Duration,
    pub(crate) notifications: bool,
    pub(crate) drift_factor: f64,
    pub(crate) drift_floor: Duration,
    pub(crate) restart_quarantine: Option<Duration>,
}

/// The per-node timeout of Redlock's operations (during acquire it is also capped at half the
/// TTL).
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(200);

/// How long a Redlock master that restarted is not trusted, by default (see
/// [`RedlockConfig::with_restart_quarantine`]).
pub const DEFAULT_RESTART_QUARANTINE: Duration = Duration::from_secs(60);

impl RedlockConfig {
    /// Parses one URL per master.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if a URL is malformed or the number of masters is not odd and
    /// at least 3.
    pub fn new<I, S>(urls: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let nodes = urls
            .into_iter()
            .map(|url| RedisConfig::from_url(url.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        if nodes.len() < 3 || nodes.len() % 2 == 0 {
            return Err(Error::invalid_config(format!(
                "Redlock needs an odd number of at least 3 independent masters, got {}",
                nodes.len()
            )));
        }
        Ok(Self {
            nodes,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            notifications: true,
            drift_factor: 0.01,
            drift_floor: Duration::from_millis(2),
            restart_quarantine: None,
        })
    }

    /// Parses `redlock://[user:pass@]host1:port1,host2:port2,host3:port3[/db][?restart_quarantine=60s]`
    /// (`redlocks://` for TLS): the same credentials and database on every master;
    /// `restart_quarantine` sets [`with_restart_quarantine`](Self::with_restart_quarantine)
    /// (`0s` turns it off), other query parameters go to every master.
    ///
    /// ```
    /// use distlock_redis::RedlockConfig;
    ///
    /// let config = RedlockConfig::from_url("redlock://:pw@10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379/2")?;
    /// assert_eq!(config.quorum(), 2);
    /// assert!(!format!("{config:?}").contains("pw"));
    /// let config = RedlockConfig::from_url("redlock://a:1,b:2,c:3?restart_quarantine=5s")?;
    /// assert!(format!("{config:?}").contains("restart_quarantine: Some(5s)"));
    /// assert!(RedlockConfig::from_url("redlock://a:1,b:2,c:3?restart_quarantine=soon").is_err());
    /// # Ok::<(), distlock_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for another scheme, a malformed host list, or an even number
    /// of masters.
    pub fn from_url(url: &str) -> Result<Self> {
        let bad = || {
            Error::invalid_config(format!(
                "not a Redlock URL (redlock://h1:p1,h2:p2,h3:p3[/db]): {}",
                redact(url)
            ))
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
        let node_scheme = match scheme {
            "redlock" => "redis",
            "redlocks" => "rediss",
            _ => return Err(bad()),
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
            None => (String::new(), authority),
        };
        if hosts.split(',').any(str::is_empty) {
            return Err(bad());
        }
        // `restart_quarantine` is Redlock's own; every other query parameter is each master's.
        let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
        let mut quarantine = None;
        let mut forwarded = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("restart_quarantine", value)) => {
                    quarantine = Some(humantime::parse_duration(value).map_err(|e| {
                        Error::invalid_config(format!(
                            "restart_quarantine={value:?} is not a duration such as 60s or 500ms: {e}"
                        ))
                    })?);
                }
                _ => forwarded.push(pair),
            }
        }
        let tail = if forwarded.is_empty() {
            path.to_owned()
        } else {
            format!("{path}?{}", forwarded.join("&"))
        };
        let config = Self::new(
            hosts
                .split(',')
                .map(|host| format!("{node_scheme}://{userinfo}{host}{tail}")),
        )?;
        Ok(match quarantine {
            Some(quarantine) => config.with_restart_quarantine(quarantine),
            None => config,
        })
    }

    /// How many masters must agree: a strict majority.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Puts every lock key under `prefix` on every master.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        for node in &mut self.nodes {
            node.prefix.clone_from(&prefix);
        }
        self
    }

    /// Bounds each master's answer during acquire, extend and release (default
    /// [`DEFAULT_NODE_TIMEOUT`], and never more than half the TTL during acquire): a dead
    /// master must not eat the lock's validity. Keep it far below the TTLs you use (the
    /// validity left after the slowest answer is what the holder gets); raise it only where
    /// the client or the masters are slow under bursts.
    pub fn with_node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The clock-drift allowance subtracted from each lease's validity: `factor * ttl +
    /// floor` (default `0.01 * ttl + 2 ms`, as in the Redlock description).
    pub fn with_clock_drift(mut self, factor: f64, floor: Duration) -> Self {
        self.drift_factor = factor;
        self.drift_floor = floor;
        self
    }

    /// How long a master that restarted does not count toward a majority. Default: the
    /// longer of [`DEFAULT_RESTART_QUARANTINE`] and the longest TTL this client used; a value
    /// set here is used as is. Set it to at least the longest TTL any client of these masters
    /// uses (`Duration::ZERO` turns the check off).
    ///
    /// A master restarted without its data (no persistence, or RDB snapshots and AOF
    /// `everysec`, which lose the last writes) forgets the locks it granted and would vote
    /// for a second holder while the first is still valid. The Redlock description's remedy
    /// is to keep a restarted master out for the maximum TTL. This client does what a client
    /// can: each acquisition reads the master's run id (new with every restart); a master
    /// whose run id changed since this client last saw it is not counted, for anyone, until
    /// the quarantine has passed. A client that first meets a master after its restart
    /// cannot tell, so operators should still delay restarts (or use AOF `appendfsync
    /// always`).
    pub fn with_restart_quarantine(mut self, quarantine: Duration) -> Self {
        self.restart_quarantine = Some(quarantine);
        self
    }

    /// Whether waiters subscribe to release announcements on every master (default `true`);
    /// with `false` they poll with backoff.
    pub fn with_notifications(mut self, on: bool) -> Self {
        self.notifications = on;
        self
    }

    /// Bounds connecting to each master.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        for node in &mut self.nodes {
            node.connect_timeout = timeout;
        }
        self
    }

    /// Connects to every master that answers: see [`Redlock::build`](crate::Redlock::build).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for bad settings.
    pub async fn build(self) -> Result<crate::Redlock> {
        crate::Redlock::build(self).await
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.node_timeout.is_zero() {
            return Err(Error::invalid_config(
                "the node timeout must be greater than zero",
            ));
        }
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(Error::invalid_config(
                "the clock drift factor must be in [0, 0.5)",
            ));
        }
        self.nodes.iter().try_for_each(RedisConfig::validate)
    }

    pub(crate) fn drift(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.drift_factor) + self.drift_floor
    }
}

impl fmt::Debug for RedlockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockConfig")
            .field("nodes", &self.nodes.iter().map(|n| &n.url).collect::<Vec<_>>())
            .field("node_timeout", &self.node_timeout)
            .field("notifications", &self.notifications)
            .field("drift_factor", &self.drift_factor)
            .field("drift_floor", &self.drift_floor)
            .field("restart_quarantine", &self.restart_quarantine)
            .finish()
    }
}

/// Parses `redis+cluster://[user:pass@]h1:p1[,h2:p2...][/0][?params]` into one seed URL per
/// host (`redis://[user:pass@]h:p[?params]`, `rediss://` for `rediss+cluster`), each checked
/// as a server URL.
fn parse_cluster_url(url: &str) -> Result<ClusterSeeds> {
    let bad = |why: &str| {
        Error::invalid_config(format!(
            "not a Redis Cluster URL (redis+cluster://host1:port1[,host2:port2...]): {why}: {}",
            redact(url)
        ))
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
    let node_scheme = match scheme {
        "redis+cluster" => "redis",
        "rediss+cluster" => "rediss",
        _ => return Err(bad("another scheme")),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
        None => (String::new(), authority),
    };
    if hosts.is_empty() || hosts.split(',').any(str::is_empty) {
        return Err(bad("an empty host"));
    }
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    if !matches!(path, "" | "/" | "/0") {
        return Err(bad("a cluster has only database 0"));
    }
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    let nodes = hosts
        .split(',')
        .map(|host| {
            let client = parse_url(&format!("{node_scheme}://{userinfo}{host}{query}"))?;
            Ok(client.get_connection_info().clone())
        })
        .collect::<Result<Vec<_>>>()?;
    let seeds = ClusterSeeds { nodes };
    // Refuses what the cluster client would refuse at connect time (mixed credentials, ...).
    seeds
        .client(DEFAULT_OPERATION_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, None)
        .map_err(|e| bad(&e.to_string()))?;
    Ok(seeds)
}

pub(crate) fn parse_url(url: &str) -> Result<redis::Client> {
    #[cfg(feature = "tls-rustls")]
    if url.starts_with("rediss://") || url.starts_with("valkeys://") {
        // rustls needs a process-wide crypto provider; install ring unless the application
        // installed one already (then this does nothing).
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if !matches!(
        scheme,
        Some("redis" | "rediss" | "redis+unix" | "unix" | "valkey" | "valkeys")
    ) {
        return Err(Error::invalid_config(format!(
            "not a Redis URL (redis://[user:pass@]host:port[/db]): {}",
            redact(url)
        )));
    }
    let bad = |e: redis::RedisError| Error::invalid_config(format!("bad Redis URL {}: {e}", redact(url)));
    let client = redis::Client::open(url).map_err(bad)?;
    let info = client
        .get_connection_info()
        .clone()
        .set_tcp_settings(tcp_settings());
    redis::Client::open(info).map_err(bad)
}

/// `TCP_NODELAY` (a lock request is one small write that must not wait for Nagle), and TCP
/// keepalive probes, so a peer that vanished without a FIN or RST (a silent partition, a
/// crashed host) is noticed by the kernel within about a minute even on an idle connection
/// (the pub/sub one). Requests are bounded by our own timeouts regardless.
pub(crate) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    use redis::io::tcp::socket2::TcpKeepalive;
    let keepalive = TcpKeepalive::new()
        .with_time(Duration::from_secs(30))
        .with_interval(Duration::from_secs(10));
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "fuchsia"))]
    let keepalive = keepalive.with_retries(3);
    redis::io::tcp::TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive)
}

/// `url` with the password of its user info, and any `pass`/`password` query parameter (as
/// `redis+unix://` URLs carry it), replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    let redacted = redact_userinfo(url);
    match redacted.split_once('?') {
        Some((base, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((key, _))
                        if key.eq_ignore_ascii_case("pass") || key.eq_ignore_ascii_case("password") =>
                    {
                        format!("{key}=***")
                    }
                    _ => param.to_owned(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
        None => redacted,
    }
}

fn redact_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return if url.contains('@') {
            "<unparsable URL>".to_owned()
        } else {
            url.to_owned()
        };
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            format!("{scheme}://{user}:***@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_are_config_errors() {
        for url in [
            "",
            "nonsense",
            "http://x:1",
            "redis://",
            "redis://host:notaport",
            "redis://h:1/x",
        ] {
            assert!(
                matches!(RedisConfig::from_url(url), Err(Error::InvalidConfig { .. })),
                "{url:?}"
            );
        }
        assert!(RedisConfig::from_url("redis://127.0.0.1:6379/3").is_ok());
        assert!(RedisConfig::from_url("redis://user:pw@localhost:6379").is_ok());
        assert!(
            RedisConfig::from_url("redis+cluster://127.0.0.1:7001,127.0.0.1:7002")
                .expect("a cluster")
                .is_cluster()
        );
        assert!(!RedisConfig::from_url("redis://127.0.0.1:7001")
            .expect("a server")
            .is_cluster());
        for url in [
            "redis+cluster://",
            "redis+cluster://a:1,,b:2",
            "redis+cluster://a:1/2",
            "redis+cluster://a:port",
            "cluster://a:1",
        ] {
            assert!(
                matches!(RedisConfig::from_url(url), Err(Error::InvalidConfig { .. })),
                "{url:?}"
            );
        }
        let config = RedisConfig::from_url("redis+cluster://u:hunter2@a:1,b:2/0").expect("valid");
        assert!(!format!("{config:?}").contains("hunter2"));
        let tls = RedisConfig::from_url("rediss://localhost:6380");
        if cfg!(feature = "tls-rustls") {
            assert!(tls.is_ok(), "{tls:?}");
        } else {
            assert!(matches!(tls, Err(Error::InvalidConfig { .. })), "{tls:?}");
        }
    }

    #[test]
    fn debug_hides_passwords() {
        let config = RedisConfig::from_url("redis://alice:hunter2@127.0.0.1:6379/1").expect("valid");
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("alice:***@127.0.0.1:6379/1"), "{shown}");
        assert_eq!(redact("redis://:pw@h:1"), "redis://:***@h:1");
        assert_eq!(redact("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(
            redact("redis+unix:///tmp/r.sock?db=1&pass=hunter2"),
            "redis+unix:///tmp/r.sock?db=1&pass=***"
        );
        let err = RedisConfig::from_url("redis://a:hunter2@h:port").expect_err("bad port");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let redlock =
            RedlockConfig::new(["redis://:pw1@a:1", "redis://:pw2@b:1", "redis://:pw3@c:1"]).expect("valid");
        assert!(!format!("{redlock:?}").contains("pw"), "{redlock:?}");
    }

    #[test]
    fn redlock_urls() {
        let config = RedlockConfig::from_url("redlock://u:secret@a:1,b:2,c:3/4").expect("valid");
        let urls: Vec<_> = config.nodes.iter().map(|n| n.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "redis://u:***@a:1/4",
                "redis://u:***@b:2/4",
                "redis://u:***@c:3/4"
            ]
        );
        for bad in [
            "redis://a:1,b:2,c:3",
            "redlock://a:1,,c:3",
            "redlock://a:1,b:2",
            "redlock://",
        ] {
            assert!(
                matches!(RedlockConfig::from_url(bad), Err(Error::InvalidConfig { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn redlock_needs_an_odd_majority() {
        assert!(RedlockConfig::new(["redis://a:1"]).is_err());
        assert!(RedlockConfig::new(["redis://a:1", "redis://b:1", "redis://c:1", "redis://d:1"]).is_err());
        let five = RedlockConfig::new((1..=5).map(|i| format!("redis://h:{i}"))).expect("valid");
        assert_eq!(five.quorum(), 3);
    }
}

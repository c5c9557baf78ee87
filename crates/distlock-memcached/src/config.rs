//! [`MemcachedConfig`]: where the servers are and how long to wait for them.
//!
//! Owns parsing and validation of the configuration; it may not open connections (that
//! happens lazily, on first use, in the built [`MemcachedLock`]).

use std::time::Duration;

use distlock_core::{Error, Result};

use crate::keys::MAX_KEY_LEN;
use crate::MemcachedLock;

/// How long one lock operation may take before it fails with `Error::Unavailable`.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(2);
/// How long opening one connection may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Connections per server per client (operations beyond it queue).
pub const DEFAULT_MAX_CONNECTIONS: usize = 32;
/// The default key namespace (see the key layout on [`MemcachedLock`]).
pub const DEFAULT_NAMESPACE: &str = "distlock";
/// The port used when a URL names none.
pub const DEFAULT_PORT: u16 = 11211;
/// The environment variable [`MemcachedConfig::from_env`] reads.
pub const URL_ENV: &str = "DISTLOCK_MEMCACHED_URL";

/// The longest namespace: the rest of the 250-byte key must hold a hashed name.
const MAX_NAMESPACE: usize = 64;
const _: () = assert!(MAX_KEY_LEN - MAX_NAMESPACE - 3 >= distlock_core::LockName::MIN_ENCODED_LEN);

/// The configuration of a [`MemcachedLock`].
///
/// ```
/// use distlock_memcached::MemcachedConfig;
/// use std::time::Duration;
///
/// let config = MemcachedConfig::from_url("memcache://10.0.0.1:11211,10.0.0.2")?
///     .with_namespace("billing")?
///     .with_operation_timeout(Duration::from_millis(500));
/// assert_eq!(config.servers(), ["10.0.0.1:11211", "10.0.0.2:11211"]);
/// assert!(MemcachedConfig::from_url("redis://localhost").is_err());
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct MemcachedConfig {
    servers: Vec<String>,
    namespace: String,
    operation_timeout: Duration,
    connect_timeout: Duration,
    max_connections: usize,
}

impl MemcachedConfig {
    /// Servers given as `host:port` (or `host`, meaning port 11211).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an empty list or a malformed address.
    pub fn new<I, S>(servers: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let servers = servers
            .into_iter()
            .map(|s| parse_host(s.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        if servers.is_empty() {
            return Err(Error::invalid_config("at least one memcached server is needed"));
        }
        let mut unique = servers.clone();
        unique.sort();
        unique.dedup();
        if unique.len() != servers.len() {
            return Err(Error::invalid_config("a memcached server is listed twice"));
        }
        Ok(Self {
            servers,
            namespace: DEFAULT_NAMESPACE.to_owned(),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        })
    }

    /// `memcache://host[:port][,host[:port]...]` (`memcached://` is accepted too). Several
    /// hosts spread the lock names over the servers; each name lives on exactly one.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for another scheme, credentials, a path or a bad address.
    pub fn from_url(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("memcache://")
            .or_else(|| url.strip_prefix("memcached://"))
            .ok_or_else(|| {
                Error::invalid_config(format!("a memcached URL starts with memcache://, not {url:?}"))
            })?;
        let hosts = rest.strip_suffix('/').unwrap_or(rest);
        if hosts.contains(['/', '?', '#', '@']) {
            return Err(Error::invalid_config(format!(
                "a memcached URL has hosts only (no credentials, path or query): {url:?}"
            )));
        }
        Self::new(hosts.split(','))
    }

    /// [`from_url`](Self::from_url) with the value of `DISTLOCK_MEMCACHED_URL`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if it is unset or invalid.
    pub fn from_env() -> Result<Self> {
        let url =
            std::env::var(URL_ENV).map_err(|_| Error::invalid_config(format!("{URL_ENV} is not set")))?;
        Self::from_url(&url)
    }

    /// A key namespace, so that several applications can share servers (printable ASCII,
    /// at most 64 bytes).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if it is empty, too long or has other characters.
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Result<Self> {
        let namespace = namespace.into();
        if namespace.is_empty()
            || namespace.len() > MAX_NAMESPACE
            || !namespace.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(Error::invalid_config(format!(
                "a namespace is 1 to {MAX_NAMESPACE} printable ASCII characters, not {namespace:?}"
            )));
        }
        self.namespace = namespace;
        Ok(self)
    }

    /// The bound on every operation, including waiting for a connection (default 2 s).
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// The bound on opening one connection (default 1 s).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Connections per server (default 32, at least 1).
    pub fn with_max_connections(mut self, max: usize) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// The servers, as `host:port`.
    pub fn servers(&self) -> &[String] {
        &self.servers
    }

    /// The key namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The operation timeout.
    pub fn operation_timeout(&self) -> Duration {
        self.operation_timeout
    }

    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Connections per server.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// The lock client. Connections open on first use, so this does no I/O; call
    /// [`DistributedLock::ping`](distlock_core::DistributedLock::ping) to check the servers.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if a timeout is zero.
    pub fn build(self) -> Result<MemcachedLock> {
        if self.operation_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(Error::invalid_config("timeouts must be greater than zero"));
        }
        Ok(MemcachedLock::from_config(self))
    }
}

/// `host[:port]` -> `host:port`, IPv6 in brackets.
fn parse_host(raw: &str) -> Result<String> {
    let host = raw.trim();
    let bad = || Error::invalid_config(format!("not a memcached address: {raw:?}"));
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(bad());
    }
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (ip, after) = rest.split_once(']').ok_or_else(bad)?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(bad)?),
        };
        (format!("[{ip}]"), port)
    } else {
        match host.rsplit_once(':') {
            Some((name, _)) if name.contains(':') => return Err(bad()), // bare IPv6
            Some((name, port)) => (name.to_owned(), Some(port)),
            None => (host.to_owned(), None),
        }
    };
    if name.is_empty() || name == "[]" {
        return Err(bad());
    }
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad)?,
        None => DEFAULT_PORT,
    };
    Ok(format!("{name}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let c = MemcachedConfig::from_url("memcache://a:1,b,[::1]:3/").expect("valid");
        assert_eq!(c.servers(), ["a:1", "b:11211", "[::1]:3"]);
        for bad in [
            "memcache://",
            "memcache://a:0",
            "memcache://a:x",
            "memcache://u:p@a",
            "memcache://a/db",
            "memcache://a,a",
            "memcache://::1",
            "http://a",
        ] {
            assert!(MemcachedConfig::from_url(bad).is_err(), "{bad}");
        }
        assert!(MemcachedConfig::from_url("memcache://a")
            .expect("valid")
            .with_namespace("has space")
            .is_err());
    }
}

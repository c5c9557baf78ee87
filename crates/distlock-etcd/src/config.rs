//! [`EtcdConfig`]: where the cluster is, where the locks live in its key space, the client
//! lease's TTL and the operation timeout. Owns URL parsing; knows nothing about the lock
//! recipe (`build` only hands itself to [`EtcdLock::connect`]).

use std::fmt;
use std::time::Duration;

use distlock_core::{duration_param, Error, Result};

use crate::EtcdLock;

/// The default prefix of every lock's keys (`<root>/<encoded name>/...`).
pub const DEFAULT_ROOT: &str = "distlock";
/// The default TTL of the client's lease: how long a killed holder keeps its locks.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);
/// The default bound on one operation (round trips plus reconnection waits).
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// How to reach etcd and where to keep the locks.
///
/// Built from a URL, `etcd://[user:password@]host1:2379[,host2:2379...][/root]?lease_ttl=10s`
/// (`etcds://` for TLS, with the `tls` feature), or with the typed setters. Query
/// parameters: `lease_ttl` and `operation_timeout` (a number with a unit `ms`, `s` or `m`; a
/// bare number is milliseconds), `root` (the key prefix, also given as the URL's path) and,
/// for TLS, `ca` (a PEM file of the CA that signed the servers' certificates; the system's
/// roots are not used).
///
/// ```
/// use distlock_etcd::EtcdConfig;
/// use std::time::Duration;
///
/// let config = EtcdConfig::from_url("etcd://a:2379,b:2379/apps?lease_ttl=6s")?;
/// assert_eq!(config.endpoints(), ["http://a:2379", "http://b:2379"]);
/// assert_eq!(config.root(), "apps");
/// assert_eq!(config.lease_ttl(), Duration::from_secs(6));
/// assert!(EtcdConfig::from_url("redis://x").is_err());
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    endpoints: Vec<String>,
    root: String,
    lease_ttl: Duration,
    operation_timeout: Duration,
    credentials: Option<(String, String)>,
    tls: bool,
    ca: Option<String>,
}

impl EtcdConfig {
    /// A configuration for `hosts` (`host:port`, each), plain HTTP/2, with the default root,
    /// lease TTL and timeout.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for no host, or a host that is not `host:port`.
    pub fn new<I, S>(hosts: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let hosts: Vec<String> = hosts.into_iter().map(|h| h.as_ref().trim().to_owned()).collect();
        if hosts.is_empty() {
            return Err(Error::invalid_config("no etcd endpoint"));
        }
        for host in &hosts {
            let valid = host
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0))
                && !host.contains(['/', '?', '#', '@', ' ']);
            if !valid {
                return Err(Error::invalid_config(format!(
                    "the etcd endpoint {host:?} is not host:port"
                )));
            }
        }
        Ok(Self {
            endpoints: hosts,
            root: DEFAULT_ROOT.to_owned(),
            lease_ttl: DEFAULT_LEASE_TTL,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            credentials: None,
            tls: false,
            ca: None,
        })
    }

    /// Parses `etcd://[user:password@]h1:2379[,h2:2379...][/root]?lease_ttl=10s`, or the
    /// same with `etcds://` for TLS.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for another scheme, no host, a bad root or a bad parameter.
    pub fn from_url(url: &str) -> Result<Self> {
        let (rest, tls) = if let Some(rest) = url.strip_prefix("etcd://") {
            (rest, false)
        } else if let Some(rest) = url.strip_prefix("etcds://") {
            (rest, true)
        } else {
            return Err(Error::invalid_config(format!(
                "{:?} is not an etcd:// or etcds:// URL",
                redact(url)
            )));
        };
        let (address, query) = match rest.split_once('?') {
            Some((address, query)) => (address, Some(query)),
            None => (rest, None),
        };
        let (credentials, address) = match address.rsplit_once('@') {
            Some((userinfo, hosts)) => {
                let (user, password) = userinfo
                    .split_once(':')
                    .ok_or_else(|| Error::invalid_config("etcd credentials in a URL are user:password@"))?;
                if user.is_empty() {
                    return Err(Error::invalid_config("an empty etcd user name"));
                }
                (Some((decode(user)?, decode(password)?)), hosts)
            }
            None => (None, address),
        };
        let (hosts, path) = match address.split_once('/') {
            Some((hosts, path)) => (hosts, path),
            None => (address, ""),
        };
        if hosts.is_empty() {
            return Err(Error::invalid_config("no etcd endpoint in the URL"));
        }
        let mut config = Self::new(hosts.split(','))?;
        config.credentials = credentials;
        config.tls = tls;
        let path = path.trim_end_matches('/');
        if !path.is_empty() {
            config = config.with_root(path)?;
        }
        for pair in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
        {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| Error::invalid_config(format!("URL parameter {pair:?} has no value")))?;
            config = match key {
                "lease_ttl" => config.with_lease_ttl(duration_param(key, value)?)?,
                "operation_timeout" => config.with_operation_timeout(duration_param(key, value)?)?,
                "root" => config.with_root(value)?,
                "ca" => {
                    config.ca = Some(decode(value)?);
                    config
                }
                _ => {
                    return Err(Error::invalid_config(format!(
                        "unknown URL parameter {key:?} (known: lease_ttl, operation_timeout, root, ca)"
                    )))
                }
            };
        }
        if config.ca.is_some() && !config.tls {
            return Err(Error::invalid_config("ca= needs an etcds:// URL"));
        }
        Ok(config)
    }

    /// Puts every lock's keys under `root` (default [`DEFAULT_ROOT`]): the lock named `n`
    /// lives at `<root>/<encoded n>/`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an empty root, one with an empty, `.` or `..` segment,
    /// or one with control characters.
    pub fn with_root(mut self, root: impl Into<String>) -> Result<Self> {
        let root = root.into();
        let trimmed = root.trim_matches('/');
        let bad = trimmed.is_empty()
            || trimmed.split('/').any(|s| s.is_empty() || s == "." || s == "..")
            || trimmed.chars().any(char::is_control);
        if bad {
            return Err(Error::invalid_config(format!(
                "the root {root:?} is not a key prefix such as distlock or apps/locks"
            )));
        }
        self.root = trimmed.to_owned();
        Ok(self)
    }

    /// The TTL of the client's lease (default [`DEFAULT_LEASE_TTL`]): every lock the client
    /// takes is attached to it, so it bounds how long a killed or cut-off holder keeps its
    /// locks. The server may raise it to its minimum (one and a half election timeouts,
    /// rounded up to whole seconds: 2 s with the default election timeout); the client
    /// follows the TTL the server granted.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] outside 1 s to 1 hour (etcd counts TTLs in seconds; a TTL that
    /// is not a whole number of seconds is rounded up).
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Result<Self> {
        if ttl < Duration::from_secs(1) || ttl > Duration::from_secs(3600) {
            return Err(Error::invalid_config(format!(
                "lease_ttl must be between 1s and 1h, got {ttl:?}"
            )));
        }
        self.lease_ttl = ttl;
        Ok(self)
    }

    /// The longest one operation may take when the cluster does not answer (default
    /// [`DEFAULT_OPERATION_TIMEOUT`]); it then fails with
    /// [`Error::Unavailable`](distlock_core::Error::Unavailable).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] outside 100 ms to 1 hour.
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Result<Self> {
        if timeout < Duration::from_millis(100) || timeout > Duration::from_secs(3600) {
            return Err(Error::invalid_config(format!(
                "operation_timeout must be between 100ms and 1h, got {timeout:?}"
            )));
        }
        self.operation_timeout = timeout;
        Ok(self)
    }

    /// Authenticates as `user` with `password` (etcd's user/password authentication).
    #[must_use]
    pub fn with_credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// Connects with these settings ([`EtcdLock::connect`]).
    ///
    /// # Errors
    /// [`Error::Unavailable`](distlock_core::Error::Unavailable) if no lease could be granted
    /// within the operation timeout.
    pub async fn build(self) -> Result<EtcdLock> {
        EtcdLock::connect(self).await
    }

    /// The endpoints, as URLs (`http://host:port`, or `https://` for TLS).
    pub fn endpoints(&self) -> Vec<String> {
        let scheme = if self.tls { "https" } else { "http" };
        self.endpoints.iter().map(|h| format!("{scheme}://{h}")).collect()
    }

    /// The key prefix of every lock.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The lease TTL asked for.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// The bound on one operation.
    pub fn operation_timeout(&self) -> Duration {
        self.operation_timeout
    }

    pub(crate) fn credentials(&self) -> Option<&(String, String)> {
        self.credentials.as_ref()
    }

    pub(crate) fn tls(&self) -> bool {
        self.tls
    }

    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn ca(&self) -> Option<&str> {
        self.ca.as_deref()
    }
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("root", &self.root)
            .field("lease_ttl", &self.lease_ttl)
            .field("operation_timeout", &self.operation_timeout)
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .field("tls", &self.tls)
            .field("ca", &self.ca)
            .finish()
    }
}

/// `url` with any password replaced by `***`, for error messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Percent-decodes a URL component.
fn decode(text: &str) -> Result<String> {
    let bad = || Error::invalid_config(format!("bad percent-encoding in {text:?}"));
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).ok_or_else(bad)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts_root_credentials_and_parameters() {
        let config = EtcdConfig::from_url(
            "etcd://me:p%40ss@h1:1,h2:2/apps/locks/?lease_ttl=4s&operation_timeout=2500ms",
        )
        .expect("valid");
        assert_eq!(config.endpoints(), ["http://h1:1", "http://h2:2"]);
        assert_eq!(config.root(), "apps/locks");
        assert_eq!(config.lease_ttl(), Duration::from_secs(4));
        assert_eq!(config.operation_timeout(), Duration::from_millis(2500));
        assert_eq!(config.credentials(), Some(&("me".to_owned(), "p@ss".to_owned())));
        assert!(
            !format!("{config:?}").contains("p@ss"),
            "the password is not shown"
        );
        let plain = EtcdConfig::from_url("etcd://127.0.0.1:2379/").expect("valid");
        assert_eq!(plain.root(), DEFAULT_ROOT);
        let tls = EtcdConfig::from_url("etcds://h:2379?ca=/etc/ca.pem").expect("valid");
        assert_eq!(tls.endpoints(), ["https://h:2379"]);
        assert_eq!(tls.ca(), Some("/etc/ca.pem"));
    }

    #[test]
    fn refuses_bad_urls_without_panicking() {
        for url in [
            "",
            "etcd://",
            "etcd:///root",
            "etcd://h1,,h2",
            "etcd://h1",
            "etcd://h1:0",
            "etcd://h1:99999",
            "http://h1:2379",
            "etcd://h:1/../x",
            "etcd://h:1/a//b",
            "etcd://h:1?lease_ttl=soon",
            "etcd://h:1?lease_ttl=0",
            "etcd://h:1?lease_ttl=500ms",
            "etcd://h:1?operation_timeout=1",
            "etcd://h:1?colour=blue",
            "etcd://h:1?lease_ttl",
            "etcd://h:1?lease_ttl=99999999999999999999m",
            "etcd://h:1?ca=/x.pem",
            "etcd://nopassword@h:1",
            "etcd://:pw@h:1",
            "etcd://u:%zz@h:1",
        ] {
            assert!(
                matches!(EtcdConfig::from_url(url), Err(Error::InvalidConfig { .. })),
                "{url:?}"
            );
        }
    }

    #[test]
    fn errors_never_show_a_password() {
        let error = EtcdConfig::from_url("http://me:secret@h:1").expect_err("not etcd");
        assert!(!error.to_string().contains("secret"), "{error}");
    }
}

//! [`ZooKeeperConfig`]: where the ensemble is, where the locks live in it, and the session and
//! operation timeouts. Owns URL parsing; knows nothing about the lock recipe (`build` only
//! hands itself to [`ZooKeeperLock::connect`]).

use std::fmt;
use std::time::Duration;

use distlock_core::{duration_param, Error, Result};

use crate::ZooKeeperLock;

/// The default parent of every lock's znode.
pub const DEFAULT_ROOT: &str = "/distlock";
/// The default session timeout asked of the server (it may negotiate it into its
/// `minSessionTimeout..=maxSessionTimeout` range).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// The default bound on one operation (round trips plus reconnection waits).
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// How to reach ZooKeeper and where to keep the locks.
///
/// Built from a URL, `zk://host1:2181,host2:2181,host3:2181/optional/chroot?session_timeout=4s`,
/// or with the typed setters. Query parameters: `session_timeout`, `operation_timeout` (a number
/// with a unit `ms`, `s` or `m`; a bare number is milliseconds) and `root` (an absolute path).
///
/// ```
/// use distlock_zookeeper::ZooKeeperConfig;
/// use std::time::Duration;
///
/// let config = ZooKeeperConfig::from_url("zk://a:2181,b:2181/apps/billing?session_timeout=4s")?;
/// assert_eq!(config.connect_string(), "a:2181,b:2181/apps/billing");
/// assert_eq!(config.session_timeout(), Duration::from_secs(4));
/// assert_eq!(config.root(), "/distlock");
/// assert!(ZooKeeperConfig::from_url("redis://x").is_err());
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ZooKeeperConfig {
    connect_string: String,
    root: String,
    session_timeout: Duration,
    operation_timeout: Duration,
}

impl ZooKeeperConfig {
    /// A configuration for a ZooKeeper connect string (`host:port[,host:port...][/chroot]`) with
    /// the default root and timeouts.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an empty host list or a malformed chroot.
    pub fn new(connect_string: impl Into<String>) -> Result<Self> {
        let connect_string = connect_string.into();
        let (hosts, chroot) = match connect_string.find('/') {
            Some(i) => connect_string.split_at(i),
            None => (connect_string.as_str(), ""),
        };
        if hosts.split(',').any(|h| h.trim().is_empty()) {
            return Err(Error::invalid_config(format!(
                "no ZooKeeper host in {connect_string:?}"
            )));
        }
        if !chroot.is_empty() {
            validate_path(chroot, "chroot")?;
        }
        Ok(Self {
            connect_string,
            root: DEFAULT_ROOT.to_owned(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        })
    }

    /// Parses `zk://host1:2181,host2:2181/optional/chroot?session_timeout=4s&root=/locks`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for another scheme, no host, a bad path or a bad parameter.
    pub fn from_url(url: &str) -> Result<Self> {
        let rest = url
            .strip_prefix("zk://")
            .or_else(|| url.strip_prefix("zookeeper://"))
            .ok_or_else(|| Error::invalid_config(format!("{url:?} is not a zk:// URL")))?;
        let (address, query) = match rest.split_once('?') {
            Some((address, query)) => (address, Some(query)),
            None => (rest, None),
        };
        let address = address.strip_suffix('/').unwrap_or(address);
        let mut config = Self::new(address)?;
        for pair in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
        {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| Error::invalid_config(format!("URL parameter {pair:?} has no value")))?;
            config = match key {
                "session_timeout" => config.with_session_timeout(duration_param(key, value)?)?,
                "operation_timeout" => config.with_operation_timeout(duration_param(key, value)?)?,
                "root" => config.with_root(value)?,
                _ => {
                    return Err(Error::invalid_config(format!(
                        "unknown URL parameter {key:?} (known: session_timeout, operation_timeout, root)"
                    )))
                }
            };
        }
        Ok(config)
    }

    /// Puts every lock's znode under `root` (default [`DEFAULT_ROOT`]), inside the chroot.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] unless `root` is an absolute ZooKeeper path other than `/`.
    pub fn with_root(mut self, root: impl Into<String>) -> Result<Self> {
        let root = root.into();
        let root = root.strip_suffix('/').map(str::to_owned).unwrap_or(root);
        validate_path(&root, "root")?;
        self.root = root;
        Ok(self)
    }

    /// The session timeout to ask for (default [`DEFAULT_SESSION_TIMEOUT`]). It bounds how long
    /// a killed holder keeps its locks, and how long a disconnected client waits before it
    /// declares its locks lost. The server brings it into its
    /// `minSessionTimeout..=maxSessionTimeout` (2 to 20 ticks by default); the client follows
    /// the negotiated one ([`ZooKeeperLock::negotiated_session_timeout`]). See the crate docs
    /// for the timeouts that are safe against a member cut off from its leader.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] outside 100 ms to 1 hour.
    pub fn with_session_timeout(mut self, timeout: Duration) -> Result<Self> {
        check_range("session_timeout", timeout)?;
        self.session_timeout = timeout;
        Ok(self)
    }

    /// The longest one operation may take when the ensemble does not answer (default
    /// [`DEFAULT_OPERATION_TIMEOUT`]); it then fails with [`Error::Unavailable`].
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] outside 100 ms to 1 hour.
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Result<Self> {
        check_range("operation_timeout", timeout)?;
        self.operation_timeout = timeout;
        Ok(self)
    }

    /// Opens a session with these settings ([`ZooKeeperLock::connect`]).
    ///
    /// # Errors
    /// [`Error::Unavailable`] if no session could be opened within the operation timeout.
    pub async fn build(self) -> Result<ZooKeeperLock> {
        ZooKeeperLock::connect(self).await
    }

    /// The connect string handed to the client: hosts and optional chroot.
    pub fn connect_string(&self) -> &str {
        &self.connect_string
    }

    /// The parent of every lock's znode.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The requested session timeout.
    pub fn session_timeout(&self) -> Duration {
        self.session_timeout
    }

    /// The bound on one operation.
    pub fn operation_timeout(&self) -> Duration {
        self.operation_timeout
    }

    /// How long the driver goes without hearing from the server before it treats the
    /// connection as lost and suspends the locks: a quarter of the requested session timeout,
    /// set explicitly (the driver's own default is two fifths) so that the suspension comes
    /// early. The driver lowers it to two fifths of the negotiated session timeout when it
    /// exceeds three fifths of it. The heartbeat works from the negotiated timeout: every
    /// twelfth of it, and suspends the locks after a quarter of it without the leader's
    /// confirmation.
    pub fn connection_timeout(&self) -> Duration {
        self.session_timeout / 4
    }
}

impl fmt::Debug for ZooKeeperConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No credentials live here (digest auth is not supported yet), so all of it is shown.
        f.debug_struct("ZooKeeperConfig")
            .field("connect_string", &self.connect_string)
            .field("root", &self.root)
            .field("session_timeout", &self.session_timeout)
            .field("operation_timeout", &self.operation_timeout)
            .finish()
    }
}

fn validate_path(path: &str, what: &str) -> Result<()> {
    let bad = !path.starts_with('/')
        || path.len() < 2
        || path.ends_with('/')
        || path[1..]
            .split('/')
            .any(|segment| segment.is_empty() || segment == "." || segment == "..")
        || path.chars().any(|c| c.is_control());
    if bad {
        return Err(Error::invalid_config(format!(
            "the {what} {path:?} is not an absolute ZooKeeper path such as /distlock"
        )));
    }
    Ok(())
}

fn check_range(what: &str, value: Duration) -> Result<()> {
    if value < Duration::from_millis(100) || value > Duration::from_secs(3600) {
        return Err(Error::invalid_config(format!(
            "{what} must be between 100ms and 1h, got {value:?}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts_chroot_and_parameters() {
        let config = ZooKeeperConfig::from_url(
            "zk://h1:1,h2:2,h3:3/chroot/x?session_timeout=2500ms&root=/locks&operation_timeout=3s",
        )
        .expect("valid");
        assert_eq!(config.connect_string(), "h1:1,h2:2,h3:3/chroot/x");
        assert_eq!(config.root(), "/locks");
        assert_eq!(config.session_timeout(), Duration::from_millis(2500));
        assert_eq!(config.operation_timeout(), Duration::from_secs(3));
        let plain = ZooKeeperConfig::from_url("zk://127.0.0.1:2181/").expect("valid");
        assert_eq!(plain.connect_string(), "127.0.0.1:2181");
    }

    #[test]
    fn refuses_bad_urls_without_panicking() {
        for url in [
            "",
            "zk://",
            "zk://h1,,h2",
            "http://h1",
            "zk://h/../x",
            "zk://h?session_timeout=soon",
            "zk://h?session_timeout=0",
            "zk://h?root=relative",
            "zk://h?root=/",
            "zk://h?colour=blue",
            "zk://h?session_timeout",
            "zk://h?session_timeout=99999999999999999999m",
        ] {
            assert!(
                matches!(ZooKeeperConfig::from_url(url), Err(Error::InvalidConfig { .. })),
                "{url:?}"
            );
        }
    }
}

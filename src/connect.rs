//! Opening a backend from a URL: the one place that knows which stores are compiled in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use distlock_core::{AcquireOptions, DistributedLock, Error, LockClient, MemoryLock, Result};

/// The conventional environment variable naming the lock store's URL.
pub const URL_ENV: &str = "DISTLOCK_URL";

/// Opens the backend `url` names and returns a [`LockClient`] over it.
///
/// | scheme | store | feature |
/// |---|---|---|
/// | `memory://NAME` | in-process store shared by every `connect` to the same NAME in this process | always |
/// | `sqlite://PATH` | a SQLite file, created if missing (the embedded default) | `sqlite` (default) |
/// | `redis://[USER:PASS@]HOST:PORT[/DB]`, `rediss://...` | one Redis server | `redis` (`redis-tls` for `rediss`) |
/// | `redis+cluster://[USER:PASS@]H1:P1[,H2:P2...]`, `rediss+cluster://...` | a Redis Cluster, from one or more seed nodes | `redis` |
/// | `redis+sentinel://[USER:PASS@]S1:P1[,S2:P2...]/MASTER[?db=N&wait_for_replicas=N]`, `rediss+sentinel://...` | the primary Redis Sentinel names, found again after a failover | `redis` |
/// | `redlock://[USER:PASS@]H1:P1,H2:P2,H3:P3[/DB]` | Redlock over independent Redis masters | `redis` |
/// | `mysql://USER:PASS@HOST:PORT/DB`, `mariadb://...` | MySQL or MariaDB | `mysql` |
/// | `postgres://USER:PASS@HOST:PORT/DB`, `postgresql://...` | PostgreSQL (waiters woken by `LISTEN`/`NOTIFY`) | `postgres` |
/// | `memcache://HOST:PORT[,HOST:PORT...]`, `memcached://...` | memcached | `memcached` |
/// | `zk://HOST:PORT[,HOST:PORT...][/CHROOT][?session_timeout=10s]`, `zookeeper://...` | ZooKeeper | `zookeeper` |
/// | `etcd://[USER:PASS@]HOST:PORT[,HOST:PORT...][/ROOT][?lease_ttl=10s&operation_timeout=5s]`, `etcds://...[?ca=FILE]` | etcd 3.4+ | `etcd` (`etcd-tls` for `etcds`) |
///
/// A scheme whose feature is not compiled in is an [`Error::InvalidConfig`] naming the
/// feature to enable; so is a malformed URL. Nothing here panics.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock::Result<()> {
/// let client = distlock::connect("memory://doc").await?;
/// let guard = client.acquire("job").await?;
/// assert!(distlock::connect("memory://doc").await?.try_acquire("job").await?.is_none());
/// guard.release().await?;
/// assert!(distlock::connect("nosuch://x").await.is_err());
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::InvalidConfig`] for a malformed URL or a scheme that is unknown or not compiled
/// in; the backend's own errors (for example [`Error::Unavailable`]) when it cannot connect.
pub async fn connect(url: &str) -> Result<LockClient> {
    Ok(LockClient::from_arc(open(url).await?))
}

/// Builds a [`LockClient`] from a URL (or `DISTLOCK_URL`), with default acquire options.
///
/// ```
/// use distlock::{AcquireOptions, ClientBuilder};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock::Result<()> {
/// let client = ClientBuilder::new("memory://builder")
///     .defaults(AcquireOptions::new().ttl(Duration::from_secs(10)).wait_for(Duration::from_secs(1)))
///     .connect()
///     .await?;
/// assert_eq!(client.defaults().ttl_value(), Duration::from_secs(10));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    url: String,
    defaults: AcquireOptions,
}

impl ClientBuilder {
    /// A builder for the store at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            defaults: AcquireOptions::new(),
        }
    }

    /// A builder for the store named by `DISTLOCK_URL`, or the embedded default.
    pub fn from_env() -> Self {
        Self::new(url_from_env())
    }

    /// The options [`LockClient::acquire`] and [`LockClient::try_acquire`] use.
    pub fn defaults(mut self, defaults: AcquireOptions) -> Self {
        self.defaults = defaults;
        self
    }

    /// Opens the store.
    ///
    /// # Errors
    /// As [`connect`].
    pub async fn connect(self) -> Result<LockClient> {
        Ok(LockClient::from_arc(open(&self.url).await?).with_defaults(self.defaults))
    }
}

/// Opens the store named by `DISTLOCK_URL`, or the embedded default store if it is unset.
///
/// # Errors
/// As [`connect`].
pub async fn connect_from_env() -> Result<LockClient> {
    connect(&url_from_env()).await
}

/// The URL [`connect_from_env`] uses: `DISTLOCK_URL` if set and not empty, else
/// [`default_url`].
pub fn url_from_env() -> String {
    match std::env::var(URL_ENV) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => default_url(),
    }
}

/// The embedded default store's URL: a SQLite file in a per-user location
/// (`$XDG_STATE_HOME/distlock/locks.db`, else `~/.local/state/distlock/locks.db`), which
/// locks between the processes of one machine with no server. Without the `sqlite` feature,
/// an in-process memory store.
pub fn default_url() -> String {
    #[cfg(feature = "sqlite")]
    {
        format!(
            "sqlite://{}",
            distlock_sql::SqlConfig::default_sqlite_path().display()
        )
    }
    #[cfg(not(feature = "sqlite"))]
    {
        "memory://default".to_owned()
    }
}

/// Opens the backend `url` names, as a shared trait object (see [`connect`]).
///
/// # Errors
/// As [`connect`].
pub async fn open(url: &str) -> Result<Arc<dyn DistributedLock>> {
    let url = url.trim();
    let scheme = scheme(url)?;
    match scheme.as_str() {
        "memory" => Ok(Arc::new(memory_store(url))),
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "redis+unix" | "valkey" | "valkeys" | "redis+cluster" | "rediss+cluster"
        | "redis+sentinel" | "rediss+sentinel" => {
            Ok(Arc::new(distlock_redis::RedisLock::connect(url).await?))
        }
        #[cfg(feature = "redis")]
        "redlock" | "redlocks" => Ok(Arc::new(
            distlock_redis::RedlockConfig::from_url(url)?.build().await?,
        )),
        #[cfg(feature = "memcached")]
        "memcache" | "memcached" => Ok(Arc::new(distlock_memcached::MemcachedLock::connect(url).await?)),
        #[cfg(feature = "sqlite")]
        "sqlite" => Ok(Arc::new(distlock_sql::SqlLock::connect(url).await?)),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => Ok(Arc::new(distlock_sql::SqlLock::connect(url).await?)),
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Ok(Arc::new(distlock_sql::SqlLock::connect(url).await?)),
        #[cfg(feature = "zookeeper")]
        "zk" | "zookeeper" => Ok(Arc::new(
            distlock_zookeeper::ZooKeeperLock::connect_url(url).await?,
        )),
        #[cfg(feature = "etcd")]
        "etcd" | "etcds" => Ok(Arc::new(distlock_etcd::EtcdLock::connect_url(url).await?)),
        other => Err(unknown_scheme(other)),
    }
}

/// The URL's scheme, lowercased.
pub(crate) fn scheme(url: &str) -> Result<String> {
    let Some((scheme, _rest)) = url.split_once(':') else {
        return Err(Error::invalid_config(format!(
            "{url:?} is not a lock store URL (expected SCHEME://..., for example redis://127.0.0.1:6379)"
        )));
    };
    let valid = scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !valid {
        return Err(Error::invalid_config(format!("{url:?} has no valid URL scheme")));
    }
    Ok(scheme.to_ascii_lowercase())
}

/// Schemes that exist but whose backend is not compiled into this build, with the feature.
const FEATURES: &[(&str, &str)] = &[
    ("redis", "redis"),
    ("rediss", "redis"),
    ("redis+unix", "redis"),
    ("redis+cluster", "redis"),
    ("rediss+cluster", "redis"),
    ("redis+sentinel", "redis"),
    ("rediss+sentinel", "redis"),
    ("valkey", "redis"),
    ("valkeys", "redis"),
    ("redlock", "redis"),
    ("redlocks", "redis"),
    ("mysql", "mysql"),
    ("mariadb", "mysql"),
    ("postgres", "postgres"),
    ("postgresql", "postgres"),
    ("sqlite", "sqlite"),
    ("zk", "zookeeper"),
    ("zookeeper", "zookeeper"),
    ("memcache", "memcached"),
    ("memcached", "memcached"),
    ("etcd", "etcd"),
    ("etcds", "etcd-tls"),
];

pub(crate) fn unknown_scheme(scheme: &str) -> Error {
    match FEATURES.iter().find(|(s, _)| *s == scheme) {
        Some((_, feature)) => Error::invalid_config(format!(
            "the {scheme}:// store is not compiled in: enable distlock's `{feature}` feature"
        )),
        None => Error::invalid_config(format!(
            "unknown lock store scheme {scheme:?} (known: memory, {})",
            FEATURES.iter().map(|(s, _)| *s).collect::<Vec<_>>().join(", ")
        )),
    }
}

/// The process-wide memory store named by a `memory://NAME` URL.
fn memory_store(url: &str) -> MemoryLock {
    static STORES: OnceLock<Mutex<HashMap<String, MemoryLock>>> = OnceLock::new();
    let name = url.split_once("://").map_or("", |(_, rest)| rest).to_owned();
    let mut stores = STORES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    stores.entry(name).or_default().clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_are_typed_errors() {
        for url in ["", "redis", "://x", "1abc://x", "na me://x", "🔒://x"] {
            assert!(matches!(scheme(url), Err(Error::InvalidConfig { .. })), "{url:?}");
        }
        assert_eq!(scheme("ReDiS://h").ok().as_deref(), Some("redis"));
    }

    #[test]
    fn unknown_and_disabled_schemes_say_what_to_do() {
        let err = unknown_scheme("nosuch").to_string();
        assert!(err.contains("unknown lock store scheme"), "{err}");
        let err = unknown_scheme("zk").to_string();
        assert!(err.contains("`zookeeper` feature"), "{err}");
        let err = unknown_scheme("redis+cluster").to_string();
        assert!(err.contains("`redis` feature"), "{err}");
        let err = unknown_scheme("redis+sentinel").to_string();
        assert!(err.contains("`redis` feature"), "{err}");
        let err = unknown_scheme("etcd").to_string();
        assert!(err.contains("`etcd` feature"), "{err}");
        let err = unknown_scheme("etcds").to_string();
        assert!(err.contains("`etcd-tls` feature"), "{err}");
        assert_eq!(
            scheme("redis+cluster://a:1,b:2").ok().as_deref(),
            Some("redis+cluster")
        );
    }
}

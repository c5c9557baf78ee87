//! `distlock doctor`: judging the configuration of the store a URL names, by scheme, as
//! [`open`](crate::open) connects to it. Reads only; it may not take or touch a lock.

use distlock_core::{Finding, Result, Verdict};

use crate::connect::{scheme, unknown_scheme};

/// Connects to the store `url` names (the schemes of [`connect`](crate::connect)) and judges
/// the settings its locks rely on: one [`Finding`] per setting (per server where there are
/// several), [`Verdict::Unsafe`] where locks can be freed while held or granted twice.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock::Result<()> {
/// use distlock::Verdict;
///
/// let findings = distlock::doctor("memory://doc").await?;
/// assert_eq!(Verdict::worst(&findings), Verdict::Warn, "one process only");
/// # Ok(()) }
/// ```
///
/// # Errors
/// As [`connect`](crate::connect): [`Error::InvalidConfig`](crate::Error::InvalidConfig) for
/// a malformed URL or a scheme not compiled in, the backend's errors (for example
/// [`Error::Unavailable`](crate::Error::Unavailable)) when it cannot connect. A setting the
/// store will not show is a [`Verdict::Warn`] finding, not an error.
pub async fn doctor(url: &str) -> Result<Vec<Finding>> {
    let url = url.trim();
    let scheme = scheme(url)?;
    match scheme.as_str() {
        "memory" => Ok(vec![Finding::new("store", Verdict::Warn, "memory://")
            .because("the memory store lives in one process: it excludes nothing between processes or hosts")
            .fix(
                "use a shared store (sqlite:// on one host, a server store across hosts)",
            )]),
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "redis+unix" | "valkey" | "valkeys" | "redis+cluster" | "rediss+cluster" => {
            distlock_redis::doctor(&distlock_redis::RedisConfig::from_url(url)?).await
        }
        #[cfg(feature = "redis")]
        "redlock" | "redlocks" => {
            distlock_redis::doctor_redlock(&distlock_redis::RedlockConfig::from_url(url)?).await
        }
        #[cfg(feature = "sqlite")]
        "sqlite" => distlock_sql::doctor(&distlock_sql::SqlConfig::from_url(url)?).await,
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => distlock_sql::doctor(&distlock_sql::SqlConfig::from_url(url)?).await,
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => distlock_sql::doctor(&distlock_sql::SqlConfig::from_url(url)?).await,
        #[cfg(feature = "memcached")]
        "memcache" | "memcached" => {
            distlock_memcached::doctor(&distlock_memcached::MemcachedConfig::from_url(url)?).await
        }
        #[cfg(feature = "zookeeper")]
        "zk" | "zookeeper" => {
            distlock_zookeeper::doctor(&distlock_zookeeper::ZooKeeperConfig::from_url(url)?).await
        }
        other => Err(unknown_scheme(other)),
    }
}

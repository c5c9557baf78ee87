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
        #[cfg(feature = "etcd")]
        "etcd" | "etcds" => etcd(url).await,
        other => Err(unknown_scheme(other)),
    }
}

/// etcd: how many members the URL names, and the lease TTL the cluster granted against the
/// one asked for (the cluster raises a TTL below its minimum, so a killed holder keeps its
/// locks longer than configured). Connecting grants the client a lease, which holds no key
/// and expires after its TTL; nothing is written.
#[cfg(feature = "etcd")]
async fn etcd(url: &str) -> Result<Vec<Finding>> {
    let config = distlock_etcd::EtcdConfig::from_url(url)?;
    let endpoints = config.endpoints();
    let at = endpoints.join(",");
    let members = match endpoints.len() {
        1 => Finding::new("members", Verdict::Warn, "1 endpoint")
            .because("the client knows one member: while it is down every lock operation fails (and a cluster of one member frees every lock with a lost data directory)")
            .fix("run 3 or 5 members and list them all in the URL"),
        n => Finding::new("members", Verdict::Ok, format!("{n} endpoints"))
            .because("the client fails over to another listed member when one stops answering"),
    }
    .at(&at);
    let asked = config.lease_ttl();
    let lock = distlock_etcd::EtcdLock::connect(config).await?;
    let lease = match lock.granted_lease_ttl() {
        Some(granted) if granted > asked => Finding::new(
            "lease TTL",
            Verdict::Warn,
            format!(
                "granted {}s, asked {}s",
                granted.as_secs(),
                asked.as_secs() + u64::from(asked.subsec_nanos() > 0)
            ),
        )
        .because("the cluster raised the TTL to its minimum: a killed holder keeps its locks that long")
        .fix("ask for a lease_ttl of at least the granted TTL, or lower the members' --election-timeout"),
        Some(granted) => Finding::new(
            "lease TTL",
            Verdict::Ok,
            format!("granted {}s", granted.as_secs()),
        )
        .because("a killed or cut-off holder's locks go with its lease after this long"),
        None => Finding::new("lease TTL", Verdict::Warn, "no lease")
            .because("the cluster granted no lease")
            .fix("check that the members have a leader (etcdctl endpoint status)"),
    }
    .at(&at);
    Ok(vec![members, lease])
}

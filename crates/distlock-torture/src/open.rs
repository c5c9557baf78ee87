//! Opening a store by URL: `distlock::open` for every store the umbrella crate knows, and
//! etcd (`etcd://`, `etcds://`) through `distlock-etcd` directly, which the umbrella does not
//! offer yet.

use std::sync::Arc;

use distlock::{DistributedLock, LockClient, Result};

/// The backend for `url`.
pub async fn open(url: &str) -> Result<Arc<dyn DistributedLock>> {
    let scheme = url
        .trim()
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("etcd" | "etcds") => Ok(Arc::new(distlock_etcd::EtcdLock::connect_url(url).await?)),
        _ => distlock::open(url).await,
    }
}

/// A client of the store at `url`.
pub async fn connect(url: &str) -> Result<LockClient> {
    Ok(LockClient::from_arc(open(url).await?))
}

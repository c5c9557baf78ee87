//! A server started with `-C` (CAS disabled) answers every CAS with 0, so no lock could ever
//! be released or renewed: the client must refuse such a server when it connects.

use crate::support;

use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, Error, LockName, OwnerToken};
use distlock_testkit::MemcachedOptions;

#[tokio::test]
async fn a_server_without_cas_is_refused_at_connect() {
    let server = support::start_server(MemcachedOptions {
        extra_args: vec!["-C".to_owned()],
        ..MemcachedOptions::default()
    })
    .await;
    let lock = support::lock(&server.url());
    let name = LockName::new("no-cas").expect("valid");
    let outcome = lock
        .try_acquire(&name, OwnerToken::new(), Duration::from_secs(5))
        .await;
    assert!(
        matches!(outcome, Err(Error::InvalidConfig { .. })),
        "expected InvalidConfig from a -C server, got {outcome:?}"
    );
    let pinged = lock.ping().await;
    assert!(
        matches!(pinged, Err(Error::InvalidConfig { .. })),
        "expected InvalidConfig from ping, got {pinged:?}"
    );
    drop(server);
}

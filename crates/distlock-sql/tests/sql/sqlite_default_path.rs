//! The embedded default's location: `$XDG_STATE_HOME/distlock/locks.db`. Alone in its test
//! binary because it sets an environment variable.
#![cfg(feature = "sqlite")]

use std::time::Duration;

use distlock_core::{DistributedLockExt, LockName, OwnerToken, TryAcquire};
use distlock_sql::{SqlConfig, SqlLock};

#[test]
fn default_path_follows_xdg_state_home() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // The only test in this binary, and no other thread runs yet.
    std::env::set_var("XDG_STATE_HOME", dir.path());
    let expected = dir.path().join("distlock").join("locks.db");
    assert_eq!(SqlConfig::default_sqlite_path(), expected);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let lock = SqlLock::embedded_default().await.expect("opens");
        assert_eq!(lock.config().sqlite_path(), Some(expected.as_path()));
        let name = LockName::new("main-job").expect("valid");
        let attempt = lock
            .try_acquire(&name, OwnerToken::new(), Duration::from_secs(1))
            .await;
        assert!(matches!(attempt, Ok(TryAcquire::Acquired(_))), "{attempt:?}");
    });
    assert!(expected.exists());
}

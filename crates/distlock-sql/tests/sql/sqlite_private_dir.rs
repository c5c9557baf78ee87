//! The embedded default without `XDG_STATE_HOME` and `HOME`: a per-user directory
//! `distlock-<uid>` in the temp dir, created with mode 0700; a directory of that name that is
//! open to others or owned by another user (created first by someone else) is refused. Alone
//! in its test binary because it changes the environment; the temp dir is a private one
//! (`TMPDIR`), not the machine's `/tmp`.
#![cfg(all(feature = "sqlite", unix))]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

use distlock_core::{DistributedLockExt, Error, LockName, OwnerToken, TryAcquire};
use distlock_sql::{SqlConfig, SqlLock};

#[test]
fn the_per_user_temp_directory_is_private() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    // The only test in this binary, and no other thread runs yet.
    std::env::set_var("TMPDIR", tmp.path());
    std::env::remove_var("XDG_STATE_HOME");
    std::env::remove_var("HOME");
    let uid = std::fs::metadata("/proc/self").expect("procfs").uid();
    let dir = tmp.path().join(format!("distlock-{uid}"));
    assert_eq!(SqlConfig::default_sqlite_path(), dir.join("locks.db"));

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let open = || runtime.block_on(SqlLock::embedded_default());

    // Created fresh: 0700, and it works.
    let lock = open().expect("opens");
    let mode = std::fs::metadata(&dir).expect("created").mode() & 0o777;
    assert_eq!(mode, 0o700, "mode {mode:o}");
    let name = LockName::new("main-job").expect("valid");
    let attempt = runtime.block_on(lock.try_acquire(&name, OwnerToken::new(), Duration::from_secs(1)));
    assert!(matches!(attempt, Ok(TryAcquire::Acquired(_))), "{attempt:?}");
    runtime.block_on(lock.close());

    // Open to others: refused.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let refused = open();
    assert!(matches!(refused, Err(Error::InvalidConfig { .. })), "{refused:?}");

    // Another user's (created first by someone else): refused, whatever its mode.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    assert!(open().is_ok(), "0700 and ours again");
    if uid == 0 {
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).expect("chown as root");
        let refused = open();
        assert!(matches!(refused, Err(Error::InvalidConfig { .. })), "{refused:?}");
    } else {
        eprintln!("not root: the foreign-owner case needs chown and runs only as root");
    }

    // A symlink planted in its place: refused.
    std::fs::remove_dir_all(&dir).expect("removes it");
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    std::os::unix::fs::symlink(&elsewhere, &dir).expect("symlink");
    let refused = open();
    assert!(matches!(refused, Err(Error::InvalidConfig { .. })), "{refused:?}");
}

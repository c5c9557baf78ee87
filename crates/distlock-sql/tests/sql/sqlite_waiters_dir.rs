//! A SQLite release never deletes anything but a waiter's socket: not a regular file in a
//! lock's waiters directory, and nothing reached through a symlink planted in place of that
//! directory (by another user who can write the database's directory). Waiters bind their
//! sockets only in a directory that is really theirs (not a symlink, this user's, mode 0700).
#![cfg(all(feature = "sqlite", unix))]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use distlock_core::{AcquireOptions, LockClient};
use distlock_sql::SqlConfig;
use sha2::{Digest, Sha256};

/// The waiters directory of the lock `key` (a name that needs no escaping) beside `db`.
fn lock_dir(db: &Path, key: &str) -> PathBuf {
    let hex: String = Sha256::digest(key.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut root = db.as_os_str().to_owned();
    root.push(".waiters");
    PathBuf::from(root).join(hex)
}

/// A user's file, writable by its owner (a send to it is refused like one to a dead socket).
fn users_file(path: &Path) {
    std::fs::write(path, "a user's data").expect("writes the file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

async fn acquire_and_release(db: &Path, name: &str) {
    let client = LockClient::new(SqlConfig::sqlite(db).build().await.expect("opens the file"));
    let guard = client
        .acquire_with(name, &AcquireOptions::new().ttl(Duration::from_secs(30)))
        .await
        .expect("acquires");
    assert!(guard.release().await.expect("releases"));
}

#[tokio::test]
async fn a_release_deletes_no_regular_file_through_a_planted_symlink() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let victim = tmp.path().join("victim");
    std::fs::create_dir(&victim).expect("mkdir");
    let precious = victim.join("00000000000000000000-thesis.tex");
    users_file(&precious);
    let db = tmp.path().join("shared").join("locks.db");
    let dir = lock_dir(&db, "nightly-report");
    std::fs::create_dir_all(dir.parent().expect("the waiters root")).expect("mkdir");
    std::os::unix::fs::symlink(&victim, &dir).expect("plants the symlink");

    acquire_and_release(&db, "nightly-report").await;

    assert!(
        precious.exists(),
        "the release deleted {} through the symlink {}",
        precious.display(),
        dir.display()
    );
}

#[tokio::test]
async fn a_release_deletes_no_regular_file_in_a_waiters_directory() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let db = tmp.path().join("locks.db");
    let dir = lock_dir(&db, "nightly-report");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let file = dir.join("00000000000000000000-notes.txt");
    users_file(&file);

    acquire_and_release(&db, "nightly-report").await;

    assert!(
        file.exists(),
        "the release deleted the regular file {}",
        file.display()
    );
}

#[tokio::test]
async fn a_waiter_binds_no_socket_through_a_planted_symlink() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let db = tmp.path().join("locks.db");
    let mut root = db.as_os_str().to_owned();
    root.push(".waiters");
    std::os::unix::fs::symlink(&elsewhere, PathBuf::from(root)).expect("plants the symlink");

    let client = LockClient::new(SqlConfig::sqlite(&db).build().await.expect("opens the file"));
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    let held = client
        .acquire_with("nightly-report", &opts)
        .await
        .expect("acquires");
    let wait = opts.clone().wait_for(Duration::from_millis(400));
    let waiting = client.acquire_with("nightly-report", &wait);
    let (waited, left) = tokio::join!(waiting, async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        std::fs::read_dir(&elsewhere)
            .expect("reads")
            .map(|e| e.expect("entry").path())
            .collect::<Vec<_>>()
    });
    assert!(waited.is_err(), "the lock stays held: {waited:?}");
    assert!(held.release().await.expect("releases"));
    assert!(
        left.is_empty(),
        "a waiter bound its socket through the symlink: {left:?}"
    );
}

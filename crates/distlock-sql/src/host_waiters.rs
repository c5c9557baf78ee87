//! [`HostWaiters`]: a release of a SQLite lock wakes one waiter on this host at once, in this
//! process or another, instead of at its next poll.
//!
//! SQLite locks only exclude processes of one host (see [`fs`](crate::fs)), so every waiter
//! can be reached through the file system: each waiter binds a Unix datagram socket in a
//! directory beside the database file, one directory per lock
//! (`<database>.waiters/<16 hex digits of the lock key's SHA-256>/`, removed with its last
//! waiter), named so that names sort by age (`<ns since the epoch>-<pid>-<random>`). A release sends one datagram to the oldest
//! socket whose owner still listens; the socket files of waiters that died are removed on the
//! way (a send to them is refused). A waiter woken that goes away without winning passes the
//! wake on. Waiters keep polling: this only shortens their sleep. Where a socket cannot be
//! bound (a directory of another user, a path too long for a socket's address outside Linux), waiters just
//! poll, and the first failure of a client is logged as a warning. A directory whose path is
//! too long for a socket's address is reached through a handle of it on Linux (see
//! [`SocketDir`]).
//!
//! The database's directory may be writable by other users, so both directories are used only
//! if they are this user's own (real directories, not symlinks, mode 0700), and a release
//! removes nothing but sockets: a send to a writable regular file is refused just as one to a
//! dead waiter's socket.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixDatagram as StdDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use distlock_core::{Primitive, ReleaseWatch};
use sha2::{Digest, Sha256};
use tokio::net::UnixDatagram;
use tokio::sync::watch;

use crate::fs::{check_private_dir, create_private_dir};
use crate::socket_addr::SocketDir;

/// The longest name of a waiter's socket: `<20 digits>-<pid, up to 10>-<8 hex digits>`.
const NAME_MAX: usize = 40;

/// The waiters of one SQLite database on this host.
#[derive(Debug)]
pub(crate) struct HostWaiters {
    root: PathBuf,
    /// This process's waiters by id, with whether each won its lock.
    waiters: Arc<Mutex<HashMap<Arc<str>, Arc<Flags>>>>,
    /// Whether a failure to bind was logged already.
    warned: AtomicBool,
}

#[derive(Debug, Default)]
struct Flags {
    woken: AtomicBool,
    won: AtomicBool,
}

impl HostWaiters {
    /// The waiters of the database at `database`.
    pub(crate) fn new(database: &Path) -> Self {
        let mut root = database.as_os_str().to_owned();
        root.push(".waiters");
        Self {
            root: PathBuf::from(root),
            waiters: Arc::default(),
            warned: AtomicBool::new(false),
        }
    }

    fn dir(&self, key: &str) -> PathBuf {
        let digest = Sha256::digest(key.as_bytes());
        let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        self.root.join(hex)
    }

    /// A waiter's watch of the lock `key`, woken by releases on this host; `None` if no socket
    /// could be bound (the waiter then only polls). Must run inside a tokio runtime.
    pub(crate) fn watch(&self, key: &str) -> Option<ReleaseWatch> {
        let dir = self.dir(key);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let id: Arc<str> = format!("{nanos:020}-{}-{:08x}", std::process::id(), rand::random::<u32>()).into();
        let path = dir.join(&*id);
        let socket = match bind(&dir, &id) {
            Ok(socket) => socket,
            Err(error) => {
                // Said once per client: its waiters all fall back to polling alike.
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(path = %path.display(), %error, "distlock-sql: cannot bind a waiter socket; SQLite waiters of this client poll instead of being woken by releases");
                }
                return None;
            }
        };
        let flags = Arc::new(Flags::default());
        self.waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), flags.clone());
        let (tx, rx) = watch::channel(0u64);
        let listener = {
            let flags = flags.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 16];
                while socket.recv(&mut buf).await.is_ok() {
                    flags.woken.store(true, Ordering::SeqCst);
                    tx.send_modify(|n| *n = n.wrapping_add(1));
                }
            })
        };
        let leave = Leave {
            path,
            dir,
            id: id.clone(),
            flags,
            waiters: self.waiters.clone(),
            listener,
        };
        Some(ReleaseWatch::for_waiter(rx, leave, id).polling_too())
    }

    /// The waiter `id` of this process won its lock: it passes no wake on when it goes.
    pub(crate) fn won(&self, id: &str) {
        if let Some(flags) = self
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
        {
            flags.won.store(true, Ordering::SeqCst);
            flags.woken.store(false, Ordering::SeqCst);
        }
    }

    /// The lock `key` was released: wakes the oldest waiter on this host that still listens.
    pub(crate) fn released(&self, key: &str) {
        wake_oldest(&self.dir(key));
    }

    /// A hold of the semaphore or read-write lock `object` (its primitive's name, a space and its key) ended: a
    /// semaphore's frees one permit and wakes the oldest waiter, as a mutex's release; a
    /// read-write lock's (or a waiting writer's withdrawal) may let several readers in at
    /// once, so it wakes every waiter on this host.
    pub(crate) fn released_hold(&self, primitive: Primitive, object: &str) {
        match primitive {
            Primitive::RwLock => wake_all(&self.dir(object)),
            _ => wake_oldest(&self.dir(object)),
        }
    }
}

/// Sends one datagram to the oldest live socket in `dir`, removing the sockets of dead ones.
fn wake_oldest(dir: &Path) {
    wake(dir, false);
}

/// Sends one datagram to every live socket in `dir`, removing the sockets of dead ones.
fn wake_all(dir: &Path) {
    wake(dir, true);
}

/// Sends one datagram to the oldest live socket in `dir`, or to every one if `all`.
///
/// Only a directory that is this user's own (`dir` and the waiters root above it: real
/// directories, not symlinks, mode 0700) is read, and only sockets in it are sent to or
/// removed: a send to a writable regular file is refused just like one to a dead socket, and
/// whoever can write the database's directory could otherwise plant a symlink to someone's
/// files in place of a waiters directory.
fn wake(dir: &Path, all: bool) {
    let private = |d: &Path| check_private_dir(d).ok();
    let (Some(_), Some(checked)) = (dir.parent().and_then(private), private(dir)) else {
        return; // no one waits, or not a directory of ours
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    // The entry's own type: a symlink is not followed.
    let mut names: Vec<_> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .map(|e| e.file_name())
        .collect();
    if names.is_empty() {
        return;
    }
    names.sort();
    let Ok(sender) = StdDatagram::unbound() else {
        return;
    };
    let _ = sender.set_nonblocking(true);
    let Ok(addresses) = SocketDir::new(dir, NAME_MAX, &checked) else {
        return;
    };
    for name in names {
        let path = dir.join(&name);
        match sender.send_to(b"released", addresses.addr(&name)) {
            Ok(_) if !all => return,
            Ok(_) => {}
            // Nobody listens: its waiter died without cleaning up. Removed only if it is still
            // a socket (not replaced meanwhile).
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
                    let _ = std::fs::remove_file(&path);
                }
            }
            // Gone meanwhile, or not ours to reach (another user's), or its buffer is full:
            // try the next one.
            Err(_) => {}
        }
    }
}

/// Binds the socket `name` in `dir`, creating `dir` and the waiters root above it if missing
/// (again, if the last waiter of another process removed it in between); refuses a `dir` or
/// root that is not this user's private directory (see [`create_private_dir`]). A path too
/// long for a socket's address is reached through a handle of `dir` (see [`SocketDir`]).
fn bind(dir: &Path, name: &str) -> std::io::Result<UnixDatagram> {
    let private = |d: &Path| {
        create_private_dir(d)
            .map_err(|why| std::io::Error::new(ErrorKind::PermissionDenied, format!("{} {why}", d.display())))
    };
    let mut tries = 0;
    loop {
        if let Some(root) = dir.parent() {
            private(root)?;
        }
        let checked = private(dir)?;
        let addresses = SocketDir::new(dir, NAME_MAX, &checked)?;
        match UnixDatagram::bind(addresses.addr(name)) {
            Err(e) if e.kind() == ErrorKind::NotFound && tries < 3 => tries += 1,
            bound => return bound,
        }
    }
}

/// Held by a waiter's watch: stops listening and removes the socket; a waiter that was woken
/// and did not win wakes the next one in its place.
struct Leave {
    path: PathBuf,
    dir: PathBuf,
    id: Arc<str>,
    flags: Arc<Flags>,
    waiters: Arc<Mutex<HashMap<Arc<str>, Arc<Flags>>>>,
    listener: tokio::task::JoinHandle<()>,
}

impl Drop for Leave {
    fn drop(&mut self) {
        self.listener.abort();
        let _ = std::fs::remove_file(&self.path);
        // The lock's directory goes with its last waiter (this fails while others wait), so
        // ever new lock names leave nothing behind.
        let _ = std::fs::remove_dir(&self.dir);
        self.waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
        if self.flags.woken.load(Ordering::SeqCst) && !self.flags.won.load(Ordering::SeqCst) {
            wake_oldest(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::Woke;
    use std::time::Duration;

    #[tokio::test]
    async fn a_release_wakes_the_oldest_waiter_only_and_dead_sockets_go() {
        let dir = tempfile::tempdir().expect("temp dir");
        let waiters = HostWaiters::new(&dir.path().join("locks.db"));
        // A socket file nobody listens on, older than everyone: a waiter that died.
        let lock_dir = waiters.dir("k");
        create_private_dir(&waiters.root).expect("root");
        create_private_dir(&lock_dir).expect("dir");
        let dead = lock_dir.join("00000000000000000000-1-00000000");
        drop(StdDatagram::bind(&dead).expect("bind"));
        let mut first = waiters.watch("k").expect("bound");
        tokio::time::sleep(Duration::from_millis(2)).await;
        let mut second = waiters.watch("k").expect("bound");
        assert!(!first.is_notified(), "waiters keep polling");
        waiters.released("k");
        assert_eq!(first.wait(Duration::from_secs(2)).await, Woke::Released);
        assert_eq!(second.wait(Duration::from_millis(100)).await, Woke::TimedOut);
        assert!(!dead.exists(), "the dead waiter's socket was removed");
        // The first goes without winning: the wake passes on.
        drop(first);
        assert_eq!(second.wait(Duration::from_secs(2)).await, Woke::Released);
        let id = second.waiter().expect("id").clone();
        waiters.won(&id);
        drop(second);
        assert!(!lock_dir.exists(), "the last waiter removes the lock's directory");
    }
}

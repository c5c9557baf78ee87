//! Where each lock lives in etcd's key space and how its contenders' keys are named. Pure
//! functions; no requests.
//!
//! ```text
//! <root>/<encoded name>/                       the mutex's prefix: etcd's concurrency.Mutex
//!                                              (and `etcdctl lock`) on the same prefix
//!     <lease id, hex>-<owner token>            one key per contender, attached to its lease;
//!                                              value = the owner token
//! <root>/semaphore:<encoded name>/locks/<lease id, hex>-<owner token>
//!                                              who may add a lease next (a mutex's queue)
//! <root>/semaphore:<encoded name>/leases/<lease id, hex>-<owner token>
//!                                              one per hold (of one permit or several)
//!                                              held or asked for; value = `permits=<count>`
//!                                              (`;weight=<n>` after it for n permits; see
//!                                              `semaphore.rs`)
//! <root>/rw-lock:<encoded name>/read/<lease id, hex>-<owner token>
//! <root>/rw-lock:<encoded name>/write/<lease id, hex>-<owner token>
//! <root>/rw-lock:<encoded name>/x-upgradeable/<lease id, hex>-<owner token>
//!                                              a reader, a writer or an upgradeable reader
//!                                              in the one queue; value = the owner token
//!                                              (see `rw_lock.rs`, `upgrade.rs`)
//! ```
//!
//! etcd's `concurrency.Mutex` names its key `<prefix><lease id in hex>` and orders every key
//! under the prefix by create revision, whatever its name; it never parses names. So a
//! contender of ours and one of etcd's on the same prefix queue in one order. Our key adds
//! the owner token after the lease id: several owners of one client (one lease) contend for
//! one name as separate keys, and the owner token alone finds a key again after an
//! ambiguous create. The encoded name keeps `[A-Za-z0-9._~-]` and percent-encodes every other
//! byte, so it contains neither `/` (one name's prefix never holds another's keys: the names
//! `a` and `a/b` are `<root>/a/` and `<root>/a%2Fb/`) nor `:` (the primitives stay apart).

use distlock_core::{LockName, OwnerToken, Primitive};

/// The key prefix of the `primitive` object `name`: the mutex's at `<root>/<encoded name>/`,
/// the others' at `<root>/<primitive>:<encoded name>/`.
pub(crate) fn object_prefix(root: &str, primitive: Primitive, name: &LockName) -> String {
    match primitive {
        Primitive::Mutex => format!("{root}/{}/", encoded(name)),
        other => format!("{root}/{}:{}/", other.as_str(), encoded(name)),
    }
}

/// The key of `owner`'s contender under `prefix`, attached to the lease `lease`.
pub(crate) fn contender_key(prefix: &str, lease: i64, owner: OwnerToken) -> String {
    format!("{prefix}{lease:x}-{owner}")
}

/// The `locks` queue of the semaphore at `prefix`: who may add a lease next.
pub(crate) fn semaphore_locks(prefix: &str) -> String {
    format!("{prefix}locks/")
}

/// The `leases` of the semaphore at `prefix`: one key per permit held or asked for.
pub(crate) fn semaphore_leases(prefix: &str) -> String {
    format!("{prefix}leases/")
}

/// The readers of the read-write lock at `prefix` (etcd's `recipe.RWMutex` creates its
/// readers under `<prefix>read/` too).
pub(crate) fn rw_reads(prefix: &str) -> String {
    format!("{prefix}read/")
}

/// The writers of the read-write lock at `prefix` (as etcd's `recipe.RWMutex`).
pub(crate) fn rw_writes(prefix: &str) -> String {
    format!("{prefix}write/")
}

/// The upgradeable readers of the read-write lock at `prefix`: named to sort just after the
/// writers (`x` after `write0`, the end of `write/`), so the writers and upgradeable readers
/// are one range (what keeps an upgradeable reader out) and the readers and writers another
/// (what an upgrade waits on).
pub(crate) fn rw_upgradeables(prefix: &str) -> String {
    format!("{prefix}x-upgradeable/")
}

/// The upgradeable read key that goes with the write key `write` (the same contender name
/// under [`rw_upgradeables`]): the anchor an upgraded hold keeps beside its write key.
pub(crate) fn upgradeable_of_write(write: &str) -> Option<String> {
    let (writes, leaf) = write.rsplit_once('/')?;
    let prefix = writes.strip_suffix("write")?;
    Some(format!("{}{leaf}", rw_upgradeables(prefix)))
}

/// The write key that goes with the upgradeable read key `read` (the other way round from
/// [`upgradeable_of_write`]).
pub(crate) fn write_of_upgradeable(read: &str) -> Option<String> {
    let (reads, leaf) = read.rsplit_once('/')?;
    let prefix = reads.strip_suffix("x-upgradeable")?;
    Some(format!("{}{leaf}", rw_writes(prefix)))
}

/// A range of keys: from `start` up to (not including) `end`.
#[derive(Debug, Clone)]
pub(crate) struct KeyRange {
    pub(crate) start: String,
    pub(crate) end: Vec<u8>,
}

impl KeyRange {
    /// Every key that starts with `prefix`.
    pub(crate) fn prefix(prefix: &str) -> Self {
        Self {
            start: prefix.to_owned(),
            end: prefix_end(prefix.as_bytes()),
        }
    }

    /// From the first key under `first` to the last under `last`.
    pub(crate) fn spanning(first: &str, last: &str) -> Self {
        Self {
            start: first.to_owned(),
            end: prefix_end(last.as_bytes()),
        }
    }

    /// Whether `key` is in the range.
    #[cfg(test)]
    pub(crate) fn holds(&self, key: &[u8]) -> bool {
        key >= self.start.as_bytes() && key < self.end.as_slice()
    }
}

/// The owner token in a contender key of ours (what follows the lease id), if `key` is one.
pub(crate) fn owner_in(key: &[u8]) -> Option<String> {
    let key = std::str::from_utf8(key).ok()?;
    let last = key.rsplit('/').next()?;
    let (lease, owner) = last.split_once('-')?;
    (!lease.is_empty() && lease.bytes().all(|b| b.is_ascii_hexdigit()) && !owner.is_empty())
        .then(|| owner.to_owned())
}

/// Whether `key` (under some prefix) is `owner`'s contender, of any lease.
pub(crate) fn is_owners(key: &[u8], owner: OwnerToken) -> bool {
    let suffix = format!("-{owner}");
    key.ends_with(suffix.as_bytes())
}

/// The end of the range of every key that starts with `prefix` (etcd's "prefix + 1": the
/// last byte below 0xff incremented, what follows it dropped).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte is 0xff: the range runs to the end of the key space.
    vec![0]
}

fn encoded(name: &LockName) -> String {
    name.path_segment()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> LockName {
        LockName::new(text).expect("valid")
    }

    #[test]
    fn names_never_share_a_prefix() {
        let a = object_prefix("distlock", Primitive::Mutex, &name("a"));
        let ab = object_prefix("distlock", Primitive::Mutex, &name("a/b"));
        assert_eq!(a, "distlock/a/");
        assert_eq!(ab, "distlock/a%2Fb/");
        assert!(!ab.starts_with(&a));
        let semaphore = object_prefix("distlock", Primitive::Semaphore, &name("a"));
        assert!(!semaphore.starts_with(&a));
        assert_eq!(object_prefix("r", Primitive::Mutex, &name("..")), "r/%2E%2E/");
    }

    #[test]
    fn a_contender_key_carries_its_lease_and_owner() {
        let owner = OwnerToken::new();
        let key = contender_key("distlock/a/", 0x694d_7a3b, owner);
        assert_eq!(key, format!("distlock/a/694d7a3b-{owner}"));
        assert!(is_owners(key.as_bytes(), owner));
        assert!(!is_owners(key.as_bytes(), OwnerToken::new()));
        assert_eq!(owner_in(key.as_bytes()), Some(owner.to_string()));
        assert_eq!(owner_in(b"distlock/rw-lock:a/read/1700000000000"), None);
    }

    #[test]
    fn each_queue_of_a_primitive_has_its_own_prefix() {
        let semaphore = object_prefix("distlock", Primitive::Semaphore, &name("a"));
        assert_eq!(semaphore_locks(&semaphore), "distlock/semaphore:a/locks/");
        assert_eq!(semaphore_leases(&semaphore), "distlock/semaphore:a/leases/");
        let rw = object_prefix("distlock", Primitive::RwLock, &name("a"));
        assert_eq!(rw_reads(&rw), "distlock/rw-lock:a/read/");
        assert_eq!(rw_writes(&rw), "distlock/rw-lock:a/write/");
        assert_eq!(rw_upgradeables(&rw), "distlock/rw-lock:a/x-upgradeable/");
        assert_eq!(
            upgradeable_of_write("distlock/rw-lock:a/write/1f-o").as_deref(),
            Some("distlock/rw-lock:a/x-upgradeable/1f-o")
        );
        assert_eq!(
            write_of_upgradeable("distlock/rw-lock:a/x-upgradeable/1f-o").as_deref(),
            Some("distlock/rw-lock:a/write/1f-o")
        );
    }

    #[test]
    fn writers_and_upgradeable_readers_are_one_range_and_readers_and_writers_another() {
        let rw = object_prefix("distlock", Primitive::RwLock, &name("a"));
        let (reads, writes, ups) = (rw_reads(&rw), rw_writes(&rw), rw_upgradeables(&rw));
        let keep_out_upgradeable = KeyRange::spanning(&writes, &ups);
        let readers_and_writers = KeyRange::spanning(&reads, &writes);
        let key = |prefix: &str| format!("{prefix}1f-owner").into_bytes();
        assert!(keep_out_upgradeable.holds(&key(&writes)));
        assert!(keep_out_upgradeable.holds(&key(&ups)));
        assert!(!keep_out_upgradeable.holds(&key(&reads)));
        assert!(readers_and_writers.holds(&key(&reads)));
        assert!(readers_and_writers.holds(&key(&writes)));
        assert!(!readers_and_writers.holds(&key(&ups)));
    }

    #[test]
    fn prefix_ends_cover_exactly_the_prefix() {
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }
}

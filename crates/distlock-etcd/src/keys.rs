//! Where each lock lives in etcd's key space and how its contenders' keys are named. Pure
//! functions; no requests.
//!
//! ```text
//! <root>/<encoded name>/                       the mutex's prefix: etcd's concurrency.Mutex
//!                                              (and `etcdctl lock`) on the same prefix
//!     <lease id, hex>-<owner token>            one key per contender, attached to its lease;
//!                                              value = the owner token
//! <root>/semaphore:<encoded name>/...          the semaphore (see `semaphore.rs`)
//! <root>/rw-lock:<encoded name>/...            the read-write lock (see `rw_lock.rs`)
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

/// The longest encoded name segment.
const MAX_SEGMENT: usize = 240;

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
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~');
    let encoded = name.encode(MAX_SEGMENT, allowed);
    match &*encoded {
        "." => "%2E".to_owned(),
        ".." => "%2E%2E".to_owned(),
        other => other.to_owned(),
    }
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
    }

    #[test]
    fn prefix_ends_cover_exactly_the_prefix() {
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }
}

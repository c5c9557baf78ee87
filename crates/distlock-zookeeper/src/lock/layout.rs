//! Where each object lives in the tree and how its nodes are named: the paths of the three
//! primitives (apart for every name), and the protected-mode prefixes that carry the owner
//! token. Pure functions; no requests.
//!
//! ```text
//! <root>/<encoded name>                         the mutex (a Curator InterProcessMutex path)
//! <root>/semaphore:<encoded name>               the semaphore (a Curator InterProcessSemaphoreV2 path)
//!     locks/_c_<uuid>-lock-<seq>                its mutex: who may add a lease next
//!     leases/_c_<uuid>-lease-<seq>              its leases; data = "permits=<count>"
//! <root>/rw-lock:<encoded name>                 the read-write lock (a Curator InterProcessReadWriteLock path)
//!     _c_<uuid>-__READ__<seq>, _c_<uuid>-__WRIT__<seq>, _c_<uuid>-upgradeable-__READ__<seq>
//! ```
//!
//! The encoded name keeps `[A-Za-z0-9._~-]` and percent-encodes every other byte, so it never
//! contains `:`: a segment with a colon is never a mutex's, and the primitive's name before the
//! colon keeps the semaphore and the read-write lock of one name apart. Each map is injective
//! because [`LockName::encode`] is.

use distlock_core::{LockName, OwnerToken, Primitive};

/// The node name of a mutex contender (and of a semaphore's `locks` mutex), after the
/// protected prefix: Curator's `InterProcessMutex` name. The sequence follows it.
pub(super) const LOCK_NODE: &str = "lock-";
/// The node name of a semaphore lease: Curator's `InterProcessSemaphoreV2` name.
pub(super) const LEASE_NODE: &str = "lease-";
/// The node name of a reader: Curator's `InterProcessReadWriteLock` read-lock name.
pub(super) const READ_NODE: &str = "__READ__";
/// The node name of a writer: Curator's `InterProcessReadWriteLock` write-lock name.
pub(super) const WRITE_NODE: &str = "__WRIT__";
/// The node name of an upgradeable reader: ends in Curator's read-lock name, so Curator's
/// `InterProcessReadWriteLock` sorts it by its sequence and counts it as a reader.
pub(super) const UPGRADEABLE_NODE: &str = "upgradeable-__READ__";
/// The longest encoded name segment.
#[cfg(test)]
const MAX_SEGMENT: usize = 240;
/// The child of a semaphore's path that holds its mutex.
const SEMAPHORE_LOCKS: &str = "locks";
/// The child of a semaphore's path that holds its leases.
const SEMAPHORE_LEASES: &str = "leases";

/// `<root>/<encoded name>`: the mutex's parent.
pub(super) fn lock_path(root: &str, name: &LockName) -> String {
    format!("{root}/{}", encoded(name))
}

/// The path of the `primitive` object `name`: the mutex at `<root>/<encoded name>`, the
/// others at `<root>/<primitive>:<encoded name>`.
pub(super) fn object_path(root: &str, primitive: Primitive, name: &LockName) -> String {
    match primitive {
        Primitive::Mutex => lock_path(root, name),
        other => format!("{root}/{}:{}", other.as_str(), encoded(name)),
    }
}

/// The semaphore's mutex: `<semaphore path>/locks`.
pub(super) fn semaphore_locks(semaphore: &str) -> String {
    format!("{semaphore}/{SEMAPHORE_LOCKS}")
}

/// The semaphore's leases: `<semaphore path>/leases`.
pub(super) fn semaphore_leases(semaphore: &str) -> String {
    format!("{semaphore}/{SEMAPHORE_LEASES}")
}

/// The protected-mode prefix of `owner`'s node named `node`: `_c_<owner token>-<node>`. The
/// owner token is a UUID, so this is Curator's protected name, and anyone holding the owner
/// token can find the node (the core's cleanup after an ambiguous attempt carries no handle).
pub(super) fn protected_prefix(owner: OwnerToken, node: &str) -> String {
    format!("_c_{}-{node}", owner.as_uuid().hyphenated())
}

/// The owner token in a protected name (`_c_<uuid>-...`), if the name is one.
pub(super) fn owner_in(child: &str) -> Option<String> {
    let uuid = child.strip_prefix("_c_")?.get(..36)?;
    let parsed = uuid::Uuid::parse_str(uuid).ok()?;
    child[3 + 36..]
        .starts_with('-')
        .then(|| parsed.hyphenated().to_string())
}

fn encoded(name: &LockName) -> String {
    name.path_segment()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_distinct_legal_segments() {
        let path = |s: &str| lock_path("/distlock", &LockName::new(s).expect("valid"));
        assert_eq!(path("orders-42"), "/distlock/orders-42");
        assert_eq!(path("a/b"), "/distlock/a%2Fb");
        assert_eq!(path("."), "/distlock/%2E");
        assert_eq!(path(".."), "/distlock/%2E%2E");
        assert_ne!(path("."), path("%2E"));
        assert_eq!(path("with\0nul"), "/distlock/with%00nul");
        let long = path(&"x".repeat(1024));
        assert!(long.len() <= "/distlock/".len() + MAX_SEGMENT);
    }

    /// The three primitives of one name never share a path, and no name's mutex lands on
    /// another name's semaphore or read-write lock (a colon is always encoded in a mutex's
    /// segment).
    #[test]
    fn the_primitives_of_a_name_live_apart() {
        let root = "/distlock";
        let names = [
            "jobs",
            "semaphore:jobs",
            "rw-lock:jobs",
            "semaphore%3Ajobs",
            ".",
            "a/b",
        ];
        let mut seen = std::collections::HashMap::new();
        for name in names {
            let name = LockName::new(name).expect("valid");
            for primitive in [Primitive::Mutex, Primitive::Semaphore, Primitive::RwLock] {
                let path = object_path(root, primitive, &name);
                let segment = path.strip_prefix("/distlock/").expect("under the root");
                assert!(!segment.contains('/'), "{path}: one segment");
                if let Some(earlier) = seen.insert(path.clone(), (name.clone(), primitive)) {
                    panic!("{path} is both {earlier:?} and {:?}", (name, primitive));
                }
            }
        }
        let jobs = LockName::new("jobs").expect("valid");
        assert_eq!(object_path(root, Primitive::Mutex, &jobs), "/distlock/jobs");
        assert_eq!(
            object_path(root, Primitive::Semaphore, &jobs),
            "/distlock/semaphore:jobs"
        );
        assert_eq!(
            object_path(root, Primitive::RwLock, &jobs),
            "/distlock/rw-lock:jobs"
        );
        assert_eq!(
            object_path(
                root,
                Primitive::Mutex,
                &LockName::new("semaphore:jobs").expect("valid")
            ),
            "/distlock/semaphore%3Ajobs"
        );
    }

    #[test]
    fn protected_names_carry_the_owner() {
        let owner = OwnerToken::new();
        let lease = format!("{}0000000007", protected_prefix(owner, LEASE_NODE));
        assert!(lease.starts_with("_c_") && lease.contains("-lease-"), "{lease}");
        assert_eq!(owner_in(&lease), Some(owner.to_string()));
        let read = format!("{}0000000003", protected_prefix(owner, READ_NODE));
        assert!(read.ends_with("-__READ__0000000003"), "{read}");
        assert_eq!(owner_in(&read), Some(owner.to_string()));
        assert_eq!(owner_in("lease-0000000001"), None);
        assert_eq!(owner_in("_c_not-a-uuid-lease-0000000001"), None);
    }
}

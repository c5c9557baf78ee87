//! Key layout and routing: which memcached key and which server a lock name maps to.
//!
//! Owns the mapping only; it may not talk to a server.
//!
//! For a namespace `ns` (default `distlock`) and a lock name `n`:
//! - `ns:l:<enc(n)>` is the lock item: the owner token as its value, the TTL as its expiry;
//! - `ns:f:<enc(n)>` is the fencing counter of `n` (an `incr` counter, 30-day expiry);
//! - `ns:n:<enc(n)>` is the note beside the mutex `n`'s hold, tagged with that hold (see
//!   `note.rs`);
//! - `ns:s:<enc(n)>` is the semaphore `n` and `ns:w:<enc(n)>` the read-write lock `n`: one
//!   item each, holding every holder, waiting writer and the fencing counter of that object
//!   (see `holders_item.rs`).
//!
//! The mutex, the semaphore and the read-write lock of one name are three objects: their
//! keys differ in the letter between the colons, so they never collide.
//!
//! `enc` is [`LockName::encode`] with printable ASCII allowed (memcached keys may not hold
//! spaces or control characters) and the room the 250-byte key limit leaves: `%` and every
//! other byte are percent-encoded, and a name that would not fit keeps a readable prefix
//! followed by `%~` and the SHA-256 of the whole name. The map is injective, so two names
//! never share a key.
//!
//! Routing: with several servers, each name lives on exactly one of them, chosen by
//! rendezvous hashing of `enc(n)` over the configured addresses (FNV-1a, stable across
//! builds and processes, so every client with the same server list agrees). The lock item
//! and its counter go to the same server, and so do the semaphore and the read-write lock of
//! that name. Adding or removing a server moves only the names
//! that hash to it; losing a server loses the locks on it.

use std::borrow::Cow;

use distlock_core::{LockName, Primitive};

/// memcached's key length limit.
pub(crate) const MAX_KEY_LEN: usize = 250;

/// The key builder of one client.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    namespace: String,
    max_encoded: usize,
}

impl Keys {
    /// `namespace` is already validated (printable ASCII, short enough).
    pub(crate) fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            max_encoded: MAX_KEY_LEN - namespace.len() - 3,
        }
    }

    /// The encoded name: the routing key and the common tail of both item keys.
    pub(crate) fn encoded<'a>(&self, name: &'a LockName) -> Cow<'a, str> {
        name.encode(self.max_encoded, |c| c.is_ascii_graphic())
    }

    /// The lock item's key.
    pub(crate) fn lock_key(&self, encoded: &str) -> String {
        format!("{}:l:{encoded}", self.namespace)
    }

    /// The fencing counter's key.
    pub(crate) fn fence_key(&self, encoded: &str) -> String {
        format!("{}:f:{encoded}", self.namespace)
    }

    /// The key of the note beside the mutex's hold.
    pub(crate) fn note_key(&self, encoded: &str) -> String {
        format!("{}:n:{encoded}", self.namespace)
    }

    /// The item of the semaphore or read-write lock `encoded` (`primitive` is one of those
    /// two; the mutex's item is [`lock_key`](Self::lock_key)).
    pub(crate) fn object_key(&self, encoded: &str, primitive: Primitive) -> String {
        let letter = match primitive {
            Primitive::Semaphore => 's',
            Primitive::RwLock => 'w',
            _ => 'l',
        };
        format!("{}:{letter}:{encoded}", self.namespace)
    }
}

/// The index of the server that owns `encoded` among `addrs` (rendezvous hashing).
pub(crate) fn route<'a>(encoded: &str, addrs: impl Iterator<Item = &'a str>) -> usize {
    let key = fnv1a(FNV_OFFSET, encoded.as_bytes());
    let mut best = (0, 0u64);
    for (index, addr) in addrs.enumerate() {
        let score = mix(fnv1a(key, addr.as_bytes()));
        if index == 0 || score > best.1 {
            best = (index, score);
        }
    }
    best.0
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// splitmix64's finaliser: spreads FNV's weak low bits.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> LockName {
        LockName::new(s).expect("valid")
    }

    #[test]
    fn keys_are_legal_and_distinct() {
        let keys = Keys::new("distlock");
        let long = "n".repeat(1000);
        for raw in ["a b", "a%20b", "tab\t", "é", "x", long.as_str()] {
            let enc = keys.encoded(&name(raw)).into_owned();
            let key = keys.lock_key(&enc);
            assert!(key.len() <= MAX_KEY_LEN, "{key}");
            assert!(key.bytes().all(|b| b.is_ascii_graphic()), "{key}");
        }
        assert_ne!(keys.encoded(&name("a b")), keys.encoded(&name("a%20b")));
        let a = keys.encoded(&name(&format!("{long}a"))).into_owned();
        let b = keys.encoded(&name(&format!("{long}b"))).into_owned();
        assert_ne!(a, b);
        let all = [
            keys.lock_key("x"),
            keys.fence_key("x"),
            keys.note_key("x"),
            keys.object_key("x", Primitive::Semaphore),
            keys.object_key("x", Primitive::RwLock),
            crate::wire::IDENTITY_KEY.to_owned(),
        ];
        let unique: std::collections::BTreeSet<&String> = all.iter().collect();
        assert_eq!(unique.len(), all.len(), "{all:?}");
        assert_eq!(keys.object_key("x", Primitive::Mutex), keys.lock_key("x"));
        let enc = keys.encoded(&name(&long)).into_owned();
        assert!(keys.object_key(&enc, Primitive::Semaphore).len() <= MAX_KEY_LEN);
        assert!(keys.note_key(&enc).len() <= MAX_KEY_LEN);
    }

    const PINNED: [usize; 4] = [2, 2, 0, 1];

    #[test]
    fn routing_is_stable_and_spread() {
        let addrs = ["10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211"];
        let mut counts = [0usize; 3];
        for i in 0..3000 {
            let key = format!("lock-{i}");
            let at = route(&key, addrs.iter().copied());
            assert_eq!(at, route(&key, addrs.iter().copied()));
            counts[at] += 1;
            // Removing another server never moves this key.
            let other = (at + 1) % 3;
            let rest: Vec<&str> = addrs
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != other)
                .map(|(_, a)| *a)
                .collect();
            assert_eq!(rest[route(&key, rest.iter().copied())], addrs[at]);
        }
        assert!(counts.iter().all(|c| *c > 800), "{counts:?}");
        // Pinned, so a change of the hash (which would split clients that disagree on where a
        // name lives) fails here.
        let pinned: Vec<usize> = ["orders-42", "a", "ledger", "job%20x"]
            .iter()
            .map(|k| route(k, addrs.iter().copied()))
            .collect();
        assert_eq!(pinned, PINNED);
    }
}

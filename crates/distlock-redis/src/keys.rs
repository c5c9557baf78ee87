//! The key layout: which Redis keys and channel one lock name uses.
//!
//! Owns the mapping from a [`LockName`] to bytes on the server; it may not talk to the server.
//!
//! For a lock `name` under the configured `prefix` (default empty):
//!
//! | what            | bytes                                         | type, lifetime                   |
//! |-----------------|-----------------------------------------------|----------------------------------|
//! | lock key        | `<prefix><name>`                              | string = owner token, `PX` ttl   |
//! | fencing counter | `{<slot tag>}` `0xFF` `fence:` `<lock key>`    | integer (`INCR`), no TTL         |
//! | waiters         | `{<slot tag>}` `0xFF` `waiters:` `<lock key>`  | sorted set, `PX` the longest stay |
//! | release channel | `distlock:released:<lock key>`                | pub/sub channel, not a key       |
//! | release marker  | `{<slot tag>}` `0xFF` `released:` `<owner>` `:` `<lock key>` | string = the release's nonce, `PX` a few timeouts; cluster only |
//! | holder's note   | `{<slot tag>}` `0xFF` `note:` `<lock key>`     | string = `<owner>` `\n` `<note>`, no TTL (read only beside its owner's hold) |
//!
//! On a Redis Cluster every channel is preceded by the lock key's `{<slot tag>}` `0xFF`
//! (`{<slot tag>}` `0xFF` `distlock:released:<lock key>`, and so on), so it hashes to the
//! object's slot: releases are announced by sharded pub/sub (`SPUBLISH` from the script, which
//! may only publish to a channel of its own slot) and heard through `SSUBSCRIBE` on the master
//! serving that slot.
//!
//! The semaphore and the read-write lock of the same name are objects of their own, with keys
//! of the derived layout (`{<slot tag>}` `0xFF` `<mark>` `<lock key>`) only:
//!
//! | what                         | mark               | type, lifetime                                 |
//! |------------------------------|--------------------|------------------------------------------------|
//! | semaphore holders            | `semaphore:`       | sorted set owner -> expiry (ms), `PX` the last |
//! | semaphore state              | `semaphore-state:` | hash `permits`, `fence`; no TTL                |
//! | read-write lock readers      | `rw-readers:`      | sorted set owner -> expiry (ms), `PX` the last |
//! | read-write lock writer       | `rw-writer:`       | string = owner token, `PX` ttl                 |
//! | waiting writers              | `rw-waiting:`      | sorted set waiter -> end of stay (ms)          |
//! | read-write lock fencing      | `rw-fence:`        | integer (`INCR`), no TTL                       |
//!
//! and the channels `distlock:semaphore-released:<lock key>` and
//! `distlock:rw-lock-released:<lock key>`. Every mark holds exactly one `:`, at its end, so no
//! mark is a prefix of another and two derived keys are equal only if their mark and lock key
//! are; and a derived key is never a lock key (it holds `0xFF`). The three channel prefixes
//! differ within their first ten bytes, so no two objects share a channel. The mutex `x`, the
//! semaphore `x` and the read-write lock `x` therefore never share a key or a channel, and all
//! keys of one object share the lock key's hash slot.
//!
//! - The **lock key is the name as is** (names are at most 1024 bytes and Redis keys are
//!   binary safe), so a plain `SET <name> <token> NX PX <ttl>` by redis-py's `Lock`, redsync
//!   and friends excludes us and we exclude them. The value is the [`OwnerToken`] in hyphenated
//!   UUID form.
//! - The **fencing counter** contains a `0xFF` byte, which never occurs in UTF-8. Lock names
//!   and prefixes are UTF-8, so no lock key of any distlock client can equal a counter key,
//!   whatever the name. The full lock key comes last, so two locks never share a counter.
//!   Counters are never deleted (deleting one would let tokens go back): one small integer per
//!   name ever locked stays on the server.
//! - **Redis Cluster**: the acquire script touches the lock key, its counter and its queue of
//!   waiters, so all must hash to one slot. Redis hashes only the `{...}` hash tag of a key when it has a non-empty
//!   one. The counter's tag is therefore the lock key's own hash input: its hash tag if it has
//!   one, else the whole key. A whole key containing `}` (such as `a}b`) cannot sit inside
//!   braces; such keys get a short synthetic tag `distlock-<n>` chosen to hash to the same slot
//!   (found by a search over `n`, about 16k CRC16 computations, only for such names).
//! - The **queue of waiters** uses the counter's layout with `waiters:` for `fence:`, so it
//!   shares the lock key's slot too and no lock key can equal it. It lives only while someone
//!   waits (its TTL is the longest stay in it).
//! - The **release marker** (Redis Cluster only) records that a release request (its nonce)
//!   of `<owner>` (a hyphenated UUID, 36 bytes, so the layout is unambiguous) deleted its
//!   hold of any kind on this name: the cluster client may send a request again unseen, and
//!   the second run reads it (see [`released`](crate::released)). One per owner token, so
//!   another owner's marker is never read; it expires after a few operation timeouts.
//! - The release channel is in pub/sub's own namespace and carries the full lock key, so it
//!   is unique per lock.
//!
//! [`OwnerToken`]: distlock_core::OwnerToken

use distlock_core::LockName;

/// Marks the derived keys: a byte that never occurs in UTF-8 text.
const NOT_UTF8: u8 = 0xFF;
const FENCE_MARK: &[u8] = b"fence:";
const WAITERS_MARK: &[u8] = b"waiters:";
const SEMAPHORE_MARK: &[u8] = b"semaphore:";
const SEMAPHORE_STATE_MARK: &[u8] = b"semaphore-state:";
const SEMAPHORE_WAITING_MARK: &[u8] = b"semaphore-waiting:";
const READERS_MARK: &[u8] = b"rw-readers:";
const WRITER_MARK: &[u8] = b"rw-writer:";
const WAITING_WRITERS_MARK: &[u8] = b"rw-waiting:";
const RW_FENCE_MARK: &[u8] = b"rw-fence:";
const RELEASED_MARK: &[u8] = b"released:";
const NOTE_MARK: &[u8] = b"note:";
const CHANNEL_PREFIX: &[u8] = b"distlock:released:";
const SEMAPHORE_CHANNEL_PREFIX: &[u8] = b"distlock:semaphore-released:";
const RW_LOCK_CHANNEL_PREFIX: &[u8] = b"distlock:rw-lock-released:";
const CLUSTER_SLOTS: u16 = 16384;

/// The keys of one configured key space (one prefix).
#[derive(Debug, Clone, Default)]
pub(crate) struct KeySpace {
    prefix: String,
    /// Channels in the lock key's slot (`{<slot tag>}` `0xFF` before the channel name), for
    /// sharded pub/sub on a cluster.
    sharded: bool,
}

/// The keys and channel of one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// `<prefix><name>`.
    pub(crate) lock: Vec<u8>,
    /// The fencing counter, in the lock key's hash slot.
    pub(crate) fence: Vec<u8>,
    /// The queue of waiters to wake, in the lock key's hash slot.
    pub(crate) waiters: Vec<u8>,
    /// The pub/sub channel a release is announced on.
    pub(crate) channel: Vec<u8>,
}

/// The note a mutex holder leaves beside its hold (`<owner>\n<note>`), in the lock key's
/// hash slot: read only while that owner holds the lock.
pub(crate) fn note_key(lock_key: &[u8]) -> Vec<u8> {
    derived(&derived_head(lock_key), NOTE_MARK, lock_key)
}

/// The keys and channel of one semaphore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SemaphoreKeys {
    /// The live holders: owner token -> expiry in ms of the server's clock.
    pub(crate) holders: Vec<u8>,
    /// The permit count of the live holders and the fencing counter (a hash, never expiring).
    pub(crate) state: Vec<u8>,
    /// The waiters: waiter id -> end of its stay in µs of the server's clock (the mutex's
    /// queue, see `acquire.lua`).
    pub(crate) waiting: Vec<u8>,
    /// The pub/sub channel a release is announced on.
    pub(crate) channel: Vec<u8>,
}

/// The keys and channel of one read-write lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RwLockKeys {
    /// The readers: owner token -> expiry in ms of the server's clock.
    pub(crate) readers: Vec<u8>,
    /// The writer's owner token, with a `PX` TTL.
    pub(crate) writer: Vec<u8>,
    /// The waiting writers: waiter id -> end of its stay in ms of the server's clock.
    pub(crate) waiting: Vec<u8>,
    /// The fencing counter (never expiring).
    pub(crate) fence: Vec<u8>,
    /// The pub/sub channel a release is announced on.
    pub(crate) channel: Vec<u8>,
}

impl KeySpace {
    pub(crate) fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            sharded: false,
        }
    }

    /// The key space of a cluster: the same keys, and every channel in its object's slot
    /// (sharded pub/sub delivers a message only to the shard of the channel's slot, and a
    /// script may publish only to a channel of its own slot).
    pub(crate) fn sharded(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            sharded: true,
        }
    }

    /// `channel_prefix` and `lock_key`, behind the lock key's slot tag when sharded.
    fn channel(&self, channel_prefix: &[u8], lock_key: &[u8]) -> Vec<u8> {
        if self.sharded {
            [&derived_head(lock_key), channel_prefix, lock_key].concat()
        } else {
            [channel_prefix, lock_key].concat()
        }
    }

    /// The lock key of `name`: `<prefix><name>`.
    pub(crate) fn lock_key(&self, name: &str) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.prefix.len() + name.len());
        key.extend_from_slice(self.prefix.as_bytes());
        key.extend_from_slice(name.as_bytes());
        key
    }

    pub(crate) fn keys(&self, name: &LockName) -> LockKeys {
        let lock = self.lock_key(name.as_str());
        let (fence, waiters) = derived_keys(&lock);
        LockKeys {
            fence,
            waiters,
            channel: self.channel(CHANNEL_PREFIX, &lock),
            lock,
        }
    }

    pub(crate) fn semaphore_keys(&self, name: &LockName) -> SemaphoreKeys {
        let lock = self.lock_key(name.as_str());
        let head = derived_head(&lock);
        SemaphoreKeys {
            holders: derived(&head, SEMAPHORE_MARK, &lock),
            state: derived(&head, SEMAPHORE_STATE_MARK, &lock),
            waiting: derived(&head, SEMAPHORE_WAITING_MARK, &lock),
            channel: self.channel(SEMAPHORE_CHANNEL_PREFIX, &lock),
        }
    }

    pub(crate) fn rw_lock_keys(&self, name: &LockName) -> RwLockKeys {
        let lock = self.lock_key(name.as_str());
        let head = derived_head(&lock);
        RwLockKeys {
            readers: derived(&head, READERS_MARK, &lock),
            writer: derived(&head, WRITER_MARK, &lock),
            waiting: derived(&head, WAITING_WRITERS_MARK, &lock),
            fence: derived(&head, RW_FENCE_MARK, &lock),
            channel: self.channel(RW_LOCK_CHANNEL_PREFIX, &lock),
        }
    }

    /// A `SCAN MATCH` pattern for lock keys whose names start with `name_prefix`.
    pub(crate) fn scan_pattern(&self, name_prefix: &str) -> Vec<u8> {
        let mut pattern = Vec::new();
        for b in self.lock_key(name_prefix) {
            if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
                pattern.push(b'\\');
            }
            pattern.push(b);
        }
        pattern.push(b'*');
        pattern
    }
}

/// The keys derived from `lock_key` (see the module docs): the fencing counter and the queue
/// of waiters, both `{<slot tag>}` `0xFF` `<mark>` `<lock key>`.
fn derived_keys(lock_key: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let head = derived_head(lock_key);
    (
        derived(&head, FENCE_MARK, lock_key),
        derived(&head, WAITERS_MARK, lock_key),
    )
}

/// The release marker of `owner` on the objects of `lock_key` (see the module docs), in the
/// lock key's slot.
pub(crate) fn release_marker(lock_key: &[u8], owner: &str) -> Vec<u8> {
    [
        &derived_head(lock_key),
        RELEASED_MARK,
        owner.as_bytes(),
        b":",
        lock_key,
    ]
    .concat()
}

/// `{<slot tag>}` `0xFF`: the start of every key derived from `lock_key`.
fn derived_head(lock_key: &[u8]) -> Vec<u8> {
    let hashed = hash_input(lock_key);
    let mut head = Vec::with_capacity(hashed.len() + 3);
    head.push(b'{');
    if hashed.contains(&b'}') {
        head.extend_from_slice(synthetic_tag(slot(hashed)).as_bytes());
    } else {
        head.extend_from_slice(hashed);
    }
    head.push(b'}');
    head.push(NOT_UTF8);
    head
}

fn derived(head: &[u8], mark: &[u8], lock_key: &[u8]) -> Vec<u8> {
    [head, mark, lock_key].concat()
}

/// The part of `key` Redis Cluster hashes: the content of the first `{...}` if non-empty,
/// else the whole key.
pub(crate) fn hash_input(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// The cluster hash slot of `key`.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    slot(hash_input(key))
}

fn slot(hashed: &[u8]) -> u16 {
    crc16(hashed) % CLUSTER_SLOTS
}

/// A brace-free tag whose slot is `target`.
fn synthetic_tag(target: u16) -> String {
    (0u64..)
        .map(|n| format!("distlock-{n}"))
        .find(|tag| slot(tag.as_bytes()) == target)
        .unwrap_or_default() // unreachable: the search covers every slot within ~200k steps
}

/// CRC16/XMODEM, the hash of Redis Cluster.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(prefix: &str, name: &str) -> LockKeys {
        KeySpace::new(prefix).keys(&LockName::new(name).expect("valid"))
    }

    #[test]
    fn crc16_matches_redis() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        assert_eq!(key_slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn the_lock_key_is_the_name() {
        let k = keys("app:", "orders/42");
        assert_eq!(k.lock, b"app:orders/42");
        assert_eq!(k.channel, b"distlock:released:app:orders/42");
    }

    #[test]
    fn counter_shares_the_lock_keys_slot() {
        for name in [
            "plain",
            "{tag}rest",
            "a}b",
            "{}x",
            "x{}y}",
            "a}b{c",
            "{",
            "}",
            "{{}}",
            "ключ",
        ] {
            let k = keys("p:", name);
            assert_eq!(key_slot(&k.fence), key_slot(&k.lock), "{name:?}");
            assert_eq!(key_slot(&k.waiters), key_slot(&k.lock), "{name:?}");
            assert!(std::str::from_utf8(&k.fence).is_err(), "{name:?}");
            assert!(std::str::from_utf8(&k.waiters).is_err(), "{name:?}");
            assert_ne!(k.fence, k.waiters, "{name:?}");
        }
    }

    #[test]
    fn counters_never_collide() {
        let a = keys("", "a}b");
        let b = keys("", "a}c");
        assert_ne!(a.fence, b.fence);
        assert_ne!(keys("", "x").fence, keys("", "{x}").fence);
    }

    #[test]
    fn the_three_primitives_of_a_name_share_no_key_and_no_channel() {
        let space = KeySpace::new("p:");
        for name in ["plain", "{tag}rest", "a}b", "semaphore:x", "rw-writer:x", "ключ"] {
            let n = LockName::new(name).expect("valid");
            let (m, s, r) = (space.keys(&n), space.semaphore_keys(&n), space.rw_lock_keys(&n));
            let keys = [
                &m.lock, &m.fence, &m.waiters, &s.holders, &s.state, &s.waiting, &r.readers, &r.writer,
                &r.waiting, &r.fence,
            ];
            for (i, a) in keys.iter().enumerate() {
                assert_eq!(key_slot(a), key_slot(&m.lock), "{name:?} key {i}");
                for b in &keys[i + 1..] {
                    assert_ne!(a, b, "{name:?}");
                }
            }
            assert_ne!(m.channel, s.channel);
            assert_ne!(m.channel, r.channel);
            assert_ne!(s.channel, r.channel);
            let marker = release_marker(&m.lock, "0e3f6a8e-4f5e-4c2b-9d7a-1b2c3d4e5f60");
            assert_eq!(key_slot(&marker), key_slot(&m.lock), "{name:?}");
            assert!(keys.iter().all(|k| **k != marker), "{name:?}");
        }
    }

    #[test]
    fn sharded_channels_share_their_objects_slot() {
        let (plain, sharded) = (KeySpace::new("p:"), KeySpace::sharded("p:"));
        for name in ["plain", "{tag}rest", "a}b", "{}x", "ключ"] {
            let n = LockName::new(name).expect("valid");
            let (m, s, r) = (
                sharded.keys(&n),
                sharded.semaphore_keys(&n),
                sharded.rw_lock_keys(&n),
            );
            for channel in [&m.channel, &s.channel, &r.channel] {
                assert_eq!(key_slot(channel), key_slot(&m.lock), "{name:?}");
            }
            assert_ne!(m.channel, s.channel);
            assert_ne!(m.channel, r.channel);
            assert_ne!(s.channel, r.channel);
            // The keys are those of one server: only the channels differ.
            assert_eq!(m.lock, plain.keys(&n).lock);
            assert_eq!(m.fence, plain.keys(&n).fence);
            assert_eq!(s.holders, plain.semaphore_keys(&n).holders);
            assert_ne!(m.channel, plain.keys(&n).channel);
        }
    }

    #[test]
    fn derived_marks_are_prefix_free() {
        let marks = [
            FENCE_MARK,
            WAITERS_MARK,
            SEMAPHORE_MARK,
            SEMAPHORE_STATE_MARK,
            SEMAPHORE_WAITING_MARK,
            READERS_MARK,
            WRITER_MARK,
            WAITING_WRITERS_MARK,
            RW_FENCE_MARK,
            RELEASED_MARK,
        ];
        for (i, a) in marks.iter().enumerate() {
            for (j, b) in marks.iter().enumerate() {
                assert!(i == j || !b.starts_with(a), "{a:?} is a prefix of {b:?}");
            }
        }
        let channels = [CHANNEL_PREFIX, SEMAPHORE_CHANNEL_PREFIX, RW_LOCK_CHANNEL_PREFIX];
        for (i, a) in channels.iter().enumerate() {
            for (j, b) in channels.iter().enumerate() {
                assert!(i == j || !b.starts_with(a), "{a:?} is a prefix of {b:?}");
            }
        }
    }

    #[test]
    fn scan_patterns_escape_globs() {
        assert_eq!(KeySpace::new("p").scan_pattern("a*[b]"), b"pa\\*\\[b\\]*");
    }
}

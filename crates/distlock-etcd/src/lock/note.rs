//! Notes beside a mutex hold (what leader election publishes): the note is the holder's key's
//! VALUE, as etcd's own `concurrency.Election` keeps its leader's value, so `etcdctl elect -l
//! <prefix>` (and a Go service's `Election.Leader`/`Observe`) reads our leader's value, and we
//! read theirs.
//!
//! ```text
//! <root>/<encoded name>/<lease id, hex>-<owner token>   value = the owner token, until the
//!                                                       holder sets a note: then the note
//! <root>/<encoded name>/<lease id, hex>                 etcd's own candidate: value = its
//!                                                       leader's value (empty: `etcdctl lock`)
//! ```
//!
//! - **Set** (1 round trip): a transaction that puts the note on the hold's key only if the
//!   key's create revision is still the hold's fencing token (the key, and so the hold, still
//!   exists: nothing can be created ahead of it while it lives), keeping the key's lease. A
//!   stale or released hold changes nothing and gets `false`. Sent again after a lost reply:
//!   storing the same note twice is harmless. Waiters and the held-key watch ignore puts.
//! - **Read** (with [`inspect`](distlock_core::DistributedLock::inspect), no extra round
//!   trip): a key of ours carries a note once it was written again after its creation (its
//!   version is above 1), so no note is ever mistaken for the owner token it replaced; etcd's
//!   own candidate's non-empty value is its note. The note lives and dies with its key, so a
//!   later holder never shows an earlier holder's note.

use std::sync::Arc;

use distlock_core::{Lease, LockKind, Result};

use super::Inner;
use crate::keys::owner_in;
use crate::proto::KeyValue;
use crate::txn;

impl Inner {
    /// Stores `note` as the value of `lease`'s key if that key still is the hold's (see the
    /// module docs): 1 round trip; `false` without a request for a lease that is no mutex hold
    /// or has no key.
    pub(super) async fn set_note(self: &Arc<Self>, lease: &Lease, note: &str) -> Result<bool> {
        let (Some(key), Some(token)) = (lease.handle(), lease.fencing_token()) else {
            return Ok(false);
        };
        let Ok(created) = i64::try_from(token.get()) else {
            return Ok(false);
        };
        if lease.kind() != LockKind::Exclusive {
            return Ok(false);
        }
        let reply = self
            .txn_idempotent(
                "set a note",
                txn::txn(
                    vec![txn::created_at(key, created)],
                    vec![txn::put_keeping_lease(key, note)],
                    Vec::new(),
                ),
            )
            .await?;
        Ok(reply.succeeded)
    }
}

/// The note on a contender's key (see the module docs).
pub(super) fn note_of(kv: &KeyValue) -> Option<String> {
    let written_again = owner_in(&kv.key).is_none() || kv.version > 1;
    (written_again && !kv.value.is_empty()).then(|| String::from_utf8_lossy(&kv.value).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str, version: i64) -> KeyValue {
        KeyValue {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            version,
            ..KeyValue::default()
        }
    }

    #[test]
    fn only_a_value_written_after_the_creation_of_our_key_is_a_note() {
        let ours = "distlock/a/694d7a3b-0f1e2d3c";
        assert_eq!(note_of(&kv(ours, "0f1e2d3c", 1)), None, "the owner token");
        assert_eq!(note_of(&kv(ours, "0f1e2d3c", 2)).as_deref(), Some("0f1e2d3c"));
        assert_eq!(
            note_of(&kv(ours, "10.0.0.7:80", 3)).as_deref(),
            Some("10.0.0.7:80")
        );
        assert_eq!(
            note_of(&kv("distlock/a/694d7a3b", "v", 1)).as_deref(),
            Some("v"),
            "etcd's candidate"
        );
        assert_eq!(note_of(&kv("distlock/a/694d7a3b", "", 1)), None, "etcd's lock");
    }
}

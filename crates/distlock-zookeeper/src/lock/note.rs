//! Notes beside a mutex hold (what leader election publishes): the note is the data of the
//! holder's own lock node, as in Apache Curator's `LeaderSelector`, an `InterProcessMutex`
//! whose node data is the participant id and whose `getLeader()` reads the first node's data.
//! Owns writing the note (`setData` on our node, version-checked) and reading a holder's owner
//! and note back from its node. Touches no other node.
//!
//! - **Owner-checked.** The note is written only on the lease's own node: its name carries the
//!   lease's owner token, it belongs to the lease's session, and it exists only while that
//!   hold does (ephemeral, never re-used). A released, lost or foreign lease finds no such node
//!   and stores nothing.
//! - **Tied to the hold.** The note lives in the holder's node and goes with it: a later
//!   holder's node carries its owner token until it sets a note of its own, so no holder ever
//!   shows an earlier holder's note. Renewals (an `exists`) do not touch it.
//! - **Reading.** Our node's data is the owner token until a note replaces it (its data
//!   version is then above 0): the owner is read from the protected name and the note from the
//!   data. A foreign contender's data (Curator's participant id, kazoo's identifier) is both
//!   its owner, as before, and its note.

use std::sync::Arc;

use distlock_core::{Lease, LockKind, Result};
use zookeeper_client as zk;

use super::layout::{lock_path, owner_in};
use super::{map_err, Inner};

/// How many times a note is written again after another writer changed the node's data
/// between our `exists` and our `setData` (Curator's revoker writes `__REVOKE__` there).
const NOTE_ATTEMPTS: usize = 3;

impl Inner {
    /// Stores `note` as the data of `lease`'s node if the lease still holds the mutex. Round
    /// trips: 2 (`exists` to check the node is this session's, `setData` at the version it
    /// read), +2 per retry after a concurrent write (at most [`NOTE_ATTEMPTS`]); none for a
    /// lease that is not a held mutex of ours.
    pub(super) async fn set_note(self: &Arc<Self>, lease: &Lease, note: &str) -> Result<bool> {
        let Some(path) = lease.handle().filter(|path| self.is_mutex_node_of(lease, path)) else {
            return Ok(false);
        };
        self.bounded(async {
            let conn = self.conn().await?;
            if lease.session_epoch() != Some(conn.epoch) {
                return Ok(false);
            }
            let session = conn.client.session_id().0;
            for _ in 0..NOTE_ATTEMPTS {
                let stat = match conn.client.check_stat(path).await.map_err(map_err)? {
                    Some(stat) if stat.ephemeral_owner == session => stat,
                    _ => return Ok(false),
                };
                self.expect_own_write(path);
                match conn
                    .client
                    .set_data(path, note.as_bytes(), Some(stat.version))
                    .await
                {
                    Ok(_) => return Ok(self.session.borrow().keeps(conn.epoch)),
                    Err(zk::Error::NoNode) => return Ok(false),
                    Err(zk::Error::BadVersion) => continue,
                    Err(e) => return Err(map_err(e)),
                }
            }
            Err(distlock_core::Error::backend(
                super::BACKEND,
                format!("the lock node's data kept changing under {NOTE_ATTEMPTS} attempts to set a note"),
            ))
        })
        .await
    }

    /// Whether `path` is a mutex contender node of `lease`'s name and owner.
    fn is_mutex_node_of(&self, lease: &Lease, path: &str) -> bool {
        let Some((parent, child)) = path.rsplit_once('/') else {
            return false;
        };
        lease.kind() == LockKind::Exclusive
            && parent == lock_path(self.config.root(), lease.name())
            && owner_in(child) == Some(lease.owner().to_string())
    }
}

/// The owner and the note of the holder whose node is `child`, from its data and the data's
/// version (how many times it was written since the node's creation).
pub(super) fn owner_and_note(child: &str, data: &[u8], version: i32) -> (String, Option<String>) {
    let data = String::from_utf8_lossy(data).into_owned();
    match owner_in(child) {
        // Our node as created: the owner token, no note.
        Some(owner) if owner == data => (owner, None),
        // A note written over a protected node's data after its creation.
        Some(owner) if version > 0 => (owner, Some(data)),
        // A foreign contender's own data: its owner, and what its leader publishes.
        _ => {
            let note = (!data.is_empty()).then(|| data.clone());
            (data, note)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_and_note_come_from_the_name_and_the_data() {
        let owner = "0f9b6b8e-4a4f-4c53-9a4a-7d0c1b1f7a11";
        let child = format!("_c_{owner}-lock-0000000001");
        assert_eq!(
            owner_and_note(&child, owner.as_bytes(), 0),
            (owner.to_owned(), None)
        );
        assert_eq!(
            owner_and_note(&child, b"10.0.0.7:8080", 1),
            (owner.to_owned(), Some("10.0.0.7:8080".to_owned()))
        );
        // Curator's LeaderSelector: the participant id, written at creation.
        assert_eq!(
            owner_and_note(&child, b"participant-1", 0),
            ("participant-1".to_owned(), Some("participant-1".to_owned()))
        );
        assert_eq!(
            owner_and_note("abc__lock__0000000002", b"", 0),
            (String::new(), None)
        );
    }
}

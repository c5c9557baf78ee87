//! Notes beside a mutex hold ([`DistributedLock::set_note`](distlock_core::DistributedLock::set_note),
//! what leader election publishes): one item per name beside the lock item, tagged with the
//! hold it belongs to. Owns writing a note and reading it back for `inspect`; never writes
//! the lock item.
//!
//! Layout: `ns:n:<enc(n)>` = `n1 <owner> <token>\n<note>`, with no expiry. `<owner> <token>`
//! is the lock item's value when the note was written (its holder's owner token and fencing
//! token), so [`note_for`] shows the note only while the lock item still holds exactly that
//! value: never for a later holder (another owner token, or the same owner's later hold with
//! another fencing token), after release or expiry, or for a note written after its hold
//! ended. Renewals rewrite the lock item with the same value, so the note survives them.
//!
//! Why not in the lock item: every renewal rewrites the lock item's whole value from the
//! lease (a classic `cas` cannot keep part of a value), and a lease does not carry its note.
//! The note item has no expiry because a hold may be renewed for longer than any expiry we
//! could give it; it stays (at most [`MAX_NOTE_BYTES`] and its tag) until the name's next
//! note replaces it, and it is never shown once its hold is over.
//!
//! A write never overwrites a later holder's note: it reads the note item (its CAS) *before*
//! it reads the lock item, in one pipeline, and writes CAS-guarded (or `add`s a missing
//! one). If the lock read shows the writer holding, that hold was live after the note read,
//! so any later holder's note write comes after the note read and makes our CAS fail (or
//! comes after our write and replaces it). The write is bound to the server process that
//! answered the reads (a restarted memcached reuses CAS values).
//!
//! **Round trips: `set_note` 2** (`mg <note> c v` + `mg <lock> v`, then `cas`/`add` of the
//! note); 1 when the store does not record the lease's owner, or already holds this very
//! note; 2 more per write that lost its race to another's. **`inspect` of the mutex stays 1**
//! (`mg <lock> v t` + `mg <note> v`, pipelined).

use distlock_core::{Error, Lease, LockKind, Result};
use tokio::time::Instant;

use crate::exchange::{refused, unexpected};
use crate::lock::{MemcachedLock, BACKEND};
use crate::mutex::owner_of;
use crate::wire::{Batch, Code, Reply};

/// The longest note accepted, in bytes.
pub const MAX_NOTE_BYTES: usize = 16 * 1024;
/// The note item's format marker.
const FORMAT: &str = "n1 ";
/// The most rounds (read, then write) one `set_note` makes when its writes keep losing
/// races; the operation timeout usually ends it first.
const MAX_ROUNDS: usize = 16;

impl MemcachedLock {
    /// Leaves `note` beside `lease`'s mutex hold if the lock item still holds `lease`'s owner
    /// token; whether it did (see the module docs for the order that keeps a stale holder
    /// from replacing a later holder's note). A lease of another kind holds no mutex:
    /// `false`, nothing sent. **2 round trips** (1 when refused or already stored).
    pub(crate) async fn set_note_once(&self, lease: &Lease, note: &str) -> Result<bool> {
        if lease.kind() != LockKind::Exclusive {
            return Ok(false);
        }
        if note.len() > MAX_NOTE_BYTES {
            return Err(Error::invalid_options(format!(
                "a note of {} bytes is longer than the {MAX_NOTE_BYTES} memcached keeps",
                note.len()
            )));
        }
        let at = self.locate(lease.name());
        let note_key = self.keys().note_key(&self.keys().encoded(lease.name()));
        let owner = lease.owner().to_string();
        let started = Instant::now();
        let budget = self.config().operation_timeout();
        for round in 0..MAX_ROUNDS {
            if round > 0 && started.elapsed() >= budget {
                break;
            }
            // The note before the lock: see the module docs.
            let mut batch = Batch::new();
            batch.get(&note_key, "c v");
            batch.get(&at.lock_key, "v");
            let (epoch, replies) = self.exchange_any(at.server, &batch).await?;
            let [noted, item] = replies.as_slice() else {
                return Err(unexpected(at.server, "two replies", &replies));
            };
            let tag = match (&item.code, item.text()) {
                (Code::Va, Some(value)) if owner_of(value) == owner => value.to_owned(),
                (Code::Va | Code::En, _) => return Ok(false),
                (Code::Refused(message), _) => return Err(refused(at.server, message)),
                _ => return Err(unexpected(at.server, "VA or EN", item)),
            };
            let value = encode(&tag, note);
            let mut write = Batch::new();
            match &noted.code {
                Code::Va if noted.value.as_deref() == Some(value.as_bytes()) => return Ok(true),
                Code::Va => {
                    let cas = noted
                        .flag_num::<u64>('c')
                        .ok_or_else(|| unexpected(at.server, "a CAS", noted))?;
                    write.replace_if_cas(&note_key, value.as_bytes(), 0, cas);
                }
                Code::En => write.add(&note_key, value.as_bytes(), 0),
                Code::Refused(message) => return Err(refused(at.server, message)),
                _ => return Err(unexpected(at.server, "VA or EN", noted)),
            }
            let Some((_, replies)) = self.exchange(at.server, &write, Some(epoch)).await? else {
                continue; // another server process answers now: read again there
            };
            match replies.first().map(|reply| &reply.code) {
                Some(Code::Hd) => return Ok(true),
                // Another write came first (or the item vanished): read both again.
                Some(Code::Ex | Code::Nf | Code::Ns) => continue,
                Some(Code::Refused(message)) => return Err(refused(at.server, message)),
                _ => {
                    return Err(unexpected(
                        at.server,
                        "STORED, NOT_STORED, EXISTS or NOT_FOUND",
                        &replies,
                    ))
                }
            }
        }
        Err(Error::unavailable(
            BACKEND,
            format!(
                "{}: {note_key} kept changing under this client's writes until the operation \
                 timeout (contended); try again",
                at.server.addr()
            ),
        ))
    }
}

/// The note item's value for a note left beside the hold whose lock item holds `tag`.
fn encode(tag: &str, note: &str) -> String {
    format!("{FORMAT}{tag}\n{note}")
}

/// The note in `reply` (to an `mg <note> v`), if it was left beside the hold whose lock item
/// holds `lock_value` now.
pub(crate) fn note_for(reply: &Reply, lock_value: &str) -> Option<String> {
    match reply.code {
        Code::Va => note_in(reply.text()?, lock_value),
        _ => None,
    }
}

/// The note in a note item's value `text`, if it was left beside the hold `lock_value`.
fn note_in(text: &str, lock_value: &str) -> Option<String> {
    let (header, note) = text.split_once('\n')?;
    (header.strip_prefix(FORMAT)? == lock_value).then(|| note.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_shows_only_beside_the_hold_it_was_left_for() {
        let tag = "8c1e0f3a-1b2c-4d5e-8f90-0123456789ab 17";
        let stored = encode(tag, "host a\nport 1");
        assert_eq!(note_in(&stored, tag).as_deref(), Some("host a\nport 1"));
        assert_eq!(note_in(&stored, "8c1e0f3a-1b2c-4d5e-8f90-0123456789ab 18"), None);
        assert_eq!(note_in(&stored, "8c1e0f3a-1b2c-4d5e-8f90-0123456789ab"), None);
        assert_eq!(note_in(&encode(tag, ""), tag).as_deref(), Some(""));
        assert_eq!(note_in("n2 x\ny", "x"), None);
        assert_eq!(note_in("no newline", "no newline"), None);
    }
}

//! Redlock's notes beside a hold (what leader election publishes a leader's value with): the
//! note stored on each master where the caller holds the lock, counted with a majority, and
//! read back beside the owner a majority holds for. It owns no keys of its own: each master
//! keeps the single-instance note key (see [`keys`](crate::keys)).

use std::collections::HashMap;

use distlock_core::{Lease, LockKind, Result};
use futures::future::join_all;
use tokio::time::Instant;

use super::quorum::tally;
use super::Redlock;
use crate::keys::note_key;

impl Redlock {
    /// Stores `note` beside `lease`'s hold on every master at once, each owner-checked (the
    /// single-instance note script: `<owner>\n<note>` only where the lock key holds `lease`'s
    /// owner). `true` if a majority stored it while the lease was valid, `false` if a
    /// majority does not hold for the owner (or the lease ran out meanwhile), an error if too
    /// few answered to tell. One parallel round trip.
    pub(super) async fn note_on_majority(&self, lease: &Lease, note: &str) -> Result<bool> {
        if lease.kind() != LockKind::Exclusive {
            return Ok(false);
        }
        let keys = self.keys(lease.name());
        let note_key = note_key(&keys.lock);
        let owner = lease.owner().to_string();
        let limit = self.inner.config.node_timeout;
        let (key_list, args): ([&[u8]; 2], [&[u8]; 2]) =
            ([&keys.lock, &note_key], [owner.as_bytes(), note.as_bytes()]);
        let replies = join_all(self.inner.nodes.iter().map(|node| async move {
            let stored: i64 = node
                .script_within(limit, &crate::lua::NOTE, &key_list, &args)
                .await?;
            Ok(stored == 1)
        }))
        .await;
        let tally = tally(replies);
        if tally.yes >= self.quorum() {
            // Stored after the lease ran out, the note may sit beside holds that expired on
            // some masters: it is the owner's own record, shown only beside its hold, but the
            // caller must not count on it.
            return Ok(lease.valid_until().is_none_or(|until| Instant::now() < until));
        }
        if tally.no > self.inner.nodes.len() - self.quorum() {
            return Ok(false);
        }
        Err(self.no_majority("note", tally.yes + tally.no, &tally.errors))
    }
}

/// The note `owner` left, from the note records (`<owner>\n<note>`) of the masters that
/// answered: the value most of them carry among the records `owner` left, `None` on a tie
/// (`owner` replaced its note and the masters that answered are split between the values).
///
/// Any record `owner` left counts, not only those beside a live hold: a note stored on a
/// majority shares a master with every majority that answers, so a minority that missed it
/// hides nothing; and a record another owner left is never read as `owner`'s.
pub(super) fn agreed_note(records: &[Vec<u8>], owner: &[u8]) -> Option<String> {
    let mut counts = HashMap::<&[u8], usize>::new();
    for record in records {
        let Some(split) = record.iter().position(|&b| b == b'\n') else {
            continue;
        };
        if record[..split] == *owner {
            *counts.entry(&record[split + 1..]).or_default() += 1;
        }
    }
    let most = counts.values().copied().max()?;
    let mut agreed = counts.into_iter().filter(|&(_, count)| count == most);
    match (agreed.next(), agreed.next()) {
        (Some((note, _)), None) => Some(String::from_utf8_lossy(note).into_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::agreed_note;

    fn records(list: &[&str]) -> Vec<Vec<u8>> {
        list.iter().map(|r| r.as_bytes().to_vec()).collect()
    }

    #[test]
    fn the_owners_most_carried_value_is_its_note() {
        let read = records(&["a\nnew", "a\nold", "a\nnew"]);
        assert_eq!(agreed_note(&read, b"a").as_deref(), Some("new"));
        // One master carries it, the others missed it or restarted: still the owner's note.
        assert_eq!(agreed_note(&records(&["a\nx:1"]), b"a").as_deref(), Some("x:1"));
        // Lines within a note come back whole.
        assert_eq!(agreed_note(&records(&["a\nx\ny"]), b"a").as_deref(), Some("x\ny"));
    }

    #[test]
    fn another_owners_record_is_never_read_and_a_tie_shows_nothing() {
        assert_eq!(agreed_note(&records(&["b\nx", "b\nx"]), b"a"), None);
        assert_eq!(agreed_note(&records(&["ab\nx", "a"]), b"a"), None);
        assert_eq!(agreed_note(&records(&["a\nold", "a\nnew", "b\nx"]), b"a"), None);
        assert_eq!(agreed_note(&[], b"a"), None);
    }
}

//! The value of one semaphore's or read-write lock's item, and the rules that change it.
//!
//! This module owns the encoding and the decisions (who may come in, whose hold ends); it is
//! pure and may not talk to a server (`holders.rs` reads and writes the item).
//!
//! One item holds the whole object, so that every change is one CAS-guarded rewrite and the
//! rules see every holder at once (an exact permit count, a mismatched count detected):
//!
//! ```text
//! v1 <expires> <counter> <permits> h<side><owner>:<until>:<token>[:<weight>] ... q<waiter>:<until> ...
//! ```
//!
//! - `expires`: the item's own absolute expiry, in unix seconds **on the server's clock**
//!   (the item is written with that absolute expiry, so `mg ... t`, the seconds it has left,
//!   gives the server's clock as `expires - t`);
//! - `counter`: the last fencing token handed out for this object;
//! - `permits`: the count the semaphore's live holders were admitted with (0 for a read-write
//!   lock);
//! - one `h` record per hold: `side` is `p` (a permit), `r` (a read), `u` (the upgradeable
//!   read; a client that predates it refuses the item rather than misread it) or `w` (the
//!   write lock),
//!   `owner` the owner token as 32 hex digits, `until` the server second at which the hold
//!   ends (it is over once the server's clock reaches it, as memcached judges its items),
//!   `token` its fencing token, and `weight` the permits a semaphore's hold takes, written
//!   only when it is more than one (so records written before weights existed read as one
//!   permit each, and an item without weighted holds reads the same to older clients);
//! - one `q` record per waiting writer, with the server second at which its record lapses.

use std::fmt::Write as _;
use std::time::Duration;

use distlock_core::{Holder, LockKind};

/// The most holds one item keeps: a semaphore has at most this many permits, and a read-write
/// lock at most this many readers at once.
pub(crate) const MAX_HOLDERS: usize = 512;
/// The most waiting writers one item records. Past it a waiting writer is not recorded; the
/// ones recorded keep new readers out all the same.
pub(crate) const MAX_WAITING_WRITERS: usize = 64;
/// The longest waiter id: ids are opaque to us, the core's are UUIDs.
pub(crate) const MAX_WAITER_ID: usize = 64;

/// The longest value an item can reach: the header, every hold, every waiting writer (each
/// with its widest numbers and separators). A weight is written only for a hold of two
/// permits or more, so at most half of [`MAX_HOLDERS`] holds carry one.
pub(crate) const MAX_VALUE_LEN: usize = HEADER_LEN
    + MAX_HOLDERS * HOLD_LEN
    + MAX_HOLDERS / 2 * WEIGHT_LEN
    + MAX_WAITING_WRITERS * (MAX_WAITER_ID + WAITER_EXTRA_LEN);
/// `v1` and three numbers of at most 20 digits, each after a space.
const HEADER_LEN: usize = 2 + 3 * 21;
/// ` h`, the side, 32 hex digits, and two `:`-led numbers of at most 20 digits.
const HOLD_LEN: usize = 2 + 1 + 32 + 2 * 21;
/// `:` and a weight of at most 3 digits (a weight is at most the count, at most
/// [`MAX_HOLDERS`]).
const WEIGHT_LEN: usize = 1 + 3;
/// ` q`, then a `:`-led number of at most 20 digits.
const WAITER_EXTRA_LEN: usize = 2 + 21;
const _: () = assert!(MAX_VALUE_LEN <= crate::wire::MAX_VALUE);
// The bound the documentation on `MemcachedLock` states.
const _: () = assert!(MAX_VALUE_LEN < 48 * 1024);

/// Which side of its object a hold is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Permit,
    Read,
    /// The upgradeable read: shares with plain reads, excludes writes and other upgradeable
    /// reads, and its owner's write attempt turns it into the write hold.
    Upgradeable,
    Write,
}

impl Side {
    /// The side a hold of `kind` takes; `None` for the mutex.
    pub(crate) fn of(kind: LockKind) -> Option<Self> {
        match kind {
            LockKind::Permit { .. } => Some(Self::Permit),
            LockKind::Read => Some(Self::Read),
            LockKind::UpgradeableRead => Some(Self::Upgradeable),
            LockKind::Write => Some(Self::Write),
            _ => None,
        }
    }

    fn letter(self) -> char {
        match self {
            Self::Permit => 'p',
            Self::Read => 'r',
            Self::Upgradeable => 'u',
            Self::Write => 'w',
        }
    }

    fn from_letter(letter: char) -> Option<Self> {
        match letter {
            'p' => Some(Self::Permit),
            'r' => Some(Self::Read),
            'u' => Some(Self::Upgradeable),
            'w' => Some(Self::Write),
            _ => None,
        }
    }
}

/// One hold recorded in the item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hold {
    pub(crate) side: Side,
    pub(crate) owner: u128,
    pub(crate) until: u64,
    pub(crate) token: u64,
    /// The permits it takes (1 for reads and writes).
    pub(crate) weight: u32,
}

/// One waiting writer recorded in the item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WaitingWriter {
    pub(crate) id: String,
    pub(crate) until: u64,
}

/// The decoded value of an object's item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    /// The item's absolute expiry on the server's clock (unix seconds).
    pub(crate) expires: u64,
    /// The last fencing token handed out.
    pub(crate) counter: u64,
    /// The semaphore's count as its live holders know it (0 for a read-write lock).
    pub(crate) permits: u32,
    pub(crate) holds: Vec<Hold>,
    pub(crate) waiting: Vec<WaitingWriter>,
}

/// What an attempt at a hold found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Granted, with this fencing token.
    Granted { token: u64 },
    /// Not granted; `recorded` says whether the item changed (a waiting writer's record) and
    /// must be written all the same.
    Refused { holder: Holder, recorded: bool },
}

/// Why an attempt is refused with an error rather than a wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The live holders were admitted with `stored` permits.
    PermitsMismatch { stored: u32 },
    /// The item already keeps [`MAX_HOLDERS`] holds.
    TooManyHolders,
    /// The kind is the mutex's (or unknown): it has no side in an object item.
    NotAHold,
}

impl Item {
    /// A new, empty object item expiring at `expires` whose fencing counter starts at `counter`.
    pub(crate) fn fresh(expires: u64, counter: u64) -> Self {
        Self {
            expires,
            counter,
            permits: 0,
            holds: Vec::new(),
            waiting: Vec::new(),
        }
    }

    /// Decodes an item's value; `None` if it is not one of ours.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let mut words = text.split(' ');
        if words.next()? != "v1" {
            return None;
        }
        let mut item = Self::fresh(words.next()?.parse().ok()?, words.next()?.parse().ok()?);
        item.permits = words.next()?.parse().ok()?;
        for word in words {
            let mut chars = word.chars();
            match chars.next()? {
                'h' => {
                    let side = Side::from_letter(chars.next()?)?;
                    let mut parts = chars.as_str().split(':');
                    let owner = parts.next().filter(|o| o.len() == 32)?;
                    let hold = Hold {
                        side,
                        owner: u128::from_str_radix(owner, 16).ok()?,
                        until: parts.next()?.parse().ok()?,
                        token: parts.next()?.parse().ok()?,
                        weight: match parts.next() {
                            Some(weight) => weight.parse().ok().filter(|w| *w > 1)?,
                            None => 1,
                        },
                    };
                    if parts.next().is_some() {
                        return None;
                    }
                    item.holds.push(hold);
                }
                'q' => {
                    let (id, until) = chars.as_str().rsplit_once(':')?;
                    if !is_valid_waiter_id(id) {
                        return None;
                    }
                    item.waiting.push(WaitingWriter {
                        id: id.to_owned(),
                        until: until.parse().ok()?,
                    });
                }
                _ => return None,
            }
        }
        Some(item)
    }

    /// Encodes the item (at most [`MAX_VALUE_LEN`] bytes while the bounds hold).
    pub(crate) fn encode(&self) -> String {
        let mut out = format!("v1 {} {} {}", self.expires, self.counter, self.permits);
        for hold in &self.holds {
            let _ = write!(
                out,
                " h{}{:032x}:{}:{}",
                hold.side.letter(),
                hold.owner,
                hold.until,
                hold.token
            );
            if hold.weight != 1 {
                let _ = write!(out, ":{}", hold.weight);
            }
        }
        for waiter in &self.waiting {
            let _ = write!(out, " q{}:{}", waiter.id, waiter.until);
        }
        out
    }

    /// Forgets holds and waiting writers whose time is over at server second `now`.
    pub(crate) fn prune(&mut self, now: u64) {
        self.holds.retain(|h| h.until > now);
        self.waiting.retain(|w| w.until > now);
    }

    /// One attempt at a hold of `kind` for `owner` until server second `until`, on a pruned
    /// item at server second `now`. A refused [`LockKind::Write`] attempt with a `waiter`
    /// (its id and the second its record lapses) records it; a granted one removes it.
    ///
    /// A write attempt by the owner of the upgradeable read is its upgrade: granted once no
    /// other hold remains, it replaces that hold with the write hold (a new token) in this
    /// same rewrite, so nothing can come between.
    pub(crate) fn admit(
        &mut self,
        kind: LockKind,
        owner: u128,
        until: u64,
        waiter: Option<(&str, u64)>,
        now: u64,
    ) -> Result<Admission, Refusal> {
        let Some(side) = Side::of(kind) else {
            return Err(Refusal::NotAHold);
        };
        let blocked = match kind {
            LockKind::Permit { permits, weight } => {
                if !self.holds.is_empty() && self.permits != permits {
                    return Err(Refusal::PermitsMismatch { stored: self.permits });
                }
                let taken: u64 = self.holds.iter().map(|h| u64::from(h.weight)).sum();
                let full = taken + u64::from(weight) > u64::from(permits);
                full.then(|| self.expiring(now, true, |_: &Hold| true))
            }
            // Plain and upgradeable readers: kept out by the holds their kind excludes, then
            // by any waiting writer.
            LockKind::Read | LockKind::UpgradeableRead => {
                let excluded = |h: &Hold| match h.side {
                    Side::Write => true,
                    Side::Upgradeable => kind == LockKind::UpgradeableRead,
                    Side::Permit | Side::Read => false,
                };
                if self.holds.iter().any(excluded) {
                    Some(self.expiring(now, true, excluded))
                } else {
                    (!self.waiting.is_empty()).then(Holder::unknown)
                }
            }
            // A writer waits for every hold to end but its own upgradeable read; other waiting
            // writers do not block it.
            _ => {
                let other = |h: &Hold| !(h.owner == owner && h.side == Side::Upgradeable);
                self.holds
                    .iter()
                    .any(other)
                    .then(|| self.expiring(now, false, other))
            }
        };
        if let Some(holder) = blocked {
            let recorded = match (side, waiter) {
                (Side::Write, Some((id, lapses))) => self.record_waiter(id, lapses),
                _ => false,
            };
            return Ok(Admission::Refused { holder, recorded });
        }
        if side == Side::Write {
            // The upgrade: its upgradeable read becomes this write hold.
            self.release(Side::Upgradeable, owner);
        }
        if self.holds.len() >= MAX_HOLDERS {
            return Err(Refusal::TooManyHolders);
        }
        if let (Side::Write, Some((id, _))) = (side, waiter) {
            self.withdraw(id);
        }
        if let LockKind::Permit { permits, .. } = kind {
            self.permits = permits;
        }
        self.counter = self.counter.saturating_add(1);
        self.holds.push(Hold {
            side,
            owner,
            until,
            token: self.counter,
            weight: kind.weight(),
        });
        Ok(Admission::Granted { token: self.counter })
    }

    /// Ends `owner`'s hold on `side`; whether there was one.
    pub(crate) fn release(&mut self, side: Side, owner: u128) -> bool {
        let before = self.holds.len();
        self.holds.retain(|h| !(h.side == side && h.owner == owner));
        self.holds.len() != before
    }

    /// Moves the end of `owner`'s hold on `side` to `until`; whether there was one.
    pub(crate) fn renew(&mut self, side: Side, owner: u128, until: u64) -> bool {
        match self.holds.iter_mut().find(|h| h.side == side && h.owner == owner) {
            Some(hold) => {
                hold.until = until;
                true
            }
            None => false,
        }
    }

    /// Removes the waiting writer `id`; whether it was recorded.
    pub(crate) fn withdraw(&mut self, id: &str) -> bool {
        let before = self.waiting.len();
        self.waiting.retain(|w| w.id != id);
        self.waiting.len() != before
    }

    /// Records (or prolongs) the waiting writer `id` until `lapses`; whether the item changed.
    fn record_waiter(&mut self, id: &str, lapses: u64) -> bool {
        if let Some(waiter) = self.waiting.iter_mut().find(|w| w.id == id) {
            if waiter.until >= lapses {
                return false; // already recorded for as long: nothing to write
            }
            waiter.until = lapses;
            return true;
        }
        if self.waiting.len() >= MAX_WAITING_WRITERS {
            return false;
        }
        self.waiting.push(WaitingWriter {
            id: id.to_owned(),
            until: lapses,
        });
        true
    }

    /// The first (`earliest`) or last hold on a side `which` accepts to end, as a waiter's
    /// hint: the seconds left on the server's clock and the holder's owner token.
    fn expiring(&self, now: u64, earliest: bool, which: impl Fn(&Hold) -> bool) -> Holder {
        let holds = self.holds.iter().filter(|h| which(h));
        let hold = if earliest {
            holds.min_by_key(|h| h.until)
        } else {
            holds.max_by_key(|h| h.until)
        };
        hold.map_or_else(Holder::unknown, |h| {
            Holder::expiring_in(Duration::from_secs(h.until.saturating_sub(now)))
                .with_owner(owner_text(h.owner))
        })
    }
}

/// Whether `id` can be recorded as a waiter: 1 to [`MAX_WAITER_ID`] characters of
/// `[A-Za-z0-9._-]` (no separator of the encoding).
pub(crate) fn is_valid_waiter_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_WAITER_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// An owner token as [`distlock_core::OwnerToken`] displays it (a hyphenated UUID).
pub(crate) fn owner_text(owner: u128) -> String {
    let hex = format!("{owner:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::OwnerToken;

    const NOW: u64 = 1_800_000_000;

    fn permit(n: u32) -> LockKind {
        LockKind::Permit {
            permits: n,
            weight: 1,
        }
    }

    fn granted(outcome: Result<Admission, Refusal>) -> u64 {
        match outcome {
            Ok(Admission::Granted { token }) => token,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    fn refused(outcome: Result<Admission, Refusal>) -> (Holder, bool) {
        match outcome {
            Ok(Admission::Refused { holder, recorded }) => (holder, recorded),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn encoding_round_trips() {
        let mut item = Item::fresh(NOW + 100, 41);
        granted(item.admit(permit(3), u128::MAX, NOW + 5, None, NOW));
        granted(item.admit(permit(3), 7, NOW + 9, None, NOW));
        item.record_waiter("6f1c-waiter_1.x", NOW + 3);
        let text = item.encode();
        assert_eq!(Item::parse(&text), Some(item));
        for bad in [
            "",
            "v2 1 2 3",
            "v1 1 2",
            "v1 1 2 3 hx00:1:2",
            "v1 1 2 3 q:1",
            "v1 1 2 3 z",
        ] {
            assert_eq!(Item::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_largest_item_fits_the_bound() {
        let mut item = Item::fresh(u64::MAX, u64::MAX);
        item.permits = u32::MAX;
        for i in 0..MAX_HOLDERS {
            item.holds.push(Hold {
                side: Side::Permit,
                owner: u128::MAX - i as u128,
                until: u64::MAX,
                token: u64::MAX,
                weight: 1,
            });
        }
        for i in 0..MAX_WAITING_WRITERS {
            item.waiting.push(WaitingWriter {
                id: format!("{i:0>64}"),
                until: u64::MAX,
            });
        }
        let text = item.encode();
        assert!(text.len() <= MAX_VALUE_LEN, "{} > {MAX_VALUE_LEN}", text.len());
        assert_eq!(Item::parse(&text), Some(item));
    }

    #[test]
    fn permits_are_counted_exactly_and_tokens_increase() {
        let mut item = Item::fresh(NOW + 100, 10);
        let tokens: Vec<u64> = (1..=3)
            .map(|owner| granted(item.admit(permit(3), owner, NOW + owner as u64, None, NOW)))
            .collect();
        assert_eq!(tokens, [11, 12, 13]);
        let (holder, recorded) = refused(item.admit(permit(3), 4, NOW + 9, None, NOW));
        assert_eq!(
            holder.remaining,
            Some(Duration::from_secs(1)),
            "the earliest holder"
        );
        assert!(!recorded);
        assert!(item.release(Side::Permit, 2));
        assert!(!item.release(Side::Permit, 2), "released once only");
        assert_eq!(granted(item.admit(permit(3), 4, NOW + 9, None, NOW)), 14);
    }

    #[test]
    fn a_weighted_hold_takes_its_weight_and_is_one_record() {
        let mut item = Item::fresh(NOW + 100, 0);
        granted(item.admit(LockKind::permits(4, 3), 1, NOW + 5, None, NOW));
        let (_, recorded) = refused(item.admit(LockKind::permits(4, 2), 2, NOW + 5, None, NOW));
        assert!(!recorded);
        granted(item.admit(permit(4), 3, NOW + 5, None, NOW));
        refused(item.admit(permit(4), 4, NOW + 5, None, NOW));
        assert_eq!(item.holds.len(), 2);
        let text = item.encode();
        assert!(text.contains(":3 ") || text.ends_with(":3"), "{text}");
        assert_eq!(Item::parse(&text), Some(item.clone()));
        // Released whole: all three permits come back.
        assert!(item.release(Side::Permit, 1));
        granted(item.admit(LockKind::permits(4, 3), 5, NOW + 5, None, NOW));
        // Records without a weight (as written before weights) take one permit; a weight of
        // 0 or 1 is never written, so it is not one of ours.
        let old = format!("v1 {} 7 2 hp{:032x}:{}:7", NOW + 100, 9, NOW + 5);
        let mut old = Item::parse(&old).expect("an old record reads");
        assert_eq!(old.holds[0].weight, 1);
        granted(old.admit(permit(2), 10, NOW + 5, None, NOW));
        for bad in [":0", ":1", ":x", ":2:2"] {
            let text = format!("v1 {} 7 2 hp{:032x}:{}:7{bad}", NOW + 100, 9, NOW + 5);
            assert_eq!(Item::parse(&text), None, "{text}");
        }
    }

    #[test]
    fn a_mismatched_count_is_refused_while_holders_live() {
        let mut item = Item::fresh(NOW + 100, 0);
        granted(item.admit(permit(3), 1, NOW + 2, None, NOW));
        let before = item.clone();
        assert_eq!(
            item.admit(permit(5), 2, NOW + 2, None, NOW),
            Err(Refusal::PermitsMismatch { stored: 3 })
        );
        assert_eq!(item, before, "nothing changed");
        item.prune(NOW + 2);
        assert_eq!(granted(item.admit(permit(5), 2, NOW + 9, None, NOW + 2)), 2);
        assert_eq!(item.permits, 5);
    }

    #[test]
    fn holds_end_when_the_server_clock_reaches_them() {
        let mut item = Item::fresh(NOW + 100, 0);
        granted(item.admit(permit(1), 1, NOW + 3, None, NOW));
        item.prune(NOW + 2);
        assert_eq!(item.holds.len(), 1);
        item.prune(NOW + 3);
        assert!(item.holds.is_empty());
        assert!(
            !item.renew(Side::Permit, 1, NOW + 10),
            "an ended hold is not renewed"
        );
    }

    #[test]
    fn readers_share_and_a_writer_excludes() {
        let mut item = Item::fresh(NOW + 100, 0);
        granted(item.admit(LockKind::Read, 1, NOW + 5, None, NOW));
        granted(item.admit(LockKind::Read, 2, NOW + 8, None, NOW));
        let (holder, recorded) = refused(item.admit(LockKind::Write, 3, NOW + 5, None, NOW));
        assert_eq!(holder.remaining, Some(Duration::from_secs(8)), "the last reader");
        assert!(!recorded, "no waiter given, nothing recorded");
        item.release(Side::Read, 1);
        item.release(Side::Read, 2);
        granted(item.admit(LockKind::Write, 3, NOW + 4, None, NOW));
        let (holder, _) = refused(item.admit(LockKind::Read, 4, NOW + 5, None, NOW));
        assert_eq!(holder.remaining, Some(Duration::from_secs(4)), "the writer");
        assert_eq!(holder.owner, Some(owner_text(3)));
        refused(item.admit(LockKind::Write, 5, NOW + 5, None, NOW));
    }

    #[test]
    fn a_waiting_writer_keeps_new_readers_out_until_it_wins_or_withdraws() {
        let mut item = Item::fresh(NOW + 100, 0);
        granted(item.admit(LockKind::Read, 1, NOW + 5, None, NOW));
        let (_, recorded) = refused(item.admit(LockKind::Write, 2, NOW + 5, Some(("w", NOW + 3)), NOW));
        assert!(recorded);
        let (_, recorded) = refused(item.admit(LockKind::Write, 2, NOW + 5, Some(("w", NOW + 3)), NOW));
        assert!(!recorded, "the same record: nothing to write");
        let (holder, _) = refused(item.admit(LockKind::Read, 3, NOW + 5, None, NOW));
        assert_eq!(holder, Holder::unknown());
        item.release(Side::Read, 1);
        granted(item.admit(LockKind::Write, 2, NOW + 5, Some(("w", NOW + 3)), NOW));
        assert!(item.waiting.is_empty(), "the winner's record is gone");
        item.release(Side::Write, 2);
        // A writer that was not blocked at all wins even while another writer waits.
        let mut free = Item::fresh(NOW + 100, 0);
        free.record_waiter("other", NOW + 3);
        granted(free.admit(LockKind::Write, 9, NOW + 5, Some(("me", NOW + 3)), NOW));
        assert_eq!(free.waiting.len(), 1, "the other waiter stays recorded");
        // Withdrawn, or lapsed: readers come in again.
        let mut item = Item::fresh(NOW + 100, 0);
        item.record_waiter("w", NOW + 3);
        assert!(item.withdraw("w"));
        granted(item.admit(LockKind::Read, 1, NOW + 5, None, NOW));
        item.record_waiter("w", NOW + 3);
        item.prune(NOW + 3);
        granted(item.admit(LockKind::Read, 2, NOW + 5, None, NOW + 3));
    }

    #[test]
    fn an_upgradeable_read_shares_with_readers_and_upgrades_in_place() {
        let mut item = Item::fresh(NOW + 100, 0);
        let read_token = granted(item.admit(LockKind::UpgradeableRead, 1, NOW + 5, None, NOW));
        granted(item.admit(LockKind::Read, 2, NOW + 5, None, NOW));
        let (holder, _) = refused(item.admit(LockKind::UpgradeableRead, 3, NOW + 5, None, NOW));
        assert_eq!(
            holder.owner,
            Some(owner_text(1)),
            "one upgradeable reader at a time"
        );
        refused(item.admit(LockKind::Write, 3, NOW + 5, None, NOW));
        // The upgrade waits for the plain reader, and its waiter record keeps new readers
        // (plain and upgradeable) out meanwhile.
        let (holder, recorded) = refused(item.admit(LockKind::Write, 1, NOW + 9, Some(("up", NOW + 3)), NOW));
        assert!(recorded);
        assert_eq!(
            holder.owner,
            Some(owner_text(2)),
            "waits for the plain reader only"
        );
        refused(item.admit(LockKind::Read, 4, NOW + 5, None, NOW));
        let text = item.encode();
        assert_eq!(Item::parse(&text), Some(item.clone()), "{text}");
        item.release(Side::Read, 2);
        let write_token = granted(item.admit(LockKind::Write, 1, NOW + 9, Some(("up", NOW + 3)), NOW));
        assert!(write_token > read_token);
        assert_eq!(item.holds.len(), 1, "one write record, no upgradeable read left");
        assert_eq!((item.holds[0].side, item.holds[0].owner), (Side::Write, 1));
        assert!(item.waiting.is_empty());
        assert!(
            !item.renew(Side::Upgradeable, 1, NOW + 20),
            "the read hold is gone"
        );
        refused(item.admit(LockKind::UpgradeableRead, 3, NOW + 5, None, NOW));
        assert!(item.release(Side::Write, 1));
        assert!(item.holds.is_empty());
        // A plain reader's write attempt is no upgrade: it waits for its own read.
        granted(item.admit(LockKind::Read, 5, NOW + 5, None, NOW));
        refused(item.admit(LockKind::Write, 5, NOW + 5, None, NOW));
    }

    #[test]
    fn holds_and_waiters_are_bounded() {
        let mut item = Item::fresh(NOW + 100, 0);
        for owner in 0..MAX_HOLDERS as u128 {
            granted(item.admit(LockKind::Read, owner, NOW + 5, None, NOW));
        }
        assert_eq!(
            item.admit(LockKind::Read, u128::MAX, NOW + 5, None, NOW),
            Err(Refusal::TooManyHolders)
        );
        for i in 0..MAX_WAITING_WRITERS {
            assert!(item.record_waiter(&format!("w{i}"), NOW + 3));
        }
        assert!(!item.record_waiter("one-more", NOW + 3));
        assert_eq!(item.waiting.len(), MAX_WAITING_WRITERS);
    }

    #[test]
    fn the_mutex_has_no_side() {
        let mut item = Item::fresh(NOW + 100, 0);
        assert_eq!(
            item.admit(LockKind::Exclusive, 1, NOW + 5, None, NOW),
            Err(Refusal::NotAHold)
        );
        assert!(item.holds.is_empty());
    }

    #[test]
    fn owners_display_as_owner_tokens_do() {
        let owner = OwnerToken::new();
        assert_eq!(owner_text(owner.as_uuid().as_u128()), owner.to_string());
    }

    #[test]
    fn waiter_ids_are_checked() {
        assert!(is_valid_waiter_id(&OwnerToken::new().to_string()));
        for bad in ["", "a b", "a:b", "é", &"x".repeat(MAX_WAITER_ID + 1)] {
            assert!(!is_valid_waiter_id(bad), "{bad:?}");
        }
    }
}

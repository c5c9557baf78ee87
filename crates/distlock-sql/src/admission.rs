//! Who gets into a semaphore or a read-write lock: the rule, over a [`Census`] of the
//! object's live rows taken while the attempt holds the object (see `lock/holds.rs`). This
//! module owns the rule only; it runs no statement.
//!
//! SQLite applies it here, in Rust, between the census and the writes of one `BEGIN
//! IMMEDIATE` transaction. MySQL applies the same rule inside its one round trip, in SQL
//! (`holds_sql.rs`, `mysql_attempt`), and reports the census it decided on, which gives the
//! waiter its wake-up hint through [`Census::wait_hint`] on both dialects. PostgreSQL applies
//! it in PL/pgSQL (`holds_sql.rs`, the attempt's function).
//!
//! So the rule exists three times. `admission_agreement.rs` holds them to one table of
//! situations on real servers (SQLite, MariaDB, PostgreSQL); a change to the rule changes all
//! three copies and that table.

use distlock_core::LockKind;

/// The live rows of one semaphore or read-write lock, as one attempt saw them. Remaining
/// times are in the dialect's unit (µs on MySQL, ms on SQLite).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Census {
    /// Live holds of any kind (permits, readers, the writer), each counted by its weight (the
    /// permits it takes; 1 for anything but a permit): so, for a semaphore, the permits taken.
    pub(crate) holds: i64,
    /// Live read holds.
    pub(crate) readers: i64,
    /// Live write holds (0 or 1).
    pub(crate) writers: i64,
    /// Live waiting-writer records.
    pub(crate) waiting: i64,
    /// The permit count the live permit holders were admitted with, if any is live.
    pub(crate) stored_permits: Option<i64>,
    /// The fencing token of the attempt's own live hold (same owner, same kind): a retried
    /// attempt whose first try was applied.
    pub(crate) mine: Option<i64>,
    /// Time left on the permit that expires first.
    pub(crate) first_permit_left: Option<i64>,
    /// Time left on the read hold that expires last.
    pub(crate) last_reader_left: Option<i64>,
    /// Time left on the write hold.
    pub(crate) writer_left: Option<i64>,
    /// Live upgradeable read holds (0 or 1).
    pub(crate) upgraders: i64,
    /// The fencing token of the attempt's owner's live upgradeable read, if any: a write
    /// attempt by that owner is its upgrade.
    pub(crate) my_upgradeable: Option<i64>,
}

/// The columns a census query yields, in order.
pub(crate) type CensusRow = (
    i64,
    i64,
    i64,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    i64,
    Option<i64>,
);

impl From<CensusRow> for Census {
    fn from(row: CensusRow) -> Self {
        let (
            holds,
            readers,
            writers,
            waiting,
            stored_permits,
            mine,
            first_permit_left,
            last_reader_left,
            writer_left,
            upgraders,
            my_upgradeable,
        ) = row;
        Self {
            holds,
            readers,
            writers,
            waiting,
            stored_permits,
            mine,
            first_permit_left,
            last_reader_left,
            writer_left,
            upgraders,
            my_upgradeable,
        }
    }
}

/// What an attempt at a hold of some kind does, given the census.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The attempt's own hold is live already (a retry of an attempt that was applied): renew
    /// it and hand back its token.
    Renew(i64),
    /// Take a new hold.
    Admit,
    /// Turn the owner's upgradeable read into the write hold (with a new fencing token).
    Upgrade,
    /// Live permit holders were admitted with this other count: change nothing.
    Mismatch(i64),
    /// Full, or excluded by readers, a writer or a waiting writer.
    Refuse,
}

impl Census {
    /// The rule:
    /// - `weight` permits of `permits` get in while the live holds take no more than
    ///   `permits - weight`, unless the live holders were admitted with another count (then
    ///   nothing changes);
    /// - a reader gets in unless a writer holds or a writer is recorded waiting (writer
    ///   preference: a waiting writer keeps new readers out);
    /// - an upgradeable reader as a reader, and also not while another upgradeable reader
    ///   holds;
    /// - a writer gets in when no hold at all is live (other waiting writers do not block it);
    ///   a writer whose owner holds the object's upgradeable read (its upgrade) when no other
    ///   hold is live, and then that hold becomes the write hold.
    pub(crate) fn verdict(&self, kind: LockKind) -> Verdict {
        if let Some(token) = self.mine {
            return Verdict::Renew(token);
        }
        let admitted = match kind {
            LockKind::Permit { permits, weight } => {
                if let Some(stored) = self.stored_permits.filter(|&s| s != i64::from(permits)) {
                    return Verdict::Mismatch(stored);
                }
                self.holds + i64::from(weight) <= i64::from(permits)
            }
            LockKind::Read => self.writers == 0 && self.waiting == 0,
            LockKind::UpgradeableRead => self.writers == 0 && self.upgraders == 0 && self.waiting == 0,
            // The owner's own upgradeable read is the one hold (of weight 1) left.
            LockKind::Write if self.my_upgradeable.is_some() => {
                return match self.holds == 1 {
                    true => Verdict::Upgrade,
                    false => Verdict::Refuse,
                };
            }
            LockKind::Write => self.holds == 0,
            _ => false,
        };
        if admitted {
            Verdict::Admit
        } else {
            Verdict::Refuse
        }
    }

    /// When a refused attempt of `kind` could next get in, in the dialect's unit, if known:
    /// a permit when the first permit expires, a reader when the writer's hold expires, a
    /// writer when the writer's or the last reader's hold expires. A reader kept out only by
    /// a waiting writer has no such moment (`None`).
    pub(crate) fn wait_hint(&self, kind: LockKind) -> Option<i64> {
        match kind {
            LockKind::Permit { .. } => self.first_permit_left,
            LockKind::Read | LockKind::UpgradeableRead => self.writer_left.filter(|_| self.writers > 0),
            LockKind::Write if self.writers > 0 => self.writer_left,
            LockKind::Write => self.last_reader_left,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn permits(n: u32) -> LockKind {
        LockKind::Permit {
            permits: n,
            weight: 1,
        }
    }

    #[test]
    fn permits_are_counted_and_must_agree() {
        let empty = Census::default();
        assert_eq!(empty.verdict(permits(1)), Verdict::Admit);
        let two = Census {
            holds: 2,
            stored_permits: Some(3),
            first_permit_left: Some(40),
            ..Census::default()
        };
        assert_eq!(two.verdict(permits(3)), Verdict::Admit);
        assert_eq!(two.verdict(permits(2)), Verdict::Mismatch(3));
        assert_eq!(two.verdict(permits(4)), Verdict::Mismatch(3));
        let full = Census { holds: 3, ..two };
        assert_eq!(full.verdict(permits(3)), Verdict::Refuse);
        assert_eq!(full.wait_hint(permits(3)), Some(40));
    }

    #[test]
    fn one_upgradeable_reader_beside_readers_and_its_upgrade() {
        let reader = Census {
            holds: 1,
            readers: 1,
            ..Census::default()
        };
        assert_eq!(reader.verdict(LockKind::UpgradeableRead), Verdict::Admit);
        let both = Census {
            holds: 2,
            upgraders: 1,
            ..reader.clone()
        };
        assert_eq!(both.verdict(LockKind::Read), Verdict::Admit);
        assert_eq!(both.verdict(LockKind::UpgradeableRead), Verdict::Refuse);
        assert_eq!(both.verdict(LockKind::Write), Verdict::Refuse);
        let mine = Census {
            my_upgradeable: Some(9),
            ..both
        };
        assert_eq!(mine.verdict(LockKind::Write), Verdict::Refuse, "a reader is in");
        let alone = Census {
            holds: 1,
            readers: 0,
            ..mine
        };
        assert_eq!(alone.verdict(LockKind::Write), Verdict::Upgrade);
        let waiting = Census { waiting: 1, ..reader };
        assert_eq!(waiting.verdict(LockKind::UpgradeableRead), Verdict::Refuse);
    }

    #[test]
    fn weights_are_counted() {
        let two_taken = Census {
            holds: 2,
            stored_permits: Some(4),
            ..Census::default()
        };
        let of = |weight| LockKind::Permit { permits: 4, weight };
        assert_eq!(two_taken.verdict(of(2)), Verdict::Admit);
        assert_eq!(two_taken.verdict(of(3)), Verdict::Refuse);
        assert_eq!(Census::default().verdict(of(4)), Verdict::Admit);
    }

    #[test]
    fn a_retry_finds_its_own_hold() {
        let full = Census {
            holds: 3,
            stored_permits: Some(3),
            mine: Some(17),
            ..Census::default()
        };
        assert_eq!(full.verdict(permits(3)), Verdict::Renew(17));
        assert_eq!(full.verdict(LockKind::Write), Verdict::Renew(17));
    }

    #[test]
    fn readers_share_writers_exclude_and_waiting_writers_keep_readers_out() {
        let readers = Census {
            holds: 2,
            readers: 2,
            last_reader_left: Some(90),
            ..Census::default()
        };
        assert_eq!(readers.verdict(LockKind::Read), Verdict::Admit);
        assert_eq!(readers.verdict(LockKind::Write), Verdict::Refuse);
        assert_eq!(readers.wait_hint(LockKind::Write), Some(90));

        let waiting = Census {
            waiting: 1,
            ..readers
        };
        assert_eq!(waiting.verdict(LockKind::Read), Verdict::Refuse);
        assert_eq!(waiting.wait_hint(LockKind::Read), None);

        let writer = Census {
            holds: 1,
            writers: 1,
            writer_left: Some(30),
            ..Census::default()
        };
        assert_eq!(writer.verdict(LockKind::Read), Verdict::Refuse);
        assert_eq!(writer.verdict(LockKind::Write), Verdict::Refuse);
        assert_eq!(writer.wait_hint(LockKind::Read), Some(30));
        assert_eq!(writer.wait_hint(LockKind::Write), Some(30));

        let only_waiters = Census {
            waiting: 2,
            ..Census::default()
        };
        assert_eq!(only_waiters.verdict(LockKind::Write), Verdict::Admit);
    }
}

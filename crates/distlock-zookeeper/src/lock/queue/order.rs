//! The order of a queue of sequential nodes, and who in it holds: the rules of the mutex, the
//! read side and the write side of the read-write lock (Curator's lock recipes), as pure
//! functions of one listing.
//!
//! - Mutex and writer: the first node holds; a waiter watches its immediate predecessor.
//! - Reader: holds when no writer's node sorts before it; a waiter watches the last writer's
//!   node before it (the one whose deletion can free it). Readers that came after a waiting
//!   writer wait behind it, so a stream of readers never starves a writer: the queue is FIFO
//!   for writers, and readers between two writers share.

use distlock_core::LockKind;

use crate::lock::layout::{LEASE_NODE, LOCK_NODE, UPGRADEABLE_NODE, WRITE_NODE};

/// The markers after whose last occurrence the whole rest of a name is the sequence: their
/// own trailing hyphen is no sign.
const HYPHENATED_MARKERS: [&str; 2] = [LOCK_NODE, LEASE_NODE];

/// The sequence number that ends a sequential node's name (ours, Curator's or kazoo's).
///
/// The server appends a signed 32-bit counter formatted as `%010d`: ten digits while it is
/// non-negative, and after it wraps past 2147483647 a minus sign and nine or ten digits
/// (`-2147483648`, ..., `-000000001`). After our (and Curator's) `-lock-` and `-lease-` markers
/// the sequence is everything that follows the marker's last occurrence (its own hyphen is no
/// sign); on other names (`__READ__`, `__WRIT__`, kazoo's `__lock__`, foreign names) a hyphen
/// right before the digits is the sign only where `%010d` could have written it: before nine
/// digits, or ten not starting with 0 (`x-0000000005` is the prefix `x-` and sequence 5).
pub(in crate::lock) fn sequence_of(child: &str) -> Option<i32> {
    let after_marker = HYPHENATED_MARKERS.iter().find_map(|marker| {
        let marker = format!("-{marker}");
        child.rfind(&marker).map(|i| &child[i + marker.len()..])
    });
    let text = match after_marker {
        Some(text) => text,
        None => {
            let digits = child.len() - child.trim_end_matches(|c: char| c.is_ascii_digit()).len();
            let start = child.len() - digits;
            let signed = match digits {
                9 => true,
                10 => !child[start..].starts_with('0'),
                _ => false,
            };
            if signed && child[..start].ends_with('-') {
                &child[start - 1..]
            } else {
                &child[start..]
            }
        }
    };
    let (negative, digits) = match text.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, text),
    };
    let well_formed = digits.bytes().all(|b| b.is_ascii_digit())
        && if negative {
            matches!(digits.len(), 9 | 10)
        } else {
            digits.len() == 10
        };
    if !well_formed {
        return None;
    }
    text.parse().ok()
}

/// Whether sequence `a` was drawn before `b`: the counter wraps, so the difference decides
/// (valid while live nodes span fewer than 2^31 numbers, which they always do).
#[cfg(test)]
fn drawn_before(a: i32, b: i32) -> bool {
    b.wrapping_sub(a) > 0
}

/// The contenders in queue order: by sequence, counted from the first child's sequence with
/// wrapping arithmetic, so that the order holds across the counter's wrap to -2147483648.
/// Children without a sequence are no contenders.
pub(in crate::lock) fn queue(children: Vec<String>) -> Vec<String> {
    let mut keyed: Vec<(i32, String)> = children
        .into_iter()
        .filter_map(|c| sequence_of(&c).map(|seq| (seq, c)))
        .collect();
    let Some(&(base, _)) = keyed.first() else {
        return Vec::new();
    };
    keyed.sort_by(|(a, x), (b, y)| (a.wrapping_sub(base), x).cmp(&(b.wrapping_sub(base), y)));
    keyed.into_iter().map(|(_, c)| c).collect()
}

/// Whether a read-write lock's node is a writer's (Curator's test: the name contains
/// `__WRIT__`). Every other contender is a reader.
pub(in crate::lock) fn is_write(child: &str) -> bool {
    child.contains(WRITE_NODE)
}

/// Whether a read-write lock's node is an upgradeable reader's (to Curator, a reader).
pub(in crate::lock) fn is_upgradeable(child: &str) -> bool {
    child.contains(UPGRADEABLE_NODE)
}

/// Whether a read-write lock's node is a plain reader's (neither a writer nor upgradeable).
fn is_plain_read(child: &str) -> bool {
    !is_write(child) && !is_upgradeable(child)
}

/// The rules of one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::lock) enum Line {
    /// A mutex (also a semaphore's `locks` mutex): the first node holds.
    Mutex,
    /// The read side of a read-write lock: holds with no writer before it.
    Read,
    /// The write side of a read-write lock: the first node holds.
    Write,
    /// The upgradeable read of a read-write lock: holds with no writer and no other
    /// upgradeable reader before it (plain readers share with it).
    Upgradeable,
    /// The write node of an upgrade, created by the holder of the upgradeable read: holds once
    /// no plain reader holds (none before the first writer node). Writers and upgradeable
    /// readers queued after the upgradeable read wait for it, so they never hold it back.
    Upgrade,
}

/// What one listing says about our node.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::lock) enum Verdict<'a> {
    /// It holds.
    Holds,
    /// It waits; this node's deletion is what can free it.
    Watch(&'a str),
}

impl Line {
    /// The line of a read-write lock's side (`None` for other kinds).
    pub(in crate::lock) fn of_rw(kind: LockKind) -> Option<Self> {
        match kind {
            LockKind::Read => Some(Self::Read),
            LockKind::Write => Some(Self::Write),
            LockKind::UpgradeableRead => Some(Self::Upgradeable),
            _ => None,
        }
    }

    /// Whether a node created now, behind all of `queue`, would hold at once.
    pub(in crate::lock) fn admits_newcomer(self, queue: &[String]) -> bool {
        match self {
            Self::Mutex | Self::Write => queue.is_empty(),
            Self::Read => !queue.iter().any(|c| is_write(c)),
            Self::Upgradeable => !queue.iter().any(|c| is_write(c) || is_upgradeable(c)),
            Self::Upgrade => holding_readers(queue).next().is_none(),
        }
    }

    /// Whether the node at `position` of `queue` holds, or which node it must watch.
    pub(in crate::lock) fn verdict(self, queue: &[String], position: usize) -> Verdict<'_> {
        match self {
            Self::Mutex | Self::Write => match position.checked_sub(1) {
                None => Verdict::Holds,
                Some(before) => Verdict::Watch(&queue[before]),
            },
            Self::Read => match queue[..position].iter().rev().find(|c| is_write(c)) {
                None => Verdict::Holds,
                Some(writer) => Verdict::Watch(writer),
            },
            Self::Upgradeable => {
                let blocking = queue[..position]
                    .iter()
                    .rev()
                    .find(|c| is_write(c) || is_upgradeable(c));
                match blocking {
                    None => Verdict::Holds,
                    Some(node) => Verdict::Watch(node),
                }
            }
            Self::Upgrade => match holding_readers(&queue[..position]).last() {
                None => Verdict::Holds,
                Some(reader) => Verdict::Watch(reader),
            },
        }
    }
}

/// The plain readers of `queue` that hold: those before its first writer node.
fn holding_readers(queue: &[String]) -> impl Iterator<Item = &String> {
    queue
        .iter()
        .take_while(|c| !is_write(c))
        .filter(|c| is_plain_read(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::layout::READ_NODE;

    #[test]
    fn queue_orders_all_recipes_by_sequence() {
        let children = vec![
            "_c_0f9b6b8e-4a4f-4c53-9a4a-7d0c1b1f7a11-lock-0000000007".to_owned(),
            "8f14e45fceea167a5a36dedd4bea2543__lock__0000000003".to_owned(),
            "lease_holder".to_owned(),
            "_c_aaaaaaaa-4a4f-4c53-9a4a-7d0c1b1f7a11-lock-0000000005".to_owned(),
        ];
        let ordered = queue(children);
        assert_eq!(ordered.len(), 3);
        assert!(ordered[0].ends_with("__lock__0000000003"));
        assert!(ordered[1].ends_with("-lock-0000000005"));
        assert!(ordered[2].ends_with("-lock-0000000007"));
        assert_eq!(sequence_of("x-lock-0000000042"), Some(42));
        assert_eq!(sequence_of("x-lock-42"), None);
    }

    #[test]
    fn sequences_are_signed_and_compared_across_the_wrap() {
        let ours = |seq: &str| format!("_c_0f9b6b8e-4a4f-4c53-9a4a-7d0c1b1f7a11-lock-{seq}");
        assert_eq!(sequence_of(&ours("2147483647")), Some(i32::MAX));
        assert_eq!(sequence_of(&ours("-2147483648")), Some(i32::MIN));
        assert_eq!(sequence_of(&ours("-2147483000")), Some(-2_147_483_000));
        // Past -999999999, `%010d` leaves nine digits after the sign.
        assert_eq!(sequence_of(&ours("-000000005")), Some(-5));
        assert_eq!(
            sequence_of("8f14e45fceea167a5a36dedd4bea2543__lock__-2147483648"),
            Some(i32::MIN)
        );
        assert_eq!(
            sequence_of("8f14e45fceea167a5a36dedd4bea2543__lock__0000000003"),
            Some(3)
        );
        assert_eq!(sequence_of("_c_x-__READ__-000000001"), Some(-1));
        // A foreign prefix ending in a hyphen: `%010d` never writes a sign before ten digits
        // that start with 0.
        assert_eq!(sequence_of("x-0000000005"), Some(5));
        assert_eq!(sequence_of("x-1000000005"), Some(-1_000_000_005));
        assert_eq!(sequence_of(&ours("-00000005")), None);
        assert_eq!(sequence_of(&ours("12345678901")), None);

        assert!(drawn_before(-2_147_483_000, -2_147_482_999));
        assert!(!drawn_before(-2_147_482_999, -2_147_483_000));
        assert!(drawn_before(i32::MAX, i32::MIN));
        assert!(drawn_before(2_147_483_000, -2_147_483_000));
        assert!(drawn_before(-1, 0));

        let ordered = queue(vec![
            ours("-2147482999"),
            ours("-2147483648"),
            ours("2147483647"),
            ours("-2147483000"),
            ours("2147483000"),
            "kazoo__lock__-2147483647".to_owned(),
        ]);
        let order: Vec<Option<i32>> = ordered.iter().map(|c| sequence_of(c)).collect();
        assert_eq!(
            order,
            [
                2_147_483_000,
                i32::MAX,
                i32::MIN,
                -2_147_483_647,
                -2_147_483_000,
                -2_147_482_999
            ]
            .map(Some)
        );
    }

    /// Curator's lease and read-write names: the hyphen that ends `-lease-` is no sign, the
    /// one after `__READ__` / `__WRIT__` is.
    #[test]
    fn lease_and_read_write_names_carry_their_sequence() {
        let uuid = "0f9b6b8e-4a4f-4c53-9a4a-7d0c1b1f7a11";
        assert_eq!(sequence_of(&format!("_c_{uuid}-lease-0000000003")), Some(3));
        assert_eq!(sequence_of(&format!("_c_{uuid}-lease--000000003")), Some(-3));
        assert_eq!(sequence_of(&format!("_c_{uuid}-__READ__0000000004")), Some(4));
        assert_eq!(
            sequence_of(&format!("_c_{uuid}-__WRIT__-2147483648")),
            Some(i32::MIN)
        );
        assert!(is_write(&format!("_c_{uuid}-__WRIT__0000000001")));
        assert!(!is_write(&format!("_c_{uuid}-__READ__0000000001")));
    }

    fn rw(names: &[&str]) -> Vec<String> {
        names
            .iter()
            .enumerate()
            .map(|(i, side)| format!("_c_0f9b6b8e-4a4f-4c53-9a4a-7d0c1b1f7a11-{side}{i:010}"))
            .collect()
    }

    /// U holds beside plain readers; a writer X and a second upgradeable reader queue behind
    /// it; the upgrade's write node W waits only for the readers that hold (before X), not for
    /// X or the reader behind X (both wait for U, which stays until W is released).
    #[test]
    fn an_upgrade_waits_only_for_the_readers_that_hold() {
        use crate::lock::layout::UPGRADEABLE_NODE;
        let q = rw(&[
            UPGRADEABLE_NODE,
            READ_NODE,
            WRITE_NODE,
            UPGRADEABLE_NODE,
            READ_NODE,
            WRITE_NODE,
        ]);
        assert_eq!(Line::Upgradeable.verdict(&q, 0), Verdict::Holds);
        assert_eq!(
            Line::Read.verdict(&q, 1),
            Verdict::Holds,
            "plain readers share with U"
        );
        assert_eq!(Line::Write.verdict(&q, 2), Verdict::Watch(&q[1]));
        assert_eq!(Line::Upgradeable.verdict(&q, 3), Verdict::Watch(&q[2]));
        assert_eq!(Line::Read.verdict(&q, 4), Verdict::Watch(&q[2]));
        assert_eq!(Line::Upgrade.verdict(&q, 5), Verdict::Watch(&q[1]));
        let without_reader: Vec<String> = q
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, c)| c.clone())
            .collect();
        assert_eq!(Line::Upgrade.verdict(&without_reader, 4), Verdict::Holds);
        assert!(
            !Line::Upgradeable.admits_newcomer(&q[..1]),
            "one upgradeable reader at a time"
        );
        assert!(Line::Read.admits_newcomer(&q[..2]));
        assert!(!Line::Upgrade.admits_newcomer(&q[..3]), "a plain reader holds");
        assert!(Line::Upgrade.admits_newcomer(&without_reader[..3]));
    }

    #[test]
    fn readers_share_until_a_writer_and_wait_behind_it() {
        let q = rw(&[READ_NODE, READ_NODE, WRITE_NODE, READ_NODE, WRITE_NODE, READ_NODE]);
        assert_eq!(Line::Read.verdict(&q, 0), Verdict::Holds);
        assert_eq!(Line::Read.verdict(&q, 1), Verdict::Holds);
        // A reader behind a waiting writer waits for it: the writer is not starved.
        assert_eq!(Line::Read.verdict(&q, 3), Verdict::Watch(&q[2]));
        // It watches the last writer before it, the one whose deletion can free it.
        assert_eq!(Line::Read.verdict(&q, 5), Verdict::Watch(&q[4]));
        assert_eq!(Line::Write.verdict(&q, 2), Verdict::Watch(&q[1]));
        assert_eq!(Line::Write.verdict(&q[2..], 0), Verdict::Holds);
        assert!(Line::Read.admits_newcomer(&q[..2]));
        assert!(!Line::Read.admits_newcomer(&q[..3]));
        assert!(!Line::Write.admits_newcomer(&q[..1]));
        assert!(Line::Write.admits_newcomer(&[]));
        assert_eq!(Line::Mutex.verdict(&q, 0), Verdict::Holds);
        assert_eq!(Line::Mutex.verdict(&q, 1), Verdict::Watch(&q[0]));
    }
}

//! The member that stands for one hold in a semaphore's holders or a read-write lock's
//! readers (sorted sets, see [`keys`](crate::keys)), computed from the hold's kind and owner.
//!
//! Acquire, release, renewal and the cleanup by owner of an attempt whose outcome is unknown
//! all receive the hold's kind, so they all name the same member; inspect parses it back.
//!
//! - a permit of weight 1 and a plain read: the owner token itself (as before weights and
//!   upgradeable reads existed, so older clients' records read the same);
//! - a permit hold of weight `n` > 1: `<n>*<owner>`;
//! - an upgradeable read: `u*<owner>` (`acquire.lua`'s write branch names it so too, to find
//!   the upgrade's own hold).
//!
//! Owner tokens (hyphenated UUIDs) never contain `*`, so no two kinds share a member.

use distlock_core::LockKind;

/// The mark of an upgradeable read's member, before its owner.
const UPGRADEABLE: &str = "u*";

/// The member of the hold of `kind` of `owner`.
pub(crate) fn member(kind: LockKind, owner: &str) -> String {
    match kind {
        LockKind::Permit { weight, .. } if weight > 1 => format!("{weight}*{owner}"),
        LockKind::UpgradeableRead => format!("{UPGRADEABLE}{owner}"),
        _ => owner.to_owned(),
    }
}

/// The owner and weight of a semaphore's member (weight 1 for a bare owner, and for a member
/// of another client of the layout that only looks weighted).
pub(crate) fn permit_holder(member: &str) -> (&str, u32) {
    match member.split_once('*') {
        Some((weight, owner)) if !weight.is_empty() && weight.bytes().all(|b| b.is_ascii_digit()) => {
            match weight.parse::<u32>() {
                Ok(weight) if weight > 1 => (owner, weight),
                _ => (member, 1),
            }
        }
        _ => (member, 1),
    }
}

/// The owner and kind of a read-write lock's reader: [`LockKind::UpgradeableRead`] for a
/// `u*` member, [`LockKind::Read`] otherwise.
pub(crate) fn reader(member: &str) -> (&str, LockKind) {
    match member.strip_prefix(UPGRADEABLE) {
        Some(owner) => (owner, LockKind::UpgradeableRead),
        None => (member, LockKind::Read),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_parsed_back_into_owner_and_kind() {
        let owner = "0b7e9c1e-4d1a-4a57-9a0c-2f7f3d1e5b11";
        assert_eq!(member(LockKind::permit(4), owner), owner);
        assert_eq!(member(LockKind::Read, owner), owner);
        let weighted = member(LockKind::permits(4, 3), owner);
        assert_eq!(weighted, format!("3*{owner}"));
        assert_eq!(permit_holder(&weighted), (owner, 3));
        assert_eq!(permit_holder(owner), (owner, 1));
        let upgradeable = member(LockKind::UpgradeableRead, owner);
        assert_eq!(upgradeable, format!("u*{owner}"));
        assert_eq!(reader(&upgradeable), (owner, LockKind::UpgradeableRead));
        assert_eq!(reader(owner), (owner, LockKind::Read));
        // What only looks weighted is an owner of weight 1.
        for odd in ["*x", "x*y", "1*y", "99999999999*y"] {
            assert_eq!(permit_holder(odd), (odd, 1), "{odd}");
        }
    }
}

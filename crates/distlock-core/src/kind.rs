//! What a hold is of: the lock of a name, a permit of a semaphore, or a side of a read-write
//! lock.

use std::fmt;

/// The three primitives. Each has its own namespace on every store: the mutex `"jobs"`, the
/// semaphore `"jobs"` and the read-write lock `"jobs"` are three objects that never block one
/// another.
///
/// ```
/// use distlock_core::{LockKind, Primitive};
///
/// assert_eq!(LockKind::Read.primitive(), Primitive::RwLock);
/// assert_eq!(LockKind::permit(4).primitive(), Primitive::Semaphore);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Primitive {
    /// A lock one owner holds at a time.
    Mutex,
    /// A counting semaphore: at most its number of permits are held at once.
    Semaphore,
    /// A read-write lock: many readers or one writer.
    RwLock,
}

impl Primitive {
    /// A short lowercase name (`"mutex"`, `"semaphore"`, `"rw-lock"`), for keys, logs and the
    /// command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Mutex => "mutex",
            Self::Semaphore => "semaphore",
            Self::RwLock => "rw-lock",
        }
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one hold (one [`Lease`](crate::Lease), one guard) is of.
///
/// ```
/// use distlock_core::LockKind;
///
/// assert!(LockKind::Write.excludes(LockKind::Read));
/// assert!(!LockKind::Read.excludes(LockKind::Read));
/// assert!(!LockKind::UpgradeableRead.excludes(LockKind::Read));
/// assert!(LockKind::UpgradeableRead.excludes(LockKind::UpgradeableRead));
/// assert_eq!(LockKind::permit(3).to_string(), "a permit of 3");
/// assert_eq!(LockKind::permits(3, 2).to_string(), "2 permits of 3");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LockKind {
    /// The lock of a name (a mutex): one holder at a time.
    #[default]
    Exclusive,
    /// `weight` permits of a semaphore that has `permits` in all, taken and given back
    /// together as one hold ([`LockKind::permit`] for one). Every holder of a semaphore must
    /// name the same count; a store that records another count for live holders refuses with
    /// [`Error::PermitsMismatch`](crate::Error::PermitsMismatch). The weights of the live
    /// holds never add up to more than `permits`.
    Permit {
        /// How many permits the semaphore has.
        permits: u32,
        /// How many of them this hold takes: at least 1 and at most `permits`.
        weight: u32,
    },
    /// A shared (reader) hold of a read-write lock.
    Read,
    /// The exclusive (writer) hold of a read-write lock.
    Write,
    /// A read hold that may become the write hold without letting go
    /// ([`UpgradeableReadGuard::upgrade`](crate::UpgradeableReadGuard::upgrade)): it shares
    /// the lock with plain readers, but excludes writers and other upgradeable readers.
    ///
    /// A [`LockKind::Write`] attempt by the owner of the object's upgradeable read is its
    /// upgrade: the store grants it once no other reader holds, turning that hold into the
    /// write hold (nothing else can take the write lock in between), and the one write lease
    /// then stands for both.
    UpgradeableRead,
}

impl LockKind {
    /// One permit of a semaphore of `permits`.
    pub const fn permit(permits: u32) -> Self {
        Self::Permit { permits, weight: 1 }
    }

    /// `weight` permits of a semaphore of `permits`, as one hold.
    pub const fn permits(permits: u32, weight: u32) -> Self {
        Self::Permit { permits, weight }
    }

    /// How many permits a hold of this kind takes: its weight for a permit, 1 otherwise.
    pub const fn weight(self) -> u32 {
        match self {
            Self::Permit { weight, .. } => weight,
            _ => 1,
        }
    }

    /// The primitive (and so the namespace) this hold belongs to.
    pub const fn primitive(self) -> Primitive {
        match self {
            Self::Exclusive => Primitive::Mutex,
            Self::Permit { .. } => Primitive::Semaphore,
            Self::Read | Self::Write | Self::UpgradeableRead => Primitive::RwLock,
        }
    }

    /// Whether a hold of this kind and one of `other` on the same object can never coexist:
    /// exclusive and write holds exclude everything of their primitive, reads exclude writes,
    /// an upgradeable read excludes writes and other upgradeable reads, permits are counted
    /// instead (they never exclude one another by kind).
    pub const fn excludes(self, other: LockKind) -> bool {
        matches!(
            (self, other),
            (Self::Exclusive, Self::Exclusive)
                | (Self::Read, Self::Write)
                | (Self::Write, Self::Read | Self::Write | Self::UpgradeableRead)
                | (Self::UpgradeableRead, Self::Write | Self::UpgradeableRead)
        )
    }

    /// Whether this is a read hold of either sort (plain or upgradeable).
    pub const fn is_read(self) -> bool {
        matches!(self, Self::Read | Self::UpgradeableRead)
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exclusive => f.write_str("the lock"),
            Self::Permit { permits, weight: 1 } => write!(f, "a permit of {permits}"),
            Self::Permit { permits, weight } => write!(f, "{weight} permits of {permits}"),
            Self::Read => f.write_str("a read lock"),
            Self::Write => f.write_str("the write lock"),
            Self::UpgradeableRead => f.write_str("an upgradeable read lock"),
        }
    }
}

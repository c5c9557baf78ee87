//! Owner tokens (who holds a lock) and fencing tokens (which hold came later).

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

use crate::{Error, Result};

/// A random 128-bit identity for one acquisition (UUID v4), never reused.
///
/// A backend stores it as the lock's value and releases or extends only when the stored value
/// is still this token, so a client whose lease expired can never free a lock someone else
/// holds by now.
///
/// ```
/// use distlock_core::OwnerToken;
///
/// let a = OwnerToken::new();
/// assert_ne!(a, OwnerToken::new());
/// assert_eq!(a.to_string().parse::<OwnerToken>()?, a);
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OwnerToken(Uuid);

impl OwnerToken {
    /// A fresh random token.
    #[allow(clippy::new_without_default)] // a default random value would surprise readers
    pub fn new() -> Self {
        Self(Uuid::new_v4())
    }

    /// The token as a UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({})", self.0.hyphenated())
    }
}

impl FromStr for OwnerToken {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Uuid::parse_str(s)
            .map(Self)
            .map_err(|e| Error::invalid_config(format!("not an owner token: {e}")))
    }
}

/// A number that strictly increases over all acquisitions of the same lock name, by any
/// client (Kleppmann's fencing token).
///
/// Pass it along with every write the lock protects; the protected resource rejects a write
/// whose token is lower than one it has already seen, which makes a paused or partitioned
/// former holder harmless. Whether a backend guarantees it is in
/// [`Capabilities::fencing`](crate::Capabilities::fencing).
///
/// ```
/// use distlock_core::FencingToken;
///
/// assert!(FencingToken::new(7) > FencingToken::new(3));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw value.
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

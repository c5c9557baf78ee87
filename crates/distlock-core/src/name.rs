//! Lock names: what the contract accepts, and a collision-free way for a backend to map any
//! accepted name onto the keys its store allows.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// The longest lock name, in bytes of UTF-8, that the contract accepts.
pub const MAX_NAME_BYTES: usize = 1024;

/// A validated lock name.
///
/// The contract every backend follows:
/// - a name is any non-empty UTF-8 string of at most [`MAX_NAME_BYTES`] bytes: spaces,
///   newlines, slashes, NUL and any unicode are allowed;
/// - names are exact and case-sensitive: `Lock`, `lock` and `lock ` are three locks; nothing
///   is trimmed or normalised;
/// - each backend maps every valid name onto its store without collisions (see
///   [`LockName::encode`]) or refuses it with [`Error::InvalidName`].
///
/// ```
/// use distlock_core::LockName;
///
/// let name = LockName::new("orders/42 ✓")?;
/// assert_eq!(name.as_str(), "orders/42 ✓");
/// assert!(LockName::new("").is_err());
/// assert!(LockName::new("x".repeat(10_000)).is_err());
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(Arc<str>);

/// The longest [`LockName::path_segment`].
const MAX_PATH_SEGMENT: usize = 240;

impl LockName {
    /// Validates `name` against the contract.
    ///
    /// # Errors
    /// [`Error::InvalidName`] if it is empty or longer than [`MAX_NAME_BYTES`].
    pub fn new(name: impl AsRef<str>) -> Result<Self> {
        let name = name.as_ref();
        if name.is_empty() {
            return Err(Error::invalid_name("a lock name must not be empty"));
        }
        if name.len() > MAX_NAME_BYTES {
            return Err(Error::invalid_name(format!(
                "a lock name may have at most {MAX_NAME_BYTES} bytes, this one has {}",
                name.len()
            )));
        }
        Ok(Self(name.into()))
    }

    /// The name exactly as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as one segment of a path or key prefix (ZooKeeper's znodes, etcd's keys): at
    /// most 240 bytes of `[A-Za-z0-9._~-]`, every other byte percent-encoded (so no `/` and no
    /// `:`), `.` and `..` written `%2E` and `%2E%2E`; injective, as [`encode`](Self::encode).
    ///
    /// ```
    /// use distlock_core::LockName;
    ///
    /// assert_eq!(LockName::new("orders/42")?.path_segment(), "orders%2F42");
    /// assert_eq!(LockName::new("..")?.path_segment(), "%2E%2E");
    /// # Ok::<(), distlock_core::Error>(())
    /// ```
    pub fn path_segment(&self) -> String {
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~');
        match &*self.encode(MAX_PATH_SEGMENT, allowed) {
            "." => "%2E".to_owned(),
            ".." => "%2E%2E".to_owned(),
            other => other.to_owned(),
        }
    }

    /// Maps the name onto a store key of at most `max_len` bytes whose characters all satisfy
    /// `allowed`, injectively: two different names never map to the same key.
    ///
    /// Characters outside `allowed`, and `%` itself, are percent-encoded byte by byte. If the
    /// result is longer than `max_len`, it is cut (at a character boundary, keeping a readable
    /// prefix) and `%~` plus the SHA-256 of the whole name in hex is appended. Encoded output
    /// never contains `%~`, so hashed keys cannot collide with unhashed ones.
    ///
    /// `allowed` must accept ASCII letters, digits and `~`, and `max_len` must be at least
    /// [`LockName::MIN_ENCODED_LEN`]; the function panics on neither but the result may then
    /// break those limits.
    ///
    /// ```
    /// use distlock_core::LockName;
    ///
    /// let safe = |c: char| c.is_ascii_graphic();
    /// assert_eq!(LockName::new("a b")?.encode(250, safe), "a%20b");
    /// let long = LockName::new("n".repeat(400))?;
    /// let key = long.encode(250, safe);
    /// assert!(key.len() <= 250 && key.contains("%~"));
    /// # Ok::<(), distlock_core::Error>(())
    /// ```
    pub fn encode(&self, max_len: usize, allowed: impl Fn(char) -> bool) -> Cow<'_, str> {
        let needs_escape = |c: char| c == '%' || !allowed(c);
        if self.0.len() <= max_len && !self.0.chars().any(needs_escape) {
            return Cow::Borrowed(&self.0);
        }
        let push = |out: &mut String, c: char| {
            if needs_escape(c) {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            } else {
                out.push(c);
            }
        };
        let mut out = String::with_capacity(self.0.len().min(max_len));
        for c in self.0.chars() {
            push(&mut out, c);
        }
        if out.len() <= max_len {
            return Cow::Owned(out);
        }
        // Too long: a readable prefix of whole characters, then `%~` and the digest.
        let digest = self.digest_hex();
        let keep = max_len.saturating_sub(2 + digest.len());
        out.clear();
        let mut piece = String::new();
        for c in self.0.chars() {
            piece.clear();
            push(&mut piece, c);
            if out.len() + piece.len() > keep {
                break;
            }
            out.push_str(&piece);
        }
        out.push_str("%~");
        out.push_str(&digest);
        Cow::Owned(out)
    }

    /// The shortest `max_len` that [`LockName::encode`] supports: `%~` and a SHA-256 in hex.
    pub const MIN_ENCODED_LEN: usize = 2 + 64;

    /// The SHA-256 of the name's bytes, in lowercase hex.
    pub fn digest_hex(&self) -> String {
        let digest = Sha256::digest(self.0.as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for LockName {
    type Error = Error;
    fn try_from(value: &str) -> Result<Self> {
        Self::new(value)
    }
}

impl TryFrom<String> for LockName {
    type Error = Error;
    fn try_from(value: String) -> Result<Self> {
        Self::new(value)
    }
}

impl TryFrom<&String> for LockName {
    type Error = Error;
    fn try_from(value: &String) -> Result<Self> {
        Self::new(value)
    }
}

impl TryFrom<&LockName> for LockName {
    type Error = Error;
    fn try_from(value: &LockName) -> Result<Self> {
        Ok(value.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, max: usize) -> String {
        LockName::new(name)
            .expect("valid")
            .encode(max, |c| c.is_ascii_alphanumeric() || c == '-' || c == '~')
            .into_owned()
    }

    #[test]
    fn safe_names_map_to_themselves() {
        assert_eq!(key("orders-42", 100), "orders-42");
    }

    #[test]
    fn escapes_are_injective() {
        assert_ne!(key("a b", 100), key("a%20b", 100));
        assert_eq!(key("a%20b", 100), "a%2520b");
        assert_eq!(key("é", 100), "%C3%A9");
    }

    #[test]
    fn long_names_hash_and_never_collide() {
        let base = "x".repeat(300);
        let a = key(&format!("{base}a"), 100);
        let b = key(&format!("{base}b"), 100);
        assert_ne!(a, b);
        assert!(a.len() <= 100, "{}", a.len());
        assert!(a.starts_with("xxxx"));
        // A name whose escaped form would end mid-escape keeps whole escapes only.
        let c = key(&"é".repeat(100), 100);
        assert!(c.len() <= 100);
        let prefix = c.split("%~").next().expect("prefix");
        assert_eq!(prefix.len() % 6, 0, "{c}");
    }

    #[test]
    fn hashed_keys_cannot_equal_escaped_ones() {
        // `%~` only ever appears in hashed keys because `%` is always escaped.
        assert!(!key("%~", 100).contains("%~"));
    }

    #[test]
    fn rejects_empty_and_huge() {
        assert!(matches!(LockName::new(""), Err(Error::InvalidName { .. })));
        assert!(LockName::new("x".repeat(MAX_NAME_BYTES)).is_ok());
        assert!(LockName::new("x".repeat(MAX_NAME_BYTES + 1)).is_err());
    }
}

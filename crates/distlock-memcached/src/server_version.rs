//! Which servers the backend accepts, from their answer to `version` (read when each
//! connection opens, in the same round trip as the server's identity).
//!
//! This module owns the version rule only; it may not open connections (`wire.rs` does).
//!
//! Releases and renewals rely on meta commands behaving as memcached 1.6.13 and later define
//! them: before 1.6.13, `md <key> C<cas>` (the CAS-guarded delete every release sends) does
//! not honour the CAS as documented. A server that does not answer with memcached's
//! `<major>.<minor>.<patch>` is another implementation of the protocol, whose meta commands
//! may differ: it is refused too, rather than trusted with locks.

/// The oldest memcached release whose meta protocol the backend relies on.
pub(crate) const MIN_VERSION: (u32, u32, u32) = (1, 6, 13);

/// Accepts `text` (what follows `VERSION ` in the reply) if it names memcached
/// [`MIN_VERSION`] or later; else says why the server is refused.
pub(crate) fn check(text: &str) -> Result<(), String> {
    let (major, minor, patch) = MIN_VERSION;
    let version = parse(text).ok_or_else(|| {
        format!(
            "the server answers `version` with {text:?}, not memcached's <major>.<minor>.<patch>: \
             another implementation of the protocol, whose meta commands may differ from the \
             memcached {major}.{minor}.{patch}+ ones locks rely on"
        )
    })?;
    if version < MIN_VERSION {
        return Err(format!(
            "memcached {text} is too old: before {major}.{minor}.{patch}, `md <key> C<cas>` (the \
             CAS-guarded delete every release sends) does not honour the CAS; upgrade to \
             {major}.{minor}.{patch} or later"
        ));
    }
    Ok(())
}

/// `1.6.18` (or `1.6.18-suffix`) as numbers.
fn parse(text: &str) -> Option<(u32, u32, u32)> {
    let numeric = text
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .next()
        .filter(|numeric| text.len() == numeric.len() || text[numeric.len()..].starts_with('-'))?;
    let mut parts = numeric.split('.').map(|part| part.parse::<u32>().ok());
    let version = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_1_6_13_and_later_are_accepted() {
        for ok in ["1.6.13", "1.6.18", "1.6.38", "1.7.0", "2.0.0", "1.6.21-rc1"] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn older_releases_and_other_servers_are_refused() {
        for old in ["1.6.12", "1.6.9", "1.5.22", "1.4.15", "0.9.99"] {
            let why = check(old).expect_err(old);
            assert!(why.contains("too old") && why.contains("1.6.13"), "{why}");
        }
        for other in [
            "",
            "1.6",
            "1.6.x",
            "df-v1.2",
            "1.6.18.1",
            "1.6.18 extra",
            "mcrouter",
        ] {
            let why = check(other).expect_err(other);
            assert!(why.contains("another implementation"), "{other}: {why}");
        }
    }
}

//! [`duration_param`]: a duration given as a backend URL's query parameter, parsed the same
//! way by every backend that takes one.

use std::time::Duration;

use crate::{Error, Result};

/// Parses the value of the URL parameter `key`: a whole number with a unit `ms`, `s` or `m`
/// (a bare number is milliseconds), as in `?session_timeout=4s&operation_timeout=500`.
///
/// # Errors
/// [`Error::InvalidConfig`] naming `key` for anything else (no number, another unit, a value
/// past the range of a duration).
///
/// ```
/// use distlock_core::duration_param;
/// use std::time::Duration;
///
/// assert_eq!(duration_param("lease_ttl", "4s")?, Duration::from_secs(4));
/// assert_eq!(duration_param("timeout", "250")?, Duration::from_millis(250));
/// assert!(duration_param("lease_ttl", "soon").is_err());
/// # Ok::<(), distlock_core::Error>(())
/// ```
pub fn duration_param(key: &str, value: &str) -> Result<Duration> {
    let bad = || Error::invalid_config(format!("{key}={value:?} is not a duration such as 4s or 500ms"));
    let split = value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let number: u64 = number.parse().map_err(|_| bad())?;
    match unit {
        "" | "ms" => Ok(Duration::from_millis(number)),
        "s" => Ok(Duration::from_secs(number)),
        "m" => number.checked_mul(60).map(Duration::from_secs).ok_or_else(bad),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_a_duration_without_panicking() {
        for value in ["", "s", "4h", "-1s", "1.5s", "99999999999999999999m", "4 s"] {
            assert!(
                matches!(duration_param("k", value), Err(Error::InvalidConfig { .. })),
                "{value:?}"
            );
        }
        assert_eq!(duration_param("k", "2m").ok(), Some(Duration::from_secs(120)));
    }
}

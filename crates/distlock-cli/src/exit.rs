//! The exit codes of `distlock`, documented in `distlock --help`.
//!
//! `exec` exits with the command's own code (128 + N if it died of signal N), except:

use distlock::Error;

/// Success.
pub const OK: u8 = 0;
/// `check` found a failing case.
pub const CHECK_FAILED: u8 = 1;
/// `doctor` found a setting that makes locks unsafe.
pub const UNSAFE: u8 = 3;
/// Bad arguments: an invalid lock name, TTL, duration, `--weight` (zero, or above
/// `--permits`) or `--permits` (zero, or another count than the live holders of the semaphore
/// gave); clap's own usage errors exit 2.
pub const USAGE: u8 = 64;
/// The store is unreachable or failed.
pub const UNAVAILABLE: u8 = 69;
/// An internal error.
pub const SOFTWARE: u8 = 70;
/// `exec`: the lock was not acquired within `--wait` (or at once with `--no-wait`).
pub const TIMEOUT: u8 = 75;
/// `exec`: the lock was lost while the command ran; the command was terminated.
pub const LOST: u8 = 76;
/// A malformed store URL, a store not compiled in, or a store without what was asked
/// (semaphores, read-write locks, fencing tokens): a setup to change, not a failure to retry.
pub const CONFIG: u8 = 78;
/// `exec`: the command exists but cannot be run.
pub const CANNOT_EXECUTE: u8 = 126;
/// `exec`: the command was not found.
pub const NOT_FOUND: u8 = 127;

/// The exit code for a library error.
pub fn for_error(error: &Error) -> u8 {
    match error {
        Error::Timeout { .. } => TIMEOUT,
        Error::LockLost { .. } => LOST,
        Error::InvalidName { .. } | Error::InvalidOptions { .. } | Error::PermitsMismatch { .. } => USAGE,
        Error::InvalidConfig { .. } | Error::NotSupported { .. } => CONFIG,
        _ => UNAVAILABLE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_store_cannot_do_is_a_setup_error_not_an_outage() {
        let missing = Error::NotSupported {
            backend: "memcached",
            what: "read-write locks",
        };
        assert_eq!(for_error(&missing), CONFIG);
        assert_eq!(
            for_error(&Error::unavailable("redis", "connection refused")),
            UNAVAILABLE
        );
    }

    #[test]
    fn a_permit_count_other_than_the_holders_is_a_usage_error() {
        let mismatch = Error::PermitsMismatch {
            name: "exports".to_owned(),
            stored: 2,
            asked: 3,
        };
        assert_eq!(for_error(&mismatch), USAGE);
    }
}

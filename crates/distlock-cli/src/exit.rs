//! The exit codes of `distlock`, documented in `distlock --help`.
//!
//! `exec` exits with the command's own code (128 + N if it died of signal N), except:

use distlock::Error;

/// Success.
pub const OK: u8 = 0;
/// `check` found a failing case.
pub const CHECK_FAILED: u8 = 1;
/// Bad arguments: an invalid lock name, TTL or duration (clap's own usage errors exit 2).
pub const USAGE: u8 = 64;
/// The store is unreachable or failed.
pub const UNAVAILABLE: u8 = 69;
/// An internal error.
pub const SOFTWARE: u8 = 70;
/// `exec`: the lock was not acquired within `--wait` (or at once with `--no-wait`).
pub const TIMEOUT: u8 = 75;
/// `exec`: the lock was lost while the command ran; the command was terminated.
pub const LOST: u8 = 76;
/// A malformed store URL or a store not compiled in.
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
        Error::InvalidName { .. } | Error::InvalidOptions { .. } => USAGE,
        Error::InvalidConfig { .. } => CONFIG,
        _ => UNAVAILABLE,
    }
}

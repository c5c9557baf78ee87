//! The one error type every backend reports, with variants by meaning.
//!
//! Backends convert their private errors into [`Error`] so that callers match on what went
//! wrong (`Timeout`, `Unavailable`, `LockLost`, ...) and never on which store they talk to.

use std::time::Duration;

/// A boxed error from a store's client library, kept as the `source` of an [`Error`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result type of every fallible distlock operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when taking, keeping or giving back a distributed lock.
///
/// "The lock is held by someone else" is not an error: single attempts report it as
/// [`TryAcquire::Held`](crate::TryAcquire::Held) or `Ok(None)`, and only a wait that ran out
/// becomes [`Error::Timeout`].
///
/// ```
/// use distlock_core::{Error, LockName};
///
/// let err = LockName::new("").unwrap_err();
/// assert!(matches!(err, Error::InvalidName { .. }));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock was still held by another owner when the wait ran out.
    #[error("timed out after {waited:?} waiting for lock {name:?}")]
    Timeout {
        /// The lock's name.
        name: String,
        /// How long the caller waited.
        waited: Duration,
    },

    /// The lock name breaks the contract (see [`LockName`](crate::LockName)) or cannot be
    /// represented by the store.
    #[error("invalid lock name: {reason}")]
    InvalidName {
        /// Why the name was refused.
        reason: String,
    },

    /// An option is out of range (a zero or absurd TTL, a wait that overflows time, ...).
    #[error("invalid options: {reason}")]
    InvalidOptions {
        /// Which option and why.
        reason: String,
    },

    /// A connection URL or configuration could not be understood.
    #[error("invalid configuration: {reason}")]
    InvalidConfig {
        /// What is wrong with it.
        reason: String,
    },

    /// The store could not be reached or did not answer in time.
    #[error("{backend} is unavailable: {source}")]
    Unavailable {
        /// The backend's name, for example `"redis"`.
        backend: &'static str,
        /// The underlying error.
        #[source]
        source: BoxError,
    },

    /// The backend cannot do what was asked (see its [`Capabilities`](crate::Capabilities)).
    #[error("{backend} does not support {what}")]
    NotSupported {
        /// The backend's name.
        backend: &'static str,
        /// What it cannot do.
        what: &'static str,
    },

    /// A semaphore's live holders were admitted with another number of permits than this
    /// attempt names: every holder of a semaphore must agree on it.
    #[error("semaphore {name:?} is held with {stored} permits, not {asked}")]
    PermitsMismatch {
        /// The semaphore's name.
        name: String,
        /// The count its live holders use.
        stored: u32,
        /// The count this attempt named.
        asked: u32,
    },

    /// A lock this client held is no longer held.
    #[error("lock {name:?} was lost: {reason}")]
    LockLost {
        /// The lock's name.
        name: String,
        /// Why it was lost.
        reason: LossReason,
    },

    /// A blocking call (the `blocking` module, feature `blocking`) was made on a thread that
    /// drives an async runtime, where blocking would stall it or deadlock; the async
    /// [`LockClient`](crate::LockClient) is the one to use there.
    #[error("a blocking distlock call was made inside an async runtime; use the async LockClient there")]
    InsideAsyncRuntime,

    /// Any other error reported by the store or its client library.
    #[error("{backend} error: {source}")]
    Backend {
        /// The backend's name.
        backend: &'static str,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// Builds an [`Error::Unavailable`] from any error.
    pub fn unavailable(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            backend,
            source: source.into(),
        }
    }

    /// Builds an [`Error::Backend`] from any error.
    pub fn backend(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Self::Backend {
            backend,
            source: source.into(),
        }
    }

    /// Builds an [`Error::InvalidOptions`].
    pub fn invalid_options(reason: impl Into<String>) -> Self {
        Self::InvalidOptions {
            reason: reason.into(),
        }
    }

    /// Builds an [`Error::InvalidName`].
    pub fn invalid_name(reason: impl Into<String>) -> Self {
        Self::InvalidName {
            reason: reason.into(),
        }
    }

    /// Builds an [`Error::InvalidConfig`].
    pub fn invalid_config(reason: impl Into<String>) -> Self {
        Self::InvalidConfig {
            reason: reason.into(),
        }
    }

    /// Whether the operation that failed with this error may still have been applied by the
    /// store: a timeout or a cut connection after the request was sent (`Unavailable`), or a
    /// store error whose cause is unknown (`Backend`). `LockClient` cleans up after such an
    /// acquisition attempt with an owner-checked release under the same owner token.
    ///
    /// ```
    /// use distlock_core::Error;
    /// assert!(Error::unavailable("redis", "timed out").is_ambiguous());
    /// assert!(!Error::invalid_name("empty").is_ambiguous());
    /// ```
    pub fn is_ambiguous(&self) -> bool {
        matches!(self, Self::Unavailable { .. } | Self::Backend { .. })
    }

    /// Whether retrying the same operation later may succeed (the store was unreachable).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    /// A copy of this error, for a failure that answers several callers at once (a failed
    /// batch of renewals answers each lease in it): the same variant and message, the source
    /// kept as its text (errors are not `Clone`).
    ///
    /// ```
    /// use distlock_core::Error;
    ///
    /// let error = Error::unavailable("redis", "timed out");
    /// let copy = error.duplicate();
    /// assert!(copy.is_transient());
    /// assert_eq!(copy.to_string(), "redis is unavailable: timed out");
    /// ```
    pub fn duplicate(&self) -> Self {
        match self {
            Self::Timeout { name, waited } => Self::Timeout {
                name: name.clone(),
                waited: *waited,
            },
            Self::InvalidName { reason } => Self::invalid_name(reason.clone()),
            Self::InvalidOptions { reason } => Self::invalid_options(reason.clone()),
            Self::InvalidConfig { reason } => Self::invalid_config(reason.clone()),
            Self::Unavailable { backend, source } => Self::unavailable(backend, source.to_string()),
            Self::NotSupported { backend, what } => Self::NotSupported { backend, what },
            Self::PermitsMismatch { name, stored, asked } => Self::PermitsMismatch {
                name: name.clone(),
                stored: *stored,
                asked: *asked,
            },
            Self::LockLost { name, reason } => Self::LockLost {
                name: name.clone(),
                reason: reason.clone(),
            },
            Self::InsideAsyncRuntime => Self::InsideAsyncRuntime,
            Self::Backend { backend, source } => Self::backend(backend, source.to_string()),
        }
    }
}

/// Why a held lock stopped being held, as reported by the lost-lock signal.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// A renewal or release found the lock gone or owned by someone else.
    NotOwned,
    /// The lease ran out before a renewal succeeded (renewals kept failing or were off).
    Expired,
    /// Renewals kept failing with this error until the lease ran out.
    RenewalFailed(String),
    /// The guard reached its maximum hold time; the watchdog stopped renewing it.
    MaxHoldExceeded,
    /// The store ended the session the lock was bound to.
    SessionExpired,
    /// The session holding the lock lost contact with the store, so the lock may be gone.
    /// Only [`LockClient::with_lock`](crate::LockClient::with_lock) stops on it (Curator's
    /// rule: a suspended session is not safe); a guard reports it through
    /// [`LockGuard::is_suspended`](crate::LockGuard::is_suspended) and stays usable.
    SessionSuspended,
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotOwned => f.write_str("the store no longer records this client as the owner"),
            Self::Expired => f.write_str("the lease expired before it was renewed"),
            Self::RenewalFailed(e) => write!(f, "renewal kept failing until the lease expired: {e}"),
            Self::MaxHoldExceeded => f.write_str("the maximum hold time was reached"),
            Self::SessionSuspended => f.write_str("the session holding the lock lost contact with the store"),
            Self::SessionExpired => f.write_str("the store session holding the lock expired"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_duplicate_has_the_same_variant_and_message() {
        let errors = [
            Error::Timeout {
                name: "a".into(),
                waited: Duration::from_millis(5),
            },
            Error::invalid_name("empty"),
            Error::invalid_options("ttl"),
            Error::invalid_config("url"),
            Error::unavailable("redis", "timed out"),
            Error::NotSupported {
                backend: "redlock",
                what: "semaphores",
            },
            Error::PermitsMismatch {
                name: "s".into(),
                stored: 2,
                asked: 3,
            },
            Error::LockLost {
                name: "a".into(),
                reason: LossReason::Expired,
            },
            Error::InsideAsyncRuntime,
            Error::backend("postgres", "syntax"),
        ];
        for error in errors {
            let copy = error.duplicate();
            assert_eq!(copy.to_string(), error.to_string());
            assert_eq!(std::mem::discriminant(&copy), std::mem::discriminant(&error));
            assert_eq!(copy.is_ambiguous(), error.is_ambiguous());
        }
    }
}

//! Owner-checked cleanup in the background, for operations whose outcome is unknown.
//!
//! An acquisition attempt that timed out or lost its connection may have been applied by the
//! store, and a release whose reply was lost may not have been: either way the store may hold
//! a lock that nobody will renew or release. The rule (part of the contract): send an
//! owner-checked release with the same owner token, in the background, retried with backoff
//! until it gets an answer or the lease would have expired on the store anyway, and logged.
//! An owner-checked release can never free someone else's lock, so sending one that was not
//! needed costs one round trip and nothing else.

use std::time::Duration;

use tokio::time::Instant;

use crate::store::Store;
use crate::Lease;

/// First pause before retrying a cleanup; it doubles up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(1);
/// How long a cleanup of a lease without a local deadline (session-bound) is retried.
const SESSION_LEASE_LIMIT: Duration = Duration::from_secs(60);

/// Releases `lease` by its owner token in a background task on the current runtime, retrying
/// until the store answers or the lease could no longer be held. The release goes through the
/// client's waiting layer, as every release of the client does. `why` goes to the log.
///
/// Must run inside a tokio runtime.
pub(crate) fn release_in_background(store: Store, lease: Lease, why: &'static str) {
    tokio::spawn(release_until_answered(store, lease, why));
}

async fn release_until_answered(store: Store, lease: Lease, why: &'static str) {
    let now = Instant::now();
    // Past the lease's end the store has freed it by itself; retry a little beyond, since the
    // local deadline is measured from the send and the store's from its arrival.
    let give_up_at = match lease.valid_until() {
        Some(until) => until.max(now) + RETRY_MAX,
        None => now + SESSION_LEASE_LIMIT,
    };
    let mut pause = RETRY_MIN;
    let mut tries = 0u32;
    loop {
        tries += 1;
        match store.release(&lease).await {
            Ok(freed) => {
                tracing::debug!(lock = %lease.name(), freed, tries, why, "distlock: owner-checked cleanup answered");
                return;
            }
            Err(error) if Instant::now() + pause < give_up_at && !is_permanent(&error) => {
                tracing::debug!(lock = %lease.name(), %error, tries, why, "distlock: cleanup failed, retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_MAX);
            }
            Err(error) => {
                tracing::warn!(
                    lock = %lease.name(), %error, tries, why,
                    "distlock: owner-checked cleanup gave up; the store frees the lock at the end of its TTL or session"
                );
                return;
            }
        }
    }
}

/// Errors that retrying cannot cure.
fn is_permanent(error: &crate::Error) -> bool {
    !error.is_ambiguous()
}

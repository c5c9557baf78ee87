//! [`MultiGuard`]: several locks held together, all or none (a multi-lock), on any backend.
//!
//! The set is taken one lock at a time in one canonical order (the names sorted, duplicates
//! dropped), so clients asking for overlapping sets in any order never wait on each other in
//! a cycle; an attempt that cannot have every lock within its wait releases what it took
//! before it returns. Each lock is an ordinary hold: renewed by the client's one watchdog
//! (in one batch), with its own fencing token; the set has one lost-lock signal.

use std::collections::BTreeSet;

use futures::future::join_all;
use tokio::time::Instant;

use crate::{
    AcquireOptions, Error, FencingToken, IntoLockName, LockClient, LockGuard, LockName, LossReason,
    LostSignal, Result, Wait,
};

/// Every lock of a set, held together: from [`LockClient::acquire_all`].
///
/// Dropping it releases every lock in the background; [`release`](Self::release) does it
/// now and says whether all were still ours.
///
/// ```
/// use distlock_core::{LockClient, MemoryLock};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let client = LockClient::new(MemoryLock::new());
/// // Another client asking for ["to", "from"] takes them in the same order: no deadlock.
/// let both = client.acquire_all(["from", "to"]).await?;
/// assert_eq!(both.guards().len(), 2);
/// assert!(client.try_acquire("to").await?.is_none());
/// assert!(both.release().await?);
/// assert!(client.try_acquire("to").await?.is_some());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct MultiGuard {
    /// One guard per name, in the canonical order.
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// The guards of the set, one per name, sorted by name: each lock's fencing token, owner
    /// and remaining time.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The names held, sorted.
    pub fn names(&self) -> Vec<LockName> {
        self.guards.iter().map(LockGuard::name).collect()
    }

    /// The fencing token of each lock, in the order of [`names`](Self::names).
    pub fn fencing_tokens(&self) -> Vec<Option<FencingToken>> {
        self.guards.iter().map(LockGuard::fencing_token).collect()
    }

    /// Whether one lock of the set was lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Resolves when one lock of the set is lost, with the reason. Never resolves after a
    /// normal release.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) -> LossReason {
        self.lost_signal().lost().await
    }

    /// One lost-lock signal for the whole set: it fires when one of its locks is lost.
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal::of(self.guards.iter().map(LockGuard::hold))
    }

    /// Releases every lock of the set, all at once. Returns whether every one was still ours
    /// (`false`: one was lost, so the set's exclusion may have been broken).
    ///
    /// # Errors
    /// The first store error; every release whose outcome is unknown is retried in the
    /// background, as [`LockGuard::release`] does.
    ///
    /// # Cancel safety
    /// Cancel safe: each release runs to completion even if this future is dropped.
    pub async fn release(self) -> Result<bool> {
        release_all(self.guards).await
    }
}

/// Releases `guards` concurrently: whether all were ours, or the first error.
async fn release_all(guards: Vec<LockGuard>) -> Result<bool> {
    let mut all_ours = true;
    let mut first_error = None;
    for outcome in join_all(guards.into_iter().map(LockGuard::release)).await {
        match outcome {
            Ok(ours) => all_ours &= ours,
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    first_error.map_or(Ok(all_ours), Err)
}

impl LockClient {
    /// Acquires every lock in `names` with the default options, all or none: see
    /// [`acquire_all_with`](Self::acquire_all_with).
    ///
    /// # Errors
    /// As [`acquire_all_with`](Self::acquire_all_with).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire_all_with`](Self::acquire_all_with).
    pub async fn acquire_all<I>(&self, names: I) -> Result<MultiGuard>
    where
        I: IntoIterator,
        I::Item: IntoLockName,
    {
        let opts = self.defaults().clone();
        self.acquire_all_with(names, &opts).await
    }

    /// Acquires every lock in `names`, all or none, waiting as `opts` say: the wait covers
    /// the whole set. The locks are taken in one canonical order (the names sorted,
    /// duplicates dropped), so clients that ask for overlapping sets, in any order, never
    /// deadlock. If one lock cannot be had (its wait ran out, a store error), the locks
    /// already taken are released before this returns: a failed attempt never leaves part of
    /// the set held.
    ///
    /// Holding a lock of the set by itself (through [`acquire`](Self::acquire)) while asking
    /// for the set can deadlock, as with any two locks taken in different orders.
    ///
    /// # Errors
    /// [`Error::Timeout`] (naming the lock that was still held) if the wait ran out;
    /// [`Error::InvalidOptions`] for an empty set; invalid names or options; store errors.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future releases, in the background, the locks taken so far,
    /// and the acquisition in flight cleans up after itself as
    /// [`acquire_with`](Self::acquire_with) does.
    pub async fn acquire_all_with<I>(&self, names: I, opts: &AcquireOptions) -> Result<MultiGuard>
    where
        I: IntoIterator,
        I::Item: IntoLockName,
    {
        let names = canonical(names)?;
        let started = Instant::now();
        let deadline = opts.wait_value().deadline(started)?;
        let mut guards = Vec::with_capacity(names.len());
        for name in names {
            let wait = match (opts.wait_value(), deadline) {
                (Wait::For(_), Some(deadline)) => {
                    Wait::For(deadline.saturating_duration_since(Instant::now()))
                }
                (wait, _) => wait,
            };
            match self.acquire_with(&name, &opts.clone().wait(wait)).await {
                Ok(guard) => guards.push(guard),
                Err(error) => {
                    // The locks taken go back before the caller hears of the failure; a
                    // release that fails is retried in the background.
                    let _ = release_all(guards).await;
                    return Err(match error {
                        Error::Timeout { name, .. } => Error::Timeout {
                            name,
                            waited: started.elapsed(),
                        },
                        other => other,
                    });
                }
            }
        }
        Ok(MultiGuard { guards })
    }

    /// One attempt at every lock in `names` with the default options, all or none:
    /// `Ok(None)` if one is held by someone else (and then none is held by this call).
    ///
    /// # Errors
    /// As [`acquire_all_with`](Self::acquire_all_with), except that a held lock is `Ok(None)`.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire_all_with`](Self::acquire_all_with).
    pub async fn try_acquire_all<I>(&self, names: I) -> Result<Option<MultiGuard>>
    where
        I: IntoIterator,
        I::Item: IntoLockName,
    {
        let opts = self.defaults().clone().no_wait();
        match self.acquire_all_with(names, &opts).await {
            Ok(guards) => Ok(Some(guards)),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

/// The names validated, sorted and without duplicates.
fn canonical<I>(names: I) -> Result<BTreeSet<LockName>>
where
    I: IntoIterator,
    I::Item: IntoLockName,
{
    let names = names
        .into_iter()
        .map(IntoLockName::into_lock_name)
        .collect::<Result<BTreeSet<_>>>()?;
    if names.is_empty() {
        return Err(Error::invalid_options("a multi-lock needs at least one name"));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryLock;
    use std::time::Duration;

    #[tokio::test]
    async fn a_failed_attempt_leaves_nothing_held() {
        let client = LockClient::new(MemoryLock::new());
        let b = client.acquire("b").await.expect("free");
        assert!(client
            .try_acquire_all(["c", "b", "a"])
            .await
            .expect("answered")
            .is_none());
        assert!(
            client.try_acquire("a").await.expect("answered").is_some(),
            "a was left held"
        );
        let error = client
            .acquire_all_with(
                ["a", "b"],
                &AcquireOptions::new().wait_for(Duration::from_millis(50)),
            )
            .await
            .expect_err("b is held");
        assert!(
            matches!(&error, Error::Timeout { name, .. } if name == "b"),
            "{error}"
        );
        drop(b);
    }

    #[tokio::test]
    async fn names_are_sorted_and_deduplicated_and_an_empty_set_is_refused() {
        let client = LockClient::new(MemoryLock::new());
        let set = client.acquire_all(["z", "a", "z"]).await.expect("free");
        let names: Vec<String> = set.names().iter().map(ToString::to_string).collect();
        assert_eq!(names, ["a", "z"]);
        assert!(set.release().await.expect("released"));
        let empty: [&str; 0] = [];
        assert!(matches!(
            client.acquire_all(empty).await,
            Err(Error::InvalidOptions { .. })
        ));
        assert!(matches!(
            client.acquire_all(["ok", ""]).await,
            Err(Error::InvalidName { .. })
        ));
    }

    #[tokio::test]
    async fn the_set_is_lost_when_one_lock_is() {
        let store = MemoryLock::new();
        let client = LockClient::new(store.clone());
        let set = client.acquire_all(["x", "y"]).await.expect("free");
        let signal = set.lost_signal();
        assert!(!signal.is_lost());
        assert!(store.steal(&LockName::new("y").expect("valid")));
        // The watchdog learns of the steal at its next renewal (a third of the TTL).
        tokio::time::pause();
        let reason = tokio::time::timeout(Duration::from_secs(60), signal.lost())
            .await
            .expect("lost within the TTL");
        assert_eq!(reason, LossReason::NotOwned);
        assert!(set.is_lost());
        assert!(
            !set.release().await.expect("answered"),
            "one lock was not ours any more"
        );
    }
}

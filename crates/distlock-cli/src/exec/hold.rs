//! What `exec` holds while its command runs: one guard, or two for a plain `exec NAME`.
//!
//! `--shared` borrows `flock(1)`'s word, and with `flock` a shared and an exclusive holder of
//! one file exclude each other. So a plain `exec NAME` (the exclusive hold) takes the write
//! lock of the read-write lock NAME, which keeps every `--shared`/`--read` holder out, and
//! then the lock NAME as well, which keeps out what held that lock before (library users of
//! `acquire(NAME)`, and `distlock` versions whose plain `exec` held only it, during an
//! upgrade). The write lock comes first for every plain `exec`, so two of them never wait on
//! each other in a cycle. On a store without read-write locks no reader can exist, and the
//! lock NAME alone is held.
//!
//! `distlock leader` runs its command under a [`Leadership`] the same way: its guard is the
//! hold's, and giving the hold back resigns.
//!
//! This module owns taking and giving back those guards and seeing them as one hold (one
//! deadline, one lost-lock signal); it does not run the command.

use std::time::Duration;

use distlock::{
    AcquireOptions, FencingToken, Leadership, LockClient, LockGuard, LockKind, LossReason, LostSignal,
    Result, Wait,
};
use futures::future::{join_all, select_all};
use tokio::time::Instant;

use super::Held;

/// The guards of one hold, in the order they were taken; the last one is the hold's own
/// (its fencing token is the one passed to the command). A leadership's hold is its guard.
pub(crate) struct Hold {
    guards: Vec<LockGuard>,
    leadership: Option<Leadership>,
}

impl Hold {
    /// Takes what `held` names, waiting as `opts` say (the wait covers every guard). If a
    /// guard cannot be had, those already taken are released before this returns.
    ///
    /// Round trips: one acquire per guard (two for a plain `exec` on a store with read-write
    /// locks).
    ///
    /// # Errors
    /// [`distlock::Error::Timeout`]; [`distlock::Error::NotSupported`] if the store has no
    /// semaphores or read-write locks; [`distlock::Error::PermitsMismatch`]; store errors.
    pub(super) async fn acquire(client: &LockClient, held: Held<'_>, opts: &AcquireOptions) -> Result<Self> {
        let name = held.name;
        let guard = match held.kind {
            LockKind::Permit { permits, weight } => {
                client
                    .semaphore(name, permits)?
                    .acquire_many_with(weight, opts)
                    .await?
            }
            LockKind::Read => client.rw_lock(name)?.read_with(opts).await?,
            LockKind::Write => client.rw_lock(name)?.write_with(opts).await?,
            _ if client.capabilities().rw_locks => {
                let started = Instant::now();
                let writer = client.rw_lock(name)?.write_with(opts).await?;
                let wait = match opts.wait_value() {
                    Wait::For(wait) => Wait::For(wait.saturating_sub(started.elapsed())),
                    other => other,
                };
                match client.acquire_with(name, &opts.clone().wait(wait)).await {
                    Ok(lock) => return Ok(Self::of(vec![writer, lock])),
                    Err(error) => {
                        // A release that fails is retried in the background.
                        let _ = writer.release().await;
                        return Err(error);
                    }
                }
            }
            _ => client.acquire_with(name, opts).await?,
        };
        Ok(Self::of(vec![guard]))
    }

    fn of(guards: Vec<LockGuard>) -> Self {
        Self {
            guards,
            leadership: None,
        }
    }

    /// The hold of a leader: giving it back resigns.
    pub(crate) fn leadership(leadership: Leadership) -> Self {
        Self {
            guards: Vec::new(),
            leadership: Some(leadership),
        }
    }

    /// Every guard of the hold, the hold's own last.
    fn guards(&self) -> impl Iterator<Item = &LockGuard> {
        self.guards
            .iter()
            .chain(self.leadership.as_ref().map(Leadership::guard))
    }

    /// The fencing token of the hold's own guard (a leader's term).
    pub(super) fn fencing_token(&self) -> Option<FencingToken> {
        self.guards().last().and_then(LockGuard::fencing_token)
    }

    /// How long every guard is still ours for sure: the least of their remaining times
    /// (`None` for session-bound leases).
    pub(super) fn remaining(&self) -> Option<Duration> {
        self.guards().filter_map(LockGuard::remaining).min()
    }

    /// One lost-lock signal for the hold: it fires when one of its guards is lost.
    pub(super) fn lost_signal(&self) -> Lost {
        Lost(self.guards().map(LockGuard::lost_signal).collect())
    }

    /// Releases every guard at once (a leader resigns). Returns whether every one was still
    /// ours.
    ///
    /// # Errors
    /// The first store error (each release whose outcome is unknown is retried in the
    /// background).
    pub(super) async fn release(self) -> Result<bool> {
        let mut all_ours = true;
        let mut first_error = None;
        let resign = self.leadership.map(Leadership::resign);
        let releases = self.guards.into_iter().map(LockGuard::release);
        let (released, resigned) = futures::join!(join_all(releases), async {
            match resign {
                Some(resign) => Some(resign.await),
                None => None,
            }
        });
        for outcome in released.into_iter().chain(resigned) {
            match outcome {
                Ok(ours) => all_ours &= ours,
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(all_ours), Err)
    }
}

/// The lost-lock signal of a [`Hold`]: lost when one of its guards is.
pub(super) struct Lost(Vec<LostSignal>);

impl Lost {
    /// Whether one guard of the hold was lost.
    pub(super) fn is_lost(&self) -> bool {
        self.0.iter().any(LostSignal::is_lost)
    }

    /// Resolves when one guard of the hold is lost, with the reason; never after a normal
    /// release.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(super) async fn lost(&self) -> LossReason {
        let (reason, _, _) = select_all(self.0.iter().map(|signal| Box::pin(signal.lost()))).await;
        reason
    }
}

//! The client's lease, published to the guards as its [`Session`]: granting a lease (with the
//! next epoch) when there is none, keeping it alive, and declaring it over here before the
//! cluster can expire it. Owns `Inner`'s `slot`, `granting` and `session`.
//!
//! Every key this client creates is attached to its one lease, so the lease is the session of
//! every lock it holds:
//! - a keeper task sends a keep-alive every third of the granted TTL on one
//!   `LeaseKeepAlive` stream; the leader renews the lease when it applies one, so a reply with
//!   a positive TTL proves that the lease lives until at least the keep-alive's *send* time
//!   plus the TTL;
//! - a keep-alive not confirmed within its third of the TTL (no reply, a broken stream, a
//!   member without a leader): `Suspended`, the locks may or may not be held; the stream is
//!   opened again on the next endpoint (a member paused or cut off costs one try);
//! - confirmed again: `Connected`, the same epoch, the locks were kept;
//! - the server says the lease is gone (a TTL of 0 or less, or "lease not found"), or the last
//!   confirmed keep-alive was sent a TTL ago less the safety margin (a tenth of the TTL, at
//!   most 2 s, as for every TTL store): `Expired`, every guard of that lease is lost, and the
//!   next operation is granted a new lease with the next epoch. The old lease is revoked in
//!   the background, so that its keys go at once if the cluster still has them.
//!
//! That deadline is also published as the session's local deadline
//! ([`Session::valid_until`]), moved forward by each confirmed keep-alive: a guard checks it
//! against the clock, so a process that was paused past it says lost the moment it runs
//! again.

use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use distlock_core::{AcquireOptions, Error, Result, Session, SessionState};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use super::{ClientLease, Inner};
use crate::client::{lease_not_found, map_status, token_refused, BACKEND};
use crate::proto::{LeaseGrantRequest, LeaseKeepAliveRequest, LeaseRevokeRequest};

impl Inner {
    /// The client's lease, or a new one (with the next epoch) if it has ended.
    pub(super) async fn lease(self: &Arc<Self>) -> Result<ClientLease> {
        if let Some(lease) = self.current() {
            return Ok(lease);
        }
        let _granting = self.granting.lock().await;
        if let Some(lease) = self.current() {
            return Ok(lease);
        }
        let asked = whole_seconds(self.config.lease_ttl());
        let sent_at = Instant::now();
        let reply = self
            .rpc
            // Sent again after a transient failure: a grant applied twice leaves a lease no key
            // is attached to, which the cluster drops after its TTL.
            .call_idempotent("lease grant", |rpc| async move {
                rpc.lease()
                    .lease_grant(LeaseGrantRequest { ttl: asked, id: 0 })
                    .await
            })
            .await?;
        if !reply.error.is_empty() || reply.ttl <= 0 {
            return Err(Error::backend(
                BACKEND,
                format!("lease grant refused: {:?} (TTL {})", reply.error, reply.ttl),
            ));
        }
        let ttl = Duration::from_secs(reply.ttl.unsigned_abs());
        let epoch = self.session.borrow().epoch + 1;
        let lease = ClientLease {
            id: reply.id,
            epoch,
            ttl,
        };
        let until = deadline(sent_at, ttl);
        *self.slot() = Some(lease);
        self.session
            .send_replace(Session::connected(epoch).with_valid_until(until));
        tracing::debug!(
            lease = format_args!("{:x}", reply.id),
            epoch,
            ?ttl,
            "distlock-etcd: lease granted"
        );
        tokio::spawn(keep_alive(Arc::downgrade(self), lease, until));
        Ok(lease)
    }

    /// The client's lease, unless it has ended.
    pub(super) fn current(&self) -> Option<ClientLease> {
        let lease = (*self.slot())?;
        let session = *self.session.borrow();
        let over = !session.keeps(lease.epoch) || session.valid_until.is_some_and(|t| t <= Instant::now());
        if over {
            self.end_session(lease.epoch, "the lease's deadline passed");
            return None;
        }
        Some(lease)
    }

    /// Whether the lease of `epoch` is still the client's and alive here.
    pub(super) fn keeps(&self, epoch: u64) -> bool {
        self.current().is_some_and(|lease| lease.epoch == epoch)
    }

    /// Ends the lease of `epoch` here (once): its guards are lost, the next operation is
    /// granted a new lease, and the old one is revoked in the background.
    pub(super) fn end_session(&self, epoch: u64, why: &str) {
        let ended = {
            let mut slot = self.slot();
            match *slot {
                Some(lease) if lease.epoch == epoch => {
                    *slot = None;
                    Some(lease)
                }
                _ => None,
            }
        };
        self.session.send_if_modified(|s| {
            if s.epoch == epoch && s.state != SessionState::Expired {
                s.state = SessionState::Expired;
                true
            } else {
                false
            }
        });
        if let Some(lease) = ended {
            tracing::warn!(
                lease = format_args!("{:x}", lease.id),
                epoch,
                why,
                "distlock-etcd: lease over"
            );
            let rpc = self.rpc.clone();
            tokio::spawn(async move {
                let _ = rpc
                    .call_idempotent("lease revoke", |rpc| async move {
                        rpc.lease()
                            .lease_revoke(LeaseRevokeRequest { id: lease.id })
                            .await
                    })
                    .await;
            });
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<ClientLease>> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a keep-alive of the lease of `epoch` sent at `sent_at` and confirmed: the
    /// deadline moves forward (silently), and a suspended session is connected again.
    fn confirmed(&self, epoch: u64, until: Instant) {
        self.session.send_if_modified(|s| {
            if s.epoch != epoch || s.state == SessionState::Expired {
                return false;
            }
            if s.valid_until.is_none_or(|t| t < until) {
                s.valid_until = Some(until);
            }
            let woke = s.state == SessionState::Suspended;
            s.state = SessionState::Connected;
            woke
        });
    }

    /// A keep-alive of the lease of `epoch` went unconfirmed: its locks are uncertain.
    fn suspended(&self, epoch: u64) {
        self.session.send_if_modified(|s| {
            if s.epoch == epoch && s.state == SessionState::Connected {
                s.state = SessionState::Suspended;
                true
            } else {
                false
            }
        });
    }
}

/// When a lease confirmed alive by a keep-alive sent at `sent_at` must be presumed expired
/// here: `ttl` later, less the safety margin of a TTL store of that TTL.
pub(super) fn deadline(sent_at: Instant, ttl: Duration) -> Instant {
    sent_at + ttl - AcquireOptions::default_safety_margin(ttl)
}

/// `ttl` in whole seconds, rounded up (etcd's unit).
fn whole_seconds(ttl: Duration) -> i64 {
    let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(seconds).unwrap_or(i64::MAX)
}

/// Keeps the lease alive until it ends or the client is dropped: a keep-alive every third of
/// its TTL on one stream, opened again after any failure.
async fn keep_alive(inner: Weak<Inner>, lease: ClientLease, mut until: Instant) {
    let every = lease.ttl / 3;
    // The endpoint the keep-alive stream goes to: the next one after a failure, so that a
    // member paused or cut off (whose connection may look alive) costs one try.
    let mut endpoint = 0;
    loop {
        let Some(strong) = inner.upgrade() else { return };
        if !strong.keeps(lease.epoch) {
            return;
        }
        let rpc = strong.rpc.clone();
        drop(strong);
        let (requests, receiver) = mpsc::channel(1);
        // etcd sends the stream's headers with its first reply, so opening the stream waits
        // for a keep-alive: the first one goes out with the opening (the channel has room).
        let mut opening = Some(Instant::now());
        let _ = requests.try_send(LeaseKeepAliveRequest { id: lease.id });
        let opened = tokio::time::timeout(
            every,
            rpc.lease_on(endpoint)
                .lease_keep_alive(ReceiverStream::new(receiver)),
        )
        .await;
        let mut replies = match opened {
            Ok(Ok(stream)) => Some(stream.into_inner()),
            Ok(Err(status)) if lease_not_found(&status) => {
                if let Some(inner) = inner.upgrade() {
                    inner.end_session(lease.epoch, "the cluster no longer has the lease");
                }
                return;
            }
            Ok(Err(status)) => {
                if token_refused(&status) {
                    // etcd 3.4 does not check a token on lease calls; a server that does gets
                    // a new one before the stream is opened again.
                    let _ = rpc.authenticate().await;
                }
                tracing::debug!(error = %map_status(status), "distlock-etcd: keep-alive stream not opened");
                None
            }
            Err(_) => None,
        };
        // Keep-alives on this stream until it fails.
        loop {
            let Some(inner) = inner.upgrade() else { return };
            if !inner.keeps(lease.epoch) {
                return;
            }
            let Some(stream) = replies.as_mut() else {
                inner.suspended(lease.epoch);
                break;
            };
            let (sent_at, sent) = match opening.take() {
                Some(sent_at) => (sent_at, true),
                None => (
                    Instant::now(),
                    requests
                        .send(LeaseKeepAliveRequest { id: lease.id })
                        .await
                        .is_ok(),
                ),
            };
            let reply = if sent {
                tokio::time::timeout(every, stream.message()).await
            } else {
                Ok(Ok(None))
            };
            match reply {
                Ok(Ok(Some(reply))) if reply.ttl > 0 => {
                    until = deadline(sent_at, Duration::from_secs(reply.ttl.unsigned_abs()));
                    inner.confirmed(lease.epoch, until);
                }
                Ok(Ok(Some(_))) => {
                    inner.end_session(lease.epoch, "the cluster expired the lease");
                    return;
                }
                Ok(Err(status)) if lease_not_found(&status) => {
                    inner.end_session(lease.epoch, "the cluster no longer has the lease");
                    return;
                }
                _ => {
                    inner.suspended(lease.epoch);
                    break;
                }
            }
            drop(inner);
            tokio::time::sleep_until(sent_at + every).await;
        }
        // The stream failed: try again at once, unless the lease is already past its deadline.
        if Instant::now() >= until {
            if let Some(inner) = inner.upgrade() {
                inner.end_session(
                    lease.epoch,
                    "no keep-alive confirmed for the lease's TTL, less a safety margin",
                );
            }
            return;
        }
        endpoint = endpoint.wrapping_add(1);
        tokio::time::sleep(Duration::from_millis(100).min(every)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_presumed_over_before_the_cluster_can_expire_it() {
        let now = Instant::now();
        assert_eq!(
            deadline(now, Duration::from_secs(10)),
            now + Duration::from_secs(9)
        );
        assert_eq!(
            deadline(now, Duration::from_secs(60)),
            now + Duration::from_secs(58)
        );
        assert_eq!(whole_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(whole_seconds(Duration::from_secs(3)), 3);
    }

    #[test]
    fn unavailable_is_the_error_of_a_silent_cluster() {
        let error = map_status(tonic::Status::unavailable("etcdserver: no leader"));
        assert!(error.is_transient(), "{error}");
    }
}

//! The session's lifecycle: opening a session (with the next epoch) when there is none,
//! publishing its state to the guards ([`Session`]), following the driver's connection states,
//! recording each contact the leader confirmed, and declaring the session over here before
//! the server can expire it. The heartbeat that proves those contacts is `heartbeat`. Owns
//! `Inner`'s `slot`, `connecting`, `session` and `contact`; on a session's end it tells the
//! held nodes' guards (`held.rs`) and may not touch the queues.
//!
//! Locks live as long as the ZooKeeper session that created them: there is no TTL, and the
//! lease's `ttl` is ignored. The session is published to the guards ([`Session`]):
//! - connection lost, or the leader has not confirmed the session (`heartbeat`: a `sync`
//!   and a read) for a quarter of the negotiated session timeout: `Suspended` (the guard's
//!   `is_suspended()`); the lock may still be held;
//! - reconnected within the session timeout: `Connected` again with the same epoch;
//! - connected only to a read-only server: `Suspended` (it cannot keep the session alive);
//! - the server expired the session, or the last contact the leader confirmed is a
//!   (negotiated) session timeout ago, less a margin of a tenth of it (so this side says lost before the server
//!   can expire the session and hand the lock to someone else): `Expired`, every guard of
//!   that session is lost, and the next operation opens a new session with the next epoch.
//!   That instant is also published as the session's local deadline
//!   ([`Session::valid_until`]), moved forward by each heartbeat: a guard checks it against
//!   the clock, so a process that was paused (a long GC, SIGSTOP) past it says lost the moment
//!   it runs again, before any of its tasks has learnt anything.

use std::sync::{Arc, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use distlock_core::{LossReason, Result, Session, SessionState};
use tokio::time::Instant;
use zookeeper_client as zk;

use super::{map_err, Conn, Inner};

mod heartbeat;

impl Inner {
    pub(super) fn slot(&self) -> MutexGuard<'_, Option<Conn>> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The open session, unless it has ended.
    pub(super) fn current(&self) -> Option<Conn> {
        let conn = self.slot().clone()?;
        if conn.client.state().is_terminated() {
            self.end_session(conn.epoch, "the server ended it");
            return None;
        }
        Some(conn)
    }

    /// The open session, or a new one (with the next epoch) if it has ended.
    pub(super) async fn conn(self: &Arc<Self>) -> Result<Conn> {
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let connecting_at = Instant::now();
        let client = zk::Client::connector()
            .session_timeout(self.config.session_timeout())
            .connection_timeout(self.config.connection_timeout())
            .connect(self.config.connect_string())
            .await
            .map_err(map_err)?;
        #[cfg(test)]
        tests::after_handshake(&client).await;
        let epoch = self.session.borrow().epoch + 1;
        let conn = Conn { client, epoch };
        tracing::debug!(epoch, session = %conn.client.session_id(), "distlock: ZooKeeper session opened");
        // The watcher sees every state change from here on, and Connected is published before
        // the follower runs, so a disconnection right after the connect is never overwritten.
        let states = conn.client.state_watcher();
        let initial = conn.client.state();
        *self.contact.lock().unwrap_or_else(PoisonError::into_inner) = (epoch, connecting_at);
        *self.slot() = Some(conn.clone());
        let session = Session::connected(epoch);
        self.session.send_replace(
            match session_deadline(connecting_at, conn.client.session_timeout()) {
                Some(until) => session.with_valid_until(until),
                None => session,
            },
        );
        // Everything below follows the timeout the server negotiated, not the one asked for.
        let timeout = conn.client.session_timeout();
        tokio::spawn(follow_session(
            Arc::downgrade(self),
            epoch,
            (initial, states),
            timeout,
            driver_connection_timeout(self.config.connection_timeout(), timeout),
        ));
        tokio::spawn(heartbeat::heartbeat(Arc::downgrade(self), epoch, timeout));
        Ok(conn)
    }

    /// Declares session `epoch` over: guards are told, and the client is dropped so that the
    /// session closes (or expires) on the server and the next operation opens a new one.
    pub(super) fn end_session(&self, epoch: u64, why: &str) {
        let conn = {
            let mut slot = self.slot();
            match slot.as_ref() {
                Some(conn) if conn.epoch == epoch => slot.take(),
                _ => None,
            }
        };
        let ended = self.session.send_if_modified(|s| {
            if s.epoch == epoch && s.state != SessionState::Expired {
                s.state = SessionState::Expired;
                true
            } else {
                false
            }
        });
        if ended {
            tracing::warn!(
                epoch,
                why,
                "distlock: ZooKeeper session ended; its locks are lost"
            );
        }
        let mut held = self.held();
        held.retain(|_, h| {
            if h.epoch == epoch {
                h.lost.send_replace(Some(LossReason::SessionExpired));
                false
            } else {
                true
            }
        });
        drop(held);
        drop(conn);
    }

    /// Records that the server answered a request of session `epoch` sent at `sent`.
    /// Moves the session's local deadline with it, without waking anyone (guards read it
    /// when they check).
    pub(super) fn contacted(&self, epoch: u64, sent: Instant, timeout: Duration) {
        let mut contact = self.contact.lock().unwrap_or_else(PoisonError::into_inner);
        if contact.0 == epoch && contact.1 < sent {
            contact.1 = sent;
            if let Some(until) = session_deadline(sent, timeout) {
                self.session.send_if_modified(|s| {
                    if s.epoch == epoch && s.valid_until.is_none_or(|t| t < until) {
                        s.valid_until = Some(until);
                    }
                    false
                });
            }
        }
    }

    /// The last contact with the server in session `epoch`, if recorded.
    pub(super) fn last_contact(&self, epoch: u64) -> Option<Instant> {
        let contact = self.contact.lock().unwrap_or_else(PoisonError::into_inner);
        (contact.0 == epoch).then_some(contact.1)
    }

    pub(super) fn set_state(&self, epoch: u64, state: SessionState) {
        self.session.send_if_modified(|s| {
            if s.epoch == epoch && s.state != SessionState::Expired && s.state != state {
                s.state = state;
                true
            } else {
                false
            }
        });
    }
}

/// Maps the client's session states onto [`Session`] for epoch `epoch`, and declares the
/// session expired on our side before the server can expire it.
///
/// The server expires a session `timeout` (the negotiated one) after it last heard from us,
/// which is no earlier than our last contact: the send time of the last request the leader
/// confirmed (kept by `heartbeat`, which also ends the session while the driver stays
/// connected to a member that lost its leader). Once the connection is lost (noticed by the driver after `connection_timeout`
/// of silence, plus one tick) or reaches only a read-only server, the guards are Suspended at
/// once, and the session ends here at the last contact plus `timeout` minus a safety margin
/// of a tenth of the session timeout: the guards' lost signals fire while the server still
/// holds our nodes. Without a recorded contact, the disconnection is counted back by the
/// driver's detection time, `connection_timeout` plus a tick (a bound the driver keeps).
async fn follow_session(
    inner: Weak<Inner>,
    epoch: u64,
    (initial, mut states): (zk::SessionState, zk::StateWatcher),
    timeout: Duration,
    connection_timeout: Duration,
) {
    let mut first = Some(initial).filter(|s| *s != zk::SessionState::SyncConnected);
    let noticed_after = connection_timeout + connection_timeout / 8;
    let gives_up_at = |inner: &Inner| {
        let now = Instant::now();
        let contact = inner
            .last_contact(epoch)
            .unwrap_or_else(|| now.checked_sub(noticed_after).unwrap_or(now));
        session_deadline(contact, timeout).unwrap_or(now).max(now)
    };
    let mut gave_up_at: Option<Instant> = None;
    loop {
        let state = match (first.take(), gave_up_at) {
            (Some(state), _) => state,
            (None, Some(at)) => tokio::select! {
                state = states.changed() => state,
                () = tokio::time::sleep_until(at) => {
                    if let Some(inner) = inner.upgrade() {
                        inner.end_session(epoch, "no contact with the server for the session timeout, less a safety margin");
                    }
                    return;
                }
            },
            (None, None) => states.changed().await,
        };
        let Some(inner) = inner.upgrade() else {
            return;
        };
        match session_state_for(state) {
            Some(SessionState::Suspended) => {
                tracing::info!(epoch, %state, "distlock: ZooKeeper connection lost or read-only; locks suspended");
                inner.set_state(epoch, SessionState::Suspended);
                gave_up_at.get_or_insert_with(|| gives_up_at(&inner));
            }
            Some(SessionState::Connected) => {
                tracing::info!(epoch, "distlock: ZooKeeper connection back in the same session");
                inner.set_state(epoch, SessionState::Connected);
                gave_up_at = None;
            }
            _ => {
                inner.end_session(epoch, &format!("session state {state}"));
                return;
            }
        }
        if inner.session.borrow().epoch != epoch {
            return; // a newer session took over
        }
    }
}

/// How long the driver lets a connection stay silent before it gives up on it: the
/// `configured` connection timeout, which the driver lowers to two fifths of the negotiated
/// session `timeout` when it exceeds three fifths of it (when the server negotiated the session
/// timeout down). Erring low only makes the session end earlier here.
fn driver_connection_timeout(configured: Duration, timeout: Duration) -> Duration {
    if configured > timeout * 3 / 5 {
        timeout * 2 / 5
    } else {
        configured
    }
}

/// When a session last heard from at `contact` must be presumed expired here: `timeout`
/// later, less a safety margin of a tenth of it (the server cannot expire it before
/// `contact + timeout`).
pub(super) fn session_deadline(contact: Instant, timeout: Duration) -> Option<Instant> {
    (contact + timeout).checked_sub(timeout / 10)
}

/// What a state of the ZooKeeper connection means for the locks of its session: `None` when
/// the session is over (expired, closed, auth failed). A read-only server (cut off from the
/// quorum) cannot keep the session alive on the ensemble, so the locks stay suspended and the
/// clock towards the session's end keeps running.
fn session_state_for(state: zk::SessionState) -> Option<SessionState> {
    match state {
        zk::SessionState::SyncConnected => Some(SessionState::Connected),
        zk::SessionState::Disconnected | zk::SessionState::ConnectedReadOnly => Some(SessionState::Suspended),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use distlock_core::DistributedLock;
    use futures::future::BoxFuture;

    use super::*;
    use crate::{ZooKeeperConfig, ZooKeeperLock};

    type Hook = Arc<dyn Fn(zk::Client) -> BoxFuture<'static, ()> + Send + Sync>;

    /// Test-only: what [`Inner::conn`] awaits right after a session's handshake, before it
    /// looks at the new session. The driver's own task may report a disconnection in that gap
    /// (when the runtime happens to run it first); no real fault can pin it there, this can.
    static AFTER_HANDSHAKE: Mutex<Option<Hook>> = Mutex::new(None);

    pub(super) async fn after_handshake(client: &zk::Client) {
        let hook = AFTER_HANDSHAKE
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(hook) = hook {
            hook(client.clone()).await;
        }
    }

    /// A disconnection the driver reports right after the handshake, before this side has
    /// looked at the new session, is never lost. Timeline: the handshake completes; the link
    /// is reset and new connections are refused; the driver reports Disconnected; only then
    /// does `conn` go on. The session must be published Suspended at once, not left Connected
    /// while the driver is disconnected (its locks would not be suspended).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_disconnection_right_after_the_handshake_suspends_the_session() {
        let url = distlock_testkit::shared::zookeeper_url().expect("the shared ZooKeeper starts");
        let (proxied_url, faults) =
            distlock_testkit::proxy::through_proxies(&url).expect("the fault proxy starts");
        let faults = Arc::new(faults);
        let cut = faults.clone();
        let hook: Hook = Arc::new(move |client: zk::Client| {
            let cut = cut.clone();
            Box::pin(async move {
                cut.refuse(true);
                cut.reset();
                tokio::time::timeout(Duration::from_secs(5), async {
                    while client.state() == zk::SessionState::SyncConnected {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
                .await
                .expect("the driver reports the cut");
            })
        });
        *AFTER_HANDSHAKE.lock().unwrap_or_else(PoisonError::into_inner) = Some(hook);
        let config = ZooKeeperConfig::from_url(&proxied_url)
            .and_then(|c| c.with_session_timeout(Duration::from_secs(3)))
            .expect("valid");
        let connected = ZooKeeperLock::connect(config).await;
        *AFTER_HANDSHAKE.lock().unwrap_or_else(PoisonError::into_inner) = None;
        let lock = connected.expect("connects");

        let mut session = lock.session().expect("session-bound");
        let left_connected = tokio::time::timeout(
            Duration::from_secs(1),
            session.wait_for(|s| s.state != SessionState::Connected),
        )
        .await
        .is_ok();
        let state = session.borrow().state;
        assert!(
            left_connected && state == SessionState::Suspended,
            "the driver is disconnected, yet the session still says {state:?} a second later"
        );
        faults.heal();
    }

    #[test]
    fn only_a_quorum_connection_keeps_the_session_connected() {
        assert_eq!(
            session_state_for(zk::SessionState::SyncConnected),
            Some(SessionState::Connected)
        );
        assert_eq!(
            session_state_for(zk::SessionState::Disconnected),
            Some(SessionState::Suspended)
        );
        assert_eq!(
            session_state_for(zk::SessionState::ConnectedReadOnly),
            Some(SessionState::Suspended),
            "a read-only server cannot keep the session alive"
        );
        for ended in [
            zk::SessionState::Expired,
            zk::SessionState::Closed,
            zk::SessionState::AuthFailed,
        ] {
            assert_eq!(session_state_for(ended), None, "{ended}");
        }
    }
}

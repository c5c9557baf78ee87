//! The session's heartbeat: keeps the session's last contact with the ensemble's leader known,
//! suspends the session's locks when the leader stops confirming, and declares the session
//! over here once the leader may have expired it. Owns no state of its own: it records what it
//! learns through `Inner` (`contacted`, `set_state`, `end_session`) and may not touch locks.
//!
//! A read answered is no proof of contact: a follower cut off from its leader keeps answering
//! reads and pings for up to `syncLimit × tickTime`, while it no longer passes the session's
//! activity on, and the leader expires the session a session timeout after it last heard of
//! it. So each beat is a `sync` followed by an `exists("/")`, both sent at once (one round
//! trip): a follower answers the `sync` only after the leader did, so an answered pair proves
//! the leader was reached after it was sent. Only that counts as contact.

use std::sync::Weak;
use std::time::Duration;

use distlock_core::SessionState;
use tokio::time::Instant;
use zookeeper_client as zk;

use super::{session_deadline, Inner};

/// Beats for session `epoch`, whose negotiated timeout is `timeout`, every twelfth of it
/// (a third of the wait below; this replaces the driver's idle pings, which it sends only
/// after three eighths of its connection timeout without a request, so the traffic stays about
/// the same). While the driver is connected to a quorum server:
/// - a beat answered within a quarter of `timeout` records its send time as the last contact
///   (moving the session's local deadline) and publishes the session `Connected`;
/// - with no contact for a quarter of `timeout`, the session is published `Suspended` (the
///   driver may still be connected, to a member that lost its leader);
/// - at the last contact plus `timeout`, less a tenth of it, the session ends here, whether
///   the driver is connected or not.
///
/// Holds the client only for a round trip, so it never keeps a session open; ends with the
/// session.
pub(super) async fn heartbeat(inner: Weak<Inner>, epoch: u64, timeout: Duration) {
    let wait = timeout / 4;
    let period = wait / 3;
    let mut next = Instant::now();
    loop {
        let Some(deadline) = local_deadline(&inner, epoch, timeout) else {
            return;
        };
        tokio::time::sleep_until(next.min(deadline)).await;
        let Some(client) = current(&inner, epoch) else {
            return;
        };
        let now = Instant::now();
        if local_deadline(&inner, epoch, timeout).is_none_or(|d| d <= now) {
            if let Some(inner) = inner.upgrade() {
                inner.end_session(
                    epoch,
                    "no word from the ensemble's leader for the session timeout, less a safety margin",
                );
            }
            return;
        }
        if now < next {
            continue;
        }
        next = now + period;
        if client.state() != zk::SessionState::SyncConnected {
            continue; // the session follower handles disconnections
        }
        let sent = Instant::now();
        let synced = client.sync("/");
        let read = client.check_stat("/");
        let confirmed = async {
            synced.await?;
            read.await.map(drop)
        };
        let answered = tokio::time::timeout_at((sent + wait).min(deadline), confirmed).await;
        let Some(strong) = inner.upgrade() else {
            return;
        };
        // Looked at right before publishing, with no await between: a disconnection the
        // driver reports after this is published after it by the session follower.
        if client.state() != zk::SessionState::SyncConnected {
            continue;
        }
        if matches!(answered, Ok(Ok(()))) {
            strong.contacted(epoch, sent, timeout);
            strong.set_state(epoch, SessionState::Connected);
        } else if strong
            .last_contact(epoch)
            .is_none_or(|contact| Instant::now() >= contact + wait)
        {
            if strong.session.borrow().state == SessionState::Connected {
                tracing::info!(
                    epoch,
                    "distlock: the ZooKeeper server answers, but the leader does not confirm; locks suspended"
                );
            }
            strong.set_state(epoch, SessionState::Suspended);
        }
    }
}

/// The client of session `epoch`, while it is the current session.
fn current(inner: &Weak<Inner>, epoch: u64) -> Option<zk::Client> {
    let inner = inner.upgrade()?;
    if inner.session.borrow().epoch != epoch {
        return None;
    }
    inner.current().filter(|c| c.epoch == epoch).map(|c| c.client)
}

/// Session `epoch`'s local deadline: its last contact plus `timeout`, less the margin.
fn local_deadline(inner: &Weak<Inner>, epoch: u64, timeout: Duration) -> Option<Instant> {
    let contact = inner.upgrade()?.last_contact(epoch)?;
    Some(session_deadline(contact, timeout).unwrap_or(contact))
}

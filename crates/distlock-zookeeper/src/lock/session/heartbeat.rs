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

use super::session_deadline;
use crate::lock::Inner;

/// Beats for session `epoch`, whose negotiated timeout is `timeout`, every twelfth of it
/// (a third of the suspension delay below; this replaces the driver's idle pings, which it sends only
/// after three eighths of its connection timeout without a request, so the traffic stays about
/// the same). While the driver is connected to a quorum server:
/// - a beat answered before the session's local deadline records its send time as the last
///   contact (moving the deadline) and publishes the session `Connected`; one beat is out at
///   a time, so a slow leader slows the beats down rather than piling them up;
/// - with a beat unanswered for a quarter of `timeout`, the session is published `Suspended`
///   (the driver may still be connected, to a member that lost its leader);
/// - at the last contact plus `timeout`, less a tenth of it, the session ends here, whether
///   the driver is connected or not.
///
/// Holds the client only while a beat is out (a quarter of `timeout` at most once the
/// `ZooKeeperLock` is dropped), so it never keeps a session open; ends with the session.
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
        tokio::pin!(confirmed);
        // A slow answer still proves contact at `sent`: it is awaited up to the deadline, and
        // the locks are suspended meanwhile once it is `wait` late (by then the driver has
        // given up on a silent connection, so requests sent after the suspension wait for
        // the next one). Looked at again every `wait`, so a session that ended or a client
        // dropped is let go.
        let mut limit = sent + wait;
        let answered = loop {
            if let Ok(answered) = tokio::time::timeout_at(limit.min(deadline), &mut confirmed).await {
                break Some(answered);
            }
            if Instant::now() >= deadline || current(&inner, epoch).is_none() {
                break None;
            }
            suspend(&inner, epoch, &client);
            limit = Instant::now() + wait;
        };
        let Some(strong) = inner.upgrade() else {
            return;
        };
        // Looked at right before publishing, with no await between: a disconnection the
        // driver reports after this is published after it by the session follower.
        if matches!(answered, Some(Ok(()))) && client.state() == zk::SessionState::SyncConnected {
            strong.contacted(epoch, sent, timeout);
            strong.set_state(epoch, SessionState::Connected);
        } else if strong
            .last_contact(epoch)
            .is_none_or(|contact| Instant::now() >= contact + wait)
        {
            suspend(&inner, epoch, &client); // a beat refused while connected
        }
    }
}

/// Publishes session `epoch` suspended while the driver is still connected: the member
/// answers, but the leader has not confirmed the session for a quarter of its timeout.
fn suspend(inner: &Weak<Inner>, epoch: u64, client: &zk::Client) {
    let Some(inner) = inner.upgrade() else {
        return;
    };
    if client.state() != zk::SessionState::SyncConnected {
        return; // the session follower handles disconnections
    }
    if inner.session.borrow().state == SessionState::Connected {
        tracing::info!(
            epoch,
            "distlock: the ZooKeeper server answers, but the leader does not confirm; locks suspended"
        );
    }
    inner.set_state(epoch, SessionState::Suspended);
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

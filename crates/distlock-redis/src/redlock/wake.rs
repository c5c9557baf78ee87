//! How a Redlock waiter is woken: the masters' release notifications, forwarded once a
//! majority of them (or the first, after a grace time) woke it.

use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::subscriber::Keep;

/// Bumps `tx`, waking the waiter, once `quorum` masters woke it, or `grace` after the first
/// of them did, whichever comes first; ends when the watch is dropped or every master's
/// subscription is gone (then `tx` drops and the waiter polls).
///
/// A release reaches the masters in parallel, and each wakes the waiter as soon as it has
/// released. A waiter that tried on the first wake would often find the lock still held on
/// the others, fail, and queue again behind the waiters its attempt overtook: then the next
/// master's release wakes one of them too. Waiting for a majority of wakes makes the first
/// attempt the one that can win. A master that does not wake the waiter (it is down, its
/// subscription broke, or the waiter was not in its queue) costs at most `grace`.
pub(super) async fn forward_releases(
    masters: Vec<(watch::Receiver<u64>, Keep)>,
    tx: watch::Sender<u64>,
    quorum: usize,
    grace: Duration,
) {
    let changed = |(i, mut rx, keep): (usize, watch::Receiver<u64>, Keep)| async move {
        let alive = rx.changed().await.is_ok();
        (alive, i, rx, keep)
    };
    let mut woke = vec![false; masters.len()];
    let mut first_wake: Option<Instant> = None;
    let mut pending: FuturesUnordered<_> = masters
        .into_iter()
        .enumerate()
        .map(|(i, (rx, keep))| changed((i, rx, keep)))
        .collect();
    loop {
        let wake_anyway = async {
            match first_wake {
                Some(at) => tokio::time::sleep_until(at + grace).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tx.closed() => return,
            () = wake_anyway => {
                tx.send_modify(|n| *n = n.wrapping_add(1));
                woke.fill(false);
                first_wake = None;
            }
            next = pending.next() => match next {
                Some((true, i, rx, keep)) => {
                    woke[i] = true;
                    first_wake.get_or_insert_with(Instant::now);
                    if woke.iter().filter(|&&w| w).count() >= quorum {
                        tx.send_modify(|n| *n = n.wrapping_add(1));
                        woke.fill(false);
                        first_wake = None;
                    }
                    pending.push(changed((i, rx, keep)));
                }
                Some((false, ..)) => {}
                None => return,
            },
        }
    }
}

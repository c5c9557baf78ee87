//! Each held key watched for its deletion behind the holder's back (an operator's `etcdctl
//! del`, another client's bug), so the loss is heard at once rather than when the lease ends.
//! One watch per hold, opened by the watchdog's task when it picks the hold up, never on the
//! acquisition's path. Reads `Inner`'s session and RPC channel; writes nothing.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{Lease, LossReason, Result};
use futures::future::BoxFuture;

use super::Inner;
use crate::proto::RangeRequest;

/// The pause before watching again after a watch or a read failed (the member unreachable):
/// the session says meanwhile whether the lease, and so the hold, may be gone.
const RETRY_AFTER: Duration = Duration::from_millis(500);

impl Inner {
    /// A future that resolves once `lease`'s key is gone: [`LossReason::NotOwned`] while the
    /// lease lives (the key was deleted), [`LossReason::SessionExpired`] once it has ended.
    /// It also resolves when the hold is released (its key is deleted then). Every kind of
    /// hold is one key (a mutex contender, a semaphore's lease, a reader, a writer). `None`
    /// for a lease without a key.
    pub(super) fn watch_held(self: &Arc<Self>, lease: &Lease) -> Option<BoxFuture<'static, LossReason>> {
        let key = lease.handle()?.as_bytes().to_vec();
        let epoch = lease.session_epoch()?;
        // The key's create revision: a delete at any later revision is delivered.
        let mut after = i64::try_from(lease.fencing_token()?.get()).ok()?;
        let inner = self.clone();
        Some(Box::pin(async move {
            let mut session = inner.session.subscribe();
            let gone = |inner: &Inner| match inner.keeps(epoch) {
                true => LossReason::NotOwned,
                false => LossReason::SessionExpired,
            };
            loop {
                if !inner.keeps(epoch) {
                    return LossReason::SessionExpired;
                }
                let ended = async {
                    // Closed only with the client, whose holds are gone with it.
                    let _ = session.wait_for(|s| !s.keeps(epoch)).await;
                };
                let watched = tokio::select! {
                    watched = crate::watch::deletion(&inner.rpc, &key, after) => watched,
                    () = ended => return LossReason::SessionExpired,
                };
                // Deleted, or the watch can tell no more (cancelled, compacted): look.
                let looked = match watched {
                    Ok(()) => inner.read_key(&key).await,
                    Err(error) => Err(error),
                };
                match looked {
                    Ok((true, revision)) => after = revision,
                    Ok((false, _)) => return gone(&inner),
                    Err(_) => tokio::time::sleep(RETRY_AFTER).await,
                }
            }
        }))
    }

    /// Whether `key` exists, and the revision the cluster read it at (1 round trip).
    async fn read_key(&self, key: &[u8]) -> Result<(bool, i64)> {
        let request = RangeRequest {
            key: key.to_vec(),
            count_only: true,
            ..RangeRequest::default()
        };
        let reply = self
            .rpc
            .call_idempotent("look at a held key", move |rpc| {
                let request = request.clone();
                async move { rpc.kv().range(request).await }
            })
            .await?;
        let revision = reply.header.map_or(0, |h| h.revision);
        Ok((reply.count > 0, revision))
    }
}

//! The mutex's renewals: one lease (`cas` + `mg`, 1 round trip) and the watchdog's batch (one
//! pipeline per pooled connection per server, at least 64 leases each, all at once), each
//! CAS-guarded and bound to the lease's server process, and what a renewal's replies mean
//! (also read by the acquisition that records its fencing token). The semaphore's and read-write lock's renewals are in
//! `holders.rs`.

use std::time::Duration;

use distlock_core::{Error, Lease, Result};
use futures::future::join_all;
use tokio::time::Instant;

use crate::exchange::{refused, unexpected};
use crate::expiry::ttl_on_server;
use crate::keys;
use crate::lock::{MemcachedLock, BACKEND};
use crate::mutex::{item_value, owner_of, Handle};
use crate::pool::Server;
use crate::stopped_server;
use crate::wire::{Batch, Code, Reply};

/// Leases per pipelined renewal batch, at least (a semaphore's or read-write lock's objects
/// per pipeline, exactly).
pub(crate) const EXTEND_BATCH: usize = 64;

/// Leases per pipeline when `leases` go to one server over at most `connections` at once: 64,
/// or more so that they take no more pipelines than there are connections, all sent at once
/// (more pipelines would wait for a connection, one round trip per wave).
fn pipeline_len(leases: usize, connections: usize) -> usize {
    leases.div_ceil(connections.max(1)).max(EXTEND_BATCH)
}

impl MemcachedLock {
    /// `cas <lock> 0 <ttl+2> <len> <cas>` with our owner token on the lease's server
    /// process: rewrites the item with the new expiry only if it is still the one we wrote,
    /// pipelined with `mg <lock> c v` to learn the new CAS. **1 round trip**; 2 in the
    /// lost-renewal-reply case (the pipelined read already shows whether the item is ours),
    /// and 1 more after a slow reply (see [`reaffirm`](Self::reaffirm)).
    pub(crate) async fn extend_once(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>> {
        match self.rewrite_lock_item(lease, ttl).await? {
            Some((renewed, true)) => self.reaffirm(renewed).await,
            outcome => Ok(outcome.map(|(renewed, _)| renewed)),
        }
    }

    /// The renewal of [`extend_once`](Self::extend_once), without the follow-up of a slow one:
    /// the renewed lease, and whether the reply to the write that renewed it was slow.
    async fn rewrite_lock_item(&self, lease: &Lease, ttl: Duration) -> Result<Option<(Lease, bool)>> {
        let mut handle = Handle::of(lease)?;
        let (lease_ttl, expiry) = ttl_on_server(ttl)?;
        let at = self.locate(lease.name());
        let value = item_value(lease);
        for attempt in 0..2 {
            let mut batch = Batch::new();
            batch.replace_if_cas(&at.lock_key, value.as_bytes(), expiry, handle.cas);
            batch.get(&at.lock_key, "c v");
            let sent_at = Instant::now();
            let Some((_, replies, written_at)) =
                self.exchange_timed(at.server, &batch, Some(handle.epoch)).await?
            else {
                return Ok(None);
            };
            let [stored, item] = replies.as_slice() else {
                return Err(unexpected(at.server, "two replies", &replies));
            };
            match renewal_outcome(at.server, lease, handle, lease_ttl, sent_at, stored, item)? {
                Renewal::Done(outcome) => {
                    return Ok(outcome.map(|renewed| (renewed, stopped_server::was_slow(written_at))))
                }
                Renewal::RetryWith(cas) if attempt == 0 => handle.cas = cas,
                Renewal::RetryWith(_) => return Ok(None),
            }
        }
        Ok(None)
    }

    /// After a renewal whose reply was slow (it may have been processed with the clock of
    /// before a stop of the server, see `stopped_server.rs`): waits for the server's clock to
    /// catch up, then renews `renewed` once more, so that the item's expiry counts from a
    /// current clock. The lease keeps the deadline of the slow renewal (counted from its
    /// send time), with the follow-up's CAS. **1 round trip.** `None` if the item is no
    /// longer ours: it expired by the refreshed clock, the loss the follow-up is there to see.
    async fn reaffirm(&self, renewed: Lease) -> Result<Option<Lease>> {
        tokio::time::sleep(stopped_server::CLOCK_CATCH_UP).await;
        let again = self.rewrite_lock_item(&renewed, renewed.ttl()).await?;
        Ok(again.map(|(again, _)| match again.handle() {
            Some(handle) => renewed.clone().with_handle(handle),
            None => renewed,
        }))
    }

    /// The watchdog's batch renewal: per server, the leases' `cas` + `mg` pairs spread over
    /// as many pipelines as the pool has connections (at least 64 leases each), all servers'
    /// in flight at once. **1 round trip** however many leases; a lease in the
    /// lost-renewal-reply case is retried alone, and after a slow reply the leases a pipeline
    /// renewed are renewed once more, in one pipeline.
    pub(crate) async fn extend_all(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); self.servers().len()];
        for (i, lease) in leases.iter().enumerate() {
            let encoded = self.keys().encoded(lease.name());
            groups[keys::route(&encoded, self.servers().iter().map(Server::addr))].push(i);
        }
        let connections = self.config().max_connections();
        let chunks = groups.iter().enumerate().flat_map(|(server, indices)| {
            indices
                .chunks(pipeline_len(indices.len(), connections))
                .map(move |chunk| (server, chunk))
        });
        let outcomes = join_all(chunks.map(|(server, chunk)| async move {
            let outcomes = self.extend_chunk(&self.servers()[server], leases, chunk).await;
            chunk.iter().copied().zip(outcomes).collect::<Vec<_>>()
        }))
        .await;
        let mut results: Vec<Option<Result<Option<Lease>>>> = leases.iter().map(|_| None).collect();
        let mut retry = Vec::new();
        for (i, outcome) in outcomes.into_iter().flatten() {
            match outcome {
                Ok(Renewal::Done(done)) => results[i] = Some(Ok(done)),
                Ok(Renewal::RetryWith(_)) => retry.push(i),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let retried = join_all(
            retry
                .iter()
                .map(|&i| self.extend_once(&leases[i], leases[i].ttl())),
        )
        .await;
        for (i, outcome) in retry.into_iter().zip(retried) {
            results[i] = Some(outcome);
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::backend(BACKEND, "a renewal got no result"))))
            .collect()
    }

    /// One pipeline of renewals on `server`; after a slow reply, the leases it renewed once
    /// more, in one pipeline too (see [`reaffirm`](Self::reaffirm) for one lease): **1 round
    /// trip**, 2 after a slow reply, however many leases.
    async fn extend_chunk(&self, server: &Server, leases: &[Lease], chunk: &[usize]) -> Vec<Result<Renewal>> {
        let (mut outcomes, slow) = self.send_chunk(server, leases, chunk).await;
        if !slow {
            return outcomes;
        }
        tokio::time::sleep(stopped_server::CLOCK_CATCH_UP).await;
        let renewed: Vec<(usize, Lease)> = outcomes
            .iter()
            .enumerate()
            .filter_map(|(pos, outcome)| match outcome {
                Ok(Renewal::Done(Some(renewed))) => Some((pos, renewed.clone())),
                _ => None,
            })
            .collect();
        let again_leases: Vec<Lease> = renewed.iter().map(|(_, lease)| lease.clone()).collect();
        let all: Vec<usize> = (0..again_leases.len()).collect();
        let (again, _) = self.send_chunk(server, &again_leases, &all).await;
        let settled = join_all(
            renewed
                .into_iter()
                .zip(again)
                .map(|((pos, first), again)| async move {
                    let outcome = match again {
                        // The lease keeps the deadline of the slow renewal, with the follow-up's CAS.
                        Ok(Renewal::Done(Some(again))) => Ok(Renewal::Done(Some(match again.handle() {
                            Some(handle) => first.with_handle(handle),
                            None => first,
                        }))),
                        // The follow-up's own reply was lost: once more alone, as for one lease.
                        Ok(Renewal::RetryWith(_)) => {
                            self.rewrite_lock_item(&first, first.ttl()).await.map(|again| {
                                Renewal::Done(again.map(|(again, _)| match again.handle() {
                                    Some(handle) => first.clone().with_handle(handle),
                                    None => first.clone(),
                                }))
                            })
                        }
                        other => other,
                    };
                    (pos, outcome)
                }),
        )
        .await;
        for (pos, outcome) in settled {
            outcomes[pos] = outcome;
        }
        outcomes
    }

    /// One pipeline of renewals on `server`: each lease's outcome, and whether the reply was
    /// slow.
    async fn send_chunk(
        &self,
        server: &Server,
        leases: &[Lease],
        chunk: &[usize],
    ) -> (Vec<Result<Renewal>>, bool) {
        // What each lease needs, or why it cannot be renewed at all.
        let prepared: Vec<Result<(Handle, Duration, u32, String)>> = chunk
            .iter()
            .map(|&i| {
                let lease = &leases[i];
                let handle = Handle::of(lease)?;
                let (lease_ttl, expiry) = ttl_on_server(lease.ttl())?;
                let key = self.keys().lock_key(&self.keys().encoded(lease.name()));
                Ok((handle, lease_ttl, expiry, key))
            })
            .collect();
        let mut sent = Vec::new(); // positions in `chunk` that went out, in pipeline order
        let mut batch = Batch::new();
        let sent_at = Instant::now();
        let exchanged = self
            .exchange_with(server, |epoch| {
                for (pos, prep) in prepared.iter().enumerate() {
                    if let Ok((handle, _, expiry, key)) = prep {
                        if handle.epoch == epoch {
                            let value = item_value(&leases[chunk[pos]]);
                            batch.replace_if_cas(key, value.as_bytes(), *expiry, handle.cas);
                            batch.get(key, "c v");
                            sent.push(pos);
                        }
                    }
                }
                (!sent.is_empty()).then_some(&batch)
            })
            .await;
        let (mut replies, written_at) = match exchanged {
            Ok((_, Some((replies, written_at)))) => (replies.into_iter(), Some(written_at)),
            Ok((_, None)) => (Vec::new().into_iter(), None),
            Err(e) => {
                let failed = prepared
                    .into_iter()
                    .map(|p| p.and_then(|_| Err(e.duplicate())))
                    .collect();
                return (failed, false);
            }
        };
        let mut outcomes: Vec<Result<Renewal>> = prepared
            .iter()
            .map(|p| match p {
                // Not sent: the lease's server process is gone, and its lock with it.
                Ok(_) => Ok(Renewal::Done(None)),
                Err(e) => Err(e.duplicate()),
            })
            .collect();
        for pos in sent {
            let (Some(stored), Some(item)) = (replies.next(), replies.next()) else {
                outcomes[pos] = Err(Error::backend(BACKEND, "a pipelined renewal got no reply"));
                continue;
            };
            if let Ok((handle, lease_ttl, _, _)) = &prepared[pos] {
                let lease = &leases[chunk[pos]];
                outcomes[pos] = renewal_outcome(server, lease, *handle, *lease_ttl, sent_at, &stored, &item);
            }
        }
        (outcomes, written_at.is_some_and(stopped_server::was_slow))
    }
}

/// What one renewal's replies (`cas`, then `mg c v`) mean.
pub(crate) enum Renewal {
    /// Renewed (the new lease) or not ours (`None`).
    Done(Option<Lease>),
    /// The CAS changed but the item still holds our token: an earlier renewal was applied
    /// and its reply lost. Retry with this CAS.
    RetryWith(u64),
}

pub(crate) fn renewal_outcome(
    server: &Server,
    lease: &Lease,
    handle: Handle,
    lease_ttl: Duration,
    sent_at: Instant,
    stored: &Reply,
    item: &Reply,
) -> Result<Renewal> {
    // Within one server process only we ever write our owner token.
    let owner = lease.owner().to_string();
    let ours = match (&item.code, item.text()) {
        (Code::Va, Some(value)) if owner_of(value) == owner => item.flag_num::<u64>('c'),
        _ => None,
    };
    match (&stored.code, ours) {
        (Code::Hd, Some(cas)) => {
            let renewed = Handle { cas, ..handle };
            Ok(Renewal::Done(Some(
                lease.renewed(lease_ttl, sent_at).with_handle(renewed.encode()),
            )))
        }
        (Code::Ex, Some(cas)) => Ok(Renewal::RetryWith(cas)),
        (Code::Hd | Code::Ex | Code::Nf, _) => Ok(Renewal::Done(None)),
        (Code::Refused(message), _) => Err(refused(server, message)),
        _ => Err(unexpected(server, "STORED, EXISTS or NOT_FOUND", stored)),
    }
}

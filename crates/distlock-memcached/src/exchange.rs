//! The connection exchange: one batch of requests written on one pooled connection to a
//! server (`pool.rs`) and all its replies read back, bounded by the operation timeout, and
//! optionally only on a connection that reaches a given server process. Owns the mapping of
//! wire errors to the crate's [`Error`]s; decides nothing about ownership.

use std::fmt;

use distlock_core::{Error, Result};
use futures::future::join_all;
use tokio::time::Instant;

use crate::lock::{MemcachedLock, BACKEND};
use crate::pool::Server;
use crate::wire::{Batch, Code, Epoch, Reply, WireError};

impl MemcachedLock {
    /// Sends `batch` on one connection to `server` and reads every reply, all within the
    /// operation timeout. With `bound_to`, sends nothing and returns `None` if the
    /// connection reaches another server process than the lease's.
    pub(crate) async fn exchange(
        &self,
        server: &Server,
        batch: &Batch,
        bound_to: Option<Epoch>,
    ) -> Result<Option<(Epoch, Vec<Reply>)>> {
        let exchanged = self.exchange_timed(server, batch, bound_to).await?;
        Ok(exchanged.map(|(epoch, replies, _)| (epoch, replies)))
    }

    /// [`exchange`](Self::exchange), also returning when the server's part of the round trip
    /// began (after any wait for a free connection slot, before opening or checking a
    /// connection and writing the batch): how long the replies took from then is what
    /// `stopped_server.rs` judges.
    pub(crate) async fn exchange_timed(
        &self,
        server: &Server,
        batch: &Batch,
        bound_to: Option<Epoch>,
    ) -> Result<Option<(Epoch, Vec<Reply>, Instant)>> {
        let (epoch, sent) = self
            .exchange_with(server, |epoch| {
                bound_to.is_none_or(|bound| bound == epoch).then_some(batch)
            })
            .await?;
        Ok(sent.map(|(replies, written_at)| (epoch, replies, written_at)))
    }

    /// The general form of [`exchange`](Self::exchange): `build` sees which server process
    /// the connection reaches before anything is sent, and returns the batch to send, or
    /// `None` to send nothing. With the replies comes when the server's part began (see
    /// [`exchange_timed`](Self::exchange_timed)).
    pub(crate) async fn exchange_with<'b>(
        &self,
        server: &Server,
        build: impl FnOnce(Epoch) -> Option<&'b Batch>,
    ) -> Result<(Epoch, Option<(Vec<Reply>, Instant)>)> {
        let limit = self.config().operation_timeout();
        let work = async {
            let mut checkout = server.checkout().await?;
            let epoch = checkout.conn().epoch();
            let Some(batch) = build(epoch) else {
                checkout.put_back();
                return Ok((epoch, None));
            };
            let written_at = checkout.granted_at();
            let replies = checkout.conn().exchange(batch).await?;
            // A refused command may leave its data block unread: do not reuse that stream.
            if !replies.iter().any(|r| matches!(r.code, Code::Refused(_))) {
                checkout.put_back();
            }
            Ok::<_, WireError>((epoch, Some((replies, written_at))))
        };
        match tokio::time::timeout(limit, work).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(WireError::Io(e))) => Err(Error::unavailable(BACKEND, format!("{}: {e}", server.addr()))),
            Ok(Err(WireError::Protocol(e))) => {
                Err(Error::backend(BACKEND, format!("{}: {e}", server.addr())))
            }
            Ok(Err(WireError::Unusable(e))) => Err(Error::invalid_config(format!("{}: {e}", server.addr()))),
            Err(_) => Err(Error::unavailable(
                BACKEND,
                format!("{} did not answer within {limit:?}", server.addr()),
            )),
        }
    }

    /// [`exchange`](Self::exchange) on whatever process the server runs now.
    pub(crate) async fn exchange_any(&self, server: &Server, batch: &Batch) -> Result<(Epoch, Vec<Reply>)> {
        match self.exchange(server, batch, None).await? {
            Some(outcome) => Ok(outcome),
            None => Err(Error::backend(BACKEND, "an unbound exchange was refused")),
        }
    }

    /// `mn` on every server, concurrently. **1 round trip.**
    pub(crate) async fn ping_all(&self) -> Result<()> {
        let pings = self.servers().iter().map(|server| async move {
            let mut batch = Batch::new();
            batch.noop();
            let (_, replies) = self.exchange_any(server, &batch).await?;
            match replies.first().map(|r| &r.code) {
                Some(Code::Mn) => Ok(()),
                _ => Err(unexpected(server, "MN", &replies)),
            }
        });
        join_all(pings).await.into_iter().collect()
    }
}

pub(crate) fn refused(server: &Server, message: &str) -> Error {
    Error::backend(
        BACKEND,
        format!("{} refused the command: {message}", server.addr()),
    )
}

pub(crate) fn unexpected(server: &Server, wanted: &str, got: &impl fmt::Debug) -> Error {
    Error::backend(
        BACKEND,
        format!("{}: expected {wanted}, got {got:?}", server.addr()),
    )
}

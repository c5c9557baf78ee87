//! Replica acknowledgement for [`RedisLock`] ([`RedisConfig::with_wait_for_replicas`]): an
//! acquisition's or renewals' scripts with `WAIT` behind them, and what too few
//! acknowledgements mean (the connections are [`replica_ack`](crate::replica_ack)'s).
//!
//! [`RedisConfig::with_wait_for_replicas`]: crate::RedisConfig::with_wait_for_replicas

use distlock_core::{Error, Result};
use redis::Value;

use super::{extend_many_on, RedisLock, Renewal};
use crate::acquire::AcquireCall;
use crate::node::{self, BACKEND};
use crate::replica_ack::ScriptCall;

impl RedisLock {
    /// Runs an acquire call: the script's reply, and with
    /// [`RedisConfig::with_wait_for_replicas`](crate::RedisConfig::with_wait_for_replicas) whether enough replicas acknowledged it (the
    /// `WAIT` in the same pipeline).
    pub(crate) async fn run_acquire(&self, call: &AcquireCall) -> Result<(Value, bool)> {
        let node = &self.inner.node;
        let Some(acks) = self.inner.acks.as_ref() else {
            return Ok((call.run(node, node.timeout()).await?, true));
        };
        let (mut replies, acknowledged) = acks.run(&[call.script_call()]).await?;
        let script = replies.pop().unwrap_or(Value::Nil);
        if let Value::ServerError(e) = &script {
            return Err(node::map_error(redis::RedisError::from(e.clone())));
        }
        Ok((script, acks.enough(acknowledged)))
    }

    /// The error for an acquisition too few replicas acknowledged.
    pub(crate) fn too_few_replicas(&self) -> Error {
        match self.inner.acks.as_ref() {
            Some(acks) => acks.too_few("the lock", ""),
            None => Error::backend(BACKEND, "no replica acknowledgement configured"),
        }
    }

    /// Runs `batch` on one server: with [`RedisConfig::with_wait_for_replicas`](crate::RedisConfig::with_wait_for_replicas), in one
    /// pipeline with `WAIT` behind it on an acknowledgement connection, where a renewal the
    /// master applied but too few replicas acknowledged is an ambiguous
    /// [`Error::Unavailable`] (a promoted replica would hold the old TTL); else as
    /// [`extend_many_on`]. One result per renewal, in order.
    pub(crate) async fn renew_on_server(&self, batch: &[Renewal]) -> Vec<Result<bool>> {
        let Some(acks) = self.inner.acks.as_ref() else {
            return extend_many_on(&self.inner.node, batch).await;
        };
        let ttls: Vec<String> = batch.iter().map(Renewal::ttl_arg).collect();
        let calls: Vec<ScriptCall<'_>> = batch
            .iter()
            .zip(&ttls)
            .map(|(r, ttl)| r.script_call(ttl))
            .collect();
        match acks.run(&calls).await {
            Ok((replies, acknowledged)) => replies
                .iter()
                .map(|reply| {
                    let ours = node::int_reply(reply)? == 1;
                    if ours && !acks.enough(acknowledged) {
                        return Err(acks.too_few("the renewal", "; its outcome is unknown"));
                    }
                    Ok(ours)
                })
                .collect(),
            Err(e) => batch.iter().map(|_| Err(e.duplicate())).collect(),
        }
    }
}

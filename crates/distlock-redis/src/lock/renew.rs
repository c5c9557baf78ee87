//! Renewals: one lease's (an extend script), and many at once in one pipeline per server
//! (on a cluster, one per master, grouped by the slot map); the replica-acknowledged form is
//! [`replicas`](super::replicas)'.

use std::time::Duration;

use distlock_core::{Error, Lease, LockKind, Result};
use futures::future::join_all;
use redis::Value;

use super::{ttl_millis, RedisLock};
use crate::holds;
use crate::keys::{self, LockKeys};
use crate::lua::{self, LuaScript};
use crate::node::{self, Node, Nonce, BACKEND};
use crate::replica_ack::ScriptCall;
use crate::slots::{Master, SlotMap};

impl RedisLock {
    /// What renews `lease` for `ttl`, by its kind.
    pub(crate) fn renewal(&self, lease: &Lease, ttl: Duration) -> Result<Renewal> {
        let ttl_ms = ttl_millis(ttl)?;
        let owner = lease.owner().to_string();
        match lease.kind() {
            LockKind::Exclusive => Ok(Renewal::lock(&self.keys(lease.name()), owner, ttl_ms)),
            kind => holds::renewal(&self.inner.keys, lease.name(), kind, owner, ttl_ms),
        }
    }
}

/// One renewal: an extend script (`KEYS[1]` the hold's key; `ARGV[1]` owner token, `ARGV[2]`
/// TTL in ms, replying 1 if renewed), for [`extend_many_on`]. The mutex's and the writer's is
/// [`lua::EXTEND`] (compare-and-`PEXPIRE`); a permit's and a reader's moves its member's
/// expiry (see [`holds::renewal`]).
pub(crate) struct Renewal {
    script: &'static LuaScript,
    key: Vec<u8>,
    owner: String,
    ttl_ms: u64,
}

impl Renewal {
    pub(crate) fn new(script: &'static LuaScript, key: Vec<u8>, owner: String, ttl_ms: u64) -> Self {
        Self {
            script,
            key,
            owner,
            ttl_ms,
        }
    }

    /// Its TTL as the script's argument.
    pub(crate) fn ttl_arg(&self) -> String {
        self.ttl_ms.to_string()
    }

    /// The call for an acknowledged pipeline, with `ttl_arg` (see [`ttl_arg`](Self::ttl_arg)).
    pub(crate) fn script_call<'a>(&'a self, ttl_arg: &'a str) -> ScriptCall<'a> {
        ScriptCall {
            script: self.script,
            keys: vec![self.key.as_slice()],
            args: vec![self.owner.as_bytes(), ttl_arg.as_bytes()],
        }
    }

    /// The renewal of a mutex.
    pub(crate) fn lock(keys: &LockKeys, owner: String, ttl_ms: u64) -> Self {
        Self::new(&lua::EXTEND, keys.lock.clone(), owner, ttl_ms)
    }

    /// Runs it alone on `node` (bounded by `limit`): whether the hold is still ours.
    pub(crate) async fn run(&self, node: &Node, limit: Duration) -> Result<bool> {
        let ttl_arg = self.ttl_ms.to_string();
        let extended: i64 = node
            .script_within(
                limit,
                self.script,
                &[&self.key],
                &[self.owner.as_bytes(), ttl_arg.as_bytes()],
            )
            .await?;
        Ok(extended == 1)
    }
}

/// Runs many renewals on `node` in one pipeline of `EVALSHA`s (a second one with `EVAL` only
/// if the server did not know a script). One result per renewal, in order.
pub(crate) async fn extend_many_on(node: &Node, batch: &[Renewal]) -> Vec<Result<bool>> {
    let batch: Vec<&Renewal> = batch.iter().collect();
    extend_pipeline(node, &batch, None)
        .await
        .into_iter()
        .map(|r| {
            r.and_then(|ours| ours.ok_or_else(|| Error::unavailable(BACKEND, "a renewal was redirected")))
        })
        .collect()
}

/// On a cluster: renewals grouped by the master serving each one's slot (by the cached
/// [`SlotMap`]), one pipeline per master, the pipelines at once; a renewal that comes back
/// `MOVED` or `ASK` (the map was stale: a slot moved), or whose master's pipeline failed (a
/// failover: the map names a master that is gone), is sent again alone through the routed
/// path, whose client follows the redirect or finds the slot's new master, and the map is read
/// again next time. One round trip per master in the usual case (plus one for `CLUSTER SLOTS`
/// every 30 s).
pub(crate) async fn extend_many_in_cluster(
    node: &Node,
    map: &SlotMap,
    answering_host: &str,
    batch: &[Renewal],
) -> Vec<Result<bool>> {
    let slots: Vec<u16> = batch.iter().map(|r| keys::key_slot(&r.key)).collect();
    let masters = map
        .masters_of(node, answering_host, &slots)
        .await
        .unwrap_or_else(|_| vec![None; batch.len()]);
    let mut groups: Vec<(Option<Master>, Vec<usize>)> = Vec::new();
    for (i, master) in masters.into_iter().enumerate() {
        match groups.iter_mut().find(|(m, _)| *m == master) {
            Some((_, members)) => members.push(i),
            None => groups.push((master, vec![i])),
        }
    }
    let runs = groups.iter().map(|(master, members)| async move {
        let subset: Vec<&Renewal> = members.iter().map(|&i| &batch[i]).collect();
        match master {
            Some(master) => extend_pipeline(node, &subset, Some(master)).await,
            None => {
                join_all(
                    subset
                        .iter()
                        .map(|r| async move { r.run(node, node.timeout()).await.map(Some) }),
                )
                .await
            }
        }
    });
    let outcomes = join_all(runs).await;
    let mut results: Vec<Option<Result<Option<bool>>>> = (0..batch.len()).map(|_| None).collect();
    for ((_, members), outcome) in groups.iter().zip(outcomes) {
        for (&i, result) in members.iter().zip(outcome) {
            results[i] = Some(result);
        }
    }
    // Sent again alone through the routed path: renewals redirected by their master, and
    // those whose master's pipeline failed (after a failover the map names a master that is
    // gone: the cluster client, asked by slot, finds where the slot lives now).
    let sent_to_master: Vec<bool> = {
        let mut by_index = vec![false; batch.len()];
        for (master, members) in &groups {
            for &i in members {
                by_index[i] = master.is_some();
            }
        }
        by_index
    };
    let redirected: Vec<usize> = (0..batch.len())
        .filter(|&i| match &results[i] {
            Some(Ok(None)) => true,
            Some(Err(_)) => sent_to_master[i],
            _ => false,
        })
        .collect();
    if !redirected.is_empty() {
        map.forget();
        let again = join_all(redirected.iter().map(|&i| batch[i].run(node, node.timeout()))).await;
        for (&i, result) in redirected.iter().zip(again) {
            results[i] = Some(result.map(Some));
        }
    }
    results
        .into_iter()
        .map(|r| match r {
            Some(Ok(Some(ours))) => Ok(ours),
            Some(Err(e)) => Err(e),
            _ => Err(Error::backend(BACKEND, "no reply for a renewal")),
        })
        .collect()
}

/// One pipeline of renewals on `node` (to the master `at` on a cluster, else as routed):
/// per renewal whether it is still ours, or `None` if the master redirected it (`MOVED`,
/// `ASK`).
async fn extend_pipeline(node: &Node, batch: &[&Renewal], at: Option<&Master>) -> Vec<Result<Option<bool>>> {
    let nonces: Vec<Nonce> = batch.iter().map(|_| Nonce::new()).collect();
    let publish = node.publish();
    let build = |use_eval: bool| {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for (renewal, nonce) in batch.iter().zip(&nonces) {
            let ttl_arg = renewal.ttl_ms.to_string();
            let keys_arg: [&[u8]; 1] = [&renewal.key];
            let args: [&[u8]; 2] = [renewal.owner.as_bytes(), ttl_arg.as_bytes()];
            pipe.add_command(node::script_cmd(
                renewal.script,
                &keys_arg,
                &args,
                publish,
                nonce,
                use_eval,
            ));
        }
        pipe
    };
    let send = |pipe: redis::Pipeline| async move {
        match at {
            Some(master) => node.pipeline_to(&master.0, master.1, &pipe).await,
            None => node
                .pipeline_on(&pipe)
                .await
                .map(|(values, generation)| (Some(values), generation)),
        }
    };
    let replies = send(build(false)).await;
    if matches!(replies, Ok((None, _))) {
        return batch.iter().map(|_| Ok(None)).collect();
    }
    let mut replies = replies.map(|(values, generation)| (values.unwrap_or_default(), generation));
    let unknown_script = matches!(&replies, Ok((values, _)) if values.iter().any(|v| matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT")));
    if unknown_script {
        replies = match send(build(true)).await {
            Ok((None, _)) => return batch.iter().map(|_| Ok(None)).collect(),
            other => other.map(|(values, generation)| (values.unwrap_or_default(), generation)),
        };
    }
    match replies {
        Ok((values, generation)) if values.len() == batch.len() => values
            .into_iter()
            .zip(&nonces)
            .map(|(v, nonce)| {
                if matches!(&v, Value::ServerError(e) if matches!(e.code(), "MOVED" | "ASK")) {
                    return Ok(None);
                }
                let v = node.checked(v, nonce, generation)?;
                node::int_reply(&v).map(|n| Some(n == 1))
            })
            .collect(),
        Ok((values, _)) => batch
            .iter()
            .map(|_| {
                Err(Error::backend(
                    BACKEND,
                    format!("{} replies to a pipeline of {}", values.len(), batch.len()),
                ))
            })
            .collect(),
        Err(e) => batch.iter().map(|_| Err(e.duplicate())).collect(),
    }
}

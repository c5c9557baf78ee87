//! The calls of the one acquire script ([`lua::ACQUIRE`]) and the reading of its reply, for
//! every kind of hold and both clients ([`RedisLock`](crate::RedisLock) and
//! [`Redlock`](crate::Redlock)).
//!
//! Owns which keys and arguments each kind sends (in the order `acquire.lua` documents) and
//! the one parser of the reply; what a reply means for an attempt (a grant without a token, a
//! holder's expiry, Redlock's votes) is for the callers.

use std::time::Duration;

use distlock_core::{Error, Result};
use redis::Value;

use crate::keys::{LockKeys, RwLockKeys, SemaphoreKeys};
use crate::lua::{self, LuaScript};
use crate::node::{self, Node, BACKEND};
use crate::replica_ack::ScriptCall;
use crate::waiters::Waiting;

/// The acquire script with its keys and arguments: one round trip (see [`lua::ACQUIRE`]).
pub(crate) struct AcquireCall {
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl AcquireCall {
    /// `kind`'s call of `owner` for `ttl_ms`, fenced or not (`KEYS[2]` the counter), with
    /// `keys` after the holds' key and the counter.
    fn new(kind: &str, owner: &str, ttl_ms: u64, fenced: bool, keys: Vec<Vec<u8>>) -> Self {
        let fenced: &[u8] = if fenced { b"1" } else { b"0" };
        Self {
            keys,
            args: vec![
                kind.as_bytes().to_vec(),
                owner.as_bytes().to_vec(),
                ttl_ms.to_string().into_bytes(),
                fenced.to_vec(),
            ],
        }
    }

    /// Adds the waiter and its stay (and, scored by the client's clock, the end of its stay
    /// in µs); without a waiter, an empty id and a stay of 0 if `always` (the semaphore's and
    /// the writer's arguments are positional), else nothing.
    fn waiting(mut self, waiting: Waiting<'_>, client_score: Option<u64>, always: bool) -> Self {
        let (waiter, stay_ms) = match waiting {
            Some(waiting) => waiting,
            None if always => ("", 0),
            None => return self,
        };
        self.args.push(waiter.as_bytes().to_vec());
        self.args.push(stay_ms.to_string().into_bytes());
        if let Some(score) = client_score {
            self.args.push(score.to_string().into_bytes());
        }
        self
    }

    /// The mutex: `SET NX PX`, then a token from the fencing counter (none if not `fenced`:
    /// Redlock's masters keep no counter, a grant reports token 0); if held, the waiter (if
    /// any) is queued, scored by the server's clock or by `client_score` (the end of its stay
    /// in µs of the client's clock, for Redlock: see `acquire.lua`).
    pub(crate) fn mutex(
        keys: &LockKeys,
        owner: &str,
        ttl_ms: u64,
        fenced: bool,
        waiting: Waiting<'_>,
        client_score: Option<u64>,
    ) -> Self {
        let mut call_keys = vec![keys.lock.clone()];
        if fenced {
            call_keys.push(keys.fence.clone());
        }
        if waiting.is_some() {
            call_keys.push(keys.waiters.clone());
        }
        Self::new("mutex", owner, ttl_ms, fenced, call_keys).waiting(waiting, client_score, false)
    }

    /// `weight` of a semaphore's `permits` as one hold, whose member is `owner` (see
    /// [`member`](crate::member)); if too few are free, the waiter (if any) is queued.
    pub(crate) fn permit(
        keys: SemaphoreKeys,
        owner: &str,
        ttl_ms: u64,
        (permits, weight): (u32, u32),
        waiting: Waiting<'_>,
    ) -> Self {
        let mut call = Self::new(
            "permit",
            owner,
            ttl_ms,
            true,
            vec![keys.holders, keys.state, keys.waiting],
        )
        .waiting(waiting, None, true);
        call.args.push(Vec::new()); // scored by the server's clock
        call.args.push(permits.to_string().into_bytes());
        call.args.push(weight.to_string().into_bytes());
        call
    }

    /// A read lock.
    pub(crate) fn read(keys: RwLockKeys, owner: &str, ttl_ms: u64) -> Self {
        Self::new("read", owner, ttl_ms, true, rw_lock_keys(keys))
    }

    /// The upgradeable read lock, whose member is `owner` (`u*<owner>`, see
    /// [`member`](crate::member)).
    pub(crate) fn upgradeable(keys: RwLockKeys, owner: &str, ttl_ms: u64) -> Self {
        Self::new("upgradeable", owner, ttl_ms, true, rw_lock_keys(keys))
    }

    /// The write lock (the upgrade of `owner`'s upgradeable read, if it holds one and no
    /// other reader does); if refused, the waiter (if any) is recorded as a waiting writer.
    pub(crate) fn write(keys: RwLockKeys, owner: &str, ttl_ms: u64, waiting: Waiting<'_>) -> Self {
        Self::new("write", owner, ttl_ms, true, rw_lock_keys(keys)).waiting(waiting, None, true)
    }

    pub(crate) fn script(&self) -> &'static LuaScript {
        &lua::ACQUIRE
    }

    pub(crate) fn keys(&self) -> Vec<&[u8]> {
        self.keys.iter().map(Vec::as_slice).collect()
    }

    pub(crate) fn args(&self) -> Vec<&[u8]> {
        self.args.iter().map(Vec::as_slice).collect()
    }

    /// The call for an acknowledged pipeline.
    pub(crate) fn script_call(&self) -> ScriptCall<'_> {
        ScriptCall {
            script: self.script(),
            keys: self.keys(),
            args: self.args(),
        }
    }

    /// Runs the call on `node`, bounded by `limit`: the script's reply.
    pub(crate) async fn run(&self, node: &Node, limit: Duration) -> Result<Value> {
        node.script_within(limit, self.script(), &self.keys(), &self.args())
            .await
    }
}

/// A read-write lock's keys in the acquire script's order: readers, counter, waiting writers,
/// writer.
fn rw_lock_keys(keys: RwLockKeys) -> Vec<Vec<u8>> {
    vec![keys.readers, keys.fence, keys.waiting, keys.writer]
}

/// What the acquire script answered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Acquired, with this fencing token (0 unfenced).
    Acquired(u64),
    /// Held by others: for this long if the holders said (a TTL, an expiry), by this holder if
    /// the script named one (any bytes: other clients of the layout may store any).
    Held {
        remaining: Option<Duration>,
        holder: Option<Vec<u8>>,
    },
    /// A semaphore whose live holders use this count of permits (nothing changed).
    PermitsMismatch(u32),
    /// The mutex, held under the waiter's id (a release handed it to the waiter), with this
    /// fencing token (0 unfenced), its TTL now the attempt's.
    AcquiredAsWaiter(u64),
}

/// Reads the acquire script's reply (`acquire.lua` lists the replies). A grant must carry a
/// token (0 for Redlock, whose masters keep no counter): one without is
/// [`no_fencing_token`].
pub(crate) fn parse(reply: Value) -> Result<AcquireReply> {
    let parts: Vec<Value> = redis::from_redis_value(reply).map_err(|e| node::map_error(e.into()))?;
    let mut parts = parts.into_iter();
    let outcome = parts.next().map(|v| node::int_reply(&v)).transpose()?;
    let n = parts
        .next()
        .map(|v| node::int_reply(&v))
        .transpose()?
        .unwrap_or(-1);
    match outcome {
        Some(1) => u64::try_from(n)
            .map(AcquireReply::Acquired)
            .map_err(|_| no_fencing_token()),
        Some(0) => Ok(AcquireReply::Held {
            remaining: u64::try_from(n).ok().map(Duration::from_millis),
            holder: parts.next().and_then(|v| redis::from_redis_value(v).ok()),
        }),
        Some(2) => Ok(AcquireReply::PermitsMismatch(u32::try_from(n).unwrap_or(0))),
        Some(3) => u64::try_from(n)
            .map(AcquireReply::AcquiredAsWaiter)
            .map_err(|_| no_fencing_token()),
        other => Err(Error::backend(
            BACKEND,
            format!("unexpected acquire reply {other:?}"),
        )),
    }
}

/// The error for a grant whose reply carries no fencing token: the lock's counter vanished
/// (a `DEL`, a flush, an eviction) before the attempt was sent again, which can only report
/// the counter's value; a token drawn anew could be below earlier ones.
pub(crate) fn no_fencing_token() -> Error {
    Error::backend(
        BACKEND,
        "the lock was granted without a fencing token (its fencing counter is gone); it was given back",
    )
}

/// The mutex's acquire call without the fencing counter (Redlock): a granted lock reports
/// token 0. Also returns the server's run id, which changes with every restart (read once per
/// connection, see [`Node::script_naming_run`]). A waiter is queued if the lock is held,
/// scored by `queued_until_us`. One round trip (`CLIENT GETNAME` and the script); two on a
/// connection not named yet.
pub(crate) async fn acquire_unfenced_on(
    node: &Node,
    limit: Duration,
    keys: &LockKeys,
    owner: &str,
    ttl_ms: u64,
    waiting: Waiting<'_>,
    queued_until_us: u64,
) -> Result<(AcquireReply, Option<String>)> {
    let call = AcquireCall::mutex(keys, owner, ttl_ms, false, waiting, Some(queued_until_us));
    let (reply, run_id): (Value, Option<String>) = node
        .script_naming_run(limit, call.script(), &call.keys(), &call.args())
        .await?;
    Ok((parse(reply)?, run_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(parts: Vec<Value>) -> Result<AcquireReply> {
        parse(Value::Array(parts))
    }

    #[test]
    fn a_grant_without_a_token_is_an_error() {
        assert_eq!(
            reply(vec![Value::Int(1), Value::Int(7)]).ok(),
            Some(AcquireReply::Acquired(7))
        );
        assert_eq!(
            reply(vec![Value::Int(1), Value::Int(0)]).ok(),
            Some(AcquireReply::Acquired(0))
        );
        assert!(reply(vec![Value::Int(1)]).is_err());
    }

    #[test]
    fn a_refusal_reports_the_expiry_and_the_holder() {
        assert_eq!(
            reply(vec![
                Value::Int(0),
                Value::Int(250),
                Value::BulkString(b"them".to_vec())
            ])
            .ok(),
            Some(AcquireReply::Held {
                remaining: Some(Duration::from_millis(250)),
                holder: Some(b"them".to_vec()),
            })
        );
        assert_eq!(
            reply(vec![Value::Int(0), Value::Int(-1)]).ok(),
            Some(AcquireReply::Held {
                remaining: None,
                holder: None
            })
        );
        assert_eq!(
            reply(vec![Value::Int(2), Value::Int(3)]).ok(),
            Some(AcquireReply::PermitsMismatch(3))
        );
        assert!(reply(vec![Value::Int(5)]).is_err());
    }
}

//! The read-decide-rewrite loop every semaphore and read-write lock operation runs on its
//! object's item.
//!
//! This module owns the round trips and the CAS discipline: `mg <item> c t v` reads the item,
//! its CAS and the seconds it has left; the caller's decision changes it; `cas <item> 0
//! <expires> <len> <cas>` writes it back, pipelined with `mg <item> c t v` again, so that a
//! write that lost its race to another client's already brings back the item to decide on
//! once more. The write only goes out on a connection to the server process that answered
//! the read (a restarted memcached starts its CAS values again at 1, so the same CAS could
//! name another item). What the item holds and the rules are in `holders_item.rs`; the
//! operations in `holders.rs`. It may not touch the mutex's items.
//!
//! Holds end by the server's clock: the item is written with an absolute expiry that its
//! value repeats, so each read learns the server's clock as `expires - t` (see `holders.rs`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_core::{Error, Result};
use tokio::time::Instant;

use crate::exchange::{refused, unexpected};
use crate::expiry::{fence_seed, SERVER_MAX_RELATIVE_SECS};
use crate::holders_item::{Item, MAX_VALUE_LEN};
use crate::lock::{MemcachedLock, BACKEND};
use crate::pool::Server;
use crate::stopped_server;
use crate::wire::{Batch, Code, Reply};

/// The most exchanges one operation makes before it gives up on a contended item (reads
/// and rewrites, each rewrite having lost its race to another client's write). The
/// operation timeout usually ends a contended operation first.
pub(crate) const MAX_EXCHANGES: usize = 64;
/// The longest pause between two attempts at a contended item.
const MAX_BACKOFF: Duration = Duration::from_millis(32);

/// How long an object item lives after its last write: as long as the longest hold it can
/// record (the longest TTL plus the slack), so its fencing counter outlives every holder.
pub(crate) const ITEM_LIFETIME_SECS: u64 = SERVER_MAX_RELATIVE_SECS;

/// The latest absolute expiry memcached 1.6 reads correctly (a signed 32-bit number of
/// seconds: 2038-01-19).
const LAST_ABSOLUTE_EXPIRY: u64 = i32::MAX as u64;

/// One read of an object's item: the server's clock at that read (unix seconds) and when the
/// read was sent, which is no later than the server read its clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Read {
    pub(crate) now: u64,
    pub(crate) sent_at: Instant,
}

/// What an operation decided after a read.
pub(crate) enum Decision<T> {
    /// Nothing to write; this is the outcome.
    Done(T),
    /// The item was changed: write it, and this is the outcome once the write lands.
    Write(T),
}

/// What one read leads to in the next exchange.
enum Plan<T> {
    Done(T),
    Rewrite {
        value: String,
        expires: u32,
        cas: u64,
        outcome: T,
    },
    Create {
        value: String,
        expires: u32,
    },
}

/// A command in flight for one job.
enum Sent<T> {
    Rewrite(T),
    Create,
}

impl MemcachedLock {
    /// Runs `decide` on each item of `keys` (all on `server`) until its outcome is settled:
    /// one pipelined read of every item, then rounds of pipelined CAS-guarded rewrites, each
    /// bringing back the items whose write lost a race. The first lost race is retried at
    /// once on the item that came back; after each further one the loop pauses a random
    /// time (up to 0.5 ms, doubling up to 32 ms, so that clients that keep colliding spread
    /// out) and reads again. No new exchange starts once the operation timeout has passed
    /// since the first, nor after [`MAX_EXCHANGES`]. `decide` gets the job's index and the
    /// pruned item with the read it came from, or `None` if the item does not exist (when
    /// `create`, a missing item is created empty instead and decided on once it exists).
    /// `Ok(None)`: that job's writes kept losing their races until then. A read whose reply
    /// took longer than `stopped_server::PROMPT_REPLY` may carry the server's clock of before
    /// a stop: it is made again after a short pause (once per call, 1 more round trip).
    pub(crate) async fn update<T, F>(
        &self,
        server: &Server,
        keys: &[String],
        create: bool,
        mut decide: F,
    ) -> Vec<Result<Option<T>>>
    where
        F: FnMut(usize, Option<(&mut Item, Read)>) -> Result<Decision<T>> + Send,
        T: Send,
    {
        let mut results: Vec<Option<Result<Option<T>>>> = keys.iter().map(|_| None).collect();
        // The latest `mg <key> c t v` reply of each unsettled job, and when it was sent.
        let mut seen: Vec<Option<(Reply, Instant)>> = keys.iter().map(|_| None).collect();
        // The server process those replies came from; `None`: read (again) first.
        let mut epoch = None;
        let started = Instant::now();
        let budget = self.config().operation_timeout();
        let mut lost_rounds = 0u32;
        // Reads made again because their reply was slow (`stopped_server.rs`): at most one.
        let mut slow_rereads = 1u32;
        for exchange in 0..MAX_EXCHANGES {
            let open: Vec<usize> = (0..keys.len()).filter(|&i| results[i].is_none()).collect();
            if open.is_empty() || (exchange > 0 && started.elapsed() >= budget) {
                break;
            }
            let Some(bound) = epoch else {
                let mut batch = Batch::new();
                for &i in &open {
                    batch.get(&keys[i], "c t v");
                }
                let sent_at = Instant::now();
                match self.exchange_timed(server, &batch, None).await {
                    // The clock it brought may be of before a stop of the server: read again
                    // once it has caught up (once per operation).
                    Ok(Some((_, replies, written_at)))
                        if replies.len() == open.len()
                            && slow_rereads > 0
                            && stopped_server::was_slow(written_at) =>
                    {
                        slow_rereads -= 1;
                        tokio::time::sleep(stopped_server::CLOCK_CATCH_UP).await;
                    }
                    Ok(Some((at, replies, _))) if replies.len() == open.len() => {
                        for (&i, reply) in open.iter().zip(replies) {
                            seen[i] = Some((reply, sent_at));
                        }
                        epoch = Some(at);
                    }
                    Ok(Some((_, replies, _))) => {
                        let e = unexpected(server, "one reply per read", &replies);
                        settle_all(&mut results, &open, &e);
                    }
                    Ok(None) => {
                        let e = Error::backend(BACKEND, "an unbound exchange was refused");
                        settle_all(&mut results, &open, &e);
                    }
                    Err(e) => settle_all(&mut results, &open, &e),
                }
                continue;
            };
            let mut batch = Batch::new();
            let mut sent = Vec::new();
            for &i in &open {
                let Some((reply, sent_at)) = seen[i].take() else {
                    results[i] = Some(Err(Error::backend(
                        BACKEND,
                        "an item was not read before its write",
                    )));
                    continue;
                };
                match plan(server, &keys[i], &reply, sent_at, create, |found| {
                    decide(i, found)
                }) {
                    Err(e) => results[i] = Some(Err(e)),
                    Ok(Plan::Done(outcome)) => results[i] = Some(Ok(Some(outcome))),
                    Ok(Plan::Rewrite {
                        value,
                        expires,
                        cas,
                        outcome,
                    }) => {
                        batch.replace_if_cas(&keys[i], value.as_bytes(), expires, cas);
                        batch.get(&keys[i], "c t v");
                        sent.push((i, Sent::Rewrite(outcome)));
                    }
                    Ok(Plan::Create { value, expires }) => {
                        batch.add(&keys[i], value.as_bytes(), expires);
                        batch.get(&keys[i], "c t v");
                        sent.push((i, Sent::Create));
                    }
                }
            }
            if sent.is_empty() {
                continue;
            }
            let sent_at = Instant::now();
            let (replies, written_at) = match self.exchange_timed(server, &batch, Some(bound)).await {
                Ok(Some((_, replies, written_at))) if replies.len() == 2 * sent.len() => {
                    (replies, written_at)
                }
                Ok(Some((_, replies, _))) => {
                    let e = unexpected(server, "two replies per write", &replies);
                    let sent: Vec<usize> = sent.iter().map(|(i, _)| *i).collect();
                    settle_all(&mut results, &sent, &e);
                    continue;
                }
                // Another server process answers now (a restart): nothing was sent; read again.
                Ok(None) => {
                    epoch = None;
                    continue;
                }
                Err(e) => {
                    let sent: Vec<usize> = sent.iter().map(|(i, _)| *i).collect();
                    settle_all(&mut results, &sent, &e);
                    continue;
                }
            };
            let mut replies = replies.into_iter();
            let mut lost = false;
            for (i, what) in sent {
                let (Some(stored), Some(item)) = (replies.next(), replies.next()) else {
                    break; // not reached: the count was checked
                };
                match (what, &stored.code) {
                    (Sent::Rewrite(outcome), Code::Hd) => results[i] = Some(Ok(Some(outcome))),
                    // Lost the race (or the item vanished): decide again on what is there now.
                    (Sent::Rewrite(_), Code::Ex | Code::Nf) => {
                        seen[i] = Some((item, sent_at));
                        lost = true;
                    }
                    (Sent::Create, Code::Hd) if item.code == Code::En => {
                        results[i] = Some(Err(Error::backend(
                            BACKEND,
                            format!(
                                "{}: {} vanished as soon as it was created (is this client's \
                                 clock more than 30 days behind the server's?)",
                                server.addr(),
                                keys[i]
                            ),
                        )));
                    }
                    (Sent::Create, Code::Hd | Code::Ns) => seen[i] = Some((item, sent_at)),
                    (_, Code::Refused(message)) => results[i] = Some(Err(refused(server, message))),
                    (_, _) => {
                        results[i] = Some(Err(unexpected(
                            server,
                            "STORED, NOT_STORED, EXISTS or NOT_FOUND",
                            &stored,
                        )));
                    }
                }
            }
            if lost {
                lost_rounds += 1;
                if lost_rounds > 1 {
                    tokio::time::sleep(backoff(lost_rounds - 1)).await;
                    epoch = None; // what came back is stale after the pause
                }
            }
            // What came back may carry a clock of before a stop of the server: read it again
            // once that clock has caught up.
            if epoch.is_some()
                && slow_rereads > 0
                && seen.iter().any(Option::is_some)
                && stopped_server::was_slow(written_at)
            {
                slow_rereads -= 1;
                tokio::time::sleep(stopped_server::CLOCK_CATCH_UP).await;
                epoch = None;
            }
        }
        results.into_iter().map(|r| r.unwrap_or(Ok(None))).collect()
    }
}

/// What to do after one read of `key`: decide on the item (pruned at the server's clock), and
/// encode what is to be written.
fn plan<T>(
    server: &Server,
    key: &str,
    reply: &Reply,
    sent_at: Instant,
    create: bool,
    decide: impl FnOnce(Option<(&mut Item, Read)>) -> Result<Decision<T>>,
) -> Result<Plan<T>> {
    match &reply.code {
        Code::En if create => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let expires = absolute_expiry(now)?;
            let value = Item::fresh(u64::from(expires), fence_seed()).encode();
            Ok(Plan::Create { value, expires })
        }
        Code::En => match decide(None)? {
            Decision::Done(outcome) => Ok(Plan::Done(outcome)),
            Decision::Write(_) => Err(Error::backend(
                BACKEND,
                "asked to write an item that does not exist",
            )),
        },
        Code::Va => {
            let text = reply.text().unwrap_or_default();
            let (Some(mut item), Some(cas), Some(left)) = (
                Item::parse(text),
                reply.flag_num::<u64>('c'),
                reply.flag_num::<u64>('t'),
            ) else {
                return Err(Error::backend(
                    BACKEND,
                    format!(
                        "{}: {key} is not a semaphore or read-write lock item of this backend: {reply:?}",
                        server.addr()
                    ),
                ));
            };
            let now = item.expires.saturating_sub(left);
            item.prune(now);
            match decide(Some((&mut item, Read { now, sent_at })))? {
                Decision::Done(outcome) => Ok(Plan::Done(outcome)),
                Decision::Write(outcome) => {
                    let expires = absolute_expiry(now)?;
                    item.expires = u64::from(expires);
                    let value = item.encode();
                    if value.len() > MAX_VALUE_LEN {
                        return Err(Error::backend(
                            BACKEND,
                            format!("{key} would outgrow {MAX_VALUE_LEN} bytes"),
                        ));
                    }
                    Ok(Plan::Rewrite {
                        value,
                        expires,
                        cas,
                        outcome,
                    })
                }
            }
        }
        Code::Refused(message) => Err(refused(server, message)),
        _ => Err(unexpected(server, "VA or EN", reply)),
    }
}

/// A random pause before the next attempt after the `round`th lost race in a row (from 1):
/// up to 0.5 ms, doubling each round, up to [`MAX_BACKOFF`].
fn backoff(round: u32) -> Duration {
    let cap = Duration::from_micros(500)
        .saturating_mul(1 << round.saturating_sub(1).min(16))
        .min(MAX_BACKOFF);
    let micros = u64::try_from(cap.as_micros()).unwrap_or(u64::MAX);
    // Owner tokens are random (v4 UUIDs): randomness enough for a pause, as for `wire.rs`'s
    // nonce.
    let random = distlock_core::OwnerToken::new().as_uuid().as_u128();
    Duration::from_micros(u64::try_from(random % (u128::from(micros) + 1)).unwrap_or(0))
}

/// The item's absolute expiry for a write at server second `now`.
fn absolute_expiry(now: u64) -> Result<u32> {
    let expires = now.saturating_add(ITEM_LIFETIME_SECS);
    if expires > LAST_ABSOLUTE_EXPIRY {
        return Err(Error::backend(
            BACKEND,
            "memcached reads expiry times as 32-bit numbers, which end on 2038-01-19: a \
             semaphore or read-write lock item cannot be written to live past that",
        ));
    }
    u32::try_from(expires).map_err(|_| Error::backend(BACKEND, "expiry out of range"))
}

fn settle_all<T>(results: &mut [Option<Result<Option<T>>>], which: &[usize], error: &Error) {
    for &i in which {
        results[i] = Some(Err(error.duplicate()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_its_cap() {
        for round in 1..40 {
            let cap = Duration::from_micros(500 << (round - 1).min(16)).min(MAX_BACKOFF);
            assert!(backoff(round) <= cap, "round {round}");
        }
        assert!(
            (0..100).any(|_| backoff(1) > Duration::ZERO),
            "random, not always zero"
        );
    }

    #[test]
    fn expiries_past_2038_are_refused() {
        assert!(absolute_expiry(1_800_000_000).is_ok());
        assert!(absolute_expiry(LAST_ABSOLUTE_EXPIRY - ITEM_LIFETIME_SECS).is_ok());
        assert!(absolute_expiry(LAST_ABSOLUTE_EXPIRY - ITEM_LIFETIME_SECS + 1).is_err());
    }
}

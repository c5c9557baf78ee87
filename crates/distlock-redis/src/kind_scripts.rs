//! The Lua scripts of semaphores and read-write locks: every decision that reads and then
//! writes runs atomically on the server, as for the mutex (see [`scripts`](crate::scripts)).
//!
//! Owns the script texts; running them is [`Node::script`](crate::node::Node::script)'s job,
//! and every script is wrapped by [`LuaScript::new`], so it takes the request's nonce as its
//! last argument and returns it beside its reply.
//!
//! Holders that can be many (semaphore permits, readers) are members of a sorted set scored
//! by their expiry in milliseconds of the server's clock (`TIME`, as the mutex's queue of
//! waiters): a member is live while its score is above the server's now, and every script
//! that counts members first drops the expired ones (`ZREMRANGEBYSCORE`). Such a set expires
//! (`PEXPIREAT`) with its last member, so nothing outlives its holds. The single writer is a
//! string with a `PX` TTL, as the mutex. Fencing counters never expire.
//!
//! Replies of the acquire scripts: `{1, fencing token}` acquired; `{0, ms until a hold could
//! free or -1, holder's owner or nothing}` held; `{2, stored permits}` for a semaphore whose
//! live holders use another count (nothing changed).
//!
//! An acquisition sent twice (the connection broke after the request left) finds its own
//! owner token live and is granted again with a fresh token: it never takes a second permit.
//! Release and extend are idempotent; on a cluster a release run again reports what its
//! first run did by its release marker (see [`released`](crate::released)).
//!
//! Each script touches only keys passed in `KEYS`, all in one hash slot (see
//! [`keys`](crate::keys)).

use std::sync::LazyLock;

use crate::scripts::{release_marker_fns, wake_next_fn, LuaScript};

/// Lua helpers of the hold scripts: `now_ms()`, the server's clock in ms; `live(set, now)`,
/// which drops the expired members of `set` and counts the rest; `first_score(set)` and
/// `last_score(set)`, the earliest and latest score (or `nil`); `expire_with_last(set)`, which
/// makes `set` expire with its latest member.
macro_rules! hold_fns {
    () => {
        r"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function live(set, now)
  redis.call('ZREMRANGEBYSCORE', set, '-inf', now)
  return redis.call('ZCARD', set)
end
local function first_score(set)
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')[2]
  return first and tonumber(first)
end
local function last_score(set)
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')[2]
  return last and tonumber(last)
end
local function expire_with_last(set)
  local last = last_score(set)
  if last then
    redis.call('PEXPIREAT', set, last)
  end
end
"
    };
}

/// Acquire a semaphore permit: drop expired holders; refuse if live holders were admitted
/// with another count; admit if fewer than `permits` are live (or this owner is already live:
/// the same attempt sent again), taking the waiter (if any) out of the queue, else queue the
/// waiter (at the back, for its stay, as the mutex's `ACQUIRE_WAITING` does) and report the
/// earliest expiry.
///
/// `KEYS[1]` holders, `KEYS[2]` state hash (`permits`, `fence`), `KEYS[3]` waiters;
/// `ARGV[1]` owner token, `ARGV[2]` TTL in ms, `ARGV[3]` permits, `ARGV[4]` waiter id (empty:
/// none), `ARGV[5]` its stay in ms. Replies as the module docs say.
pub(crate) static ACQUIRE_PERMIT: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(concat!(
        hold_fns!(),
        wake_next_fn!(),
        r"
local now = now_ms()
local count = live(KEYS[1], now)
local asked = tonumber(ARGV[3])
if count > 0 then
  local stored = tonumber(redis.call('HGET', KEYS[2], 'permits'))
  if stored and stored ~= asked then
    return {2, stored}
  end
end
if count < asked or redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  redis.call('HSET', KEYS[2], 'permits', asked)
  expire_with_last(KEYS[1])
  if ARGV[4] ~= '' then
    redis.call('ZREM', KEYS[3], ARGV[4])
  end
  return {1, redis.call('HINCRBY', KEYS[2], 'fence', 1)}
end
if ARGV[4] ~= '' then
  local stay = tonumber(ARGV[5])
  local now_micros = now_us()
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_micros)
  redis.call('ZADD', KEYS[3], now_micros + stay * 1000, ARGV[4])
  if redis.call('PTTL', KEYS[3]) < stay then
    redis.call('PEXPIRE', KEYS[3], stay)
  end
end
return {0, first_score(KEYS[1]) - now}
",
    ))
});

/// Acquire a read lock: drop expired readers and waiting writers; refused while a writer
/// holds (reporting its `PTTL` and owner) or while a live waiting writer is recorded
/// (reporting when the last record ends); else the reader joins the set.
///
/// `KEYS[1]` readers, `KEYS[2]` writer, `KEYS[3]` waiting writers, `KEYS[4]` fencing counter;
/// `ARGV[1]` owner token, `ARGV[2]` TTL in ms.
pub(crate) static ACQUIRE_READ: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(concat!(
        hold_fns!(),
        r"
local now = now_ms()
live(KEYS[1], now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local writer = redis.call('GET', KEYS[2])
  if writer then
    return {0, redis.call('PTTL', KEYS[2]), writer}
  end
  if live(KEYS[3], now) > 0 then
    return {0, last_score(KEYS[3]) - now}
  end
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
expire_with_last(KEYS[1])
return {1, redis.call('INCR', KEYS[4])}
",
    ))
});

/// Acquire the write lock: drop expired readers and waiting writers; win if no reader and no
/// writer is live (or this owner is the writer: the same attempt sent again), taking the
/// waiter's own record out; else record the waiter (if any) as waiting until now + its stay,
/// and report the writer's `PTTL` and owner, or the last reader's expiry.
///
/// `KEYS[1]` readers, `KEYS[2]` writer, `KEYS[3]` waiting writers, `KEYS[4]` fencing counter;
/// `ARGV[1]` owner token, `ARGV[2]` TTL in ms, `ARGV[3]` waiter id (empty: none), `ARGV[4]`
/// its stay in ms.
pub(crate) static ACQUIRE_WRITE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(concat!(
        hold_fns!(),
        r"
local now = now_ms()
local readers = live(KEYS[1], now)
live(KEYS[3], now)
local writer = redis.call('GET', KEYS[2])
if writer == ARGV[1] or (not writer and readers == 0) then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  if ARGV[3] ~= '' then
    redis.call('ZREM', KEYS[3], ARGV[3])
  end
  return {1, redis.call('INCR', KEYS[4])}
end
if ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[4]), ARGV[3])
  expire_with_last(KEYS[3])
end
if writer then
  return {0, redis.call('PTTL', KEYS[2]), writer}
end
return {0, last_score(KEYS[1]) - now}
",
    ))
});

/// Release a member hold (a permit, a read lock): remove the owner; if its hold was live,
/// for a semaphore (`ARGV[3]` = `next`) wake the first waiter of the queue `KEYS[2]` alone
/// (one permit came free: one waiter can take it), for readers (`last`) announce it on the
/// channel only when no live reader is left (a reader's release can only let a writer in,
/// and only the last one does).
///
/// `KEYS[1]` the set, `KEYS[2]` the semaphore's waiters (readers: unused), `KEYS[3]` the
/// release marker; `ARGV[1]` owner token, `ARGV[2]` channel, `ARGV[3]` `next` or `last`,
/// `ARGV[4]` the marker's TTL in ms (`0`: no marker). Returns 1 if the owner held a live
/// member (then the marker is written), or held none but its marker says an earlier run of
/// this same request removed it; 0 otherwise (an expired member is removed too).
pub(crate) static RELEASE_MEMBER: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::shrinking(concat!(
        hold_fns!(),
        wake_next_fn!(),
        release_marker_fns!(),
        r"
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  if released_before(KEYS[3], ARGV[4]) then
    return 1
  end
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
local now = now_ms()
if tonumber(score) <= now then
  return 0
end
mark_released(KEYS[3], ARGV[4])
if ARGV[3] == 'next' then
  wake_next(KEYS[2], ARGV[2])
elseif live(KEYS[1], now) == 0 then
  redis.call(distlock_publish, ARGV[2], 'released')
end
return 1
",
    ))
});

/// A semaphore's waiter leaves the queue (its wait ended without a permit); if a permit is
/// free, it may have been woken without trying, so the next waiter is woken in its place.
///
/// `KEYS[1]` holders, `KEYS[2]` state hash, `KEYS[3]` waiters; `ARGV[1]` waiter id,
/// `ARGV[2]` channel.
pub(crate) static LEAVE_PERMIT: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::shrinking(concat!(
        hold_fns!(),
        wake_next_fn!(),
        r"
redis.call('ZREM', KEYS[3], ARGV[1])
local count = live(KEYS[1], now_ms())
local permits = tonumber(redis.call('HGET', KEYS[2], 'permits'))
if count == 0 or (permits and count < permits) then
  wake_next(KEYS[3], ARGV[2])
end
return 0
",
    ))
});

/// Extend a member hold: a live member's expiry becomes now + TTL (`ZADD XX`), and the set
/// expires with its last member.
///
/// `KEYS[1]` the set; `ARGV[1]` owner token, `ARGV[2]` TTL in ms. Returns 1 if the owner held
/// a live member, 0 otherwise.
pub(crate) static EXTEND_MEMBER: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::shrinking(concat!(
        hold_fns!(),
        r"
local now = now_ms()
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
expire_with_last(KEYS[1])
return 1
",
    ))
});

/// Release the write lock: compare-and-delete, then announce it (readers and writers may come
/// in now).
///
/// `KEYS[1]` writer, `KEYS[2]` release marker; `ARGV[1]` owner token, `ARGV[2]` channel,
/// `ARGV[3]` the marker's TTL in ms (`0`: no marker). Returns 1 if deleted (then the marker is
/// written), or if the marker says an earlier run of this same request deleted it; 0 otherwise.
pub(crate) static RELEASE_WRITE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::shrinking(concat!(
        release_marker_fns!(),
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  mark_released(KEYS[2], ARGV[3])
  redis.call(distlock_publish, ARGV[2], 'released')
  return 1
end
if released_before(KEYS[2], ARGV[3]) then
  return 1
end
return 0
",
    ))
});

/// A waiting writer withdraws: its record goes; if that leaves no live waiting writer and no
/// writer, readers may come in, so it is announced.
///
/// `KEYS[1]` waiting writers, `KEYS[2]` writer; `ARGV[1]` waiter id, `ARGV[2]` channel.
/// Returns 1 if the waiter was recorded.
pub(crate) static WITHDRAW_WRITER: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::shrinking(concat!(
        hold_fns!(),
        r"
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if live(KEYS[1], now_ms()) == 0 and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call(distlock_publish, ARGV[2], 'released')
end
return 1
",
    ))
});

/// The live holders of a semaphore, in one consistent read.
///
/// `KEYS[1]` holders, `KEYS[2]` state hash. Returns `{{owner, expiry, ...}, permits or
/// false, now}` (expiry and now in ms of the server's clock).
pub(crate) static INSPECT_SEMAPHORE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::shrinking(concat!(
        hold_fns!(),
        r"
local now = now_ms()
return {
  redis.call('ZRANGEBYSCORE', KEYS[1], now + 1, '+inf', 'WITHSCORES'),
  redis.call('HGET', KEYS[2], 'permits'),
  now,
}
",
    ))
});

/// The live holders of a read-write lock, in one consistent read.
///
/// `KEYS[1]` readers, `KEYS[2]` writer. Returns `{{owner, expiry, ...}, writer or false,
/// writer's PTTL, now}`.
pub(crate) static INSPECT_RW_LOCK: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::shrinking(concat!(
        hold_fns!(),
        r"
local now = now_ms()
return {
  redis.call('ZRANGEBYSCORE', KEYS[1], now + 1, '+inf', 'WITHSCORES'),
  redis.call('GET', KEYS[2]),
  redis.call('PTTL', KEYS[2]),
  now,
}
",
    ))
});

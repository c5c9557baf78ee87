//! The Lua scripts: every decision that reads and then writes runs atomically on the server.
//!
//! Owns the script texts and their SHA1s; running them (`EVALSHA`, falling back to `EVAL` on
//! `NOSCRIPT`) is [`Node::script`](crate::node::Node::script)'s job.
//!
//! A lock key holding another type (another library's lock: Redisson keeps a hash under the
//! lock name) makes `GET` fail with `WRONGTYPE`. The scripts read it with `pcall`: such a key
//! is held by a foreign owner, reported as `<type>` (for example `<hash>`), never ours, and
//! never an error that would end a wait.
//!
//! Each script touches only keys passed in `KEYS` and all of one lock's keys share a hash
//! slot (see [`keys`](crate::keys)), so they run unchanged on Redis Cluster.
//!
//! Every script takes two more arguments than its documentation lists, last: the command
//! that announces a release (`PUBLISH` on one server, `SPUBLISH` on a cluster, where the
//! channel shares the lock's slot: see [`keys`](crate::keys)), as `distlock_publish`, and
//! the request's nonce, which it takes off `ARGV` and returns beside its reply,
//! `{nonce, reply}`. On one
//! multiplexed connection replies are matched to requests in order; a reply lost on the way
//! (a request that ran, whose answer never came) would shift every later reply onto the
//! request before it, and a renewal could read another renewal's "renewed". With the nonce a
//! reply that is not the request's own is recognized and refused (see `node::open_reply`).

use std::sync::LazyLock;

/// A Lua function `owner(key)` for the scripts that report a lock's holder: the key's value,
/// or `<type>` for a key of another type (another library's lock, such as Redisson's hash),
/// which is then held by a foreign owner rather than a `WRONGTYPE` error. One text for every
/// script that needs it (a macro, so `concat!` can join it to each script's literal).
macro_rules! owner_fn {
    () => {
        r"
local function owner(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and v.err then
    return '<' .. redis.call('TYPE', key).ok .. '>'
  end
  return v
end
"
    };
}

/// One script: its text (for `EVAL`) and its SHA1 (for `EVALSHA`), in two forms: as is, for
/// one server (any Redis with Lua), and for a cluster with a `#!lua` first line.
///
/// The cluster client sends `READONLY` on every connection it opens, and Redis runs a script
/// without a `#!` line as a read wherever the connection is `READONLY`: sent to a master that
/// has since become a replica (after a failover, to a client whose slot map is stale), it
/// would run on that replica, whose copy may be behind or empty (a renewal would find the lock
/// "not ours") and which refuses the script's writes. With `#!lua` and no `no-writes` flag,
/// Redis 7 treats the script as a write: a replica redirects it (`MOVED`) to the slot's master.
/// Redis before 7.0 cannot parse the `#!` line, and has no sharded pub/sub either, which the
/// cluster needs anyway.
///
/// A script with a `#!` line is refused outright while the server is over `maxmemory` (under
/// `noeviction`, the recommended policy), unless it declares `flags=allow-oom`. The scripts
/// that cannot grow memory (releases, renewals, a waiter leaving, inspection) are built with
/// [`shrinking`](Self::shrinking) and declare it, so a full master still frees and renews
/// locks; acquisitions, which add keys, stay refusable. (A release on a cluster writes a small
/// release marker that expires within seconds, and only when it deleted a hold: it frees
/// about as much as it adds.) (Without a `#!` line, on one server,
/// Redis checks each command a script calls instead: the same split follows, since `DEL`,
/// `PEXPIRE`, `ZREM` and reads are allowed at `maxmemory` and `SET`, `INCR` and `ZADD` are
/// not.)
pub(crate) struct LuaScript {
    plain: (String, redis::Script),
    cluster: (String, redis::Script),
}

impl LuaScript {
    /// `body` wrapped to take the request's nonce and publish command off the end of `ARGV`
    /// and return `{nonce, reply}` (see the module docs).
    pub(crate) fn new(body: &'static str) -> Self {
        Self::with_shebang(body, "#!lua")
    }

    /// As [`new`](Self::new), for a script that cannot grow memory: on a cluster it runs also
    /// while the server is over `maxmemory` (`flags=allow-oom`). Only for scripts that add no
    /// key and no member (but a release's short-lived marker, written as it deletes a hold).
    pub(crate) fn shrinking(body: &'static str) -> Self {
        Self::with_shebang(body, "#!lua flags=allow-oom")
    }

    fn with_shebang(body: &'static str, shebang: &str) -> Self {
        let code = format!(
            "local distlock_nonce = table.remove(ARGV)\n\
             local distlock_publish = table.remove(ARGV)\n\
             local function distlock_reply()\n{body}\nend\n\
             return {{distlock_nonce, distlock_reply()}}\n"
        );
        let cluster = format!("{shebang}\n{code}");
        Self {
            plain: (code.clone(), redis::Script::new(&code)),
            cluster: (cluster.clone(), redis::Script::new(&cluster)),
        }
    }

    fn form(&self, cluster: bool) -> &(String, redis::Script) {
        match cluster {
            true => &self.cluster,
            false => &self.plain,
        }
    }

    /// The script's text, for a cluster or one server.
    pub(crate) fn code(&self, cluster: bool) -> &str {
        &self.form(cluster).0
    }

    /// The script's SHA1 in hex, for a cluster or one server.
    pub(crate) fn sha1(&self, cluster: bool) -> &str {
        self.form(cluster).1.get_hash()
    }
}

/// Lua functions of the release scripts for the release marker (see
/// [`released`](crate::released)): `mark_released(marker, ttl)` records, for `ttl` ms, that
/// this request (its nonce) deleted the hold; `released_before(marker, ttl)` tells whether
/// this same request did so in an earlier run (sent again by the cluster client), so that it
/// reports what its first run did. Another release, also by the same owner, has another
/// nonce and is not answered by the marker. A `ttl` of `0` (one server, whose client sees its
/// own resends) turns both off.
macro_rules! release_marker_fns {
    () => {
        r"
local function mark_released(marker, ttl)
  if ttl ~= '0' then
    redis.call('SET', marker, distlock_nonce, 'PX', ttl)
  end
end
local function released_before(marker, ttl)
  return ttl ~= '0' and redis.call('GET', marker) == distlock_nonce
end
"
    };
}
pub(crate) use release_marker_fns;

/// Acquire: `SET lock token NX PX ttl`; on success `INCR` the fencing counter.
///
/// `KEYS[1]` lock key, `KEYS[2]` fencing counter; `ARGV[1]` owner token, `ARGV[2]` TTL in ms.
/// Returns `{1, fencing token}` when acquired, `{0, PTTL of the holder, holder's value}` when
/// held (PTTL `-1`: the holder set no TTL). A key already holding this owner token (the same
/// attempt sent again after a broken connection: tokens are unique per attempt) is ours: its
/// TTL is reset and the counter's current value, which our first run set, is the token.
pub(crate) static ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(concat!(
        owner_fn!(),
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2])}
end
local holder = owner(KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end
return {0, redis.call('PTTL', KEYS[1]), holder}
",
    ))
});

/// A Lua function `wake_next(waiters, channel)`: drops the queue entries whose stay ended,
/// takes the first remaining waiter out of the queue and publishes `wake:<waiter>` on the
/// lock's channel. Nothing is published when no one waits.
macro_rules! wake_next_fn {
    () => {
        r"
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function wake_next(waiters, channel)
  if redis.call('EXISTS', waiters) == 0 then
    return
  end
  redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now_us())
  local first = redis.call('ZRANGE', waiters, 0, 0)[1]
  if first then
    redis.call('ZREM', waiters, first)
    redis.call(distlock_publish, channel, 'wake:' .. first)
  end
end
"
    };
}
pub(crate) use wake_next_fn;

/// Acquire by a waiter: as [`ACQUIRE`], and if the lock is held, queue the waiter (at the
/// back, for its stay, after dropping the entries whose stay ended, so that waiters that died
/// do not pile up while the lock stays held), else take it out of the queue.
///
/// `KEYS[1]` lock key, `KEYS[2]` fencing counter, `KEYS[3]` waiters; `ARGV[1]` owner token,
/// `ARGV[2]` TTL in ms, `ARGV[3]` waiter id, `ARGV[4]` stay in ms. Replies as [`ACQUIRE`].
/// The queue is a sorted set scored by the end of each waiter's stay in microseconds of the
/// server's clock (so waiters queued in one millisecond keep their order); it expires with
/// the longest stay in it.
pub(crate) static ACQUIRE_WAITING: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(concat!(
        owner_fn!(),
        wake_next_fn!(),
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('ZREM', KEYS[3], ARGV[3])
  return {1, redis.call('INCR', KEYS[2])}
end
local holder = owner(KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[3], ARGV[3])
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end
local stay = tonumber(ARGV[4])
local now = now_us()
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
redis.call('ZADD', KEYS[3], now + stay * 1000, ARGV[3])
if redis.call('PTTL', KEYS[3]) < stay then
  redis.call('PEXPIRE', KEYS[3], stay)
end
return {0, redis.call('PTTL', KEYS[1]), holder}
",
    ))
});

/// Release that wakes one waiter: compare-and-delete, then wake the first waiter in the
/// queue (see `wake_next`).
///
/// `KEYS[1]` lock key, `KEYS[2]` waiters, `KEYS[3]` release marker; `ARGV[1]` owner token,
/// `ARGV[2]` release channel, `ARGV[3]` the marker's TTL in ms (`0`: no marker). Returns 1 if
/// the key held our token and was deleted (then the marker is written), or if it did not but
/// its marker says an earlier run of this same request deleted it; 0 otherwise.
pub(crate) static RELEASE_WAKING: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::shrinking(concat!(
        wake_next_fn!(),
        release_marker_fns!(),
        r"
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  mark_released(KEYS[3], ARGV[3])
  wake_next(KEYS[2], ARGV[2])
  return 1
end
if released_before(KEYS[3], ARGV[3]) then
  return 1
end
return 0
",
    ))
});

/// A waiter leaves the queue (it gave up, or its outcome is unknown); if the lock is free, it
/// may have been woken without trying, so the next waiter is woken in its place.
///
/// `KEYS[1]` lock key, `KEYS[2]` waiters; `ARGV[1]` waiter id, `ARGV[2]` release channel.
pub(crate) static LEAVE: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::shrinking(concat!(
        wake_next_fn!(),
        r"
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  wake_next(KEYS[2], ARGV[2])
end
return 0
",
    ))
});

/// Acquire without a fencing counter (Redlock, whose masters cannot make tokens monotonic).
/// Idempotent for one owner token (its second run reports the lock acquired). The server's
/// run id, for Redlock's restart check, is read once per connection, not here (see
/// [`Node::script_naming_run`](crate::node::Node::script_naming_run)).
///
/// `KEYS[1]` lock key; `ARGV[1]` owner token, `ARGV[2]` TTL in ms. Returns `{1, 0}` when
/// acquired, else `{0, PTTL of the holder, holder's value}`.
pub(crate) static ACQUIRE_UNFENCED: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(concat!(
        owner_fn!(),
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, 0}
end
local holder = owner(KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, 0}
end
return {0, redis.call('PTTL', KEYS[1]), holder}
",
    ))
});

/// As [`ACQUIRE_UNFENCED`] by a waiter: if the lock is held, queue the waiter (as
/// [`ACQUIRE_WAITING`] does), else take it out of the queue.
///
/// `KEYS[1]` lock key, `KEYS[2]` waiters; `ARGV[1]` owner token, `ARGV[2]` TTL in ms,
/// `ARGV[3]` waiter id, `ARGV[4]` stay in ms, `ARGV[5]` the end of the stay in µs of the
/// client's clock, the waiter's score. Replies as [`ACQUIRE_UNFENCED`].
///
/// The score comes from the client, not from each master's clock as in [`ACQUIRE_WAITING`]:
/// one attempt reaches the masters in parallel, and waiters' attempts arrive in different
/// orders at different masters; scored by arrival, each master's release would wake a
/// different first waiter. With the client's score every master orders its queue alike, and
/// a release wakes the same waiter on all of them.
pub(crate) static ACQUIRE_UNFENCED_WAITING: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(concat!(
        owner_fn!(),
        wake_next_fn!(),
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('ZREM', KEYS[2], ARGV[3])
  return {1, 0}
end
local holder = owner(KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[3])
  return {1, 0}
end
local stay = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(ARGV[5]) - stay * 1000)
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[3])
if redis.call('PTTL', KEYS[2]) < stay then
  redis.call('PEXPIRE', KEYS[2], stay)
end
return {0, redis.call('PTTL', KEYS[1]), holder}
",
    ))
});

/// Release without waking anyone: compare-and-delete only. For the cleanup of a failed Redlock
/// attempt, whose minority grants nobody waits for: waking a waiter for them would spend its
/// wake (and cut the random pause after a split vote short) on a lock that is still not free.
///
/// `KEYS[1]` lock key; `ARGV[1]` owner token. Returns 1 if deleted, 0 otherwise.
pub(crate) static RELEASE_QUIET: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::shrinking(
        r"
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
",
    )
});

/// Extend: compare-and-`PEXPIRE`.
///
/// `KEYS[1]` lock key; `ARGV[1]` owner token, `ARGV[2]` TTL in ms. Returns 1 if the key held
/// our token and got the new TTL, 0 otherwise.
pub(crate) static EXTEND: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::shrinking(
        r"
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
",
    )
});

/// Inspect: the holder, its remaining TTL and the last fencing token, in one consistent read.
///
/// `KEYS[1]` lock key, `KEYS[2]` fencing counter. Returns `{owner or false, PTTL, counter or
/// false}`.
pub(crate) static INSPECT: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::shrinking(concat!(
        owner_fn!(),
        r"
return {owner(KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
",
    ))
});

/// Inspect without a fencing counter (Redlock): the holder and its remaining TTL, in one
/// consistent read.
///
/// `KEYS[1]` lock key. Returns `{owner or false, PTTL}`.
pub(crate) static INSPECT_UNFENCED: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::shrinking(concat!(
        owner_fn!(),
        r"
return {owner(KEYS[1]), redis.call('PTTL', KEYS[1])}
",
    ))
});

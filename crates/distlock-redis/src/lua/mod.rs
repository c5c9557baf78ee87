//! The Lua scripts: every decision that reads and then writes runs atomically on the server.
//!
//! Owns the script texts (the `.lua` files beside this one) and their SHA1s; which keys and
//! arguments each operation sends is for [`acquire`](crate::acquire), [`release`](crate::release)
//! and their callers, and running a script (`EVALSHA`, falling back to `EVAL` on `NOSCRIPT`)
//! is [`Node::script`](crate::node::Node::script)'s job.
//!
//! One script acquires every kind of hold ([`ACQUIRE`]: the mutex, fenced or not, a permit, a
//! read or the write lock, with or without a waiter) and one releases them ([`RELEASE`]); the
//! kind and the options are arguments, documented at the top of each file. The others extend,
//! let a waiter leave, and inspect.
//!
//! A lock key holding another type (another library's lock: Redisson keeps a hash under the
//! lock name) makes `GET` fail with `WRONGTYPE`. The mutex's scripts read it with `pcall`:
//! such a key is held by a foreign owner, reported as `<type>` (for example `<hash>`), never
//! ours, and never an error that would end a wait.
//!
//! Each script touches only keys passed in `KEYS` and all of one lock's keys share a hash
//! slot (see [`keys`](crate::keys)), so they run unchanged on Redis Cluster.
//!
//! Every script takes two more arguments than its documentation lists, last: the command
//! that announces a release (`PUBLISH` on one server, `SPUBLISH` on a cluster, where the
//! channel shares the lock's slot: see [`keys`](crate::keys)), as `distlock_publish`, and
//! the request's nonce, which it takes off `ARGV` and returns beside its reply,
//! `{nonce, reply}`. On one multiplexed connection replies are matched to requests in order;
//! a reply lost on the way (a request that ran, whose answer never came) would shift every
//! later reply onto the request before it, and a renewal could read another renewal's
//! "renewed". With the nonce a reply that is not the request's own is recognized and refused
//! (see `node::open_reply`).

use std::sync::LazyLock;

/// The helpers a script takes in by a `--! name` line, defined where that line stands: Lua
/// makes a closure of every function definition it runs, on every call, so a script defines
/// a helper in the branch that calls it, not up front for every path. `wake_next`,
/// `grant_next` and `enqueue` need `now_us` before them.
const FRAGMENTS: [(&str, &str); 9] = [
    // `holder_of(key)`: the holder of a mutex's key, `<type>` for a key of another type.
    ("holder", include_str!("holder.lua")),
    // `now_us()`: the server's clock in µs, which scores the queues of waiters.
    ("now_us", include_str!("now_us.lua")),
    // `waiter_channel(channel, waiter)`: where a message naming a waiter is published.
    ("waiter_channel", include_str!("waiter_channel.lua")),
    // `wake_next(waiters, channel)`: wakes the first waiter of a queue.
    ("wake_next", include_str!("wake_next.lua")),
    // `grant_next(waiters, lock, fence, channel)`: hands the mutex to the first waiter of its
    // queue.
    ("grant_next", include_str!("grant_next.lua")),
    // `enqueue(queue, waiter, stay, client_score)`: the one queue insert.
    ("enqueue", include_str!("enqueue.lua")),
    // `now_ms`, `live`, `first_score`, `last_score`, `expire_with_last`: the holds that are
    // members of a sorted set.
    ("holds", include_str!("holds.lua")),
    // `mark_released(marker, ttl)`, `released_before(marker, ttl)` (see
    // [`released`](crate::released)).
    ("release_marker", include_str!("release_marker.lua")),
    // Not a helper: what an unknown name expands to, so that the script fails loudly.
    ("", "error('distlock: a script takes in an unknown helper')"),
];

/// `text` with its `--! name` lines replaced by the helpers they name, and without comment
/// and blank lines (an `EVAL`, a first run on a server, need not carry them).
fn expand(text: &str) -> String {
    let mut code = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix("--! ") {
            let fragment = FRAGMENTS
                .iter()
                .find(|(known, _)| *known == name.trim())
                .or(FRAGMENTS.last())
                .map_or("", |(_, fragment)| *fragment);
            code.push(expand(fragment));
        } else if !trimmed.is_empty() && !trimmed.starts_with("--") {
            code.push(line.to_owned());
        }
    }
    code.join("\n")
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
/// about as much as it adds.) (Without a `#!` line, on one server, Redis checks each command a
/// script calls instead: the same split follows, since `DEL`, `PEXPIRE`, `ZREM` and reads are
/// allowed at `maxmemory` and `SET`, `INCR` and `ZADD` are not.)
pub(crate) struct LuaScript {
    plain: (String, redis::Script),
    cluster: (String, redis::Script),
}

impl LuaScript {
    /// `text` (see [`expand`]) wrapped to take the request's nonce and publish command off the
    /// end of `ARGV` and return `{nonce, reply}` (see the module docs).
    fn new(text: &str) -> Self {
        Self::with_shebang(text, "#!lua")
    }

    /// As [`new`](Self::new), for a script that cannot grow memory: on a cluster it runs also
    /// while the server is over `maxmemory` (`flags=allow-oom`). Only for scripts that add no
    /// key and no member (but a release's short-lived marker, written as it deletes a hold).
    fn shrinking(text: &str) -> Self {
        Self::with_shebang(text, "#!lua flags=allow-oom")
    }

    fn with_shebang(text: &str, shebang: &str) -> Self {
        let body = expand(text);
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

/// Acquires a hold of any kind (`acquire.lua`; see [`acquire`](crate::acquire) for the calls
/// and the reading of the reply).
pub(crate) static ACQUIRE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("acquire.lua")));

/// Releases a hold of any kind, waking or announcing (`release.lua`; see
/// [`release`](crate::release)).
pub(crate) static RELEASE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::shrinking(include_str!("release.lua")));

/// Extends the mutex or the writer: compare-and-`PEXPIRE` (`extend.lua`).
pub(crate) static EXTEND: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::shrinking(include_str!("extend.lua")));

/// Extends a permit or a reader: its member's expiry moved (`extend_member.lua`).
pub(crate) static EXTEND_MEMBER: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::shrinking(include_str!("extend_member.lua")));

/// A mutex's waiter leaves the queue, waking the next if the lock is free (`leave.lua`).
pub(crate) static LEAVE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::shrinking(include_str!("leave.lua")));

/// A semaphore's waiter leaves the queue, waking the next if a permit is free
/// (`leave_permit.lua`).
pub(crate) static LEAVE_PERMIT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::shrinking(include_str!("leave_permit.lua")));

/// A waiting writer withdraws, announcing it if readers may come in (`withdraw_writer.lua`).
pub(crate) static WITHDRAW_WRITER: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::shrinking(include_str!("withdraw_writer.lua")));

/// The mutex's holder, its TTL and the last fencing token (`inspect.lua`).
pub(crate) static INSPECT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::shrinking(include_str!("inspect.lua")));

/// A mutex holder leaves a note beside its hold (`note.lua`).
pub(crate) static NOTE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::shrinking(include_str!("note.lua")));

/// The mutex's holder, its TTL and the holder's note, for Redlock (`inspect_unfenced.lua`).
pub(crate) static INSPECT_UNFENCED: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::shrinking(include_str!("inspect_unfenced.lua")));

/// The live holders of a semaphore (`inspect_semaphore.lua`).
pub(crate) static INSPECT_SEMAPHORE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::shrinking(include_str!("inspect_semaphore.lua")));

/// The live holders of a read-write lock (`inspect_rw_lock.lua`).
pub(crate) static INSPECT_RW_LOCK: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::shrinking(include_str!("inspect_rw_lock.lua")));

#[cfg(test)]
mod tests {
    use super::*;

    /// Every script, with its helpers taken in.
    fn all() -> [&'static LuaScript; 12] {
        [
            &ACQUIRE,
            &RELEASE,
            &EXTEND,
            &EXTEND_MEMBER,
            &LEAVE,
            &LEAVE_PERMIT,
            &WITHDRAW_WRITER,
            &INSPECT,
            &NOTE,
            &INSPECT_UNFENCED,
            &INSPECT_SEMAPHORE,
            &INSPECT_RW_LOCK,
        ]
    }

    #[test]
    fn every_helper_a_script_takes_in_is_known_and_comments_are_left_out() {
        for script in all() {
            let code = script.code(false);
            assert!(!code.contains("unknown helper"), "{code}");
            assert!(
                !code.lines().any(|line| line.trim_start().starts_with("--")),
                "{code}"
            );
        }
        assert!(expand("--! nothing").contains("unknown helper"));
    }

    #[test]
    fn a_path_defines_the_helpers_it_calls_where_it_calls_them() {
        let acquire = ACQUIRE.code(false);
        let start = acquire.find("if kind == 'mutex'").unwrap_or(0);
        let end = acquire.find("if kind == 'permit'").unwrap_or(acquire.len());
        let mutex = &acquire[start..end];
        // The mutex's path never defines the holds' helpers; its grant defines none.
        assert!(!mutex.contains("local function now_ms"), "{mutex}");
        let grant = &mutex[..mutex.find("local function").unwrap_or(mutex.len())];
        assert!(grant.contains("redis.call('INCR', KEYS[2])"), "{grant}");
    }
}

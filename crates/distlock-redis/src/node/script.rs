//! Scripts on a [`Node`]: a request on the wire (`EVALSHA`, `EVAL` on `NOSCRIPT`, with the
//! announcing command and the request's [`Nonce`] last), the opening of its `{nonce, reply}`
//! reply, and the naming of the server's run for Redlock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use distlock_core::{Error, Result};
use redis::{ErrorKind, FromRedisValue, RedisError, ServerErrorKind, Value};

use super::errors::{map_error, with_context};
use super::probe::At;
use super::{Node, BACKEND};
use crate::keys::key_slot;
use crate::lua::LuaScript;
use crate::server_run::{fresh_name, parse_run_id, NamingTurn};

/// What the scripts announce a release with: `PUBLISH` on one server, `SPUBLISH` (sharded
/// pub/sub: the message goes to the shard of the channel's slot, which is the lock's) on a
/// cluster. Every script takes it as its last argument but one (see [`script_cmd`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Publish {
    Plain,
    Sharded,
}

impl Publish {
    fn command(self) -> &'static str {
        match self {
            Publish::Plain => "PUBLISH",
            Publish::Sharded => "SPUBLISH",
        }
    }
}

/// A request's nonce: unique in this process, and counted from a random start so that two
/// processes' nonces meet only by chance (a cluster's release marker holds one, see
/// [`released`](crate::released)); every script returns it beside its reply.
#[derive(Debug, Clone)]
pub(crate) struct Nonce(String);

impl Nonce {
    pub(crate) fn new() -> Self {
        static NEXT: LazyLock<AtomicU64> = LazyLock::new(|| AtomicU64::new(rand::random()));
        Self(format!("{:x}", NEXT.fetch_add(1, Ordering::Relaxed)))
    }
}

/// `EVALSHA sha numkeys keys... args... publish nonce`, or with `use_eval`
/// `EVAL code numkeys keys... args... publish nonce` (`publish`: the command that announces
/// a release, see [`Publish`]).
pub(crate) fn script_cmd(
    script: &LuaScript,
    keys: &[&[u8]],
    args: &[&[u8]],
    publish: Publish,
    nonce: &Nonce,
    use_eval: bool,
) -> redis::Cmd {
    let mut cmd = match use_eval {
        true => {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(script.code(publish == Publish::Sharded));
            cmd
        }
        false => {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(script.sha1(publish == Publish::Sharded));
            cmd
        }
    };
    cmd.arg(keys.len())
        .arg(keys)
        .arg(args)
        .arg(publish.command())
        .arg(nonce.0.as_bytes());
    cmd
}

/// A script's reply `{nonce, reply}` opened: `reply` if the nonce is `nonce`. An error reply
/// (`NOSCRIPT`, a script error) comes back as it is: it never confirms anything. `None` for a
/// reply to another request: on one connection replies are matched to requests in order, so
/// one lost on the way hands every later request the reply of the request after it.
pub(crate) fn open_reply(reply: Value, nonce: &Nonce) -> Option<Value> {
    match reply {
        Value::ServerError(_) => Some(reply),
        Value::Array(mut parts) if !parts.is_empty() => {
            let ours = matches!(&parts[0], Value::BulkString(n) if n.as_slice() == nonce.0.as_bytes());
            if !ours {
                return None;
            }
            Some(if parts.len() > 1 {
                parts.swap_remove(1)
            } else {
                Value::Nil
            })
        }
        _ => None,
    }
}

fn is_noscript(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

impl Node {
    /// Runs `script` by `EVALSHA`, falling back to `EVAL` (which also caches it on the
    /// server) on `NOSCRIPT`: one round trip once the server knows it. Bounded by the
    /// operation timeout.
    pub(crate) async fn script<T: FromRedisValue>(
        &self,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<T> {
        self.script_within(self.timeout, script, keys, args).await
    }

    /// As [`script`](Self::script), bounded by `limit`. A reply that is not the request's
    /// own (see [`open_reply`]) is an error, and the connection is replaced.
    pub(crate) async fn script_within<T: FromRedisValue>(
        &self,
        limit: Duration,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<T> {
        self.script_sent_within(limit, script, keys, args)
            .await
            .map(|(value, _)| value)
    }

    /// As [`script_within`](Self::script_within), also telling whether this client sent the
    /// script again after its connection broke, so that it may have run twice: a second run
    /// sees what the first one did (a release sent again finds its lock gone). On a cluster
    /// the cluster client also sends a request again after a dropped connection, without
    /// saying so: that is not seen here (the release scripts' marker answers it, see
    /// [`released`](crate::released)).
    pub(crate) async fn script_sent_within<T: FromRedisValue>(
        &self,
        limit: Duration,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<(T, bool)> {
        let nonce = Nonce::new();
        let nonce = &nonce;
        let publish = self.publish();
        let at = keys.first().map_or(At::Unknown, |key| At::Slot(key_slot(key)));
        let (reply, generation, resent) = self
            .run_tracked(limit, at, |mut conn| async move {
                match script_cmd(script, keys, args, publish, nonce, false)
                    .query_async::<Value>(&mut conn)
                    .await
                {
                    Err(e) if is_noscript(&e) => {
                        script_cmd(script, keys, args, publish, nonce, true)
                            .query_async(&mut conn)
                            .await
                    }
                    other => other,
                }
            })
            .await?;
        let reply = self.checked(reply, nonce, generation)?;
        let value =
            redis::from_redis_value(reply).map_err(|e| with_context(map_error(e.into()), &self.url))?;
        Ok((value, resent))
    }

    /// As [`script_within`](Self::script_within) on one server, also naming the run of the
    /// server that ran it (its run id, new with every restart; see [`ServerRun`](crate::server_run::ServerRun)): the script
    /// is pipelined after `CLIENT GETNAME`, one round trip. On a connection this client has
    /// not named (its first request, or the connection was reopened, perhaps to a restarted
    /// server) a second round trip names it, reads `INFO server` and runs the script again on
    /// it, by `EVAL` (a new connection may be to a server that never saw it): the scripts sent
    /// here must be idempotent for their arguments. One request at a time names a connection:
    /// requests that find it unnamed meanwhile wait for that one (within `limit`), then send
    /// their script after `CLIENT GETNAME` again, by an `EVALSHA` that finds the script
    /// loaded; so a burst of first requests names a connection once and sends the script's
    /// code once; a request whose look was answered before that naming but read after it
    /// looks again instead of naming the connection a second time. If that naming fails, each waiting request names the connection itself, at
    /// once (a dead server fails them all together, not one after another). A server that does not know the script (`NOSCRIPT`: restarted, or its
    /// scripts flushed) sends the request to the naming too, which loads it once for all.
    /// `None` on a cluster, or if the server did not say.
    pub(crate) async fn script_naming_run<T: FromRedisValue>(
        &self,
        limit: Duration,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<(T, Option<String>)> {
        if self.is_cluster() {
            return Ok((self.script_within(limit, script, keys, args).await?, None));
        }
        let started = tokio::time::Instant::now();
        let seen = self.run.recorded();
        if self.run.named() {
            if let Some(named) = self.script_on_named(limit, limit, script, keys, args).await? {
                return Ok(named);
            }
        }
        self.find_or_name(seen, started, limit, script, keys, args).await
    }

    /// After a look that did not find a name this client set on the connection (or none was
    /// set yet): finds the name another request's naming set since, or names the connection.
    /// `seen` is how many namings were recorded before that look, `started` when the request
    /// began. A naming recorded since that look most likely named the connection it went on
    /// (its reply may just have been read after that naming's): look again rather than name
    /// it a second time. Another request naming a connection now most likely names the one
    /// this request sends on: wait for it, then look for its name. Twice at most; after a
    /// naming that failed (the server refused or did not answer), or after two, this request
    /// names the connection itself, beside any other: waiting for a turn would fail a dead
    /// server's requests one after another, each after the one before it.
    async fn find_or_name<T: FromRedisValue>(
        &self,
        mut seen: u64,
        started: tokio::time::Instant,
        limit: Duration,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<(T, Option<String>)> {
        let left = || limit.saturating_sub(started.elapsed());
        for _ in 0..2 {
            match self.run.try_naming_turn() {
                // No naming since that look: this request names the connection.
                Some(turn) if self.run.recorded() == seen => {
                    return self
                        .name_connection(Some(turn), limit, left(), script, keys, args)
                        .await;
                }
                // A naming finished since: look for its name.
                Some(_) => {}
                None => {
                    self.within_limit(limit, left(), self.run.naming_done()).await?;
                    if self.run.recorded() == seen {
                        break;
                    }
                }
            }
            seen = self.run.recorded();
            if let Some(named) = self.script_on_named(limit, left(), script, keys, args).await? {
                return Ok(named);
            }
        }
        self.name_connection(None, limit, left(), script, keys, args)
            .await
    }

    /// The script pipelined after `CLIENT GETNAME` (by `EVALSHA`), bounded by `left` of the
    /// request's `limit`: its reply and the run id if the connection bears a name this client
    /// set, else `None` (the script ran all the same, unless the server did not know it).
    async fn script_on_named<T: FromRedisValue>(
        &self,
        limit: Duration,
        left: Duration,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<Option<(T, Option<String>)>> {
        if left.is_zero() {
            return Err(self.no_answer_within(limit));
        }
        let mut getname = redis::cmd("CLIENT");
        getname.arg("GETNAME");
        let Some((before, reply)) = self
            .script_after(left, &[getname], script, keys, args, false)
            .await?
        else {
            // The connection is new, to a server that never saw the script (restarted), or
            // the server's scripts were flushed: the naming loads it once for all.
            return Ok(None);
        };
        let run_id = match before.first() {
            Some(Value::BulkString(name)) => self.run.run_id(name),
            _ => None,
        };
        match run_id {
            Some(run_id) => Ok(Some((self.value(reply)?, Some(run_id)))),
            None => Ok(None),
        }
    }

    /// Names the connection, holding `_turn` if it has it (the others wait for that naming):
    /// `CLIENT SETNAME`, `INFO server` and the script by `EVAL`, one round trip bounded by
    /// `left` of the request's `limit`.
    async fn name_connection<T: FromRedisValue>(
        &self,
        _turn: Option<NamingTurn<'_>>,
        limit: Duration,
        left: Duration,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<(T, Option<String>)> {
        if left.is_zero() {
            return Err(self.no_answer_within(limit));
        }
        let name = fresh_name();
        let mut setname = redis::cmd("CLIENT");
        setname.arg("SETNAME").arg(&name);
        let mut info = redis::cmd("INFO");
        info.arg("server");
        let (before, reply) = self
            .script_after(left, &[setname, info], script, keys, args, true)
            .await?
            .ok_or_else(|| Error::backend(BACKEND, format!("{}: NOSCRIPT in reply to EVAL", self.url)))?;
        let run_id = before
            .get(1)
            .and_then(|info| redis::from_redis_value::<String>(info.clone()).ok())
            .and_then(|info| parse_run_id(&info));
        if let Some(run_id) = &run_id {
            self.run.record(name, run_id.clone());
        }
        Ok((self.value(reply)?, run_id))
    }

    /// `wait`, bounded by `left` of the request's `limit`.
    async fn within_limit<F: std::future::Future>(
        &self,
        limit: Duration,
        left: Duration,
        wait: F,
    ) -> Result<F::Output> {
        if left.is_zero() {
            return Err(self.no_answer_within(limit));
        }
        tokio::time::timeout(left, wait)
            .await
            .map_err(|_| self.no_answer_within(limit))
    }

    fn no_answer_within(&self, limit: Duration) -> Error {
        Error::unavailable(BACKEND, format!("{} did not answer within {limit:?}", self.url))
    }

    /// `before`'s commands and `script` (by `EVAL` if `eval`, else by `EVALSHA`) in one
    /// pipeline, bounded by `limit`: their replies, and the script's opened (see
    /// [`checked`](Self::checked)); `None` if the server does not know the script (`NOSCRIPT`:
    /// nothing ran).
    async fn script_after(
        &self,
        limit: Duration,
        before: &[redis::Cmd],
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
        eval: bool,
    ) -> Result<Option<(Vec<Value>, Value)>> {
        let nonce = Nonce::new();
        let nonce = &nonce;
        let publish = self.publish();
        let mut pipe = redis::pipe();
        for cmd in before {
            pipe.add_command(cmd.clone());
        }
        pipe.add_command(script_cmd(script, keys, args, publish, nonce, eval));
        let pipe = &pipe;
        let (replies, generation) = self
            .run_on(limit, |mut conn| async move {
                match pipe.query_async::<Vec<Value>>(&mut conn).await {
                    Err(e) if is_noscript(&e) => Ok(None),
                    other => other.map(Some),
                }
            })
            .await?;
        let Some(mut replies) = replies else {
            return Ok(None);
        };
        let reply = replies
            .pop()
            .ok_or_else(|| Error::backend(BACKEND, format!("{}: an empty reply to a pipeline", self.url)))?;
        Ok(Some((replies, self.checked(reply, nonce, generation)?)))
    }

    fn value<T: FromRedisValue>(&self, reply: Value) -> Result<T> {
        redis::from_redis_value(reply).map_err(|e| with_context(map_error(e.into()), &self.url))
    }

    /// `reply` opened (see [`open_reply`]); a reply to another request means the connection of
    /// `generation` lost one and is out of step: it is replaced, and the request's outcome is
    /// unknown.
    pub(crate) fn checked(&self, reply: Value, nonce: &Nonce, generation: u64) -> Result<Value> {
        open_reply(reply, nonce).ok_or_else(|| {
            tracing::warn!(url = %self.url, "distlock-redis: a reply to another request; replacing the connection");
            self.replace(generation);
            Error::unavailable(
                BACKEND,
                format!(
                    "{}: a reply to another request arrived (one was lost on the way); the outcome is unknown",
                    self.url
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use distlock_testkit::RedisServer;

    use super::*;
    use crate::lua::ACQUIRE;

    /// Calls of `command` the server at `url` ran so far.
    async fn calls(url: &str, command: &str) -> u64 {
        let client = redis::Client::open(url).expect("url");
        let mut conn = client.get_multiplexed_async_connection().await.expect("connects");
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .expect("INFO commandstats");
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|line| line.strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// A request whose look found the connection unnamed, and whose reply was read only after
    /// another request's naming finished, finds that naming's name instead of naming the
    /// connection again (a burst after a restart sent `INFO` and the script's code once per
    /// such request).
    #[tokio::test]
    async fn a_look_that_raced_a_finished_naming_finds_its_name() {
        let server = tokio::task::spawn_blocking(RedisServer::start)
            .await
            .expect("joined")
            .expect("starts");
        let url = server.url();
        let client = redis::Client::open(url.as_str()).expect("url");
        let timeout = Duration::from_secs(5);
        let node = Node::lazy(client, url.clone(), timeout, timeout).expect("node");
        let acquire = |key: &'static [u8]| {
            let node = node.clone();
            async move {
                let keys: [&[u8]; 1] = [key];
                let args: [&[u8]; 4] = [b"mutex", b"owner", b"30000", b"0"];
                node.script_naming_run::<Value>(timeout, &ACQUIRE, &keys, &args)
                    .await
            }
        };
        // This request's look happened before the naming below was recorded.
        let seen = node.run.recorded();
        let started = tokio::time::Instant::now();
        acquire(b"first").await.expect("names the connection");
        assert_eq!(calls(&url, "client|setname").await, 1, "one naming so far");
        let keys: [&[u8]; 1] = [b"second"];
        let args: [&[u8]; 4] = [b"mutex", b"owner", b"30000", b"0"];
        let (_, run_id) = node
            .find_or_name::<Value>(seen, started, timeout, &ACQUIRE, &keys, &args)
            .await
            .expect("runs");
        assert!(run_id.is_some(), "the run is known");
        assert_eq!(
            (calls(&url, "client|setname").await, calls(&url, "eval").await),
            (1, 1),
            "(CLIENT SETNAME, EVAL) calls: the second request found the first one's naming"
        );
    }
}

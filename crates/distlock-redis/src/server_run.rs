//! [`ServerRun`]: which run of a server (its run id, new with every restart) a connection
//! talks to, learned once per connection instead of once per request.
//!
//! A TCP connection ends with the server process it was opened to, and its name
//! (`CLIENT SETNAME`) lives and dies with it. So a name set in the same pipeline as the
//! `INFO server` that read the run id marks the connection as talking to that run: a later
//! request pipelined after `CLIENT GETNAME` that finds the name ran on the same run, and one
//! that finds another name (or none: the connection was reopened, perhaps to a restarted
//! server) learns the run id again. One request at a time names a connection (see
//! [`ServerRun::try_naming_turn`]): the others wait for it and then find the name (or, if
//! it failed, name the connection themselves). It owns only that record and that turn;
//! [`Node`](crate::node::Node) sends the requests.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use tokio::sync::{RwLock, RwLockWriteGuard};

/// How many of the names this client set on a server it remembers: a name set by a request
/// that timed out, or that raced a reconnection, may not be the one that stays.
const NAMES_KEPT: usize = 8;

/// The connection names this client set on one server, newest last, each with the run id of
/// the server when it was set.
#[derive(Debug, Default)]
pub(crate) struct ServerRun {
    known: Mutex<VecDeque<Named>>,
    /// Written by the request naming a connection: requests that find the connection unnamed
    /// meanwhile wait for it (all woken at once) instead of each sending `CLIENT SETNAME`,
    /// `INFO server` and the script's code.
    naming: RwLock<()>,
    /// How many names were recorded: a waiter that sees it changed looks for the new name.
    recorded: AtomicU64,
}

/// The turn to name a connection to the server: held while naming it.
pub(crate) type NamingTurn<'a> = RwLockWriteGuard<'a, ()>;

#[derive(Debug, Clone)]
struct Named {
    name: String,
    run_id: String,
}

impl ServerRun {
    /// Whether this client named a connection to the server yet.
    pub(crate) fn named(&self) -> bool {
        !self.lock().is_empty()
    }

    /// The run id of the connection named `name`, if this client named it.
    pub(crate) fn run_id(&self, name: &[u8]) -> Option<String> {
        self.lock()
            .iter()
            .find(|k| k.name.as_bytes() == name)
            .map(|k| k.run_id.clone())
    }

    /// Records that the connection named `name` talks to the run `run_id`.
    pub(crate) fn record(&self, name: String, run_id: String) {
        let mut known = self.lock();
        if known.len() == NAMES_KEPT {
            known.pop_front();
        }
        known.push_back(Named { name, run_id });
        self.recorded.fetch_add(1, Ordering::Release);
    }

    /// How many names were recorded so far.
    pub(crate) fn recorded(&self) -> u64 {
        self.recorded.load(Ordering::Acquire)
    }

    /// The turn to name a connection, if no request is naming one now.
    pub(crate) fn try_naming_turn(&self) -> Option<NamingTurn<'_>> {
        self.naming.try_write().ok()
    }

    /// Returns once no request is naming a connection (at once if none is). Cancel safe.
    pub(crate) async fn naming_done(&self) {
        drop(self.naming.read().await);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Named>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A connection name no other connection has: this client's, random.
pub(crate) fn fresh_name() -> String {
    format!("distlock-{:032x}", rand::random::<u128>())
}

/// The run id in an `INFO server` reply.
pub(crate) fn parse_run_id(info: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.trim_end().strip_prefix("run_id:"))
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_run_id_from_info_server() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:3f1c0a9e\r\ntcp_port:6379\r\n";
        assert_eq!(parse_run_id(info).as_deref(), Some("3f1c0a9e"));
        assert_eq!(parse_run_id("# Server\r\nrun_id:\r\n"), None);
        assert_eq!(parse_run_id(""), None);
    }

    #[test]
    fn any_recent_name_tells_its_run_and_others_none() {
        let run = ServerRun::default();
        assert!(!run.named());
        for i in 0..NAMES_KEPT + 1 {
            run.record(format!("n{i}"), format!("r{i}"));
        }
        assert_eq!(run.run_id(b"n0"), None, "the oldest name is forgotten");
        assert_eq!(run.run_id(b"n1").as_deref(), Some("r1"));
        assert_eq!(
            run.run_id(format!("n{NAMES_KEPT}").as_bytes()).as_deref(),
            Some(&*format!("r{NAMES_KEPT}"))
        );
        assert_eq!(run.run_id(b"other"), None);
        assert!(fresh_name() != fresh_name());
    }

    #[tokio::test]
    async fn one_request_at_a_time_names_and_the_others_wait_for_it() {
        let run = ServerRun::default();
        let turn = run.try_naming_turn().expect("nobody names yet");
        assert!(run.try_naming_turn().is_none(), "one naming at a time");
        let seen = run.recorded();
        let waiting = run.naming_done();
        tokio::pin!(waiting);
        assert!(futures::poll!(&mut waiting).is_pending(), "waits for the naming");
        run.record("n".to_owned(), "r".to_owned());
        drop(turn);
        waiting.await;
        assert_ne!(run.recorded(), seen, "the waiter sees a new name");
        assert!(run.try_naming_turn().is_some());
    }
}

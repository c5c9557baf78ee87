//! Every server process is spawned from one long-lived thread.
//!
//! Servers get `PR_SET_PDEATHSIG = SIGKILL` so they die with the test
//! process, even when it is killed with `kill -9`. But the kernel sends that
//! signal when the *thread* that forked the child exits, and libtest runs each
//! test on its own short-lived thread: a server spawned directly by a test
//! would be killed as soon as that test returns, which breaks shared servers.
//! So all spawning goes through a dedicated thread that lives as long as the
//! process.

use std::io;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::thread;

use crate::sys;

type Request = (Command, mpsc::Sender<io::Result<Child>>);

/// The spawner thread's inbox; `None` if the thread could not be started.
static SPAWNER: OnceLock<Option<mpsc::Sender<Request>>> = OnceLock::new();

/// Spawns `cmd` on the spawner thread, with the parent-death signal set.
pub(crate) fn spawn(cmd: Command) -> io::Result<Child> {
    let inbox = SPAWNER
        .get_or_init(start_thread)
        .as_ref()
        .ok_or_else(|| io::Error::other("could not start the testkit's spawner thread"))?;
    let (reply_to, reply) = mpsc::channel();
    inbox
        .send((cmd, reply_to))
        .map_err(|_| io::Error::other("the testkit's spawner thread is gone"))?;
    reply
        .recv()
        .map_err(|_| io::Error::other("the testkit's spawner thread did not answer"))?
}

fn start_thread() -> Option<mpsc::Sender<Request>> {
    let (inbox, requests) = mpsc::channel::<Request>();
    thread::Builder::new()
        .name("distlock-testkit-spawner".into())
        .spawn(move || {
            // Runs until the process exits: the sender lives in a static.
            for (mut cmd, reply_to) in requests {
                sys::kill_when_parent_dies(&mut cmd);
                // The requester may have given up; nothing to do then (the
                // Child's drop does not kill it, but PDEATHSIG still will).
                let _ = reply_to.send(cmd.spawn());
            }
        })
        .ok()?;
    Some(inbox)
}

//! [`run_bounded`]: runs a database's command-line client (`mariadb`, `psql`) to completion
//! within a time limit, killing it if it hangs.

use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use crate::sys::{self, Signal};

/// Runs `command` with no input, waiting at most `limit`; `Ok(stdout)` on success,
/// `Err(message with stderr)` otherwise. `what` names the client in messages.
pub(crate) fn run_bounded(mut command: Command, what: &str, limit: Duration) -> Result<String, String> {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {what}: {e}"))?;
    let pid = child.id();
    // Collect the output on a helper thread so a large result cannot fill the pipe while we
    // wait with a timeout.
    let (done, result) = mpsc::channel();
    thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let output = match result.recv_timeout(limit) {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Err(format!("running {what}: {e}")),
        Err(_) => {
            // The helper thread reaps it once it is dead.
            let _ = sys::send_signal(pid, Signal::Kill);
            return Err(format!("{what} hung for {limit:?}"));
        }
    };
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{what} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

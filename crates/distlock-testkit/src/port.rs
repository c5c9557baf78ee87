//! Picking free loopback ports.
//!
//! A port is handed out once per process, and once among every process on the machine that
//! uses the testkit: nextest runs each test in a process of its own, and a server killed for
//! a restart leaves its port free for the kernel to offer to another process. Each process
//! reserves its ports with a lock file per port (`<temp dir>/distlock-testkit-ports/<port>`,
//! an exclusive `flock`) that it holds until it ends, however it ends; the files stay, empty.

use std::collections::HashMap;
use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use crate::{sys, HarnessError};

/// Ports this process already handed out, with the lock file that reserves each against
/// other processes; never handed out twice, so servers started in parallel by one test
/// binary cannot collide.
static HANDED_OUT: Mutex<Option<HashMap<u16, File>>> = Mutex::new(None);

/// Returns a TCP port on 127.0.0.1 that was free a moment ago and that this
/// process has not handed out before.
///
/// The port is found by binding `127.0.0.1:0` and closing the socket again,
/// so another process may still take it before the server binds it; the
/// `start` functions detect "address already in use" and retry with fresh
/// ports.
pub fn free_port() -> Result<u16, HarnessError> {
    pick(bound_port)
}

/// A port the kernel gives to a socket bound to `127.0.0.1:0`, closed again.
fn bound_port() -> Result<u16, HarnessError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| HarnessError::io("binding 127.0.0.1:0 to find a free port", e))?;
    Ok(listener
        .local_addr()
        .map_err(|e| HarnessError::io("reading the address of a bound socket", e))?
        .port())
}

/// The first port `candidate` gives that no process using the testkit has handed out (this
/// one, or another still running), reserved for this process from then on.
fn pick(mut candidate: impl FnMut() -> Result<u16, HarnessError>) -> Result<u16, HarnessError> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    let handed_out = handed_out.get_or_insert_with(HashMap::new);
    for _ in 0..100 {
        let port = candidate()?;
        if handed_out.contains_key(&port) {
            continue;
        }
        if let Some(reservation) = reserve(port)? {
            handed_out.insert(port, reservation);
            return Ok(port);
        }
    }
    Err(HarnessError::Other(
        "could not find a free loopback port that no test process was handed before".into(),
    ))
}

/// The lock file reserving `port` for this process, or `None` if another process holds it.
fn reserve(port: u16) -> Result<Option<File>, HarnessError> {
    let dir = reservations();
    std::fs::create_dir_all(&dir).map_err(|e| HarnessError::io(format!("creating {}", dir.display()), e))?;
    let path = dir.join(port.to_string());
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| HarnessError::io(format!("opening {}", path.display()), e))?;
    match sys::try_lock_exclusive(&file) {
        Ok(true) => Ok(Some(file)),
        Ok(false) => Ok(None),
        Err(e) => Err(HarnessError::io(format!("locking {}", path.display()), e)),
    }
}

/// Where the lock files of the reserved ports are.
fn reservations() -> PathBuf {
    std::env::temp_dir().join("distlock-testkit-ports")
}

/// How many times a `start` function tries again with fresh ports when the
/// server reports that its address is in use.
const START_ATTEMPTS: usize = 4;

/// Runs `start` until it succeeds or fails for a reason other than a taken
/// port; `start` must pick fresh ports (and a fresh directory) each time.
pub(crate) fn retry_if_port_taken<T>(
    mut start: impl FnMut() -> Result<T, HarnessError>,
) -> Result<T, HarnessError> {
    let mut attempt = 1;
    loop {
        match start() {
            Err(e) if e.is_address_in_use() && attempt < START_ATTEMPTS => attempt += 1,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// Set in the child process, to the port its parent was handed.
    const PROBE: &str = "DISTLOCK_TESTKIT_PORT_PROBE";
    const NAME: &str = "port::tests::a_port_handed_to_one_process_is_not_handed_to_another";

    /// nextest runs every test in a process of its own: a port one test process was handed
    /// (whose server may be down for a restart) must not be handed to another, even when the
    /// kernel offers it again.
    #[test]
    fn a_port_handed_to_one_process_is_not_handed_to_another() {
        if let Some(theirs) = std::env::var_os(PROBE) {
            let theirs: u16 = theirs.to_string_lossy().parse().expect("a port");
            // The kernel offers the parent's port first, then any.
            let mut offers = std::iter::once(theirs);
            let port = pick(|| offers.next().map_or_else(bound_port, Ok)).expect("a port");
            println!("PICKED {port}");
            return;
        }
        let ours = free_port().expect("a port");
        let out = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env(PROBE, ours.to_string())
            .output()
            .expect("the test binary runs again");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let picked: u16 = stdout
            .lines()
            .find_map(|line| line.split_once("PICKED ").map(|(_, port)| port))
            .unwrap_or_else(|| {
                panic!(
                    "the child's report: {stdout}{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
            .trim()
            .parse()
            .expect("a port");
        assert_ne!(
            picked, ours,
            "another process was handed this process's port {ours}"
        );
    }
}

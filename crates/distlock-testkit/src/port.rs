//! Picking free loopback ports.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, PoisonError};

use crate::HarnessError;

/// Ports this process already handed out; never handed out twice, so
/// servers started in parallel by one test binary cannot collide.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// Returns a TCP port on 127.0.0.1 that was free a moment ago and that this
/// process has not handed out before.
///
/// The port is found by binding `127.0.0.1:0` and closing the socket again,
/// so another process may still take it before the server binds it; the
/// `start` functions detect "address already in use" and retry with fresh
/// ports.
pub fn free_port() -> Result<u16, HarnessError> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    for _ in 0..100 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| HarnessError::io("binding 127.0.0.1:0 to find a free port", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the address of a bound socket", e))?
            .port();
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
    Err(HarnessError::Other(
        "could not find a free loopback port that was not handed out before".into(),
    ))
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

//! Small raw-TCP exchanges: the readiness checks, and protocol pings for tests that need to
//! see a server answer (or not) without a client library.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// Connect/read/write timeout of one readiness probe.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// `127.0.0.1:port`.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// Connects to `addr`, sends `request` and reads until `done(reply so far)`
/// or the peer closes the connection. Every step is bounded by `timeout`.
pub fn exchange(
    addr: SocketAddr,
    request: &[u8],
    done: impl Fn(&[u8]) -> bool,
    timeout: Duration,
) -> io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(request)?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while !done(&reply) {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&chunk[..n]);
    }
    Ok(reply)
}

/// Sends `request` and checks that the one-line reply starts with `prefix` (a protocol ping,
/// such as `PING` -> `+PONG`).
pub(crate) fn expect_line(addr: SocketAddr, request: &[u8], prefix: &[u8]) -> Result<(), String> {
    let reply = exchange(addr, request, has_line, PROBE_TIMEOUT).map_err(|e| e.to_string())?;
    if reply.starts_with(prefix) {
        Ok(())
    } else {
        Err(format!(
            "{} answered {:?}",
            String::from_utf8_lossy(request).trim(),
            String::from_utf8_lossy(&reply)
        ))
    }
}

/// True once `reply` holds a complete line.
pub fn has_line(reply: &[u8]) -> bool {
    reply.ends_with(b"\r\n") || reply.ends_with(b"\n")
}

/// Reads the MySQL/MariaDB handshake greeting; `Ok(server version)` when
/// the server accepts connections, `Err(reason)` otherwise.
pub fn mysql_greeting(addr: SocketAddr, timeout: Duration) -> Result<String, String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let mut header = [0u8; 4];
    stream
        .read_exact(&mut header)
        .map_err(|e| format!("reading the greeting: {e}"))?;
    let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
    let mut payload = vec![0u8; len];
    stream
        .read_exact(&mut payload)
        .map_err(|e| format!("reading the greeting: {e}"))?;
    match payload.first() {
        // Protocol version 10, then the NUL-terminated server version.
        Some(10) => {
            let version = payload[1..].split(|&b| b == 0).next().unwrap_or_default();
            Ok(String::from_utf8_lossy(version).into_owned())
        }
        // Error packet: 0xff, 2-byte code, message.
        Some(0xff) => Err(format!(
            "server refused the connection: {}",
            String::from_utf8_lossy(payload.get(3..).unwrap_or_default())
        )),
        _ => Err("unexpected greeting packet".into()),
    }
}

/// Polls `found` every 50 ms until it gives a value, for up to `timeout`; then fails with
/// `what` and what `said` reports at that moment (each member's view, say).
pub(crate) fn poll<T>(
    timeout: Duration,
    what: &str,
    mut found: impl FnMut() -> Option<T>,
    said: impl Fn() -> Vec<String>,
) -> Result<T, crate::HarnessError> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(value) = found() {
            return Ok(value);
        }
        if std::time::Instant::now() >= deadline {
            return Err(crate::HarnessError::Other(format!(
                "{what} after {timeout:?} ({})",
                said().join(", ")
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

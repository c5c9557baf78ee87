//! Connections to one memcached server: a small pool, each connection bound to the server
//! process it reached.
//!
//! This module owns connection reuse and its limit; it may not retry a command (a retry on
//! another connection could land on a restarted server) and does not time operations out
//! (the caller bounds the whole operation, and dropping a checkout discards its connection).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::wire::{Conn, WireError};

/// One server of the configuration.
#[derive(Debug)]
pub(crate) struct Server {
    addr: String,
    idle: Mutex<Vec<Conn>>,
    slots: Arc<Semaphore>,
    max_idle: usize,
    connect_timeout: Duration,
}

/// A connection taken out of the pool. Dropping it closes the connection (the right thing
/// after an error or a cancelled exchange); [`Checkout::put_back`] keeps it for reuse.
#[derive(Debug)]
pub(crate) struct Checkout<'a> {
    server: &'a Server,
    conn: Conn,
    _slot: OwnedSemaphorePermit,
}

impl Server {
    pub(crate) fn new(addr: String, max_connections: usize, connect_timeout: Duration) -> Self {
        Self {
            addr,
            idle: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(max_connections)),
            max_idle: max_connections,
            connect_timeout,
        }
    }

    /// The address as configured (`host:port`).
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// An idle live connection, or a new one. Waits while all connections are busy.
    pub(crate) async fn checkout(&self) -> Result<Checkout<'_>, WireError> {
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| WireError::Protocol("the connection pool is closed".to_owned()))?;
        loop {
            let conn = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
            match conn {
                Some(conn) if conn.is_reusable() => {
                    return Ok(Checkout {
                        server: self,
                        conn,
                        _slot: slot,
                    })
                }
                Some(_) => continue, // closed by the server (a restart): drop it
                None => break,
            }
        }
        let conn = tokio::time::timeout(self.connect_timeout, Conn::open(&self.addr))
            .await
            .map_err(|_| {
                WireError::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("connecting to {} timed out", self.addr),
                ))
            })??;
        Ok(Checkout {
            server: self,
            conn,
            _slot: slot,
        })
    }
}

impl Checkout<'_> {
    pub(crate) fn conn(&mut self) -> &mut Conn {
        &mut self.conn
    }

    /// Returns the connection to the pool (only after a complete, clean exchange).
    pub(crate) fn put_back(self) {
        let mut idle = self.server.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.server.max_idle {
            idle.push(self.conn);
        }
    }
}

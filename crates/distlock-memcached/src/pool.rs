//! Connections to one memcached server: a small pool, each connection bound to the server
//! process it reached, and the check that one address reaches one process.
//!
//! This module owns connection reuse and its limit; it may not retry a command (a retry on
//! another connection could land on a restarted server) and does not time operations out
//! (the caller bounds the whole operation, and dropping a checkout discards its connection).
//!
//! # One address, one process
//!
//! Locks live in one server process. Several processes behind one address (a TCP load
//! balancer, a proxy that spreads connections) each hold their own items, so two clients
//! could hold one lock at once. The pool sees it when its live connections disagree on the
//! server's identity: a connection whose identity differs from the latest one seen reads the
//! identity item again (one round trip, only then). If its server still holds the identity
//! the connection was opened with, two processes answer at this address at once (a restart
//! would have closed the connection, and a process whose identity item was replaced reads
//! the new one): every later checkout is refused with [`WireError::Unusable`]. Otherwise the
//! stale connection is closed. A pool that never has two connections open at once cannot
//! see a second process; nor can clients each reaching only one.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::wire::{Conn, Epoch, WireError};

/// One server of the configuration.
#[derive(Debug)]
pub(crate) struct Server {
    addr: String,
    idle: Mutex<Vec<Conn>>,
    slots: Arc<Semaphore>,
    max_idle: usize,
    connect_timeout: Duration,
    /// The identity of the latest connection opened (or confirmed).
    latest: Mutex<Option<Epoch>>,
    /// Why the address is refused, once several processes were seen behind it.
    split: OnceLock<String>,
}

/// A connection taken out of the pool. Dropping it closes the connection (the right thing
/// after an error or a cancelled exchange); [`Checkout::put_back`] keeps it for reuse.
#[derive(Debug)]
pub(crate) struct Checkout<'a> {
    server: &'a Server,
    conn: Conn,
    _slot: OwnedSemaphorePermit,
    /// When the wait for a free slot ended: what follows (opening or checking a connection,
    /// the exchange) is the server's part of a round trip.
    granted_at: Instant,
}

impl Server {
    pub(crate) fn new(addr: String, max_connections: usize, connect_timeout: Duration) -> Self {
        Self {
            addr,
            idle: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(max_connections)),
            max_idle: max_connections,
            connect_timeout,
            latest: Mutex::new(None),
            split: OnceLock::new(),
        }
    }

    /// The address as configured (`host:port`).
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// An idle live connection, or a new one. Waits while all connections are busy.
    /// Refused ([`WireError::Unusable`]) once several server processes were seen at this
    /// address (see the module's docs).
    pub(crate) async fn checkout(&self) -> Result<Checkout<'_>, WireError> {
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| WireError::Protocol("the connection pool is closed".to_owned()))?;
        let granted_at = Instant::now();
        loop {
            if let Some(why) = self.split.get() {
                return Err(WireError::Unusable(why.clone()));
            }
            let conn = match self.take_idle(|_| true) {
                Some(conn) => {
                    let Some(conn) = self.idle_agrees(conn).await? else {
                        continue; // stale: closed
                    };
                    conn
                }
                None => self.open_agreeing().await?,
            };
            return Ok(Checkout {
                server: self,
                conn,
                _slot: slot,
                granted_at,
            });
        }
    }

    /// The most recently returned idle connection that is still open and `wanted`; closed
    /// ones met on the way are dropped (a restart closes them).
    fn take_idle(&self, wanted: impl Fn(Epoch) -> bool) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            let at = idle.iter().rposition(|conn| wanted(conn.epoch()))?;
            let conn = idle.remove(at);
            if conn.is_reusable() {
                return Some(conn);
            }
        }
    }

    /// A new connection. If it reaches another identity than the latest, an idle connection
    /// of the latest identity, if one is open, must now read the new one (one process whose
    /// identity item was replaced), or two processes answer here.
    async fn open_agreeing(&self) -> Result<Conn, WireError> {
        let conn = tokio::time::timeout(self.connect_timeout, Conn::open(&self.addr))
            .await
            .map_err(|_| {
                WireError::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("connecting to {} timed out", self.addr),
                ))
            })??;
        let latest = self.latest_epoch();
        if latest.is_some_and(|latest| latest != conn.epoch()) {
            if let Some(mut older) = self.take_idle(|epoch| Some(epoch) == latest) {
                let older_epoch = older.epoch();
                if still_holds(&mut older, older_epoch).await {
                    return Err(self.refuse(older_epoch, conn.epoch()));
                }
                // Dropped: its identity is stale.
            }
        }
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner) = Some(conn.epoch());
        Ok(conn)
    }

    /// An idle connection whose identity is the latest, or `None` (then it was closed) if
    /// its server now reads another identity. If its server still holds the identity the
    /// connection was opened with while a later connection saw another, two processes
    /// answer here.
    async fn idle_agrees(&self, mut conn: Conn) -> Result<Option<Conn>, WireError> {
        let Some(latest) = self.latest_epoch().filter(|latest| *latest != conn.epoch()) else {
            return Ok(Some(conn));
        };
        let own = conn.epoch();
        if still_holds(&mut conn, own).await {
            return Err(self.refuse(own, latest));
        }
        Ok(None)
    }

    fn latest_epoch(&self) -> Option<Epoch> {
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses this address from now on: live connections reached two processes.
    fn refuse(&self, one: Epoch, other: Epoch) -> WireError {
        let why = self.split.get_or_init(|| {
            format!(
                "several memcached processes answer at {} (live connections reach server \
                 identities {:032x} and {:032x} at once, as behind a load balancer): each \
                 would hold its own locks, so two clients could hold one lock at once; give \
                 each memcached server's own address instead",
                self.addr, one.nonce, other.nonce
            )
        });
        tracing::error!("{why}");
        WireError::Unusable(why.clone())
    }
}

/// Whether `conn`'s server still holds `identity` (a failed read says no: the connection is
/// then dropped, and nothing is concluded from it).
async fn still_holds(conn: &mut Conn, identity: Epoch) -> bool {
    matches!(conn.read_identity().await, Ok(Some(nonce)) if nonce == identity.nonce)
}

impl Checkout<'_> {
    pub(crate) fn conn(&mut self) -> &mut Conn {
        &mut self.conn
    }

    /// When this checkout stopped waiting for a free slot (before any connection was opened
    /// or checked for it).
    pub(crate) fn granted_at(&self) -> Instant {
        self.granted_at
    }

    /// Returns the connection to the pool (only after a complete, clean exchange).
    pub(crate) fn put_back(self) {
        let mut idle = self.server.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.server.max_idle {
            idle.push(self.conn);
        }
    }
}

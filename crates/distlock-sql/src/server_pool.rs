//! The connection pool of the server databases (MySQL / MariaDB, PostgreSQL):
//! [`ServerConnections`], a pool of sqlx connections kept by deadpool, so that a lock operation
//! is exactly one round trip to the server. What a new connection runs first is the
//! dialect's ([`Dial`]: `mysql_pool.rs`, `pg_pool.rs`).
//!
//! sqlx's own pool pings every connection handed back to it: a second round trip per
//! operation, which the server pays for, and during which the connection is not available to
//! the next operation. Here a connection goes back to the pool as soon as its statement's
//! answer arrived, with no check (the [`Checkout`](crate::checkout::Checkout) rule already
//! closes any connection whose statement was cut or whose answer was not clean), and only a
//! connection idle for over [`IDLE_CHECK`] is pinged before its next statement. The
//! connection handed back last is lent out first, so a light load keeps reusing one
//! connection that never idles long enough to need a ping.
//!
//! Like sqlx's pool before it, this one connects lazily (no connection until the first
//! statement), holds at most `max_connections`, retries a connection refused while the server
//! restarts until the operation's deadline, and closes connections idle for
//! [`IDLE_TIMEOUT`] or older than [`MAX_LIFETIME`].

use std::future::Future;
use std::time::Duration;

use deadpool::managed::{self, Metrics, Object, PoolError, RecycleError, RecycleResult};
use distlock_core::{Error, Result};
use sqlx::Connection;
use tokio::time::Instant;

use crate::checkout::{ConnectionPool, PooledConnection};

/// A pooled connection idle for longer than this is pinged before its next statement: long
/// enough that a lock renewed every few seconds never pays for a ping (a second round trip
/// that a slow network may not fit in the operation timeout), short enough to catch
/// connections that a load balancer's or the server's idle timeout closed.
const IDLE_CHECK: Duration = Duration::from_secs(30);
/// A connection idle for this long is closed (sqlx's default, kept).
const IDLE_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// A connection this old is closed once idle, and never lent out again (sqlx's default, kept).
const MAX_LIFETIME: Duration = Duration::from_secs(30 * 60);
/// How often idle connections are looked at for [`IDLE_TIMEOUT`] and [`MAX_LIFETIME`].
const REAP_EVERY: Duration = Duration::from_secs(60);
/// The bound on closing a connection politely (`COM_QUIT`, `Terminate`) when it is retired.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// The first and the longest pause between connection attempts a restarting server refused.
const CONNECT_RETRY_FIRST: Duration = Duration::from_millis(10);
const CONNECT_RETRY_MAX: Duration = Duration::from_millis(250);

/// How one dialect opens a connection ready for the lock's statements.
pub(crate) trait Dial: Send + Sync + 'static {
    /// The sqlx connection.
    type Conn: Connection + Send + 'static;

    /// Connects and sets the session up; a connection whose set-up failed is dropped.
    fn open(&self) -> impl Future<Output = Result<Self::Conn, sqlx::Error>> + Send;
}

/// Connections for [`SqlLock`](crate::SqlLock): at most `max_connections`, opened on demand
/// by `D` (see [`Dial`]).
pub(crate) struct ServerConnections<D: Dial> {
    pool: managed::Pool<Manager<D>>,
}

/// A connection of the pool, with the moment it was last handed back.
pub(crate) struct Pooled<C> {
    conn: C,
    idle_since: Instant,
}

impl<D: Dial> ServerConnections<D> {
    /// A pool of at most `max_connections` connections opened by `dial`, none opened yet.
    /// Within a Tokio runtime, a background task closes connections idle for
    /// [`IDLE_TIMEOUT`] or older than [`MAX_LIFETIME`].
    pub(crate) fn new(dial: D, max_connections: u32) -> Result<Self> {
        let max_size = usize::try_from(max_connections).unwrap_or(usize::MAX).max(1);
        let pool = managed::Pool::builder(Manager { dial })
            .max_size(max_size)
            // The connection handed back last is lent out first: a steady trickle of
            // operations (a lock renewed every 10 s) keeps reusing one connection, which stays
            // under IDLE_CHECK and is never pinged, while the ones a burst opened idle out and
            // close. Taken in turn (first in, first out), eight connections would each sit
            // idle for 80 s between statements and be pinged before every one.
            .queue_mode(managed::QueueMode::Lifo)
            .build()
            .map_err(|e| Error::invalid_config(format!("the connection pool: {e}")))?;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(reap(pool.weak()));
        }
        Ok(Self { pool })
    }

    /// Closes every idle connection (politely, each within [`CLOSE_TIMEOUT`]) and the pool:
    /// later checkouts fail with [`sqlx::Error::PoolClosed`], and connections in use are
    /// closed when handed back.
    pub(crate) async fn close(&self) {
        let idle = self.pool.retain(|_, _| false).removed;
        self.pool.close();
        for pooled in idle {
            close_politely(pooled).await;
        }
    }
}

impl<D: Dial> ConnectionPool for ServerConnections<D> {
    type Pooled = Object<Manager<D>>;

    /// A connection; a server refusing connections (restarting) is tried again with backoff
    /// while the next attempt can start before `deadline`, then its error is returned.
    async fn checkout(&self, deadline: Instant) -> Result<Self::Pooled, sqlx::Error> {
        let mut pause = CONNECT_RETRY_FIRST;
        loop {
            match self.pool.get().await {
                Ok(pooled) => return Ok(pooled),
                Err(PoolError::Backend(e)) if is_restarting(&e) && Instant::now() + pause < deadline => {
                    tracing::debug!(error = %e, "distlock-sql: connecting failed, trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(CONNECT_RETRY_MAX);
                }
                Err(e) => return Err(pool_error(e)),
            }
        }
    }
}

impl<D: Dial> PooledConnection for Object<Manager<D>> {
    type Connection = D::Conn;

    fn connection(&mut self) -> &mut D::Conn {
        &mut self.conn
    }

    fn give_back(mut self) {
        self.idle_since = Instant::now();
        drop(self);
    }

    fn discard(self) {
        drop(Object::take(self));
    }
}

/// Opens and checks connections for deadpool.
pub(crate) struct Manager<D> {
    dial: D,
}

impl<D: Dial> managed::Manager for Manager<D> {
    type Type = Pooled<D::Conn>;
    type Error = sqlx::Error;

    /// Connects and sets the session up ([`Dial::open`]).
    async fn create(&self) -> Result<Pooled<D::Conn>, sqlx::Error> {
        let conn = self.dial.open().await?;
        Ok(Pooled {
            conn,
            idle_since: Instant::now(),
        })
    }

    /// A connection idle for less than [`IDLE_CHECK`] is lent out as it is, with no round
    /// trip; one idle for longer must answer a ping first. One past [`MAX_LIFETIME`] is not
    /// lent out again. A refused connection is dropped and the pool tries the next or opens
    /// a new one.
    async fn recycle(&self, pooled: &mut Pooled<D::Conn>, metrics: &Metrics) -> RecycleResult<sqlx::Error> {
        if metrics.age() >= MAX_LIFETIME {
            return Err(RecycleError::message("past its lifetime"));
        }
        if pooled.idle_since.elapsed() < IDLE_CHECK {
            return Ok(());
        }
        pooled.conn.ping().await.map_err(RecycleError::Backend)
    }
}

/// Every [`REAP_EVERY`], closes the idle connections that were idle for [`IDLE_TIMEOUT`] or
/// are older than [`MAX_LIFETIME`]; ends when the pool is closed or dropped.
async fn reap<D: Dial>(pool: managed::WeakPool<Manager<D>>) {
    loop {
        tokio::time::sleep(REAP_EVERY).await;
        let Some(pool) = pool.upgrade() else { return };
        if pool.is_closed() {
            return;
        }
        let retired = pool
            .retain(|pooled, metrics| {
                pooled.idle_since.elapsed() < IDLE_TIMEOUT && metrics.age() < MAX_LIFETIME
            })
            .removed;
        drop(pool);
        for pooled in retired {
            close_politely(pooled).await;
        }
    }
}

/// Says goodbye to the server, within [`CLOSE_TIMEOUT`].
async fn close_politely<C: Connection>(pooled: Pooled<C>) {
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, pooled.conn.close()).await;
}

/// A connection attempt that failed because the server is not accepting connections yet
/// (starting or restarting) or dropped the new one: worth another try.
fn is_restarting(error: &sqlx::Error) -> bool {
    use std::io::ErrorKind;
    if let sqlx::Error::Database(db) = error {
        // PostgreSQL's cannot_connect_now: the server is starting up or shutting down.
        return db.code().as_deref() == Some("57P03");
    }
    let sqlx::Error::Io(e) = error else {
        return false;
    };
    matches!(
        e.kind(),
        ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::UnexpectedEof
            | ErrorKind::BrokenPipe
    )
}

/// A pool failure as the sqlx error the rest of the backend classifies.
fn pool_error(error: PoolError<sqlx::Error>) -> sqlx::Error {
    match error {
        PoolError::Backend(e) => e,
        PoolError::Closed => sqlx::Error::PoolClosed,
        // No pool timeouts are configured: the operation's deadline bounds the wait.
        PoolError::Timeout(_) | PoolError::NoRuntimeSpecified => sqlx::Error::PoolTimedOut,
        PoolError::PostCreateHook(e) => sqlx::Error::Protocol(e.to_string()),
    }
}

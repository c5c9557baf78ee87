//! The MySQL / MariaDB connection pool: [`MySqlConnections`], a pool of sqlx connections
//! kept by deadpool, so that a lock operation is exactly one round trip to the server.
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

use std::time::Duration;

use deadpool::managed::{self, Metrics, Object, PoolError, RecycleError, RecycleResult};
use distlock_core::{Error, Result};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Connection, Executor};
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
/// The bound on closing a connection politely (`COM_QUIT`) when it is retired.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// The first and the longest pause between connection attempts a restarting server refused.
const CONNECT_RETRY_FIRST: Duration = Duration::from_millis(10);
const CONNECT_RETRY_MAX: Duration = Duration::from_millis(250);

/// MySQL connections for [`SqlLock`](crate::SqlLock): at most `max_connections`, opened on
/// demand with the session set up for the lock's statements (see [`Session`]).
pub(crate) struct MySqlConnections {
    pool: managed::Pool<Manager>,
}

/// A connection of the pool, with the moment it was last handed back.
pub(crate) struct PooledMySql {
    conn: MySqlConnection,
    idle_since: Instant,
}

/// What every new connection runs before its first statement.
pub(crate) struct Session {
    /// `SET SESSION` statements bounding every statement on the server (see
    /// [`session_limits`]): MariaDB's, then MySQL's if the server does not know the first.
    pub(crate) limits: (String, String),
    /// Statements prepared at connect, so that none costs a second round trip the first time
    /// it runs on this connection (a renewal through a slow network, the first release after
    /// a long hold).
    pub(crate) warm: Vec<String>,
}

impl MySqlConnections {
    /// A pool of at most `max_connections` connections to `options`, none opened yet. Within a
    /// Tokio runtime, a background task closes connections idle for [`IDLE_TIMEOUT`] or older
    /// than [`MAX_LIFETIME`].
    pub(crate) fn new(options: MySqlConnectOptions, max_connections: u32, session: Session) -> Result<Self> {
        let manager = Manager { options, session };
        let max_size = usize::try_from(max_connections).unwrap_or(usize::MAX).max(1);
        let pool = managed::Pool::builder(manager)
            .max_size(max_size)
            // The connection handed back last is lent out first: a steady trickle of
            // operations (a lock renewed every 10 s) keeps reusing one connection, which stays
            // under IDLE_CHECK and is never pinged, while the ones a burst opened idle out and
            // close. Taken in turn (first in, first out), eight connections would each sit
            // idle for 80 s between statements and be pinged before every one.
            .queue_mode(managed::QueueMode::Lifo)
            .build()
            .map_err(|e| Error::invalid_config(format!("the MySQL connection pool: {e}")))?;
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

impl ConnectionPool for MySqlConnections {
    type Pooled = Object<Manager>;

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

impl PooledConnection for Object<Manager> {
    type Connection = MySqlConnection;

    fn connection(&mut self) -> &mut MySqlConnection {
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
pub(crate) struct Manager {
    options: MySqlConnectOptions,
    session: Session,
}

impl managed::Manager for Manager {
    type Type = PooledMySql;
    type Error = sqlx::Error;

    /// Connects and sets the session up ([`Session`]); a connection whose set-up failed is
    /// dropped.
    async fn create(&self) -> Result<PooledMySql, sqlx::Error> {
        let mut conn = self.options.connect().await?;
        set_up(&mut conn, &self.session).await?;
        Ok(PooledMySql {
            conn,
            idle_since: Instant::now(),
        })
    }

    /// A connection idle for less than [`IDLE_CHECK`] is lent out as it is, with no round
    /// trip; one idle for longer must answer a ping first. One past [`MAX_LIFETIME`] is not
    /// lent out again. A refused connection is dropped and the pool tries the next or opens
    /// a new one.
    async fn recycle(&self, pooled: &mut PooledMySql, metrics: &Metrics) -> RecycleResult<sqlx::Error> {
        if metrics.age() >= MAX_LIFETIME {
            return Err(RecycleError::message("past its lifetime"));
        }
        if pooled.idle_since.elapsed() < IDLE_CHECK {
            return Ok(());
        }
        pooled.conn.ping().await.map_err(RecycleError::Backend)
    }
}

/// Bounds every statement of the session on the server and prepares the lock's statements.
async fn set_up(conn: &mut MySqlConnection, session: &Session) -> Result<(), sqlx::Error> {
    let (mariadb, mysql) = &session.limits;
    match conn.execute(mariadb.as_str()).await {
        Ok(_) => {}
        // ER_UNKNOWN_SYSTEM_VARIABLE: MySQL, without max_statement_time.
        Err(e) if mysql_error_number(&e) == Some(1193) => {
            conn.execute(mysql.as_str()).await?;
        }
        Err(e) => return Err(e),
    }
    for statement in &session.warm {
        // Best effort: before the table exists (the very first connection) it fails, and the
        // statement is prepared when first run.
        if let Err(e) = conn.prepare(statement.as_str()).await {
            if matches!(e, sqlx::Error::Io(_)) {
                return Err(e);
            }
            tracing::debug!(error = %e, "distlock-sql: preparing at connect");
        }
    }
    Ok(())
}

/// Every [`REAP_EVERY`], closes the idle connections that were idle for [`IDLE_TIMEOUT`] or
/// are older than [`MAX_LIFETIME`]; ends when the pool is closed or dropped.
async fn reap(pool: managed::WeakPool<Manager>) {
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

/// Says goodbye to the server (`COM_QUIT`), within [`CLOSE_TIMEOUT`].
async fn close_politely(pooled: PooledMySql) {
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, pooled.conn.close()).await;
}

/// A connection attempt that failed because the server is not accepting connections yet
/// (starting or restarting) or dropped the new one: worth another try.
fn is_restarting(error: &sqlx::Error) -> bool {
    use std::io::ErrorKind;
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

/// The statements that bound every statement of a MySQL session by `limit` on the server
/// (run when a connection opens): a statement blocked on a row lock (an operator's
/// `SELECT ... FOR UPDATE`) or on a metadata lock (DDL) is rolled back by the server before
/// the operation times out on the client, instead of committing after the caller was told it
/// failed. MariaDB: `max_statement_time` (any statement, µs precision) plus the two lock waits
/// in whole seconds (0: do not wait). The second statement is for MySQL, which has no time
/// limit for writes and accepts lock waits from 1 s.
pub(crate) fn session_limits(limit: Duration) -> (String, String) {
    let wait = limit.as_secs();
    let mariadb = format!(
        "SET SESSION max_statement_time = {:.6}, innodb_lock_wait_timeout = {wait}, \
         lock_wait_timeout = {wait}",
        limit.as_secs_f64()
    );
    let wait = wait.max(1);
    let mysql = format!("SET SESSION innodb_lock_wait_timeout = {wait}, lock_wait_timeout = {wait}");
    (mariadb, mysql)
}

/// The server's error number of a MySQL error.
fn mysql_error_number(error: &sqlx::Error) -> Option<u16> {
    let sqlx::Error::Database(db) = error else {
        return None;
    };
    db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .map(sqlx::mysql::MySqlDatabaseError::number)
}

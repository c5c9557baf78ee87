//! One connection out of a pool for one statement, whatever the pool: MySQL's own pool
//! (`mysql_pool.rs`) or sqlx's SQLite pool. [`Checkout`] holds the rule every statement
//! follows: a connection goes back to its pool only once its statement completed.

use std::future::Future;

use tokio::time::Instant;

/// A pool that lends out one connection at a time.
pub(crate) trait ConnectionPool: Sync {
    /// A connection checked out of this pool.
    type Pooled: PooledConnection;

    /// A connection: an idle one, or a new one while the pool is below its size, else the
    /// first one handed back. The caller bounds the wait; `deadline` is the operation's, for
    /// the pool's own retries (a server refusing connections while it restarts).
    fn checkout(&self, deadline: Instant) -> impl Future<Output = Result<Self::Pooled, sqlx::Error>> + Send;
}

/// A connection checked out of a [`ConnectionPool`].
pub(crate) trait PooledConnection: Send {
    /// The database connection itself.
    type Connection;

    /// The connection, to run a statement on.
    fn connection(&mut self) -> &mut Self::Connection;

    /// Hands the connection back to its pool, ready for the next statement.
    fn give_back(self);

    /// Closes the connection and frees its place in the pool.
    fn discard(self);
}

/// A pooled connection for one statement. It goes back to the pool only through
/// [`finish`](Self::finish), once its statement completed with an answer that leaves the
/// connection usable. Dropped before that (the operation timed out, or its future was
/// dropped, mid-statement) it is closed and its place in the pool freed, never returned:
/// the next statement on it would first have to read the cut statement's answer (waiting for
/// it up to the statement limit, while holding a pool slot) or find the stream cut
/// mid-packet, and a few such timeouts would tie up the whole pool.
pub(crate) struct Checkout<P: PooledConnection>(Option<P>);

impl<P: PooledConnection> Checkout<P> {
    /// Takes charge of `pooled` for one statement.
    pub(crate) fn new(pooled: P) -> Self {
        Self(Some(pooled))
    }

    /// The connection to run the statement on.
    pub(crate) fn conn(&mut self) -> Result<&mut P::Connection, sqlx::Error> {
        self.0
            .as_mut()
            .map(PooledConnection::connection)
            .ok_or(sqlx::Error::PoolClosed)
    }

    /// The statement completed: hands the connection back if `reusable` (the server answered
    /// and the session is alive), else closes it.
    pub(crate) fn finish(mut self, reusable: bool) {
        if let Some(pooled) = self.0.take() {
            if reusable {
                pooled.give_back();
            } else {
                pooled.discard();
            }
        }
    }
}

impl<P: PooledConnection> Drop for Checkout<P> {
    fn drop(&mut self) {
        if let Some(pooled) = self.0.take() {
            pooled.discard();
        }
    }
}

/// SQLite stays on sqlx's pool: the check it runs on every connection handed back (a ping)
/// is a call to the connection's worker thread in this process, with no network and no
/// server, and it runs after the answer reached the caller.
#[cfg(feature = "sqlite")]
impl ConnectionPool for sqlx::SqlitePool {
    type Pooled = sqlx::pool::PoolConnection<sqlx::Sqlite>;

    fn checkout(&self, _deadline: Instant) -> impl Future<Output = Result<Self::Pooled, sqlx::Error>> + Send {
        // The pool's own acquire timeout is the operation timeout.
        self.acquire()
    }
}

#[cfg(feature = "sqlite")]
impl PooledConnection for sqlx::pool::PoolConnection<sqlx::Sqlite> {
    type Connection = sqlx::SqliteConnection;

    fn connection(&mut self) -> &mut sqlx::SqliteConnection {
        self
    }

    fn give_back(self) {
        drop(self);
    }

    fn discard(self) {
        drop(self.detach());
    }
}

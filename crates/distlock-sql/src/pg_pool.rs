//! The PostgreSQL side of the server pool (`server_pool.rs`): how a new connection is opened
//! ([`PgDial`]). Its session's time limits travel in the startup packet (`options`), so
//! setting them costs no round trip; the lock's statements are then prepared.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Executor};

use crate::server_pool::{Dial, ServerConnections};

/// PostgreSQL connections for [`SqlLock`](crate::SqlLock).
pub(crate) type PgConnections = ServerConnections<PgDial>;

/// Opens PostgreSQL connections with the session's limits, then prepares `warm`.
pub(crate) struct PgDial {
    pub(crate) options: PgConnectOptions,
    /// Statements prepared at connect, so that none costs a second round trip (sqlx's parse
    /// and describe) the first time it runs on this connection.
    pub(crate) warm: Vec<String>,
}

impl PgDial {
    /// Connections to `options` whose every statement the server bounds by `limit`: see
    /// [`session_options`].
    pub(crate) fn new(options: &PgConnectOptions, limit: Duration, warm: Vec<String>) -> Self {
        Self {
            options: session_options(options, limit),
            warm,
        }
    }
}

impl Dial for PgDial {
    type Conn = PgConnection;

    async fn open(&self) -> Result<PgConnection, sqlx::Error> {
        let mut conn = self.options.connect().await?;
        for statement in &self.warm {
            // Best effort: before the tables exist (the very first connection) it fails, and
            // the statement is prepared when first run.
            if let Err(e) = conn.prepare(statement.as_str()).await {
                if matches!(e, sqlx::Error::Io(_)) {
                    return Err(e);
                }
                tracing::debug!(error = %e, "distlock-sql: preparing at connect");
            }
        }
        Ok(conn)
    }
}

/// `options` with the session settings that bound every statement by `limit` on the server:
/// `statement_timeout` (any statement, including one waiting for a row lock: the server
/// cancels and rolls it back) and `lock_timeout`, in whole milliseconds (at least 1, since 0
/// would mean "no limit"). A statement blocked by an operator's `SELECT ... FOR UPDATE` or by
/// DDL therefore fails on the server, changing nothing, before the operation times out on
/// the client. An `options` parameter of the URL is kept; these are added after it.
///
/// Also `default_transaction_isolation` READ COMMITTED, which the functions and statements
/// rely on whatever the database's or role's default: a release reads the queue of waiters,
/// and an attempt at a hold counts the holds, in a statement of their own after taking the
/// lock's row, which sees what committed while they waited for it only under READ COMMITTED
/// (under REPEATABLE READ or SERIALIZABLE the snapshot is the call's, taken before the wait:
/// a waiter queued meanwhile would not be woken). Options of the startup packet take
/// precedence over `ALTER DATABASE` and `ALTER ROLE` settings.
pub(crate) fn session_options(options: &PgConnectOptions, limit: Duration) -> PgConnectOptions {
    let ms = limit.as_millis().clamp(1, u128::from(u32::MAX)).to_string();
    options.clone().options([
        ("statement_timeout", ms.as_str()),
        ("lock_timeout", ms.as_str()),
        // The space is escaped: options are separated by spaces.
        ("default_transaction_isolation", "read\\ committed"),
    ])
}

/// The tables (and the attempt's function) created in one transaction under an advisory lock
/// named after `table`: concurrent `CREATE TABLE IF NOT EXISTS` of one table can fail on
/// PostgreSQL (a duplicate key in `pg_type`), so clients starting at once take turns. One
/// simple query, so one round trip.
pub(crate) fn ddl_transaction(table: &str, statements: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("distlock-sql create {table}").as_bytes());
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest[..8]);
    let id = i64::from_be_bytes(id);
    let mut sql = format!("BEGIN;\nSELECT pg_advisory_xact_lock({id});\n");
    for statement in statements {
        sql.push_str(statement);
        sql.push_str(";\n");
    }
    sql.push_str("COMMIT");
    sql
}

//! The MySQL / MariaDB side of the server pool (`server_pool.rs`): how a new connection is
//! opened and its session set up ([`MySqlDial`]), and the session's time limits.

use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Executor};

use crate::server_pool::{Dial, ServerConnections};

/// MySQL connections for [`SqlLock`](crate::SqlLock).
pub(crate) type MySqlConnections = ServerConnections<MySqlDial>;

/// Opens MySQL connections: connect, then set the [`Session`] up.
pub(crate) struct MySqlDial {
    pub(crate) options: MySqlConnectOptions,
    pub(crate) session: Session,
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

impl Dial for MySqlDial {
    type Conn = MySqlConnection;

    async fn open(&self) -> Result<MySqlConnection, sqlx::Error> {
        let mut conn = self.options.connect().await?;
        set_up(&mut conn, &self.session).await?;
        Ok(conn)
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

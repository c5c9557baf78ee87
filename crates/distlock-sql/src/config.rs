//! [`SqlConfig`]: which database to use (a URL or the embedded SQLite default), the table, and
//! the bounds every operation runs within. It owns parsing and validation; it opens nothing
//! until [`SqlConfig::build`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use distlock_core::{Error, Result};

use crate::sql::Dialect;
use crate::SqlLock;

/// The table used unless [`SqlConfig::with_table`] names another.
pub const DEFAULT_TABLE: &str = "distlock_locks";
/// How long one operation (all its statements and retries) may take by default.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(5);
/// The default size of each client's connection pool.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 8;
/// How long rows must be idle before a client's automatic purge deletes them: a day.
pub const DEFAULT_PURGE_AFTER: Duration = Duration::from_secs(24 * 3600);
/// The longest table name accepted (MySQL's identifier limit).
const MAX_TABLE_LEN: usize = 64;
/// The longest table name on PostgreSQL, whose identifiers stop at 63 bytes (longer ones are
/// cut silently, so two long names could meet).
#[cfg(feature = "postgres")]
const MAX_PG_TABLE_LEN: usize = 63;

/// How to reach the lock table: the database, the table name, and the time bounds.
///
/// Build it from a URL with [`SqlConfig::from_url`] (`mysql://user:pass@host:port/db`,
/// `mariadb://...`, `postgres://user:pass@host:port/db`, `postgresql://...` or
/// `sqlite://path/to/file.db`), from a file with [`SqlConfig::sqlite`], or
/// use [`SqlConfig::embedded_default`]. `Debug` never shows the password.
///
/// ```
/// use distlock_sql::SqlConfig;
/// use std::time::Duration;
///
/// let config = SqlConfig::from_url("mysql://app:secret@127.0.0.1:3306/app")?
///     .with_table("app_locks")?
///     .with_operation_timeout(Duration::from_secs(2))
///     .with_max_connections(4);
/// assert!(!format!("{config:?}").contains("secret"));
/// assert!(SqlConfig::from_url("ftp://nope").is_err());
/// assert!(SqlConfig::from_url("").is_err());
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Clone)]
pub struct SqlConfig {
    pub(crate) target: Target,
    pub(crate) table: String,
    pub(crate) operation_timeout: Duration,
    pub(crate) max_connections: u32,
    pub(crate) create_table: bool,
    pub(crate) notifications: bool,
    pub(crate) purge_after: Option<Duration>,
}

/// The database a config points at.
#[derive(Clone)]
pub(crate) enum Target {
    #[cfg(feature = "mysql")]
    MySql {
        options: Box<sqlx::mysql::MySqlConnectOptions>,
        /// The URL with the password replaced, for `Debug` and errors.
        redacted: String,
    },
    #[cfg(feature = "postgres")]
    Postgres {
        options: Box<sqlx::postgres::PgConnectOptions>,
        /// The URL with the password replaced, for `Debug` and errors.
        redacted: String,
    },
    #[cfg(feature = "sqlite")]
    Sqlite { path: PathBuf },
}

impl SqlConfig {
    /// Parses a connection URL: `mysql://user:pass@host:port/db` (also `mariadb://`),
    /// `postgres://user:pass@host:port/db` (also `postgresql://`; query parameters as libpq's,
    /// such as `?application_name=jobs`) or `sqlite://path/to/file.db` (relative; `sqlite:///abs/path.db` for an absolute path;
    /// the file and its directory are created if missing).
    ///
    /// TLS (rustls, no OpenSSL) is as the URL asks, with sqlx's parameters: MySQL
    /// `?ssl-mode=verify_identity&ssl-ca=/path/ca.pem` (also `disabled`, `preferred`,
    /// `required`, `verify_ca`; `ssl-cert` and `ssl-key` for a client certificate),
    /// PostgreSQL `?sslmode=verify-full&sslrootcert=/path/ca.pem` (also `disable`, `prefer`,
    /// `require`, `verify-ca`; `sslcert`, `sslkey`; or `PGSSLMODE`). Without a mode, TLS is
    /// off (no round trip spent asking for it). Without a CA file the system's roots verify
    /// the server. `preferred`/`prefer` and `required`/`require` do not verify the server's
    /// certificate: use the `verify` modes where the network is not trusted.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a malformed URL, an unknown scheme, or a scheme whose cargo
    /// feature (`mysql`, `postgres`, `sqlite`) is off.
    pub fn from_url(url: &str) -> Result<Self> {
        let url = url.trim();
        let Some((scheme, rest)) = url.split_once(':') else {
            return Err(Error::invalid_config(format!(
                "{url:?} is not a URL; expected mysql://user:pass@host:port/db, \
                 postgres://user:pass@host:port/db or sqlite://path/to/file.db"
            )));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "mysql" | "mariadb" => Self::mysql_url(rest),
            "postgres" | "postgresql" => Self::postgres_url(rest),
            "sqlite" => Self::sqlite_url(rest),
            other => Err(Error::invalid_config(format!(
                "unknown scheme {other:?} in a SQL lock URL; expected mysql, mariadb, postgres, \
                 postgresql or sqlite"
            ))),
        }
    }

    #[cfg(feature = "mysql")]
    fn mysql_url(rest: &str) -> Result<Self> {
        use std::str::FromStr;

        if !rest.starts_with("//") || rest.len() <= 2 {
            return Err(Error::invalid_config(
                "a MySQL URL looks like mysql://user:pass@host:port/db",
            ));
        }
        let url = format!("mysql:{rest}");
        let redacted = redact_password(&url);
        let mut options = sqlx::mysql::MySqlConnectOptions::from_str(&url)
            .map_err(|e| Error::invalid_config(format!("bad MySQL URL {redacted}: {e}")))?;
        if !names_ssl_mode(&url) {
            options = options.ssl_mode(sqlx::mysql::MySqlSslMode::Disabled);
        }
        // Expiry is judged with UTC_TIMESTAMP(), so the session time zone does not matter;
        // sqlx sets +00:00 by default, which we keep (a URL may override it).
        Ok(Self::with_target(Target::MySql {
            options: Box::new(options),
            redacted,
        }))
    }

    #[cfg(not(feature = "mysql"))]
    fn mysql_url(_rest: &str) -> Result<Self> {
        Err(Error::invalid_config(
            "MySQL/MariaDB URLs need the `mysql` feature of distlock-sql, which is off",
        ))
    }

    #[cfg(feature = "postgres")]
    fn postgres_url(rest: &str) -> Result<Self> {
        use std::str::FromStr;

        if !rest.starts_with("//") || rest.len() <= 2 {
            return Err(Error::invalid_config(
                "a PostgreSQL URL looks like postgres://user:pass@host:port/db",
            ));
        }
        let url = format!("postgres:{rest}");
        let redacted = redact_password(&url);
        let mut options = sqlx::postgres::PgConnectOptions::from_str(&url)
            .map_err(|e| Error::invalid_config(format!("bad PostgreSQL URL {redacted}: {e}")))?;
        let from_env = std::env::var_os("PGSSLMODE").is_some_and(|v| !v.is_empty());
        if !names_ssl_mode(&url) && !from_env {
            options = options.ssl_mode(sqlx::postgres::PgSslMode::Disable);
        }
        Ok(Self::with_target(Target::Postgres {
            options: Box::new(options),
            redacted,
        }))
    }

    #[cfg(not(feature = "postgres"))]
    fn postgres_url(_rest: &str) -> Result<Self> {
        Err(Error::invalid_config(
            "PostgreSQL URLs need the `postgres` feature of distlock-sql, which is off",
        ))
    }

    #[cfg(feature = "sqlite")]
    fn sqlite_url(rest: &str) -> Result<Self> {
        let path = rest.strip_prefix("//").unwrap_or(rest);
        let path = path.split_once('?').map_or(path, |(p, _query)| p);
        if path.is_empty() {
            return Err(Error::invalid_config(
                "a SQLite URL names a file: sqlite://path/to/file.db or sqlite:///abs/path.db",
            ));
        }
        if path == ":memory:" || path.starts_with("file::memory:") {
            return Err(Error::invalid_config(
                "an in-memory SQLite database is private to one connection and cannot lock \
                 anything between clients; name a file",
            ));
        }
        Ok(Self::sqlite(path))
    }

    #[cfg(not(feature = "sqlite"))]
    fn sqlite_url(_rest: &str) -> Result<Self> {
        Err(Error::invalid_config(
            "SQLite URLs need the `sqlite` feature of distlock-sql, which is off",
        ))
    }

    /// A SQLite database in the file `path` (created, with its directory, if missing).
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub fn sqlite(path: impl AsRef<Path>) -> Self {
        Self::with_target(Target::Sqlite {
            path: path.as_ref().to_path_buf(),
        })
    }

    /// The embedded default: SQLite in [`SqlConfig::default_sqlite_path`]. It excludes the
    /// processes of one machine with no server.
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub fn embedded_default() -> Self {
        Self::sqlite(Self::default_sqlite_path())
    }

    /// Where the embedded default keeps its file: `$XDG_STATE_HOME/distlock/locks.db`, else
    /// `$HOME/.local/state/distlock/locks.db`, else `distlock-<uid>/locks.db` in the temp dir
    /// (`/tmp/distlock-1000/locks.db`). Every process of one user that uses the default
    /// therefore shares one file.
    ///
    /// The per-user temp directory is created with mode 0700, and [`build`](Self::build)
    /// refuses it ([`Error::InvalidConfig`]) if it is a symlink, is owned by another user or
    /// is open to group or others: in a shared temp dir another local user could create it
    /// first and then control (delete, hold, replace) the lock file.
    pub fn default_sqlite_path() -> PathBuf {
        let absolute = |var: &str| {
            std::env::var_os(var)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        absolute("XDG_STATE_HOME")
            .or_else(|| absolute("HOME").map(|home| home.join(".local").join("state")))
            .map_or_else(crate::fs::private_temp_dir, |base| base.join("distlock"))
            .join("locks.db")
    }

    fn with_target(target: Target) -> Self {
        Self {
            target,
            table: DEFAULT_TABLE.to_owned(),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            create_table: true,
            notifications: true,
            purge_after: Some(DEFAULT_PURGE_AFTER),
        }
    }

    /// Uses the table `table` (default [`DEFAULT_TABLE`]).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] unless `table` is an ASCII letter or `_` followed by up to 63
    /// ASCII letters, digits or `_` (62 on PostgreSQL, whose identifiers stop at 63 bytes; it
    /// is spliced into SQL, so nothing else is accepted).
    pub fn with_table(mut self, table: &str) -> Result<Self> {
        let max = match self.dialect() {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => MAX_PG_TABLE_LEN,
            _ => MAX_TABLE_LEN,
        };
        let mut chars = table.chars();
        let valid = table.len() <= max
            && chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(Error::invalid_config(format!(
                "{table:?} is not a plain table name (a letter or _, then up to {} letters, \
                 digits or _)",
                max - 1
            )));
        }
        table.clone_into(&mut self.table);
        Ok(self)
    }

    /// Bounds every operation (pool checkout, statements and internal retries) to `timeout`
    /// (default 5 s); past it the operation fails with [`Error::Unavailable`]. Also the pool's
    /// checkout timeout. The database's own limits (MySQL/MariaDB lock waits and statement
    /// time, SQLite's busy timeout) are three quarters of it: see [`statement_limit`](Self::statement_limit).
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The most connections this client's pool opens (default 8, at least 1).
    pub fn with_max_connections(mut self, max: u32) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// How long the database clock must prove a row idle before the client's automatic purge
    /// deletes it ([`SqlLock::purge_idle`](crate::SqlLock::purge_idle), a few seconds after
    /// [`build`](Self::build) and then every hour); default a day, `None` turns the automatic
    /// purge off (to run `purge_idle` on a schedule of your own). Fencing tokens never go back
    /// for it.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a time under a minute.
    pub fn with_purge_after(mut self, idle_for: Option<Duration>) -> Result<Self> {
        if let Some(idle) = idle_for.filter(|d| *d < Duration::from_secs(60)) {
            return Err(Error::invalid_config(format!(
                "purging rows idle for {idle:?}: at least a minute, far longer than any statement runs"
            )));
        }
        self.purge_after = idle_for;
        Ok(self)
    }

    /// Whether [`build`](Self::build) runs `CREATE TABLE IF NOT EXISTS` (default `true`). Turn
    /// it off where a DBA creates the table from [`SqlConfig::ddl`] and the application's
    /// user may not run DDL.
    pub fn with_create_table(mut self, create: bool) -> Self {
        self.create_table = create;
        self
    }

    /// PostgreSQL: whether waiters hear releases through `LISTEN`/`NOTIFY` (default `true`):
    /// one extra connection per client listens, waiters of a mutex join its queue of waiters,
    /// and a release wakes the first of them (of a semaphore or read-write lock, every waiter
    /// of it) at once, in any process. Turn it off behind a pooler that cannot keep a
    /// session's `LISTEN` (PgBouncer in transaction mode); waiters then poll, as on MySQL,
    /// and join no queue. Releases still wake queued waiters of other clients (`NOTIFY`). No
    /// effect on other databases.
    pub fn with_notifications(mut self, notifications: bool) -> Self {
        self.notifications = notifications;
        self
    }

    /// The `CREATE TABLE` statements for this config's database and table, for teams whose
    /// DBAs create tables: the lock table, then its holds table (`<table>_holds`, for
    /// semaphores and read-write locks), its weights table (`<table>_weights`, the weights of
    /// holds of several permits), its notes table (`<table>_notes`, a mutex holder's
    /// note), separated by `;`. On PostgreSQL more follow: the
    /// function an attempt at a semaphore or read-write lock calls (`<table>_holds_try`), the
    /// mutex's queue of waiters ([`waiters_table`](Self::waiters_table)), and the functions of
    /// a release (`<table>_release`) and of a waiter leaving the queue (`<table>_leave`); the
    /// functions are PL/pgSQL, dollar-quoted: run them with `psql`.
    ///
    /// ```
    /// use distlock_sql::SqlConfig;
    ///
    /// # #[cfg(feature = "postgres")] {
    /// let ddl = SqlConfig::from_url("postgres://app@db/locks")?.ddl();
    /// assert!(ddl.contains("CREATE TABLE IF NOT EXISTS \"distlock_locks_waiters\""));
    /// assert!(ddl.contains("FUNCTION \"distlock_locks_release\""));
    /// # }
    /// # Ok::<(), distlock_core::Error>(())
    /// ```
    pub fn ddl(&self) -> String {
        let statements = crate::sql::Statements::new(self.dialect(), &self.table);
        let mut ddl = statements
            .create_schema(self.dialect(), &self.table, false)
            .join(";\n\n");
        ddl.push_str(";\n");
        ddl
    }

    /// PostgreSQL: the name of the mutex's queue of waiters beside [`table`](Self::table),
    /// `<table>_waiters` (shortened with a hash when that would pass 63 characters): a waiter
    /// that finds a lock held is queued there, and a release wakes the first one. Do not give
    /// another client of the same database this name as its lock table.
    ///
    /// ```
    /// use distlock_sql::SqlConfig;
    ///
    /// # #[cfg(feature = "postgres")] {
    /// let config = SqlConfig::from_url("postgres://app@db/locks")?.with_table("jobs_locks")?;
    /// assert_eq!(config.waiters_table(), "jobs_locks_waiters");
    /// # }
    /// # Ok::<(), distlock_core::Error>(())
    /// ```
    pub fn waiters_table(&self) -> String {
        crate::waiters_sql::waiters_table(&self.table)
    }

    /// The name of the holds table beside [`table`](Self::table), where semaphores and
    /// read-write locks keep their rows: `<table>_holds` (shortened with a hash when that
    /// would pass 64 characters, 63 on PostgreSQL). Do not give another client of the same
    /// database this name as its lock table.
    pub fn holds_table(&self) -> String {
        crate::holds_sql::holds_table(self.dialect(), &self.table)
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The operation timeout.
    pub fn operation_timeout(&self) -> Duration {
        self.operation_timeout
    }

    /// The SQLite file, if this config uses SQLite.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match &self.target {
            #[cfg(feature = "sqlite")]
            Target::Sqlite { path } => Some(path),
            #[cfg(feature = "mysql")]
            Target::MySql { .. } => None,
            #[cfg(feature = "postgres")]
            Target::Postgres { .. } => None,
        }
    }

    /// How long the database itself lets one statement run or wait for a lock: three quarters
    /// of the operation timeout (the rest is for the network and a connect). MySQL/MariaDB sessions set their lock-wait timeouts (and, on
    /// MariaDB, `max_statement_time`) from it, PostgreSQL sessions their `statement_timeout`
    /// and `lock_timeout`, and SQLite uses it as its busy timeout, so a
    /// statement blocked by someone else's lock fails on the server, changing nothing, before
    /// the client gives up on it.
    pub fn statement_limit(&self) -> Duration {
        self.operation_timeout * 3 / 4
    }

    pub(crate) fn dialect(&self) -> Dialect {
        match &self.target {
            #[cfg(feature = "mysql")]
            Target::MySql { .. } => Dialect::MySql,
            #[cfg(feature = "postgres")]
            Target::Postgres { .. } => Dialect::Postgres,
            #[cfg(feature = "sqlite")]
            Target::Sqlite { .. } => Dialect::Sqlite,
        }
    }

    /// Connects (creating the SQLite file and the table if asked) and returns the lock.
    ///
    /// # Errors
    /// [`Error::Unavailable`] if the database cannot be reached within the operation timeout;
    /// [`Error::Backend`] if it refuses (bad credentials, no permission to create the table);
    /// [`Error::InvalidConfig`] for a SQLite file on a network file system (NFS, SMB/CIFS,
    /// 9p, Ceph, sshfs, ...: SQLite's locks exclude processes of one host only), or for the
    /// embedded default's per-user temp directory when another user owns it or it is open to
    /// others (see [`default_sqlite_path`](Self::default_sqlite_path)).
    pub async fn build(self) -> Result<SqlLock> {
        SqlLock::open(self).await
    }
}

/// `scheme://user:***@host/...` for a URL with a password; the URL unchanged otherwise.
#[cfg(any(feature = "mysql", feature = "postgres"))]
fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            if userinfo.contains(':') {
                format!("{scheme}://{user}:***@{host}{tail}")
            } else {
                format!("{scheme}://{user}@{host}{tail}")
            }
        }
        None => url.to_owned(),
    }
}

/// Whether the URL's query names a TLS mode (`ssl-mode` or `sslmode`). Without one, TLS is
/// off, as it was before this crate had TLS: sqlx's own default (`prefer`) would cost every
/// new PostgreSQL connection a round trip (its `SSLRequest`) even where the server has no TLS,
/// and a MySQL one a TLS handshake wherever the server offers TLS.
#[cfg(any(feature = "mysql", feature = "postgres"))]
fn names_ssl_mode(url: &str) -> bool {
    url.split_once('?').is_some_and(|(_, query)| {
        query.split('&').any(|pair| {
            let key = pair.split_once('=').map_or(pair, |(k, _)| k);
            key.eq_ignore_ascii_case("sslmode") || key.eq_ignore_ascii_case("ssl-mode")
        })
    })
}

impl fmt::Debug for SqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("SqlConfig");
        match &self.target {
            #[cfg(feature = "mysql")]
            Target::MySql { redacted, .. } => s.field("url", redacted),
            #[cfg(feature = "postgres")]
            Target::Postgres { redacted, .. } => s.field("url", redacted),
            #[cfg(feature = "sqlite")]
            Target::Sqlite { path } => s.field("sqlite", path),
        };
        s.field("table", &self.table)
            .field("operation_timeout", &self.operation_timeout)
            .field("max_connections", &self.max_connections)
            .field("create_table", &self.create_table)
            .field("purge_after", &self.purge_after)
            .field("notifications", &self.notifications)
            .finish()
    }
}

#[cfg(all(test, feature = "mysql", feature = "sqlite"))]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact_password("mysql://u:p@h:1/db?x=1"),
            "mysql://u:***@h:1/db?x=1"
        );
        assert_eq!(redact_password("mysql://u@h/db"), "mysql://u@h/db");
        assert_eq!(redact_password("mysql://h/db"), "mysql://h/db");
    }

    #[test]
    fn table_names_are_strict() {
        let config = || SqlConfig::from_url("sqlite://x.db").expect("valid");
        assert!(config().with_table("locks_2").is_ok());
        for bad in ["", "1x", "a-b", "a b", "a;drop", "`x`", "ä", &"x".repeat(65)] {
            assert!(config().with_table(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn urls() {
        for bad in [
            "",
            "nope",
            "redis://x",
            "sqlite://",
            "sqlite::memory:",
            "sqlite://:memory:",
            "mysql:",
            "mysql://",
            "mysql://u:p@h:notaport/db",
        ] {
            assert!(
                matches!(SqlConfig::from_url(bad), Err(Error::InvalidConfig { .. })),
                "{bad:?}"
            );
        }
        let c = SqlConfig::from_url("sqlite://dir/file.db?mode=rwc").expect("valid");
        assert_eq!(c.sqlite_path(), Some(Path::new("dir/file.db")));
        let c = SqlConfig::from_url("sqlite:///abs/file.db").expect("valid");
        assert_eq!(c.sqlite_path(), Some(Path::new("/abs/file.db")));
        let c = SqlConfig::from_url("mysql://u:secret@127.0.0.1:3306/db").expect("valid");
        assert!(!format!("{c:?}").contains("secret"));
        assert!(SqlConfig::from_url("MariaDB://u:p@localhost/db").is_ok());
    }

    #[test]
    fn default_path_is_absolute_or_temp() {
        let path = SqlConfig::default_sqlite_path();
        let dir = path.parent().and_then(Path::file_name).and_then(|d| d.to_str());
        assert!(
            path.ends_with("locks.db") && dir.is_some_and(|d| d.starts_with("distlock")),
            "{path:?}"
        );
    }
}

#[cfg(all(test, feature = "postgres"))]
mod postgres_tests {
    use super::*;

    #[test]
    fn postgres_urls() {
        for url in [
            "postgres://u:secret@127.0.0.1:5432/db",
            "postgresql://u:secret@localhost/db?application_name=jobs",
            "PostgreSQL://u:secret@h/db",
        ] {
            let config = SqlConfig::from_url(url).expect(url);
            assert_eq!(config.dialect(), Dialect::Postgres);
            assert!(!format!("{config:?}").contains("secret"), "{url}");
        }
        for bad in ["postgres:", "postgres://", "postgresql://u@h:notaport/db"] {
            assert!(
                matches!(SqlConfig::from_url(bad), Err(Error::InvalidConfig { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn postgres_table_names_fit_its_identifiers() {
        let config = || SqlConfig::from_url("postgres://u@h/db").expect("valid");
        assert!(config().with_table(&"x".repeat(63)).is_ok());
        assert!(config().with_table(&"x".repeat(64)).is_err());
        let holds = config().with_table(&"x".repeat(63)).expect("valid").holds_table();
        assert!(holds.len() <= 63 && holds.ends_with("_holds"), "{holds}");
    }
}

//! Opening [`SqlLock`]'s database: SQLite's file and WAL mode, the schema created (or
//! checked) at start, and its recorded version. This module owns what runs once per client;
//! the DDL is `sql.rs`'s and `schema.rs`'s.

use distlock_core::Result;

use super::{reusable, Checkout, Pool, SqlLock};
#[cfg(feature = "sqlite")]
use crate::config::SqlConfig;
#[cfg(feature = "sqlite")]
use distlock_core::Error;

impl SqlLock {
    /// Switches SQLite to WAL (persistent, so pooled connections need not repeat it), creates
    /// the tables if asked (the lock table and its holds table), and proves the database
    /// answers.
    #[allow(irrefutable_let_patterns)] // with only the `sqlite` feature
    pub(super) async fn prepare(&self) -> Result<()> {
        #[cfg(feature = "sqlite")]
        if let Pool::Sqlite(pool) = &self.inner.pool {
            // Changing the journal mode needs an exclusive lock that the busy timeout does not
            // wait for, so several processes opening a new file at once retry here.
            let mode: String = self
                .run(
                    pool,
                    "setting WAL mode",
                    on_conn!(c => {
                        sqlx::query_scalar("PRAGMA journal_mode = WAL").fetch_one(c.conn()?).await
                    }),
                )
                .await?;
            if !mode.eq_ignore_ascii_case("wal") {
                tracing::warn!(%mode, "distlock-sql: SQLite refused WAL mode; locking still works, slower");
            }
        }
        let table = self.inner.config.table.as_str();
        let create = self.inner.config.create_table;
        let ddl = self.inner.sql.create_schema(self.dialect(), table, true);
        #[cfg(feature = "postgres")]
        if let (Pool::Postgres(pool), true) = (&self.inner.pool, create) {
            let ddl: Vec<&str> = ddl.iter().map(String::as_str).collect();
            let ddl = crate::pg_pool::ddl_transaction(table, &ddl);
            let ddl = ddl.as_str();
            self.run(
                pool,
                "creating the lock tables",
                in_transaction!(c => {
                    use sqlx::Executor;
                    c.conn()?.execute(ddl).await.map(drop)
                }),
            )
            .await?;
        }
        // PostgreSQL's was created above, in one transaction.
        #[cfg(feature = "postgres")]
        let created = matches!(self.inner.pool, Pool::Postgres(_));
        #[cfg(not(feature = "postgres"))]
        let created = false;
        if create && !created {
            for ddl in &ddl {
                let ddl = ddl.as_str();
                each_pool!(self, pool => {
                    self.run(
                        pool,
                        "creating the lock tables",
                        on_conn!(c => sqlx::query(ddl).execute(c.conn()?).await),
                    )
                    .await?;
                });
            }
        }
        // The version check also proves the database answers.
        let found = self.schema_version().await?;
        crate::schema::check(found, table, create)?;
        self.find_notes(create).await
    }

    /// The recorded schema version (**1 round trip**); `Err` with the database's message
    /// where it cannot be read (no version table).
    pub(super) async fn schema_version(&self) -> Result<std::result::Result<Option<i64>, String>> {
        let sql = crate::schema::read(self.dialect(), &self.inner.config.table);
        let sql = sql.as_str();
        /// A database's refusal (a missing table) is an answer; anything else an error.
        fn answer(
            read: Result<Option<i64>, sqlx::Error>,
        ) -> Result<std::result::Result<Option<i64>, String>, sqlx::Error> {
            match read {
                Ok(v) => Ok(Ok(v)),
                Err(sqlx::Error::Database(db)) => Ok(Err(db.message().to_owned())),
                Err(e) => Err(e),
            }
        }
        each_pool!(self, pool => {
            self.run(
                pool,
                "reading the schema version",
                on_conn!(c => answer(sqlx::query_scalar(sql).fetch_optional(c.conn()?).await)),
            )
            .await
        })
    }
}

#[cfg(feature = "sqlite")]
pub(super) fn open_sqlite(path: &std::path::Path, config: &SqlConfig) -> Result<sqlx::SqlitePool> {
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteSynchronous};

    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir.filter(|d| *d == crate::fs::private_temp_dir()) {
        crate::fs::ensure_private_dir(dir)?;
    }
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::backend(
                "sqlite",
                format!("creating the directory {} for the lock file: {e}", dir.display()),
            )
        })?;
    }
    crate::fs::refuse_network_fs(dir.unwrap_or(std::path::Path::new(".")))?;
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .busy_timeout(config.statement_limit())
        .synchronous(SqliteSynchronous::Normal);
    Ok(SqlitePoolOptions::new()
        .max_connections(config.max_connections)
        .min_connections(0)
        .acquire_timeout(config.operation_timeout)
        .test_before_acquire(false)
        .connect_lazy_with(options))
}

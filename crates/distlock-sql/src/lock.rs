//! [`SqlLock`]: the [`DistributedLock`] over one row per lock name with an optimistic
//! `version` column, on MySQL/MariaDB, PostgreSQL or SQLite. This module owns the meaning of each
//! statement's result and the retries around it; the SQL text lives in `sql.rs`, the MySQL
//! connection pool in `mysql_pool.rs` and the rule for handing connections back in
//! `checkout.rs`.
//!
//! # Row layout
//!
//! | column       | MySQL / MariaDB                           | PostgreSQL                 | SQLite    | meaning |
//! |--------------|-------------------------------------------|----------------------------|-----------|---------|
//! | `lock_key`   | `VARCHAR(255) ascii_bin`, primary key     | `VARCHAR(255) "C"`, PK     | `TEXT` PK | the name, percent-escaped to printable ASCII; past 255 bytes a readable prefix + `%~` + SHA-256 ([`LockName::encode`]) |
//! | `lock_name`  | `VARCHAR(1024) utf8mb4_bin`               | `TEXT`                     | `TEXT`    | the full name, for humans |
//! | `owner`      | `VARCHAR(64) ascii_bin NULL`              | `VARCHAR(64) "C"`          | `TEXT`    | the holder's [`OwnerToken`]; `NULL` when free |
//! | `version`    | `BIGINT`                                  | `BIGINT`                   | `INTEGER` | the fencing token: `max(version + 1, clock in µs)` on every acquisition |
//! | `expires_at` | `DATETIME(6) NULL`, UTC                   | `TIMESTAMPTZ`              | `INTEGER` | end of the hold by the database clock (SQLite: ms since the epoch); `NULL` when free |
//!
//! A row is created by the first acquisition of a name and never deleted: release clears
//! `owner` and `expires_at` and keeps `version`, so fencing tokens grow across release,
//! expiry and re-acquisition. Because each new version is at least the database clock in
//! microseconds, they keep growing even if someone deletes the row by hand and it is created
//! again. A name is held iff `owner IS NOT NULL AND expires_at > now`,
//! where `now` is always the database's clock, read inside the statement that decides; no
//! client clock is ever compared with anything, so clients with skewed clocks stay safe.
//!
//! Every statement is a single autocommit statement: under MySQL's default REPEATABLE READ an
//! `INSERT ... ON DUPLICATE KEY UPDATE` or `UPDATE` reads the latest committed row (a locking
//! read), never a stale snapshot. No lock is tied to a connection, so pooled connections can
//! come and go, and a lost connection loses no lock (the lease simply expires unless renewed).
//!
//! Semaphores and read-write locks live in a table of their own beside this one
//! (`<table>_holds`, layout in `holds_sql.rs`), reached through `lock/holds.rs`: `release` and
//! `extend` (and so the default `extend_many`) route a lease there by its [`LockKind`]; the
//! mutex's rows and statements are untouched by it. Their attempt is the one operation that
//! runs a transaction (committed within the operation's one round trip on MySQL).
//!
//! On PostgreSQL the mutex's waiters queue in a third table (`<table>_waiters`, layout and
//! statements in `waiters_sql.rs`), run by `lock/queue.rs`: a waiter's attempt queues it, a
//! release wakes the first of them, and a waiter whose wait ends leaves.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    renew_each, Attempt, Capabilities, DistributedLock, Error, Fencing, FencingToken, Holder, Lease,
    LockKind, LockName, LockState, Mechanics, ObjectState, OwnerToken, Primitive, ReleaseWatch, Result,
    TryAcquire, WakeUp,
};
use tokio::time::Instant;

use crate::checkout::{Checkout, ConnectionPool};
use crate::config::{SqlConfig, Target};
#[cfg(feature = "sqlite")]
use crate::host_waiters::HostWaiters;
#[cfg(feature = "mysql")]
use crate::mysql_pool::{session_limits, MySqlConnections, MySqlDial, Session};
#[cfg(feature = "postgres")]
use crate::pg_pool::{PgConnections, PgDial};
#[cfg(feature = "postgres")]
use crate::pg_releases::PgReleases;
#[cfg(feature = "postgres")]
use crate::pg_waiters::PgWaiters;
#[cfg(feature = "mysql")]
use crate::sql::MYSQL_HELD;
use crate::sql::{key_char, Dialect, Statements, KEY_LEN};

/// A closure for [`SqlLock::run`]: runs one statement (`$body`, which reaches the connection as
/// `$c.conn()?`) and hands the connection back to the pool only once the statement finished
/// with an answer that leaves the connection usable.
macro_rules! on_conn {
    ($c:ident => $body:expr) => {
        |mut $c: Checkout<_>| async move {
            let result = $body;
            $c.finish(reusable(&result));
            result
        }
    };
}

/// As [`on_conn!`], for statements that run in a transaction of their own, committed within
/// `$body`: the connection goes back to the pool only after a success; after any error it is
/// closed, which rolls back whatever the unfinished transaction did.
macro_rules! in_transaction {
    ($c:ident => $body:expr) => {
        |mut $c: Checkout<_>| async move {
            let result = $body;
            $c.finish(result.is_ok());
            result
        }
    };
}

mod holds;
mod purge;
#[cfg(feature = "postgres")]
mod queue;
#[cfg(feature = "postgres")]
mod renew_many;
#[cfg(feature = "mysql")]
mod unreported;

/// The longest TTL accepted: 30 days, as [`Capabilities::new`] declares.
const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// The first and the longest pause between internal retries of a busy or deadlocked statement.
const RETRY_FIRST: Duration = Duration::from_millis(2);
const RETRY_MAX: Duration = Duration::from_millis(50);

/// A distributed lock stored in a SQL table: MySQL/MariaDB, PostgreSQL, or a SQLite file (the
/// embedded default, which locks between the processes of one machine with no server).
///
/// Cheap to clone (clones share one connection pool). Build it with [`SqlLock::connect`],
/// [`SqlLock::embedded_default`] or [`SqlConfig::build`], and hand it to
/// [`LockClient`](distlock_core::LockClient).
///
/// Capabilities: [`Fencing::Monotonic`] (the `version` column; monotonic as long as the
/// database's clock never steps back and the clocks of failover peers or Galera nodes agree,
/// see the crate docs), [`WakeUp::Polling`] (waiters back off with jitter and wake at the
/// holder's expiry; on PostgreSQL [`WakeUp::Notification`], through `LISTEN`/`NOTIFY`, and
/// a release of a mutex wakes its first queued waiter only), TTLs
/// from 1 ms to 30 days in 1 ms steps,
/// [`inspect`](DistributedLock::inspect), semaphores and read-write locks (writer
/// preference: a waiting writer keeps new readers out), each hold with its own fencing
/// token from a per-object counter.
///
/// # Why not `GET_LOCK`, `pg_advisory_lock` or `SELECT ... FOR UPDATE`
///
/// All tie the lock to one database connection: `GET_LOCK` and PostgreSQL's advisory locks
/// are released when the session ends, and a row lock when the transaction ends; none gives
/// a fencing token. The holder would have to pin one connection
/// out of its pool for as long as it holds the lock (one connection per held lock), a pool
/// that recycles or reconnects it silently drops the lock, and a long open transaction blocks
/// purges and other writers. A row with an owner, an expiry and a version needs no connection
/// between statements, works with any pool, survives reconnects, has a TTL that the watchdog
/// renews, and gives a fencing token that outlives restarts.
///
/// ```no_run
/// use distlock_core::LockClient;
/// use distlock_sql::SqlLock;
///
/// # #[tokio::main] async fn main() -> distlock_core::Result<()> {
/// let client = LockClient::new(SqlLock::connect("sqlite://locks.db").await?);
/// let guard = client.acquire("nightly-report").await?;
/// // ... work, sending guard.fencing_token() with each write ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SqlLock {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    sql: Statements,
    config: SqlConfig,
    /// SQLite: this host's waiters, woken by releases through Unix sockets.
    #[cfg(feature = "sqlite")]
    host: Option<HostWaiters>,
    /// PostgreSQL: the one listening connection that hears releases (`LISTEN`), shared by
    /// every waiter of this client; `None` with notifications off.
    #[cfg(feature = "postgres")]
    releases: Option<PgReleases>,
    /// PostgreSQL: which of this client's waiters may be in the database's queue of waiters.
    #[cfg(feature = "postgres")]
    waiters: PgWaiters,
}

enum Pool {
    #[cfg(feature = "mysql")]
    MySql(MySqlConnections),
    #[cfg(feature = "postgres")]
    Postgres(PgConnections),
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
}

impl SqlLock {
    /// Connects to the database at `url` with default settings (see [`SqlConfig::from_url`]).
    ///
    /// # Errors
    /// As [`SqlConfig::from_url`] and [`SqlConfig::build`].
    pub async fn connect(url: &str) -> Result<Self> {
        SqlConfig::from_url(url)?.build().await
    }

    /// The embedded default: a SQLite file at [`SqlConfig::default_sqlite_path`].
    ///
    /// # Errors
    /// As [`SqlConfig::build`].
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub async fn embedded_default() -> Result<Self> {
        SqlConfig::embedded_default().build().await
    }

    /// The configuration this lock was built from.
    pub fn config(&self) -> &SqlConfig {
        &self.inner.config
    }

    /// Closes the connection pool; later operations fail with [`Error::Unavailable`].
    pub async fn close(&self) {
        match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(connections) => connections.close().await,
            #[cfg(feature = "postgres")]
            Pool::Postgres(connections) => connections.close().await,
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => pool.close().await,
        }
        #[cfg(feature = "postgres")]
        if let Some(releases) = &self.inner.releases {
            releases.close();
        }
    }
}

#[async_trait]
impl DistributedLock for SqlLock {
    fn backend(&self) -> &'static str {
        match self.dialect() {
            Dialect::MySql => "mysql",
            Dialect::Postgres => "postgres",
            Dialect::Sqlite => "sqlite",
        }
    }

    /// PostgreSQL with notifications (the default) declares [`WakeUp::Notification`], and its
    /// mutex watch names its waiter: a release of a mutex wakes the first waiter of its queue
    /// (`NOTIFY` naming that waiter), a release or withdrawal on a semaphore or read-write lock
    /// every waiter of it, and waiters keep only a safety-net poll. Every other configuration
    /// polls.
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Fencing::Monotonic, self.wake_up())
            .with_ttl_granularity(Duration::from_millis(1))
            .with_ttl_range(Duration::from_millis(1), MAX_TTL)
            .with_primitives(true, true)
    }

    /// Hands over: one `UPDATE` passes a mutex to the next owner (see
    /// [`hand_over`](DistributedLock::hand_over)).
    fn mechanics(&self) -> Mechanics {
        Mechanics::default().with_hands_over(true)
    }

    /// The mutex: insert the row, or take it over if it is free or expired, bumping `version`.
    ///
    /// MySQL: **1 round trip**, won or held: `LAST_INSERT_ID` carries the new version, or the
    /// holder's remaining time so the waiter wakes at its expiry. SQLite: **1 statement** when
    /// acquired (`RETURNING version`), **2** when held (the second reads the holder's
    /// remaining time; both are local calls, no network). PostgreSQL: **1 round trip**, won
    /// or held (the holder's remaining time in the same statement). No ping precedes or
    /// follows a MySQL or PostgreSQL statement, except one before it on a MySQL connection
    /// idle for over 30 s.
    ///
    /// With a waiter: PostgreSQL with notifications: in the same statement (**1 round
    /// trip**, won or held), a waiter that finds the lock held joins the lock's queue of
    /// waiters for `stay` (renewing its stay and keeping its place if queued already), and
    /// one that wins leaves it. SQLite: a waiter that wins passes no wake on when its wait
    /// ends.
    ///
    /// A permit of a semaphore, or a side of a read-write lock: one transaction over the
    /// object's rows in the holds table (see `lock/holds.rs`). MySQL: **1 round trip**, won or
    /// not. SQLite: 4 to 7 statements of one `BEGIN IMMEDIATE` transaction (local calls).
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        let Attempt {
            name,
            kind,
            owner,
            ttl,
            ..
        } = attempt;
        let (kind, owner, ttl) = (*kind, *owner, *ttl);
        let waiter = attempt.waiter_parts();
        if kind != LockKind::Exclusive {
            let outcome = self.acquire_hold(name, kind, owner, ttl, waiter).await;
            #[cfg(feature = "sqlite")]
            if let (Ok(TryAcquire::Acquired(_)), Some(host), Some((waiter, _))) =
                (&outcome, &self.inner.host, waiter)
            {
                host.won(waiter);
            }
            return outcome;
        }
        let Some((waiter, stay)) = waiter else {
            return self.acquire(name, owner, ttl, None).await;
        };
        #[cfg(feature = "postgres")]
        if self.inner.releases.is_some() {
            return self.acquire_queued_as(name, owner, ttl, waiter, stay).await;
        }
        let _ = stay;
        let outcome = self.acquire(name, owner, ttl, None).await;
        #[cfg(feature = "sqlite")]
        if let (Ok(TryAcquire::Acquired(_)), Some(host)) = (&outcome, &self.inner.host) {
            host.won(waiter);
        }
        let _ = waiter;
        outcome
    }

    /// Release: clear `owner` and `expires_at` where the owner is still ours and the hold has
    /// not expired; `version` stays. Matches by name and owner only, so a bare lease (no
    /// fencing token, as the core's cleanup after an ambiguous acquire sends) works.
    /// **1 round trip.** PostgreSQL: one call of `<table>_release`, which also takes the first
    /// live waiter out of the lock's queue and wakes it alone (`NOTIFY` naming it).
    async fn release(&self, lease: &Lease) -> Result<bool> {
        if lease.kind() != LockKind::Exclusive {
            return self.release_hold(lease).await;
        }
        let key = lock_key(lease.name());
        let key = key.as_ref();
        let owner = lease.owner().to_string();
        let owner = owner.as_str();
        let sql = self.inner.sql.release.as_str();
        let (affected, broken) = match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => self
                .run_tracked(
                    pool,
                    "releasing",
                    on_conn!(c => {
                        sqlx::query(sql).bind(key).bind(owner).execute(c.conn()?).await
                    }),
                )
                .await
                .map(|(done, broken)| (done.rows_affected(), broken))?,
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => self
                .run_tracked(
                    pool,
                    "releasing",
                    on_conn!(c => {
                        sqlx::query_scalar::<_, i64>(sql).bind(key).bind(owner).fetch_one(c.conn()?).await
                    }),
                )
                .await
                .map(|(count, broken)| (u64::try_from(count).unwrap_or(0), broken))?,
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => self
                .run_tracked(
                    pool,
                    "releasing",
                    on_conn!(c => {
                        sqlx::query(sql).bind(key).bind(owner).execute(c.conn()?).await
                    }),
                )
                .await
                .map(|(done, broken)| (done.rows_affected(), broken))?,
        };
        match broken {
            // An attempt broke mid-statement and the retry found nothing to release: the broken
            // attempt may have released it, or it was not ours. Unknown, so an error.
            Some(error) if affected == 0 => Err(error),
            _ => {
                #[cfg(feature = "sqlite")]
                if affected > 0 {
                    if let Some(host) = &self.inner.host {
                        host.released(key);
                    }
                }
                Ok(affected > 0)
            }
        }
    }

    /// Hand over: where the owner is still ours (as `release` judges it), set the next owner,
    /// its expiry and a new `version` in one `UPDATE`. **1 round trip**, like a release alone:
    /// `LockClient` hands a lock released in this process to this process's first waiter
    /// with it, which saves the waiter's round trip.
    async fn hand_over(&self, lease: &Lease, next: OwnerToken, ttl: Duration) -> Result<Option<Lease>> {
        if lease.kind() != LockKind::Exclusive {
            return Err(Error::NotSupported {
                backend: self.backend(),
                what: "handing a semaphore permit or a read-write lock over",
            });
        }
        let units = self.ttl_units(ttl)?;
        let key = lock_key(lease.name());
        let key = key.as_ref();
        let owner = lease.owner().to_string();
        let owner = owner.as_str();
        let next_str = next.to_string();
        let next_str = next_str.as_str();
        let sql = self.inner.sql.hand_over.as_str();
        let sent = Instant::now();
        let (version, broken): (Option<i64>, _) = match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => self
                .run_tracked(
                    pool,
                    "handing over",
                    on_conn!(c => {
                        sqlx::query(sql)
                            .bind(next_str)
                            .bind(units)
                            .bind(key)
                            .bind(owner)
                            .execute(c.conn()?)
                            .await
                    }),
                )
                .await
                .map(|(done, broken)| {
                    // A handed-over row always reports its new version (above zero); zero
                    // would mean the server did not report it, and the token is unknown.
                    let version =
                        (done.rows_affected() > 0).then(|| i64::try_from(done.last_insert_id()).unwrap_or(0));
                    (version, broken)
                })?,
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => self
                .run_tracked(
                    pool,
                    "handing over",
                    on_conn!(c => {
                        sqlx::query_scalar(sql)
                            .bind(key)
                            .bind(owner)
                            .bind(next_str)
                            .bind(units)
                            .fetch_all(c.conn()?)
                            .await
                    }),
                )
                .await
                .map(|(rows, broken)| (rows.first().copied(), broken))?,
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => self
                .run_tracked(
                    pool,
                    "handing over",
                    on_conn!(c => {
                        sqlx::query_scalar(sql)
                            .bind(key)
                            .bind(owner)
                            .bind(next_str)
                            .bind(units)
                            .bind(clock_micros())
                            .fetch_all(c.conn()?)
                            .await
                    }),
                )
                .await
                .map(|(rows, broken)| (rows.first().copied(), broken))?,
        };
        match (version.map(|v| u64::try_from(v).unwrap_or(0)), broken) {
            (Some(0), _) => Err(Error::backend(
                self.backend(),
                "handing over: the database did not report the new fencing token",
            )),
            (Some(version), _) => Ok(Some(
                Lease::new(lease.name().clone(), next, ttl, sent).with_fencing(FencingToken::new(version)),
            )),
            // An attempt broke mid-statement and the retry found the lock not ours: the broken
            // attempt may have handed it over. Unknown, so an error.
            (None, Some(error)) => Err(error),
            (None, None) => Ok(None),
        }
    }

    /// PostgreSQL: every lease in **1 round trip** (one `UPDATE ... FROM unnest(...)` per
    /// table, in one statement). Elsewhere each lease, up to 32 at once: move `expires_at` to
    /// the database's now + `ttl` where the owner is still ours and the hold has not expired.
    /// **1 round trip** each.
    #[allow(irrefutable_let_patterns)] // with only the `postgres` feature
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        #[cfg(feature = "postgres")]
        if let Pool::Postgres(pool) = &self.inner.pool {
            return self.extend_many_pg(pool, leases).await;
        }
        renew_each(leases, |lease| async move {
            let (lease, ttl) = (&lease, lease.ttl());
            if lease.kind() != LockKind::Exclusive {
                return self.extend_hold(lease, ttl).await;
            }
            let units = self.ttl_units(ttl)?;
            let key = lock_key(lease.name());
            let key = key.as_ref();
            let owner = lease.owner().to_string();
            let owner = owner.as_str();
            let sql = self.inner.sql.extend.as_str();
            let sent = Instant::now();
            let affected = match &self.inner.pool {
                #[cfg(feature = "mysql")]
                Pool::MySql(pool) => self
                    .run(
                        pool,
                        "extending",
                        on_conn!(c => {
                            sqlx::query(sql).bind(units).bind(key).bind(owner).execute(c.conn()?).await
                        }),
                    )
                    .await?
                    .rows_affected(),
                #[cfg(feature = "postgres")]
                Pool::Postgres(pool) => self
                    .run(
                        pool,
                        "extending",
                        on_conn!(c => {
                            sqlx::query(sql).bind(key).bind(owner).bind(units).execute(c.conn()?).await
                        }),
                    )
                    .await?
                    .rows_affected(),
                #[cfg(feature = "sqlite")]
                Pool::Sqlite(pool) => self
                    .run(
                        pool,
                        "extending",
                        on_conn!(c => {
                            sqlx::query(sql).bind(key).bind(owner).bind(units).execute(c.conn()?).await
                        }),
                    )
                    .await?
                    .rows_affected(),
            };
            Ok((affected > 0).then(|| lease.renewed(ttl, sent)))
        })
        .await
    }

    /// Wait: MySQL and SQLite publish no release notifications, so waiters poll. `LockClient`
    /// retries with capped, jittered exponential backoff and wakes early at
    /// [`Holder::remaining`], which a failed attempt reads from the database (its second
    /// round trip). **0 round trips** here. On MySQL, `LockClient` makes each poll after a
    /// failed attempt a read ([`inspect`](Self::inspect), no row lock) while the lock stays held,
    /// and an attempt only when the read found it free or a release in this process woke the
    /// waiter; the backoff starts again when a read finds a new owner.
    ///
    /// SQLite: a release by any process of this host wakes one waiter at once (a Unix datagram
    /// to the oldest waiter's socket beside the database file, see `host_waiters`); waiters
    /// still poll, in case a socket cannot be bound.
    ///
    /// PostgreSQL: a watch of one waiter, with an id of its own: its attempts
    /// ([`try_acquire_waiting`](Self::try_acquire_waiting)) queue it in the lock's queue of
    /// waiters, and a release wakes the first waiter of that queue only (`NOTIFY` naming it,
    /// heard by this client's one listening connection, see `pg_releases`). **0 round trips**
    /// once the connection listens; the first watch of a client waits for its `LISTEN`.
    /// Dropping the watch takes a waiter that may still be queued out of the queue (**1 round
    /// trip**, in the background; if the lock is free then, the next waiter is woken in its
    /// place). Waiters keep a safety-net poll.
    ///
    /// Semaphores and read-write locks. PostgreSQL: the releases and withdrawals of the
    /// object, as for the mutex (payload `<primitive>:<key>`). SQLite: a release of a permit by
    /// any process of this host wakes one waiter at once, a release of a read or write lock
    /// (or a waiting writer's withdrawal) every waiter, as for the mutex (a socket per waiter
    /// beside the database file). MySQL: a polling watch, which `LockClient` wakes on releases
    /// in this process.
    async fn watch(&self, name: &LockName, primitive: Primitive) -> Result<ReleaseWatch> {
        if primitive == Primitive::Mutex {
            let watched = async {
                #[cfg(feature = "postgres")]
                if let Some(releases) = &self.inner.releases {
                    return self.watch_queued(releases, name).await;
                }
                #[cfg(feature = "sqlite")]
                if let Some(host) = &self.inner.host {
                    if let Some(watch) = host.watch(&lock_key(name)) {
                        return Ok(watch);
                    }
                }
                let _ = name;
                Ok(ReleaseWatch::polling())
            };
            return watched.await;
        }
        #[cfg(feature = "postgres")]
        if let Some(releases) = &self.inner.releases {
            return releases.watch(primitive, &lock_key(name)).await;
        }
        #[cfg(feature = "sqlite")]
        if let Some(host) = &self.inner.host {
            let key = lock_key(name);
            if let Some(watch) = host.watch(&holds::host_object(primitive, &key)) {
                return Ok(watch);
            }
        }
        let _ = (name, primitive);
        Ok(ReleaseWatch::polling())
    }

    /// MySQL: `mysql://<user>@<host>:<port>/<db>#<table>`, so that a release by a client of
    /// this process wakes one of this process's waiters at once (PostgreSQL likewise, which
    /// matters only with notifications off). SQLite: `None`, since its
    /// releases wake waiters of the whole host (see [`watch`](Self::watch)).
    fn store_identity(&self) -> Option<String> {
        match &self.inner.config.target {
            #[cfg(feature = "mysql")]
            Target::MySql { redacted, .. } => Some(format!("{redacted}#{}", self.inner.config.table)),
            #[cfg(feature = "postgres")]
            Target::Postgres { redacted, .. } => Some(format!("{redacted}#{}", self.inner.config.table)),
            #[cfg(feature = "sqlite")]
            Target::Sqlite { .. } => None,
        }
    }

    /// The mutex: the row's owner, version and remaining time. **1 round trip.**
    /// A semaphore or read-write lock, oldest first. **1 round trip.**
    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        if primitive != Primitive::Mutex {
            return self
                .holder_states(name, primitive)
                .await
                .map(ObjectState::held_by);
        }
        let state = async {
            let key = lock_key(name);
            let key = key.as_ref();
            let sql = self.inner.sql.inspect.as_str();
            let row: Option<(Option<String>, i64, Option<i64>)> = match &self.inner.pool {
                #[cfg(feature = "mysql")]
                Pool::MySql(pool) => {
                    self.run(
                        pool,
                        "inspecting",
                        on_conn!(c => {
                            sqlx::query_as(sql).bind(key).fetch_optional(c.conn()?).await
                        }),
                    )
                    .await?
                }
                #[cfg(feature = "postgres")]
                Pool::Postgres(pool) => {
                    self.run(
                        pool,
                        "inspecting",
                        on_conn!(c => {
                            sqlx::query_as(sql).bind(key).fetch_optional(c.conn()?).await
                        }),
                    )
                    .await?
                }
                #[cfg(feature = "sqlite")]
                Pool::Sqlite(pool) => {
                    self.run(
                        pool,
                        "inspecting",
                        on_conn!(c => {
                            sqlx::query_as(sql).bind(key).fetch_optional(c.conn()?).await
                        }),
                    )
                    .await?
                }
            };
            let Some((owner, version, left)) = row else {
                return Ok(LockState::free(None));
            };
            let fencing = u64::try_from(version).ok().map(FencingToken::new);
            Ok(match (owner, self.remaining(left)) {
                (Some(owner), Some(left)) => LockState::held(owner, fencing, Some(left)),
                _ => LockState::free(fencing),
            })
        };
        state.await.map(ObjectState::from)
    }

    /// Deletes the waiting writer's record. **1 round trip**; nothing for other kinds.
    async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        self.withdraw_waiter(name, kind, waiter).await
    }

    /// `SELECT 1`. **1 round trip.**
    async fn ping(&self) -> Result<()> {
        match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => {
                self.run(
                    pool,
                    "ping",
                    on_conn!(c => sqlx::query("SELECT 1").execute(c.conn()?).await),
                )
                .await?;
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                self.run(
                    pool,
                    "ping",
                    on_conn!(c => sqlx::query("SELECT 1").execute(c.conn()?).await),
                )
                .await?;
            }
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                self.run(
                    pool,
                    "ping",
                    on_conn!(c => sqlx::query("SELECT 1").execute(c.conn()?).await),
                )
                .await?;
            }
        }
        Ok(())
    }
}

/// Opening, and the machinery every operation shares.
impl SqlLock {
    /// One attempt at the mutex (`try_acquire`); on PostgreSQL with `waiting` (the waiter's
    /// `waiter` column and its stay in µs), the attempt of a waiter, which queues it if the
    /// lock is held (see `waiters_sql.rs`). Other dialects ignore `waiting`.
    pub(crate) async fn acquire(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
        waiting: Option<(&str, i64)>,
    ) -> Result<TryAcquire> {
        self.storable(name)?;
        #[cfg(not(feature = "postgres"))]
        let _ = waiting;
        let units = self.ttl_units(ttl)?;
        let key = lock_key(name);
        let key = key.as_ref();
        let owner_str = owner.to_string();
        let owner_str = owner_str.as_str();
        let sql = self.inner.sql.acquire.as_str();
        let sent = Instant::now();
        let version: Option<i64> = match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => {
                let done = self
                    .run(
                        pool,
                        "acquiring",
                        on_conn!(c => {
                            sqlx::query(sql)
                                .bind(key)
                                .bind(name.as_str())
                                .bind(owner_str)
                                .bind(units)
                                .bind(owner_str)
                                .bind(owner_str)
                                .bind(owner_str)
                                .bind(owner_str)
                                .bind(units)
                                .execute(c.conn()?)
                                .await
                        }),
                    )
                    .await?;
                match done.last_insert_id() {
                    id if id >= MYSQL_HELD => {
                        let left = Duration::from_micros(id - MYSQL_HELD);
                        return Ok(TryAcquire::Held(Holder::expiring_in(left)));
                    }
                    // Not reported (won or held alike): the row says which.
                    0 => return self.unreported_outcome(pool, key, name, owner, ttl, sent).await,
                    id => i64::try_from(id).ok(),
                }
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                let sql = match waiting {
                    Some(_) => self.inner.sql.acquire_waiting.as_str(),
                    None => sql,
                };
                let rows: Vec<(Option<i64>, Option<i64>)> = self
                    .run(
                        pool,
                        "acquiring",
                        on_conn!(c => {
                            let query = sqlx::query_as(sql)
                                .bind(key)
                                .bind(name.as_str())
                                .bind(owner_str)
                                .bind(units);
                            let query = match waiting {
                                Some((waiter, stay)) => query.bind(waiter).bind(stay),
                                None => query,
                            };
                            query.fetch_all(c.conn()?).await
                        }),
                    )
                    .await?;
                match rows.first() {
                    Some((Some(version), _)) => Some(*version),
                    // Held: the holder's remaining time as the statement's snapshot saw it (no
                    // row: created by an attempt the snapshot missed; retry soon).
                    other => {
                        let left = other.and_then(|(_, left)| self.remaining(*left));
                        return Ok(TryAcquire::Held(Holder::expiring_in(
                            left.unwrap_or(Duration::ZERO),
                        )));
                    }
                }
            }
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                // fetch_all steps the statement to completion, so its write commits at once.
                let rows: Vec<i64> = self
                    .run(
                        pool,
                        "acquiring",
                        on_conn!(c => {
                            sqlx::query_scalar(sql)
                                .bind(key)
                                .bind(name.as_str())
                                .bind(owner_str)
                                .bind(units)
                                .bind(clock_micros())
                                .fetch_all(c.conn()?)
                                .await
                        }),
                    )
                    .await?;
                rows.first().copied()
            }
        };
        match version.and_then(|v| u64::try_from(v).ok()) {
            Some(version) => Ok(TryAcquire::Acquired(
                Lease::new(name.clone(), owner, ttl, sent).with_fencing(FencingToken::new(version)),
            )),
            None => Ok(TryAcquire::Held(self.holder(key).await?)),
        }
    }

    pub(crate) async fn open(config: SqlConfig) -> Result<Self> {
        let sql = Statements::new(config.dialect(), &config.table);
        let pool = match &config.target {
            #[cfg(feature = "mysql")]
            Target::MySql { options, .. } => Pool::MySql(MySqlConnections::new(
                MySqlDial {
                    options: (**options).clone(),
                    session: Session {
                        limits: session_limits(config.statement_limit()),
                        warm: vec![
                            sql.acquire.clone(),
                            sql.extend.clone(),
                            sql.release.clone(),
                            sql.holds.extend.clone(),
                            sql.holds.release.clone(),
                            sql.holds.withdraw.clone(),
                        ],
                    },
                },
                config.max_connections,
            )?),
            #[cfg(feature = "postgres")]
            Target::Postgres { options, .. } => {
                if config.table.len() > 63 {
                    return Err(Error::invalid_config(format!(
                        "the table name {:?} is longer than PostgreSQL's 63-byte identifiers",
                        config.table
                    )));
                }
                Pool::Postgres(PgConnections::new(
                    PgDial::new(
                        options,
                        config.statement_limit(),
                        vec![
                            sql.acquire.clone(),
                            sql.acquire_waiting.clone(),
                            sql.extend.clone(),
                            sql.release.clone(),
                            sql.waiters.leave.clone(),
                            sql.extend_many.clone(),
                            sql.holds.attempt.clone(),
                            sql.holds.extend.clone(),
                            sql.holds.release.clone(),
                            sql.holds.withdraw.clone(),
                        ],
                    ),
                    config.max_connections,
                )?)
            }
            #[cfg(feature = "sqlite")]
            Target::Sqlite { path } => Pool::Sqlite(open_sqlite(path, &config)?),
        };
        let lock = Self {
            inner: Arc::new(Inner {
                #[cfg(feature = "postgres")]
                releases: match &config.target {
                    Target::Postgres { options, .. } if config.notifications => Some(PgReleases::new(
                        (**options).clone(),
                        config.table.clone(),
                        config.operation_timeout,
                    )),
                    #[allow(unreachable_patterns)] // with only the `postgres` feature
                    _ => None,
                },
                #[cfg(feature = "postgres")]
                waiters: PgWaiters::default(),
                #[cfg(feature = "sqlite")]
                host: match &config.target {
                    Target::Sqlite { path } => Some(HostWaiters::new(path)),
                    #[allow(unreachable_patterns)] // without the `mysql` feature
                    _ => None,
                },
                pool,
                sql,
                config,
            }),
        };
        lock.prepare().await?;
        if let Some(idle_for) = lock.inner.config.purge_after {
            purge::spawn_automatic(&lock, idle_for);
        }
        Ok(lock)
    }

    /// Switches SQLite to WAL (persistent, so pooled connections need not repeat it), creates
    /// the tables if asked (the lock table and its holds table), and proves the database
    /// answers.
    #[allow(irrefutable_let_patterns)] // with only the `sqlite` feature
    async fn prepare(&self) -> Result<()> {
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
        if create {
            for ddl in &ddl {
                let ddl = ddl.as_str();
                match &self.inner.pool {
                    #[cfg(feature = "mysql")]
                    Pool::MySql(pool) => {
                        self.run(
                            pool,
                            "creating the lock tables",
                            on_conn!(c => sqlx::query(ddl).execute(c.conn()?).await),
                        )
                        .await?;
                    }
                    #[cfg(feature = "sqlite")]
                    Pool::Sqlite(pool) => {
                        self.run(
                            pool,
                            "creating the lock tables",
                            on_conn!(c => sqlx::query(ddl).execute(c.conn()?).await),
                        )
                        .await?;
                    }
                    // Created above, in one transaction.
                    #[cfg(feature = "postgres")]
                    Pool::Postgres(_) => {
                        let _ = ddl;
                    }
                }
            }
        }
        // The version check also proves the database answers.
        let found = self.schema_version().await?;
        crate::schema::check(found, table, create)
    }

    /// The recorded schema version (**1 round trip**); `Err` with the database's message
    /// where it cannot be read (no version table).
    async fn schema_version(&self) -> Result<std::result::Result<Option<i64>, String>> {
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
        match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => {
                self.run(
                    pool,
                    "reading the schema version",
                    on_conn!(c => answer(sqlx::query_scalar(sql).fetch_optional(c.conn()?).await)),
                )
                .await
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                self.run(
                    pool,
                    "reading the schema version",
                    on_conn!(c => answer(sqlx::query_scalar(sql).fetch_optional(c.conn()?).await)),
                )
                .await
            }
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                self.run(
                    pool,
                    "reading the schema version",
                    on_conn!(c => answer(sqlx::query_scalar(sql).fetch_optional(c.conn()?).await)),
                )
                .await
            }
        }
    }

    fn dialect(&self) -> Dialect {
        self.inner.config.dialect()
    }

    /// PostgreSQL's text cannot hold NUL, so a name with one cannot be stored (the key escapes
    /// it, but the readable `lock_name` column keeps the name as it is).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for such a name on PostgreSQL.
    pub(crate) fn storable(&self, name: &LockName) -> Result<()> {
        if self.dialect() == Dialect::Postgres && name.as_str().contains('\0') {
            return Err(Error::InvalidName {
                reason: "PostgreSQL text cannot hold NUL characters".to_owned(),
            });
        }
        Ok(())
    }

    /// How waiters learn of releases: by notification on PostgreSQL with its listener, else
    /// by polling.
    fn wake_up(&self) -> WakeUp {
        #[cfg(feature = "postgres")]
        if self.inner.releases.is_some() {
            return WakeUp::Notification;
        }
        WakeUp::Polling
    }

    /// Runs one statement (`op` makes a fresh attempt each call, on a connection checked out
    /// of `pool`) within the operation timeout, retrying only errors that guarantee the
    /// statement changed nothing: SQLite's `SQLITE_BUSY`/`SQLITE_LOCKED`, InnoDB's deadlock /
    /// lock-wait timeout and the server's statement time limit (the statement was rolled
    /// back). Those never reach the caller as such: when the time is up they become
    /// [`Error::Unavailable`]. A retry starts only if the database's own limit on it
    /// ([`SqlConfig::statement_limit`]) ends before the operation's deadline, so the last
    /// attempt is aborted by the database before the caller is told it failed.
    async fn run<C, T, F, Fut>(&self, pool: &C, what: &'static str, op: F) -> Result<T>
    where
        C: ConnectionPool,
        F: FnMut(Checkout<C::Pooled>) -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        self.run_tracked(pool, what, op).await.map(|(value, _)| value)
    }

    /// [`run`](Self::run), also retrying a statement whose connection broke (a pooled
    /// connection the server closed meanwhile, after a restart), on another connection,
    /// within the operation timeout. Every statement of this backend gives the same answer
    /// when run again with the same owner token (acquire wins again if it won, extend extends
    /// again), except release, whose retry finds nothing to release if the broken attempt was
    /// applied: so the result says whether an attempt broke mid-statement (the error it
    /// broke with), and the caller decides.
    async fn run_tracked<C, T, F, Fut>(
        &self,
        pool: &C,
        what: &'static str,
        mut op: F,
    ) -> Result<(T, Option<Error>)>
    where
        C: ConnectionPool,
        F: FnMut(Checkout<C::Pooled>) -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let timeout = self.inner.config.operation_timeout;
        let limit = self.inner.config.statement_limit();
        let deadline = Instant::now() + timeout;
        let mut pause = RETRY_FIRST;
        let mut broken: Option<Error> = None;
        // Every pooled connection may be stale after a restart; one more is a fresh one.
        let mut reconnects = self.inner.config.max_connections + 1;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = async {
                let conn = pool.checkout(deadline).await.map_err(Failure::Checkout)?;
                op(Checkout::new(conn)).await.map_err(Failure::Statement)
            };
            match tokio::time::timeout(left, attempt).await {
                Ok(Ok(value)) => return Ok((value, broken)),
                Ok(Err(Failure::Checkout(e) | Failure::Statement(e)))
                    if is_contention(&e) && Instant::now() + pause + limit < deadline =>
                {
                    tracing::trace!(error = %e, what, "distlock-sql: contention, retrying");
                    tokio::time::sleep(jittered(pause)).await;
                    pause = (pause * 2).min(RETRY_MAX);
                }
                // Only a statement's connection breaks mid-statement; a failed checkout sent
                // nothing (the pool already retried a server refusing connections).
                Ok(Err(Failure::Statement(e)))
                    if is_broken(&e) && reconnects > 0 && Instant::now() < deadline =>
                {
                    tracing::debug!(error = %e, what, "distlock-sql: connection broke, retrying on another");
                    reconnects -= 1;
                    broken.get_or_insert(map_error(self.backend(), what, e));
                }
                Ok(Err(Failure::Checkout(e) | Failure::Statement(e))) => {
                    return Err(broken.unwrap_or_else(|| map_error(self.backend(), what, e)))
                }
                Err(_) => {
                    return Err(broken.unwrap_or_else(|| {
                        Error::unavailable(
                            self.backend(),
                            format!("{what}: no answer within the operation timeout of {timeout:?}"),
                        )
                    }))
                }
            }
        }
    }

    /// How long the current holder of `key` has left (round trip 2 of a failed attempt), as
    /// the waiter's wake-up hint. A row found free or expired meanwhile says "retry now".
    async fn holder(&self, key: &str) -> Result<Holder> {
        let sql = self.inner.sql.remaining.as_str();
        let left: Option<Option<i64>> = match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => {
                self.run(
                    pool,
                    "reading the holder's expiry",
                    on_conn!(c => {
                        sqlx::query_scalar(sql).bind(key).fetch_optional(c.conn()?).await
                    }),
                )
                .await?
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                self.run(
                    pool,
                    "reading the holder's expiry",
                    on_conn!(c => {
                        sqlx::query_scalar(sql).bind(key).fetch_optional(c.conn()?).await
                    }),
                )
                .await?
            }
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                self.run(
                    pool,
                    "reading the holder's expiry",
                    on_conn!(c => {
                        sqlx::query_scalar(sql).bind(key).fetch_optional(c.conn()?).await
                    }),
                )
                .await?
            }
        };
        Ok(Holder::expiring_in(
            self.remaining(left.flatten()).unwrap_or(Duration::ZERO),
        ))
    }

    /// A stored remaining time (µs on MySQL and PostgreSQL, ms on SQLite) as a duration,
    /// `None` if not positive.
    fn remaining(&self, raw: Option<i64>) -> Option<Duration> {
        let raw = u64::try_from(raw?).ok().filter(|&v| v > 0)?;
        Some(match self.dialect() {
            Dialect::MySql | Dialect::Postgres => Duration::from_micros(raw),
            Dialect::Sqlite => Duration::from_millis(raw),
        })
    }

    /// A TTL in the unit the dialect stores (µs on MySQL and PostgreSQL, ms rounded up on
    /// SQLite).
    fn ttl_units(&self, ttl: Duration) -> Result<i64> {
        if ttl.is_zero() || ttl > MAX_TTL {
            return Err(Error::invalid_options(format!(
                "a TTL of {ttl:?} is outside what the SQL backend accepts (1 ms to {MAX_TTL:?})"
            )));
        }
        let units = match self.dialect() {
            Dialect::MySql | Dialect::Postgres => ttl.as_micros().max(1),
            Dialect::Sqlite => ttl.as_micros().div_ceil(1000),
        };
        // At most 30 days in µs: far below i64::MAX.
        i64::try_from(units).map_err(|_| Error::invalid_options("TTL out of range"))
    }
}

/// This machine's clock in microseconds since the Unix epoch (0 before it), the fine part of
/// a SQLite fencing token: see `sql.rs`.
#[cfg(feature = "sqlite")]
fn clock_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The key column's value for `name`.
pub(crate) fn lock_key(name: &LockName) -> std::borrow::Cow<'_, str> {
    name.encode(KEY_LEN, key_char)
}

#[cfg(feature = "sqlite")]
fn open_sqlite(path: &std::path::Path, config: &SqlConfig) -> Result<sqlx::SqlitePool> {
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

/// How one attempt at a statement failed.
enum Failure {
    /// No connection: the pool is closed, or connecting failed (nothing was sent).
    Checkout(sqlx::Error),
    /// The statement failed, or its connection broke while it ran.
    Statement(sqlx::Error),
}

/// Whether a connection may serve the next statement after this one's `outcome`: yes after a
/// result or an error the server answered with, unless that error ends the session; no after
/// anything else (an I/O or protocol error leaves the connection in an unknown state).
fn reusable<T>(outcome: &Result<T, sqlx::Error>) -> bool {
    match outcome {
        Ok(_) => true,
        Err(sqlx::Error::Database(db)) => !ends_session(&**db),
        Err(_) => false,
    }
}

/// Whether a statement failed because its connection broke (and may have been applied):
/// an I/O error, or on PostgreSQL a session the server ended (a restart or an administrator's
/// `pg_terminate_backend`: `FATAL` 57P01-57P03), whose error a pooled connection reads as the
/// answer to its next statement.
fn is_broken(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) => true,
        #[cfg(feature = "postgres")]
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
            .is_some_and(|pg| matches!(pg.code(), "57P01" | "57P02" | "57P03")),
        _ => false,
    }
}

/// Errors after which the server closes the session: MySQL's ER_SERVER_SHUTDOWN,
/// ER_CONNECTION_KILLED; PostgreSQL's `FATAL`s (admin_shutdown, crash_shutdown,
/// cannot_connect_now, a terminated backend).
fn ends_session(db: &dyn sqlx::error::DatabaseError) -> bool {
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return matches!(my.number(), 1053 | 1927);
    }
    #[cfg(feature = "postgres")]
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return matches!(pg.code(), "57P01" | "57P02" | "57P03")
            || matches!(
                pg.severity(),
                sqlx::postgres::PgSeverity::Fatal | sqlx::postgres::PgSeverity::Panic
            );
    }
    let _ = db;
    false
}

impl std::fmt::Debug for SqlLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlLock")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// `pause` ± 50 %, so contending retries spread out.
fn jittered(pause: Duration) -> Duration {
    let factor: f64 = rand::random_range(0.5..1.5);
    pause.mul_f64(factor)
}

/// Errors after which the statement certainly changed nothing and may simply run again.
fn is_contention(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = error else {
        return false;
    };
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        // ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT: InnoDB rolled the statement back;
        // ER_STATEMENT_TIMEOUT (MariaDB's max_statement_time), ER_QUERY_TIMEOUT (MySQL's
        // max_execution_time): the server aborted and rolled back the statement.
        return matches!(my.number(), 1213 | 1205 | 1969 | 3024);
    }
    #[cfg(feature = "postgres")]
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        // serialization_failure, deadlock_detected, lock_not_available (lock_timeout),
        // query_canceled (statement_timeout): the server rolled the statement back.
        return matches!(pg.code(), "40001" | "40P01" | "55P03" | "57014");
    }
    #[cfg(feature = "sqlite")]
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        // SQLITE_BUSY and SQLITE_LOCKED with their extended codes (low byte 5 or 6).
        let code = db.code().and_then(|c| c.parse::<i32>().ok()).unwrap_or_default();
        return matches!(code & 0xff, 5 | 6);
    }
    false
}

/// Connection failures, pool timeouts and a database that stays busy are
/// [`Error::Unavailable`]; everything else is [`Error::Backend`].
fn map_error(backend: &'static str, what: &'static str, error: sqlx::Error) -> Error {
    let unavailable = match &error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => is_contention(&error) || is_server_going_away(&**db),
        _ => false,
    };
    let source = format!("{what}: {error}");
    if unavailable {
        Error::unavailable(backend, source)
    } else {
        Error::backend(backend, source)
    }
}

/// MySQL server errors that mean "the server is going away" or "this server takes no writes
/// now" (a primary demoted by a failover, a replica), not "the statement is wrong".
fn is_server_going_away(db: &dyn sqlx::error::DatabaseError) -> bool {
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        // ER_SERVER_SHUTDOWN, ER_CON_COUNT_ERROR, ER_QUERY_INTERRUPTED, ER_CONNECTION_KILLED;
        // read-only: ER_OPTION_PREVENTS_STATEMENT (`--read-only`), ER_READ_ONLY_MODE,
        // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION, ER_INNODB_READ_ONLY.
        return matches!(my.number(), 1053 | 1040 | 1317 | 1927 | 1290 | 1836 | 1792 | 1874);
    }
    #[cfg(feature = "postgres")]
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        // Connection exceptions (08...), too_many_connections, the server shutting down or
        // starting (57P01-57P03), read_only_sql_transaction (a hot standby, or a primary
        // demoted by a failover).
        let code = pg.code();
        return code.starts_with("08") || matches!(code, "53300" | "57P01" | "57P02" | "57P03" | "25006");
    }
    let _ = db;
    false
}

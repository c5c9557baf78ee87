//! [`SqlLock`]: the [`DistributedLock`] over one row per lock name with an optimistic
//! `version` column, on MySQL/MariaDB, PostgreSQL or SQLite. This module owns the type, its
//! constructor and its [`DistributedLock`] implementation, which only dispatches by kind and
//! dialect; what it runs lives in its submodules, one concern each:
//!
//! - `acquire.rs`: the mutex's attempt and the holder's remaining time;
//! - `release.rs`, `hand_over.rs`: the mutex's release, and its hand-over to the next owner;
//! - `renew.rs`: renewing leases, and the mutex's single extend;
//! - `inspect.rs`: reading the mutex's row, and the ping;
//! - `notes.rs`: the note a mutex holder leaves beside its hold (leader election's value);
//! - `holds.rs` (and `holds/` per dialect): semaphores and read-write locks;
//! - `renew_many.rs`: PostgreSQL's renewal of many leases in one round trip;
//! - `queue.rs`: PostgreSQL's queue of the mutex's waiters;
//! - `purge.rs`: purging idle rows; `unreported.rs`: a MySQL acquire whose token went unreported;
//! - `prepare.rs`: opening the database, creating or checking the schema;
//! - `run.rs`: the operation timeout, retries and error mapping every statement runs through;
//! - `units.rs`: TTLs and remaining times in each dialect's unit, and storable names.
//!
//! The SQL text lives in `sql.rs` and its siblings, bound by parameter name (`statement.rs`,
//! each operation's values built beside it, `binds.rs` checks they cover every name); code
//! that is the same on every dialect is written once over `each_pool!`. The MySQL
//! connection pool is `mysql_pool.rs`'s and the rule for handing connections back
//! `checkout.rs`'s.
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
//! A mutex holder's note ([`DistributedLock::set_note`]) lives in a table of its own
//! (`<table>_notes`, layout in `notes_sql.rs`), tagged with the hold's owner and `version`;
//! the mutex's statements never touch it, and inspect joins it.
//!
//! On PostgreSQL the mutex's waiters queue in a fourth table (`<table>_waiters`, layout and
//! statements in `waiters_sql.rs`), run by `lock/queue.rs`: a waiter's attempt queues it, a
//! release wakes the first of them, and a waiter whose wait ends leaves.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    Attempt, Capabilities, DistributedLock, Error, Fencing, Lease, LockKind, LockName, Mechanics,
    ObjectState, OwnerToken, Primitive, ReleaseWatch, Result, TryAcquire, WakeUp,
};

#[cfg(doc)]
use distlock_core::Holder;

use crate::checkout::Checkout;
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

/// `$body` with `$p` bound to `$lock`'s connection pool, whichever its dialect: the body is
/// written once and compiled for each (see `statement::DialectPool` for binding a statement's values
/// there).
macro_rules! each_pool {
    ($lock:expr, $p:ident => $body:expr) => {
        match &$lock.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql($p) => $body,
            #[cfg(feature = "postgres")]
            Pool::Postgres($p) => $body,
            #[cfg(feature = "sqlite")]
            Pool::Sqlite($p) => $body,
        }
    };
}

mod acquire;
#[cfg(test)]
mod binds;
mod hand_over;
mod holds;
mod inspect;
mod notes;
mod prepare;
mod purge;
#[cfg(feature = "postgres")]
mod queue;
mod release;
mod renew;
mod renew_batch;
#[cfg(feature = "postgres")]
mod renew_many;
mod run;
mod units;
#[cfg(feature = "mysql")]
mod unreported;

#[cfg(feature = "sqlite")]
use acquire::clock_micros;
#[cfg(feature = "sqlite")]
use prepare::open_sqlite;
use run::reusable;

/// The longest TTL accepted: 30 days, as [`Capabilities::new`] declares.
const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

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
/// token from a per-object counter, holds of several permits
/// ([`Semaphore::acquire_many`](distlock_core::Semaphore::acquire_many)), upgradeable reads
/// ([`RwLock::upgradeable_read`](distlock_core::RwLock::upgradeable_read)), and notes beside a mutex hold (leader election), where
/// the notes table is there (see `notes_sql.rs`).
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
    /// Whether the notes table is there (a DBA's schema from before it may lack it): set once
    /// the schema is prepared.
    notes: std::sync::atomic::AtomicBool,
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
        each_pool!(self, pool => pool.close().await);
        #[cfg(feature = "postgres")]
        if let Some(releases) = &self.inner.releases {
            releases.close();
        }
    }
}

/// Opening.
impl SqlLock {
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
                            sql.acquire.as_str().to_owned(),
                            sql.extend.as_str().to_owned(),
                            sql.release.as_str().to_owned(),
                            sql.holds.extend.as_str().to_owned(),
                            sql.holds.release.as_str().to_owned(),
                            sql.holds.withdraw.as_str().to_owned(),
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
                            sql.acquire.as_str().to_owned(),
                            sql.acquire_waiting.as_str().to_owned(),
                            sql.extend.as_str().to_owned(),
                            sql.release.as_str().to_owned(),
                            sql.waiters.leave.as_str().to_owned(),
                            sql.extend_many.as_str().to_owned(),
                            sql.holds.attempt.as_str().to_owned(),
                            sql.holds.extend.as_str().to_owned(),
                            sql.holds.release.as_str().to_owned(),
                            sql.holds.withdraw.as_str().to_owned(),
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
                notes: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        lock.prepare().await?;
        if let Some(idle_for) = lock.inner.config.purge_after {
            purge::spawn_automatic(&lock, idle_for);
        }
        Ok(lock)
    }

    fn dialect(&self) -> Dialect {
        self.inner.config.dialect()
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
            .with_weights_and_upgrades(true, true)
            .with_notes(self.has_notes())
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
    /// live waiter out of the lock's queue and wakes it alone (`NOTIFY` naming it). A
    /// semaphore's permit or a side of a read-write lock: its row of the holds table.
    async fn release(&self, lease: &Lease) -> Result<bool> {
        if lease.kind() != LockKind::Exclusive {
            return self.release_hold(lease).await;
        }
        self.release_mutex(lease).await
    }

    /// Hand over: where the owner is still ours (as `release` judges it), set the next owner,
    /// its expiry and a new `version` in one `UPDATE`. **1 round trip**, like a release alone:
    /// `LockClient` hands a lock released in this process to this process's first waiter
    /// with it, which saves the waiter's round trip. The mutex only.
    async fn hand_over(&self, lease: &Lease, next: OwnerToken, ttl: Duration) -> Result<Option<Lease>> {
        if lease.kind() != LockKind::Exclusive {
            return Err(Error::NotSupported {
                backend: self.backend(),
                what: "handing a semaphore permit or a read-write lock over",
            });
        }
        self.hand_over_mutex(lease, next, ttl).await
    }

    /// PostgreSQL: every lease in **1 round trip** (one `UPDATE ... FROM unnest(...)` per
    /// table, in one statement). MySQL and SQLite: **1 round trip per 500 leases of one table
    /// and one TTL** (mutex leases in the mutex table; semaphore permits and read-write holds
    /// in the holds table): one `UPDATE` of their rows, on MySQL with the `SELECT` of those
    /// renewed in the same text query, sent at once; a lease alone of its table and TTL by its
    /// own statement, up to 32 at once.
    /// Each moves `expires_at` to the database's now + `ttl` where the owner is still ours and
    /// the hold has not expired.
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        self.renew_leases(leases).await
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
    /// ([`attempt`](Self::attempt) with its waiter record) queue it in the lock's queue of
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

    /// The mutex: the row's owner, version and remaining time, and the holder's note (joined
    /// from the notes table). **1 round trip.**
    /// A semaphore or read-write lock, oldest first. **1 round trip.**
    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        if primitive != Primitive::Mutex {
            return self
                .holder_states(name, primitive)
                .await
                .map(ObjectState::held_by);
        }
        self.inspect_mutex(name).await.map(ObjectState::from)
    }

    /// Stores `note` for the mutex hold of `lease` in the notes table, tagged with the hold's
    /// fencing token, where the row's owner is still `lease`'s and the hold has not expired
    /// (see `notes_sql.rs`). **1 round trip.** `Ok(false)` for any other kind of lease.
    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool> {
        self.set_mutex_note(lease, note).await
    }

    /// Deletes the waiting writer's record. **1 round trip**; nothing for other kinds.
    async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        self.withdraw_waiter(name, kind, waiter).await
    }

    /// `SELECT 1`. **1 round trip.**
    async fn ping(&self) -> Result<()> {
        self.ping_pool().await
    }
}

/// The key column's value for `name`.
pub(crate) fn lock_key(name: &LockName) -> std::borrow::Cow<'_, str> {
    name.encode(KEY_LEN, key_char)
}

impl std::fmt::Debug for SqlLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlLock")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

//! The SQL backend of distlock: one row per lock name with an optimistic `version` column, on
//! MySQL/MariaDB (feature `mysql`), PostgreSQL (feature `postgres`) or SQLite (feature
//! `sqlite`, the embedded default), via sqlx with no TLS and no OpenSSL.
//!
//! - [`SqlLock`] implements [`DistributedLock`](distlock_core::DistributedLock); build it from
//!   a URL (`mysql://user:pass@host:port/db`, `postgres://user:pass@host:port/db`,
//!   `sqlite://path/to/file.db`) with
//!   [`SqlLock::connect`] or [`SqlConfig`], or use [`SqlLock::embedded_default`] for a SQLite
//!   file in a per-user location ([`SqlConfig::default_sqlite_path`]).
//! - Acquire is one atomic upsert that takes the row only if it is free or expired and bumps
//!   `version`, the fencing token; release and extend are compare-and-set on the owner token.
//!   Expiry is judged by the database's clock only. See [`SqlLock`] for the row layout, the
//!   round trips of each operation, and why not `GET_LOCK` / `SELECT ... FOR UPDATE`.
//! - Semaphores and read-write locks
//!   ([`LockClient::semaphore`](distlock_core::LockClient::semaphore),
//!   [`LockClient::rw_lock`](distlock_core::LockClient::rw_lock)) keep their rows in a second
//!   table, `<table>_holds`: one row per object (its fencing counter), per hold and per
//!   waiting writer. An attempt takes the object first (an InnoDB row lock on the object's
//!   row; SQLite's `BEGIN IMMEDIATE`) and only then counts the live holds and inserts its own,
//!   so permits are exact under any concurrency; on MySQL the whole transaction is one round
//!   trip (one text query of several statements), on PostgreSQL too (one call of a PL/pgSQL
//!   function the backend creates beside the tables). Release, extend and withdraw are one
//!   statement each. See [`SqlLock`]. A hold of several permits
//!   ([`Semaphore::acquire_many`](distlock_core::Semaphore::acquire_many)) is one hold row
//!   and a row with its weight in `<table>_weights`, written in the same transaction; the
//!   census counts each hold by its weight, and releasing or renewing the hold acts on all
//!   its permits at once. An upgradeable read
//!   ([`RwLock::upgradeable_read`](distlock_core::RwLock::upgradeable_read)) is a hold row of
//!   its own kind; its upgrade is a write attempt by its owner that, once no plain reader
//!   holds, turns that row into the write hold in the same transaction (one round trip on
//!   MySQL and PostgreSQL).
//! - A mutex holder can leave a note beside its hold
//!   ([`DistributedLock::set_note`](distlock_core::DistributedLock::set_note)), which
//!   [`inspect`](distlock_core::DistributedLock::inspect) reports while that hold lives: what
//!   leader election ([`LockClient::election`](distlock_core::LockClient::election)) publishes
//!   the leader's value with. Notes live in a third table, `<table>_notes`, tagged with the
//!   hold's owner and fencing token, so a later holder never shows an earlier one's note and
//!   renewals keep it; one round trip to set, none extra to read (inspect joins it).
//! - PostgreSQL wakes waiters by notification, and a release of a mutex wakes **one** waiter:
//!   a waiter's attempt that finds the lock held also puts it in the lock's queue of waiters
//!   (`<table>_waiters`, in the same statement), and the release (one call of a PL/pgSQL
//!   function, `<table>_release`) frees the lock, takes the first waiter whose stay has not
//!   ended out of the queue and runs `pg_notify` naming that waiter alone. Each client keeps
//!   **one** listening connection (`LISTEN`) shared by all its waiters, which hands each wake
//!   to the waiter it names. A waiter that wins leaves the queue in its winning statement; one
//!   whose wait ends otherwise (it gave up, failed or was dropped) leaves it in the background
//!   (`<table>_leave`), and if the lock is free then, the next waiter is woken in its place (it
//!   may have been woken and gone without trying); one that died stays until its stay ends (its
//!   longest sleep plus a second, judged by the database's clock), costing the others at most
//!   one wake. Releases of permits and sides of read-write locks, and withdrawals of waiting
//!   writers, still wake every waiter of the object (`NOTIFY` with the object's key): which of
//!   them can get in depends on what each asks for. The connection listens again after a
//!   restart or a reset (and then wakes every waiter once), and waiters keep a safety-net poll.
//!   A connection that goes silent without breaking is asked `SELECT 1` after 5 s without a
//!   notification, and replaced the same way if it does not answer within the operation
//!   timeout.
//!   Turn notifications off behind a pooler that cannot keep a `LISTEN`
//!   ([`SqlConfig::with_notifications`]). Clients of versions before this queue share the
//!   tables but not the wakes: while both run on one table, a waiter of one is not woken by a
//!   release of the other and wakes at its safety-net poll or the holder's expiry instead;
//!   where a DBA creates the tables, create the queue and its functions
//!   ([`SqlConfig::ddl`]) before the clients that use them start, or their releases fail.
//! - Waiting on MySQL and SQLite: they publish no releases, so waiters poll with backoff,
//!   waking at the holder's expiry. A MySQL release by a client of this process hands the lock straight to the first
//!   of this process's waiters, in the release's own `UPDATE` (`LockClient` does it, by the
//!   store's name, through `DistributedLock::hand_over`): the waiter holds it without a round
//!   trip of its own, and no client of the process races it. A SQLite release wakes the oldest
//!   waiter of the whole host at once, in any process, through a Unix socket per waiter in
//!   `<database>.waiters/` (a permit's release likewise; a read or write lock's release every
//!   waiter of it). Only this user's private directories are used there, and only sockets
//!   are removed. Without Unix sockets (Windows) SQLite waiters poll.
//! - The schema is versioned (`<table>_schema`, one row). A client creates what is missing
//!   (idempotently, also when many processes start at once) and records its version, replaces
//!   PostgreSQL's functions only where the recorded version is older, refuses to start on a
//!   newer one (an older client could break the newer clients' functions), and with
//!   [`SqlConfig::with_create_table`]`(false)` refuses a missing or older schema, saying what
//!   to run. Version 2 added the weights table and PostgreSQL's attempt function that counts
//!   weights (beside version 1's, which running clients of that version still call): a client
//!   of version 1 would count a hold of several permits as one, so it refuses to start on a
//!   schema of version 2; stop such clients before holds of several permits are taken.
//!   Version 3 replaced the body of PostgreSQL's attempt function, for upgradeable reads. The DDL of a dialect and table, complete (tables, PostgreSQL's functions, the
//!   version), is [`SqlConfig::ddl`], printed by `distlock schema --url <url> [--table
//!   <name>]`; run it with the dialect's own client (`mysql`, `psql`, `sqlite3`).
//! - What a DBA creates once, and what a runtime user then needs: the lock table, the holds
//!   table `<table>_holds`, the weights table `<table>_weights`, the notes table `<table>_notes` (without it, or without the
//!   privileges on it, a client works as before but offers no notes), the version table
//!   `<table>_schema`, and on PostgreSQL the queue
//!   `<table>_waiters` and the functions `<table>_holds_try`, `<table>_release` and
//!   `<table>_leave`. At run time: `SELECT`, `INSERT`, `UPDATE` and `DELETE` on those tables
//!   (`SELECT` alone on `<table>_schema`) and, on PostgreSQL, `EXECUTE` on the functions
//!   (by default granted to everyone); nothing else. A client that creates the schema itself
//!   needs `CREATE` on the database (MySQL) or schema (PostgreSQL), and on PostgreSQL owns the
//!   functions it creates.
//! - Idle rows are purged ([`SqlLock::purge_idle`]; each client does it a few seconds after
//!   it opens and then hourly, see [`SqlConfig::with_purge_after`]): only what the database
//!   clock proves idle (a row's version is the clock in µs when it was last taken), so a name
//!   taken again gets a higher fencing token than before; and the notes of holds that ended.
//!
//! SQLite runs in WAL mode with `synchronous = NORMAL` and a busy timeout of three quarters
//! of the operation timeout; `database is locked` is retried inside the operation and never
//! reaches the caller (past the operation timeout it becomes
//! [`Error::Unavailable`](distlock_core::Error::Unavailable)). WAL's shared memory and
//! SQLite's locks only exclude processes of one host, so a file on a network file system
//! (NFS, SMB/CIFS, 9p, Ceph, sshfs, ...) is refused with
//! [`Error::InvalidConfig`](distlock_core::Error::InvalidConfig) (detected on Linux from
//! `/proc/self/mountinfo`; elsewhere not checked: do not do it).
//!
//! # Time limits on the database side
//!
//! Every statement is bounded on the database itself by [`SqlConfig::statement_limit`] (three
//! quarters of the operation timeout), so a statement blocked by someone else's lock fails
//! there, changing nothing, before the client gives up on it:
//! MariaDB sessions set `max_statement_time`, `innodb_lock_wait_timeout` and
//! `lock_wait_timeout` (the two lock waits in whole seconds, 0 meaning "do not wait"); MySQL,
//! which has no time limit for writes, sets only the two lock waits, from 1 s, so on MySQL
//! keep the operation timeout above 1.4 s for this to hold; SQLite uses it as its busy timeout.
//! An operator's `SELECT ... FOR UPDATE` on a lock row, or DDL waiting for a metadata lock,
//! therefore makes operations on that row fail with `Unavailable` in time instead of
//! committing after the caller was told they failed. A connection whose statement was still
//! running when the operation timed out (or whose future was dropped) is closed, never
//! returned to the pool (its next statement would first wait for the cut one's answer while
//! holding a slot).
//!
//! # Ambiguous errors
//!
//! An operation that fails with [`Error::Unavailable`](distlock_core::Error::Unavailable)
//! **may have been applied** when its message says `no answer within the operation timeout`
//! (the database bounds its statements below that timeout, but a slow connect or network can
//! still delay a statement past it) or when the connection was lost mid-statement (an I/O
//! error, `ER_CONNECTION_KILLED`, a server shutting down): the statement may have committed
//! and only its answer been lost. A broken connection (an I/O error, typically a pooled
//! connection the server closed across a restart) is first retried on another connection
//! within the operation timeout: acquire and extend give the same answer when run again with
//! the same owner token, so their retried answer is definite; a release whose retry finds
//! nothing to release returns the original error, since the broken attempt may have
//! released it. `LockClient` follows a failed acquire with an owner-checked release of the
//! same owner token, which this backend runs by name and owner alone (no handle or fencing
//! token needed). Errors that guarantee nothing was written are not
//! ambiguous: lock-wait timeout, deadlock, the statement time limit and `database is locked`
//! (retried within the operation, then reported as `Unavailable` with the database's
//! message), and a read-only server (`Unavailable` at once).
//!
//! # PostgreSQL specifics
//!
//! - Rows, not advisory locks (`pg_advisory_lock`): an advisory lock belongs to the session
//!   that took it, so the holder must pin one connection out of its pool per held lock; it
//!   is released silently when that connection drops (a pooler recycling it, a network blip,
//!   a failover), and the holder learns of it only at its next statement; and it carries no
//!   fencing token. A row with an owner, an expiry and a version needs no connection between
//!   statements, is renewed by the watchdog, and its version is the fencing token. Advisory
//!   locks serve one purpose here: serializing this backend's own `CREATE` statements
//!   (`pg_advisory_xact_lock`, held for one transaction), since concurrent `CREATE TABLE IF
//!   NOT EXISTS` of one table can fail on PostgreSQL.
//! - Acquire is one `INSERT ... ON CONFLICT (lock_key) DO UPDATE ... WHERE <free, expired or
//!   ours> RETURNING version`; the same statement reads the holder's remaining time when it
//!   did not win; a waiter's attempt also queues it (or takes it out of the queue when it
//!   wins) in the same statement. Extend and hand-over are one `UPDATE` each, a release one
//!   call of `<table>_release` (it reads the queue after it took the lock's row, which one
//!   plain statement could not: its snapshot would miss a waiter queued while it waited for
//!   the row); `extend_many` renews every lease, of both tables, in one statement. Every
//!   operation is **one round trip**
//!   (the statements are prepared when a connection opens; the pool is MySQL's, without
//!   pings), and the database's `statement_timestamp()` judges every expiry.
//! - Every session sets `statement_timeout` and `lock_timeout` to
//!   [`SqlConfig::statement_limit`], and `default_transaction_isolation` to READ COMMITTED
//!   (which the functions' reads after taking a row rely on, whatever the database's or
//!   role's default), in its startup packet (no extra round trip). A session the server ended
//!   (a restart) is retried on another connection, as a broken one.
//! - A failover to a streaming standby keeps what the standby received: with a synchronous
//!   standby (`synchronous_commit = on` or `remote_apply`) every acquisition, renewal and
//!   release a client was told of, so holders keep their locks; with an asynchronous one an
//!   acquisition it had not received is gone, and another client can hold that lock until the
//!   first's next renewal reports [`LossReason::NotOwned`](distlock_core::LossReason::NotOwned)
//!   (fencing tokens still grow while the servers' clocks agree). Operations against the dead
//!   primary end within the operation timeout; a standby's refusal to write is `Unavailable`.
//! - A name containing NUL is refused ([`Error::InvalidName`](distlock_core::Error::InvalidName)):
//!   PostgreSQL's text cannot hold it. Table names are at most 63 bytes.
//! - The backend's user needs `CREATE` on the schema for the tables and the functions (see
//!   the privileges above), or a DBA creates them from [`SqlConfig::ddl`] (`distlock schema`)
//!   and the backend runs with [`SqlConfig::with_create_table`]`(false)`.
//!
//! # MySQL / MariaDB specifics
//!
//! - The acquire upsert is independent of how `ON DUPLICATE KEY UPDATE` orders its
//!   assignments, so it is correct under MariaDB's `SIMULTANEOUS_ASSIGNMENT` (part of
//!   `sql_mode=ORACLE`) as under the default; a row with an owner but no expiry counts as free.
//! - The acquire learns its outcome and token from the OK packet's `last_insert_id`. Where it
//!   comes back 0 (a MySQL-compatible service or proxy that does not pass
//!   `LAST_INSERT_ID(expr)` on), the outcome is read from the row by owner (one more round
//!   trip), never taken for a hold that was the attempt's own.
//! - Acquire (won or held), release and extend are exactly one round trip each: one
//!   statement, prepared when a connection opens, and no ping before or after it. An attempt
//!   at a permit or a side of a read-write lock is one round trip too: one text query
//!   (`COM_QUERY`) carrying its transaction, its values spliced in as hexadecimal literals
//!   (`_ascii X'...'`), which no `sql_mode` can misread. The watchdog's renewal of many
//!   held locks is one such text query per 500 leases of one table and TTL (mutexes, or
//!   permits and read-write holds: an `UPDATE` of their rows, then the `SELECT` of those
//!   renewed), as on SQLite one `UPDATE ... RETURNING`. The
//!   backend keeps its own pool of sqlx connections (sqlx's pool pings every connection
//!   handed back to it, a second round trip per operation that also keeps the connection
//!   from the next operation meanwhile): a connection goes back as soon as its statement's
//!   answer arrived, unless the statement was cut or the answer ended the session, and only a
//!   connection idle for over 30 s is pinged before its next statement. Connections open
//!   lazily, at most [`SqlConfig::with_max_connections`] of them; one idle for 10 minutes or
//!   older than 30 minutes is closed.
//! - A server that refuses writes because it is read-only (a primary demoted by a failover,
//!   `--read-only`: errors 1290, 1836, 1792, 1874) makes writes fail with `Unavailable`,
//!   which callers retry, not `Backend`. The lock's user must not hold `SUPER` or
//!   `READ_ONLY ADMIN`, or it would write to a demoted primary.
//!
//! # Fencing tokens and clocks
//!
//! [`Fencing::Monotonic`](distlock_core::Fencing::Monotonic) rests on assumptions about the
//! database's clock: a row's `version` grows by at least one per acquisition while the row
//! exists, but a row deleted by hand starts again at the clock in microseconds (the server's
//! on MySQL; on SQLite the calling process's, as precise as SQLite's own counts only ms), so
//! tokens keep growing only if that clock never stepped back in between. Across a failover, or between
//! Galera nodes, the servers' clocks must agree (NTP, no steps backwards); expiry is judged by
//! whichever server runs the statement, so a node whose clock runs ahead frees holds early.
//! A restored backup of the table can likewise bring back lower versions. A failover to an
//! asynchronous replica that missed the latest writes loses holds and versions alike (a lock
//! held on the old primary is free on the new one): use semi-synchronous replication or
//! Galera where a failover must keep locks.
//!
//! ```no_run
//! use distlock_core::LockClient;
//! use distlock_sql::SqlLock;
//!
//! # #[tokio::main] async fn main() -> distlock_core::Result<()> {
//! let client = LockClient::new(SqlLock::embedded_default().await?);
//! let guard = client.acquire("main-job").await?; // other processes on this machine wait
//! // ... the job ...
//! guard.release().await?;
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(any(feature = "mysql", feature = "postgres", feature = "sqlite")))]
compile_error!("distlock-sql needs at least one of its features `mysql`, `postgres` and `sqlite`");

mod admission;
#[cfg(all(test, feature = "mysql", feature = "postgres", feature = "sqlite"))]
mod admission_agreement;
mod checkout;
mod config;
mod doctor;
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
mod fs;
mod holds_sql;
#[cfg(all(feature = "sqlite", unix))]
mod host_waiters;
#[cfg(all(feature = "sqlite", not(unix)))]
#[path = "host_waiters_none.rs"]
mod host_waiters;
mod lock;
#[cfg(feature = "mysql")]
mod mysql_pool;
mod notes_sql;
#[cfg(feature = "postgres")]
mod pg_pool;
#[cfg(feature = "postgres")]
mod pg_releases;
#[cfg(feature = "postgres")]
mod pg_waiters;
mod purge_sql;
mod schema;
#[cfg(any(feature = "mysql", feature = "postgres"))]
mod server_pool;
#[cfg(all(feature = "sqlite", unix))]
mod socket_addr;
mod sql;
mod statement;
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
mod waiters_sql;

pub use config::{
    SqlConfig, DEFAULT_MAX_CONNECTIONS, DEFAULT_OPERATION_TIMEOUT, DEFAULT_PURGE_AFTER, DEFAULT_TABLE,
};
pub use doctor::doctor;
pub use lock::SqlLock;

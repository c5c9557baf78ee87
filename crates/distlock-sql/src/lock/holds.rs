//! Semaphores and read-write locks on [`SqlLock`]: the holds table's operations (the rows and
//! statements are `holds_sql.rs`'s, the admission rule `admission.rs`'s). This module owns
//! the meaning of their results; it shares the pool, the retries and the error mapping of
//! the mutex (`lock.rs`), and never touches the mutex table.
//!
//! Round trips (MySQL) and statements (SQLite: local calls to the connection's thread, no
//! network) per operation:
//!
//! | operation                       | MySQL / MariaDB | PostgreSQL | SQLite |
//! |---------------------------------|-----------------|------------|--------|
//! | acquire, won                    | 1               | 1 (a call of the attempt's function) | 6 (`BEGIN IMMEDIATE`, purge, census, bump, insert, `COMMIT`); a writer with a waiting record 7 |
//! | acquire, refused or mismatched  | 1               | 1          | 4 (`BEGIN IMMEDIATE`, purge, census, `COMMIT`); a waiting writer 5 |
//! | acquire, retried after applied  | 1               | 1          | 5 (`BEGIN IMMEDIATE`, purge, census, renew, `COMMIT`) |
//! | release                         | 1               | 1 (with its `NOTIFY`) | 1 |
//! | extend                          | 1               | 1          | 1 |
//! | `extend_many` (n leases)        | n, up to 32 at once (the default) | 1, mutexes and holds together | n |
//! | withdraw                        | 1               | 1 (with its `NOTIFY`) | 1 |
//! | `inspect_holders`               | 1               | 1          | 1 |

use std::time::Duration;

use distlock_core::{
    DistributedLock, Error, FencingToken, Holder, Lease, LockKind, LockName, LockState, OwnerToken,
    Primitive, Result, TryAcquire,
};
use tokio::time::Instant;

use super::{lock_key, reusable, Pool, SqlLock, MAX_TTL};
use crate::admission::{Census, CensusRow, Verdict};
use crate::checkout::Checkout;
use crate::holds_sql::{kind_column, kind_of_row, waiter_holder};
use crate::sql::Dialect;

/// How one attempt ended on the database.
enum Outcome {
    /// The hold is ours, with this fencing token.
    Won(i64),
    /// Not admitted; what the attempt saw.
    Lost(Census),
}

/// A live hold as `inspect_holders` reads it: holder, kind, permits, version, remaining time.
type HolderRow = (String, String, Option<i64>, i64, Option<i64>);

impl SqlLock {
    /// One attempt at a hold of `kind` (a permit, a read or the write lock); the mutex's
    /// `try_acquire` for [`LockKind::Exclusive`]. See the module docs for the round trips.
    pub(super) async fn acquire_hold(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
        ttl: Duration,
        waiter: Option<(&str, Duration)>,
    ) -> Result<TryAcquire> {
        if kind.primitive() == Primitive::Mutex {
            return self.acquire(name, owner, ttl, None).await;
        }
        self.storable(name)?;
        if let LockKind::Permit { permits: 0 } = kind {
            return Err(Error::invalid_options("a semaphore needs at least one permit"));
        }
        let ttl_units = self.ttl_units(ttl)?;
        let key = lock_key(name);
        let owner_str = owner.to_string();
        // Only a writer that will wait leaves a record; readers and permits ignore `waiter`.
        let waiter = match (kind, waiter) {
            (LockKind::Write, Some((id, stay))) => Some((waiter_holder(id), self.stay_units(stay))),
            _ => None,
        };
        let sent = Instant::now();
        let outcome = match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => {
                let query = crate::holds_sql::mysql_attempt(
                    &self.inner.sql.holds.table,
                    &crate::holds_sql::AttemptValues {
                        primitive: kind.primitive().as_str(),
                        key: &key,
                        name: name.as_str(),
                        owner: &owner_str,
                        kind,
                        ttl: ttl_units,
                        waiter: waiter.as_ref().map(|(holder, stay)| (holder.as_str(), *stay)),
                    },
                );
                let query = query.as_str();
                self.run(
                    pool,
                    "acquiring",
                    in_transaction!(c => mysql::attempt(c.conn()?, query).await),
                )
                .await?
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                let sql = self.inner.sql.holds.attempt.as_str();
                let (primitive, key, owner_str) =
                    (kind.primitive().as_str(), key.as_ref(), owner_str.as_str());
                let kind_col = kind_column(kind).unwrap_or_default();
                let permits = match kind {
                    LockKind::Permit { permits } => Some(i32::try_from(permits).unwrap_or(i32::MAX)),
                    _ => None,
                };
                let (waiter_holder, stay) = match &waiter {
                    Some((holder, stay)) => (Some(holder.as_str()), Some(*stay)),
                    None => (None, None),
                };
                self.run(
                    pool,
                    "acquiring",
                    on_conn!(c => {
                        sqlx::query_as::<_, postgres::AttemptRow>(sql)
                            .bind(primitive)
                            .bind(key)
                            .bind(name.as_str())
                            .bind(owner_str)
                            .bind(kind_col)
                            .bind(permits)
                            .bind(ttl_units)
                            .bind(waiter_holder)
                            .bind(stay)
                            .fetch_one(c.conn()?)
                            .await
                            .map(postgres::outcome)
                    }),
                )
                .await?
            }
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                let attempt = sqlite::Attempt {
                    steps: &self.inner.sql.holds.sqlite,
                    primitive: kind.primitive().as_str(),
                    key: &key,
                    name: name.as_str(),
                    owner: &owner_str,
                    kind,
                    kind_col: kind_column(kind).unwrap_or_default(),
                    withdraw: &self.inner.sql.holds.withdraw,
                    ttl: ttl_units,
                    waiter: waiter.as_ref().map(|(holder, stay)| (holder.as_str(), *stay)),
                };
                let attempt = &attempt;
                self.run(
                    pool,
                    "acquiring",
                    in_transaction!(c => sqlite::attempt(c.conn()?, attempt).await),
                )
                .await?
            }
        };
        match outcome {
            Outcome::Won(token) => {
                let token = u64::try_from(token).ok().filter(|&t| t > 0).ok_or_else(|| {
                    Error::backend(
                        self.backend(),
                        "acquiring: the database reported no fencing token",
                    )
                })?;
                Ok(TryAcquire::Acquired(
                    Lease::new(name.clone(), owner, ttl, sent)
                        .with_kind(kind)
                        .with_fencing(FencingToken::new(token)),
                ))
            }
            Outcome::Lost(census) => match (census.verdict(kind), kind) {
                (Verdict::Mismatch(stored), LockKind::Permit { permits }) => Err(Error::PermitsMismatch {
                    name: name.as_str().to_owned(),
                    stored: u32::try_from(stored).unwrap_or(u32::MAX),
                    asked: permits,
                }),
                _ => Ok(TryAcquire::Held(
                    census.wait_hint(kind).map_or_else(Holder::unknown, |left| {
                        Holder::expiring_in(self.remaining(Some(left)).unwrap_or(Duration::ZERO))
                    }),
                )),
            },
        }
    }

    /// Release of a hold: delete its row where the owner is the lease's and the hold is live.
    /// Matches by primitive, name, owner and kind only, so the bare lease of the cleanup after
    /// an ambiguous attempt works. **1 round trip.**
    pub(super) async fn release_hold(&self, lease: &Lease) -> Result<bool> {
        let kind = kind_column(lease.kind()).unwrap_or_default();
        let primitive = lease.kind().primitive().as_str();
        let key = lock_key(lease.name());
        let key = key.as_ref();
        let owner = lease.owner().to_string();
        let owner = owner.as_str();
        let sql = self.inner.sql.holds.release.as_str();
        let (affected, broken) = match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => self
                .run_tracked(
                    pool,
                    "releasing",
                    on_conn!(c => {
                        sqlx::query(sql).bind(primitive).bind(key).bind(owner).bind(kind).execute(c.conn()?).await
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
                        sqlx::query_scalar::<_, i64>(sql)
                            .bind(primitive)
                            .bind(key)
                            .bind(owner)
                            .bind(kind)
                            .fetch_one(c.conn()?)
                            .await
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
                        sqlx::query(sql).bind(primitive).bind(key).bind(owner).bind(kind).execute(c.conn()?).await
                    }),
                )
                .await
                .map(|(done, broken)| (done.rows_affected(), broken))?,
        };
        match broken {
            // As the mutex's release: a broken attempt may have released it.
            Some(error) if affected == 0 => Err(error),
            _ => {
                if affected > 0 {
                    self.host_released(lease.kind().primitive(), key);
                }
                Ok(affected > 0)
            }
        }
    }

    /// SQLite: wakes this host's waiters for the object, see
    /// [`HostWaiters::released_hold`](crate::host_waiters::HostWaiters::released_hold).
    fn host_released(&self, primitive: Primitive, key: &str) {
        #[cfg(feature = "sqlite")]
        if let Some(host) = &self.inner.host {
            host.released_hold(primitive, &host_object(primitive, key));
        }
        let _ = (primitive, key);
    }

    /// Extend a hold: move its `expires_at` to the database's now + `ttl` where the owner is
    /// the lease's and the hold is live. **1 round trip.**
    pub(super) async fn extend_hold(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>> {
        let units = self.ttl_units(ttl)?;
        let kind = kind_column(lease.kind()).unwrap_or_default();
        let primitive = lease.kind().primitive().as_str();
        let key = lock_key(lease.name());
        let key = key.as_ref();
        let owner = lease.owner().to_string();
        let owner = owner.as_str();
        let sql = self.inner.sql.holds.extend.as_str();
        let sent = Instant::now();
        let affected = match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => self
                .run(
                    pool,
                    "extending",
                    on_conn!(c => {
                        sqlx::query(sql)
                            .bind(units)
                            .bind(primitive)
                            .bind(key)
                            .bind(owner)
                            .bind(kind)
                            .execute(c.conn()?)
                            .await
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
                        sqlx::query(sql)
                            .bind(primitive)
                            .bind(key)
                            .bind(owner)
                            .bind(kind)
                            .bind(units)
                            .execute(c.conn()?)
                            .await
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
                        sqlx::query(sql)
                            .bind(primitive)
                            .bind(key)
                            .bind(owner)
                            .bind(kind)
                            .bind(units)
                            .execute(c.conn()?)
                            .await
                    }),
                )
                .await?
                .rows_affected(),
        };
        Ok((affected > 0).then(|| lease.renewed(ttl, sent)))
    }

    /// Withdraw: delete the waiting writer `waiter`'s record of the read-write lock `name`.
    /// Nothing for other kinds, which record no waiters. **1 round trip.**
    pub(super) async fn withdraw_waiter(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        if kind != LockKind::Write {
            return Ok(());
        }
        let primitive = Primitive::RwLock.as_str();
        let key = lock_key(name);
        let key = key.as_ref();
        let holder = waiter_holder(waiter);
        let holder = holder.as_str();
        let sql = self.inner.sql.holds.withdraw.as_str();
        match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => {
                self.run(
                    pool,
                    "withdrawing a waiting writer",
                    on_conn!(c => {
                        sqlx::query(sql).bind(primitive).bind(key).bind(holder).execute(c.conn()?).await
                    }),
                )
                .await?;
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                self.run(
                    pool,
                    "withdrawing a waiting writer",
                    on_conn!(c => {
                        sqlx::query_scalar::<_, i64>(sql)
                            .bind(primitive)
                            .bind(key)
                            .bind(holder)
                            .fetch_one(c.conn()?)
                            .await
                    }),
                )
                .await?;
            }
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                self.run(
                    pool,
                    "withdrawing a waiting writer",
                    on_conn!(c => {
                        sqlx::query(sql).bind(primitive).bind(key).bind(holder).execute(c.conn()?).await
                    }),
                )
                .await?;
            }
        }
        // Readers it kept out may come in now.
        self.host_released(Primitive::RwLock, key);
        Ok(())
    }

    /// The live holds of the `primitive` object `name`, oldest first; the mutex's holder, if
    /// any, for [`Primitive::Mutex`]. **1 round trip.**
    pub(super) async fn holder_states(
        &self,
        name: &LockName,
        primitive: Primitive,
    ) -> Result<Vec<LockState>> {
        if primitive == Primitive::Mutex {
            return Ok(self.inspect(name, Primitive::Mutex).await?.holders);
        }
        let primitive = primitive.as_str();
        let key = lock_key(name);
        let key = key.as_ref();
        let sql = self.inner.sql.holds.holders.as_str();
        let rows: Vec<HolderRow> = match &self.inner.pool {
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => {
                self.run(
                    pool,
                    "listing holders",
                    on_conn!(c => {
                        sqlx::query_as(sql).bind(primitive).bind(key).fetch_all(c.conn()?).await
                    }),
                )
                .await?
            }
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => {
                self.run(
                    pool,
                    "listing holders",
                    on_conn!(c => {
                        sqlx::query_as(sql).bind(primitive).bind(key).fetch_all(c.conn()?).await
                    }),
                )
                .await?
            }
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => {
                self.run(
                    pool,
                    "listing holders",
                    on_conn!(c => {
                        sqlx::query_as(sql).bind(primitive).bind(key).fetch_all(c.conn()?).await
                    }),
                )
                .await?
            }
        };
        Ok(rows
            .into_iter()
            .filter_map(|(holder, kind, permits, version, left)| {
                let kind = kind_of_row(&kind, permits)?;
                let fencing = u64::try_from(version).ok().map(FencingToken::new);
                Some(LockState::held(holder, fencing, self.remaining(left)).with_kind(kind))
            })
            .collect())
    }

    /// How long a waiting writer's record lives, in the dialect's unit: `stay`, from 1 ms up
    /// to the longest TTL.
    fn stay_units(&self, stay: Duration) -> i64 {
        let stay = stay.clamp(Duration::from_millis(1), MAX_TTL);
        let units = match self.dialect() {
            Dialect::MySql | Dialect::Postgres => stay.as_micros(),
            Dialect::Sqlite => stay.as_micros().div_ceil(1000),
        };
        // At most 30 days in µs: far below i64::MAX.
        i64::try_from(units).unwrap_or(i64::MAX)
    }
}

/// MySQL's attempt: one text query (see `holds_sql::mysql_attempt`).
#[cfg(feature = "mysql")]
mod mysql {
    use sqlx::mysql::MySqlConnection;
    use sqlx::{Executor, FromRow};

    use super::{Census, CensusRow, Outcome};

    /// The query's one row: won, the fencing token, then the census.
    type AttemptRow = (
        i64,
        Option<i64>,
        i64,
        i64,
        i64,
        i64,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
    );

    /// Runs the attempt's query (its transaction commits within it) and reads its outcome.
    pub(super) async fn attempt(conn: &mut MySqlConnection, query: &str) -> Result<Outcome, sqlx::Error> {
        // A bare string runs as a text query (`COM_QUERY`), the protocol that carries several
        // statements in one round trip.
        let rows = conn.fetch_all(query).await?;
        let row = rows.first().ok_or(sqlx::Error::RowNotFound)?;
        let (won, token, holds, readers, writers, waiting, stored, mine, first_permit, last_reader, writer) =
            AttemptRow::from_row(row)?;
        let census: CensusRow = (
            holds,
            readers,
            writers,
            waiting,
            stored,
            mine,
            first_permit,
            last_reader,
            writer,
        );
        Ok(match (won, token) {
            (1, Some(token)) => Outcome::Won(token),
            _ => Outcome::Lost(Census::from(census)),
        })
    }
}

/// PostgreSQL's attempt: one call of the attempt's function (see `holds_sql.rs`).
#[cfg(feature = "postgres")]
mod postgres {
    use super::{Census, CensusRow, Outcome};

    /// The call's one row: won, the fencing token, then the census.
    pub(super) type AttemptRow = (
        bool,
        Option<i64>,
        i64,
        i64,
        i64,
        i64,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
    );

    /// The outcome the call's row reports.
    pub(super) fn outcome(row: AttemptRow) -> Outcome {
        let (won, token, holds, readers, writers, waiting, stored, mine, first_permit, last_reader, writer) =
            row;
        match (won, token) {
            (true, Some(token)) => Outcome::Won(token),
            _ => {
                let census: CensusRow = (
                    holds,
                    readers,
                    writers,
                    waiting,
                    stored,
                    mine,
                    first_permit,
                    last_reader,
                    writer,
                );
                Outcome::Lost(Census::from(census))
            }
        }
    }
}

/// SQLite's attempt: the census and the writes as statements of one `BEGIN IMMEDIATE`
/// transaction, the rule applied in between.
#[cfg(feature = "sqlite")]
mod sqlite {
    use distlock_core::LockKind;
    use sqlx::SqliteConnection;

    use super::{Census, CensusRow, Outcome, Verdict};
    use crate::holds_sql::SqliteAttempt;

    /// The statements and values of one attempt.
    pub(super) struct Attempt<'a> {
        pub(super) steps: &'a SqliteAttempt,
        pub(super) primitive: &'static str,
        pub(super) key: &'a str,
        pub(super) name: &'a str,
        pub(super) owner: &'a str,
        pub(super) kind: LockKind,
        pub(super) kind_col: &'static str,
        /// The holds table's `withdraw` statement.
        pub(super) withdraw: &'a str,
        /// The hold's TTL in ms.
        pub(super) ttl: i64,
        /// A waiting writer's `holder` value and how long its record lives (ms).
        pub(super) waiter: Option<(&'a str, i64)>,
    }

    /// Runs one attempt in its own transaction, committed before it returns. On an error the
    /// transaction is still open: the caller closes the connection (`in_transaction!`).
    pub(super) async fn attempt(
        conn: &mut SqliteConnection,
        a: &Attempt<'_>,
    ) -> Result<Outcome, sqlx::Error> {
        let s = a.steps;
        // Takes the database's write lock now (waiting for it up to the busy timeout), so the
        // census below stays true until the commit.
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
        sqlx::query(&s.purge)
            .bind(a.primitive)
            .bind(a.key)
            .execute(&mut *conn)
            .await?;
        let census: CensusRow = sqlx::query_as(&s.census)
            .bind(a.primitive)
            .bind(a.key)
            .bind(a.owner)
            .bind(a.kind_col)
            .fetch_one(&mut *conn)
            .await?;
        let census = Census::from(census);
        let outcome = match census.verdict(a.kind) {
            Verdict::Renew(token) => {
                sqlx::query(&s.renew)
                    .bind(a.primitive)
                    .bind(a.key)
                    .bind(a.owner)
                    .bind(a.kind_col)
                    .bind(a.ttl)
                    .execute(&mut *conn)
                    .await?;
                Outcome::Won(token)
            }
            Verdict::Admit => {
                let token: i64 = sqlx::query_scalar(&s.bump)
                    .bind(a.primitive)
                    .bind(a.key)
                    .bind(a.name)
                    .bind(crate::lock::clock_micros())
                    .fetch_one(&mut *conn)
                    .await?;
                let permits = match a.kind {
                    LockKind::Permit { permits } => Some(i64::from(permits)),
                    _ => None,
                };
                sqlx::query(&s.insert)
                    .bind(a.primitive)
                    .bind(a.key)
                    .bind(a.owner)
                    .bind(a.name)
                    .bind(a.kind_col)
                    .bind(permits)
                    .bind(token)
                    .bind(a.ttl)
                    .execute(&mut *conn)
                    .await?;
                Outcome::Won(token)
            }
            Verdict::Mismatch(_) | Verdict::Refuse => Outcome::Lost(census),
        };
        if let Some((waiter, stay)) = a.waiter {
            match outcome {
                Outcome::Won(_) => {
                    sqlx::query(a.withdraw)
                        .bind(a.primitive)
                        .bind(a.key)
                        .bind(waiter)
                        .execute(&mut *conn)
                        .await?;
                }
                Outcome::Lost(_) => {
                    sqlx::query(&s.record_waiter)
                        .bind(a.primitive)
                        .bind(a.key)
                        .bind(waiter)
                        .bind(a.name)
                        .bind(stay)
                        .execute(&mut *conn)
                        .await?;
                }
            }
        }
        sqlx::query("COMMIT").execute(&mut *conn).await?;
        Ok(outcome)
    }
}

/// SQLite: the name under which a host's waiters for `key` of `primitive` meet (see
/// `host_waiters`): the mutex's key itself, else the primitive's name, a space and the key
/// (the objects of one name are apart from each other; a key has no spaces).
#[cfg(feature = "sqlite")]
pub(crate) fn host_object(primitive: Primitive, key: &str) -> std::borrow::Cow<'_, str> {
    match primitive {
        Primitive::Mutex => key.into(),
        other => format!("{} {key}", other.as_str()).into(),
    }
}

//! Semaphores and read-write locks on [`SqlLock`]: the holds table's operations (the rows and
//! statements are `holds_sql.rs`'s, the admission rule `admission.rs`'s). This module owns
//! the meaning of their results; it shares the pool, the retries and the error mapping of
//! the mutex (`lock.rs`), and never touches the mutex table.
//!
//! An upgradeable read ([`LockKind::UpgradeableRead`]) is a hold row of kind `uread`. Its
//! owner's write attempt is its upgrade: granted when no other hold lives, it turns that row
//! into the write hold (new kind, new fencing token, the write lease's TTL) in the attempt's
//! own transaction, so no other writer can come between; while it waits, its waiting record
//! keeps new readers out as any waiting writer's does. The read lease then renews nothing.
//!
//! A hold of several permits ([`LockKind::Permit`]'s `weight`) is one hold: one row, and a
//! weight row written in the same transaction (see `holds_sql.rs`); its release, renewal and
//! the cleanup by owner act on its row, and so on all of its permits at once. It costs no
//! round trip more than a single permit.
//!
//! Round trips (MySQL) and statements (SQLite: local calls to the connection's thread, no
//! network) per operation:
//!
//! | operation                       | MySQL / MariaDB | PostgreSQL | SQLite |
//! |---------------------------------|-----------------|------------|--------|
//! | acquire, won                    | 1               | 1 (a call of the attempt's function) | 6 (`BEGIN IMMEDIATE`, purge, census, bump, insert, `COMMIT`); a hold of several permits (its weight row) or a writer with a waiting record 7 |
//! | acquire, refused or mismatched  | 1               | 1          | 4 (`BEGIN IMMEDIATE`, purge, census, `COMMIT`); a waiting writer 5 |
//! | acquire, retried after applied  | 1               | 1          | 5 (`BEGIN IMMEDIATE`, purge, census, renew, `COMMIT`) |
//! | upgrade (a write attempt by the upgradeable reader), granted | 1 | 1 | 6 (`BEGIN IMMEDIATE`, purge, census, bump, the row turned into the write hold, `COMMIT`); 7 with its waiting record |
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
use crate::statement::{DialectPool, Values};

/// MySQL's attempt: one text query (see `holds_sql::mysql_attempt`).
#[cfg(feature = "mysql")]
mod mysql;
/// PostgreSQL's attempt: one call of the attempt's function (see `holds_sql.rs`).
#[cfg(feature = "postgres")]
mod postgres;
/// SQLite's attempt: the census and the writes as statements of one `BEGIN IMMEDIATE`
/// transaction, the rule applied in between.
#[cfg(feature = "sqlite")]
mod sqlite;

/// How one attempt ended on the database.
enum Outcome {
    /// The hold is ours, with this fencing token.
    Won(i64),
    /// Not admitted; what the attempt saw.
    Lost(Census),
}

/// A live hold as `inspect_holders` reads it: holder, kind, permits, version, remaining time,
/// weight.
type HolderRow = (String, String, Option<i64>, i64, Option<i64>, i64);

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
        if let LockKind::Permit { permits: 0, .. } = kind {
            return Err(Error::invalid_options("a semaphore needs at least one permit"));
        }
        if let LockKind::Permit { permits, weight } = kind {
            if weight == 0 || weight > permits {
                return Err(Error::invalid_options(format!(
                    "a hold of {weight} permits of a semaphore of {permits}"
                )));
            }
        }
        // At most `permits`, so at most u32::MAX; the columns are signed 32-bit on PostgreSQL.
        let weight = i32::try_from(kind.weight()).unwrap_or(i32::MAX);
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
                    &self.inner.sql.holds.weights,
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
                let statement = &self.inner.sql.holds.attempt;
                let sql = statement.as_str();
                let values = Values {
                    primitive: Some(kind.primitive().as_str()),
                    key: Some(&key),
                    name: Some(name.as_str()),
                    owner: Some(&owner_str),
                    kind: Some(kind_column(kind).unwrap_or_default()),
                    permits: match kind {
                        LockKind::Permit { permits, .. } => Some(i32::try_from(permits).unwrap_or(i32::MAX)),
                        _ => None,
                    },
                    ttl: Some(ttl_units),
                    weight: Some(weight),
                    // A waiting writer's record: its holder value and its stay.
                    waiter: waiter.as_ref().map(|(holder, _)| holder.as_str()),
                    stay: waiter.as_ref().map(|(_, stay)| *stay),
                    ..Values::default()
                };
                self.run(
                    pool,
                    "acquiring",
                    on_conn!(c => {
                        let args = pool.arguments(statement, &values)?;
                        sqlx::query_as_with::<_, postgres::AttemptRow, _>(sql, args)
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
                    withdraw: &self.inner.sql.holds.withdraw,
                    kind,
                    values: Values {
                        primitive: Some(kind.primitive().as_str()),
                        key: Some(&key),
                        name: Some(name.as_str()),
                        owner: Some(&owner_str),
                        kind: Some(kind_column(kind).unwrap_or_default()),
                        permits: match kind {
                            LockKind::Permit { permits, .. } => {
                                Some(i32::try_from(permits).unwrap_or(i32::MAX))
                            }
                            _ => None,
                        },
                        ttl: Some(ttl_units),
                        weight: Some(weight),
                        holder: waiter.as_ref().map(|(holder, _)| holder.as_str()),
                        stay: waiter.as_ref().map(|(_, stay)| *stay),
                        ..Values::default()
                    },
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
                (Verdict::Mismatch(stored), LockKind::Permit { permits, .. }) => {
                    Err(Error::PermitsMismatch {
                        name: name.as_str().to_owned(),
                        stored: u32::try_from(stored).unwrap_or(u32::MAX),
                        asked: permits,
                    })
                }
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
        let key = lock_key(lease.name());
        let key = key.as_ref();
        let owner = lease.owner().to_string();
        let values = Values {
            primitive: Some(lease.kind().primitive().as_str()),
            key: Some(key),
            owner: Some(&owner),
            kind: Some(kind_column(lease.kind()).unwrap_or_default()),
            ..Values::default()
        };
        let statement = &self.inner.sql.holds.release;
        let (affected, broken) = self.run_release(statement, &values).await?;
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
        let key = lock_key(lease.name());
        let owner = lease.owner().to_string();
        let values = Values {
            primitive: Some(lease.kind().primitive().as_str()),
            key: Some(&key),
            owner: Some(&owner),
            kind: Some(kind_column(lease.kind()).unwrap_or_default()),
            ttl: Some(units),
            ..Values::default()
        };
        let statement = &self.inner.sql.holds.extend;
        let sql = statement.as_str();
        let sent = Instant::now();
        let affected = each_pool!(self, pool => {
            self.run(
                pool,
                "extending",
                on_conn!(c => {
                    let args = pool.arguments(statement, &values)?;
                    sqlx::query_with(sql, args).execute(c.conn()?).await
                }),
            )
            .await?
            .rows_affected()
        });
        Ok((affected > 0).then(|| lease.renewed(ttl, sent)))
    }

    /// Withdraw: delete the waiting writer `waiter`'s record of the read-write lock `name`.
    /// Nothing for other kinds, which record no waiters. **1 round trip.**
    pub(super) async fn withdraw_waiter(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        if kind != LockKind::Write {
            return Ok(());
        }
        let key = lock_key(name);
        let key = key.as_ref();
        let holder = waiter_holder(waiter);
        let values = Values {
            primitive: Some(Primitive::RwLock.as_str()),
            key: Some(key),
            holder: Some(&holder),
            ..Values::default()
        };
        let statement = &self.inner.sql.holds.withdraw;
        let sql = statement.as_str();
        // PostgreSQL's statement also yields whether it deleted the record: not needed here.
        each_pool!(self, pool => {
            self.run(
                pool,
                "withdrawing a waiting writer",
                on_conn!(c => {
                    let args = pool.arguments(statement, &values)?;
                    sqlx::query_with(sql, args).execute(c.conn()?).await
                }),
            )
            .await?;
        });
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
        let key = lock_key(name);
        let values = Values {
            primitive: Some(primitive.as_str()),
            key: Some(&key),
            ..Values::default()
        };
        let statement = &self.inner.sql.holds.holders;
        let sql = statement.as_str();
        let rows: Vec<HolderRow> = each_pool!(self, pool => {
            self.run(
                pool,
                "listing holders",
                on_conn!(c => {
                    let args = pool.arguments(statement, &values)?;
                    sqlx::query_as_with(sql, args).fetch_all(c.conn()?).await
                }),
            )
            .await?
        });
        Ok(rows
            .into_iter()
            .filter_map(|(holder, kind, permits, version, left, weight)| {
                let kind = kind_of_row(&kind, permits, weight)?;
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

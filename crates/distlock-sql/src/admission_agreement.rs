//! The admission rule's three copies agree: the Rust rule (`admission.rs`, which SQLite
//! applies), MySQL's SQL (`holds_sql.rs`'s `mysql_attempt`, on a real MariaDB) and the
//! PL/pgSQL function (on a real PostgreSQL). One table of situations (permits held and free,
//! readers in, a waiting writer recorded, expired holds, the attempt's own live hold) is
//! written into each database by hand; an attempt then runs through the backend, and its
//! decision must be the one the Rust rule gives for the census the situation describes.
#![allow(clippy::too_many_arguments)] // the seeded row's columns

use std::time::Duration;

use distlock_core::{DistributedLockExt, Error, LockKind, LockName, OwnerToken, TryAcquire};

use crate::admission::{Census, Verdict};
use crate::{SqlConfig, SqlLock};

/// A row written before the attempt.
#[derive(Debug, Clone, Copy)]
enum Seed {
    /// A permit admitted with this count.
    Permit(u32),
    Read,
    Write,
    /// Another owner's upgradeable read.
    Upgradeable,
    /// The attempt's owner's upgradeable read (a write attempt then is its upgrade).
    MyUpgradeable,
    /// A waiting writer's record.
    Waiter,
    /// The attempt's own hold, of the attempt's kind (a retried attempt).
    Mine,
}

/// A seed, live or expired.
type Row = (Seed, bool);

const LIVE: bool = true;
const EXPIRED: bool = false;
/// The fencing token of the attempt's own hold.
const MINE: i64 = 777;

/// The situations: the rows of one object, and the attempt's kind.
fn situations() -> Vec<(&'static str, Vec<Row>, LockKind)> {
    let permits = |n| LockKind::Permit {
        permits: n,
        weight: 1,
    };
    vec![
        ("no holds, a permit", vec![], permits(2)),
        (
            "one of two permits held",
            vec![(Seed::Permit(2), LIVE)],
            permits(2),
        ),
        (
            "both permits held",
            vec![(Seed::Permit(2), LIVE), (Seed::Permit(2), LIVE)],
            permits(2),
        ),
        (
            "two permits, one expired",
            vec![(Seed::Permit(2), LIVE), (Seed::Permit(2), EXPIRED)],
            permits(2),
        ),
        (
            "a live holder admitted with 3",
            vec![(Seed::Permit(3), LIVE)],
            permits(2),
        ),
        (
            "an expired holder admitted with 3",
            vec![(Seed::Permit(3), EXPIRED)],
            permits(2),
        ),
        (
            "full, one of them mine",
            vec![(Seed::Permit(2), LIVE), (Seed::Mine, LIVE)],
            permits(2),
        ),
        (
            "full, mine expired",
            vec![(Seed::Permit(1), LIVE), (Seed::Mine, EXPIRED)],
            permits(1),
        ),
        (
            "readers in, a reader",
            vec![(Seed::Read, LIVE), (Seed::Read, LIVE)],
            LockKind::Read,
        ),
        (
            "readers in, a writer",
            vec![(Seed::Read, LIVE), (Seed::Read, LIVE)],
            LockKind::Write,
        ),
        (
            "readers in and a waiting writer, a reader",
            vec![(Seed::Read, LIVE), (Seed::Waiter, LIVE)],
            LockKind::Read,
        ),
        (
            "readers in and an expired waiting writer, a reader",
            vec![(Seed::Read, LIVE), (Seed::Waiter, EXPIRED)],
            LockKind::Read,
        ),
        (
            "a waiting writer only, a reader",
            vec![(Seed::Waiter, LIVE)],
            LockKind::Read,
        ),
        (
            "waiting writers only, a writer",
            vec![(Seed::Waiter, LIVE), (Seed::Waiter, LIVE)],
            LockKind::Write,
        ),
        ("a writer in, a reader", vec![(Seed::Write, LIVE)], LockKind::Read),
        (
            "a writer in, a writer",
            vec![(Seed::Write, LIVE)],
            LockKind::Write,
        ),
        (
            "an expired writer, a reader",
            vec![(Seed::Write, EXPIRED)],
            LockKind::Read,
        ),
        (
            "an expired writer, a writer",
            vec![(Seed::Write, EXPIRED)],
            LockKind::Write,
        ),
        (
            "expired readers, a writer",
            vec![(Seed::Read, EXPIRED), (Seed::Read, EXPIRED)],
            LockKind::Write,
        ),
        (
            "a reader in, mine (a reader)",
            vec![(Seed::Read, LIVE), (Seed::Mine, LIVE)],
            LockKind::Read,
        ),
        (
            "an upgradeable reader in, a reader",
            vec![(Seed::Upgradeable, LIVE)],
            LockKind::Read,
        ),
        (
            "an upgradeable reader in, an upgradeable reader",
            vec![(Seed::Upgradeable, LIVE)],
            LockKind::UpgradeableRead,
        ),
        (
            "an expired upgradeable reader, an upgradeable reader",
            vec![(Seed::Upgradeable, EXPIRED)],
            LockKind::UpgradeableRead,
        ),
        (
            "an upgradeable reader in, a writer",
            vec![(Seed::Upgradeable, LIVE)],
            LockKind::Write,
        ),
        (
            "readers in, an upgradeable reader",
            vec![(Seed::Read, LIVE), (Seed::Read, LIVE)],
            LockKind::UpgradeableRead,
        ),
        (
            "a waiting writer, an upgradeable reader",
            vec![(Seed::Read, LIVE), (Seed::Waiter, LIVE)],
            LockKind::UpgradeableRead,
        ),
        (
            "a writer in, an upgradeable reader",
            vec![(Seed::Write, LIVE)],
            LockKind::UpgradeableRead,
        ),
        (
            "my upgradeable read and a reader, its upgrade",
            vec![(Seed::MyUpgradeable, LIVE), (Seed::Read, LIVE)],
            LockKind::Write,
        ),
        (
            "my upgradeable read alone and a waiting writer, its upgrade",
            vec![(Seed::MyUpgradeable, LIVE), (Seed::Waiter, LIVE)],
            LockKind::Write,
        ),
        (
            "my expired upgradeable read and a reader, a writer",
            vec![(Seed::MyUpgradeable, EXPIRED), (Seed::Read, LIVE)],
            LockKind::Write,
        ),
        (
            "my write lock and a waiting writer, a writer",
            vec![(Seed::Mine, LIVE), (Seed::Waiter, LIVE)],
            LockKind::Write,
        ),
    ]
}

/// The census the rows describe, as the Rust rule reads it (remaining times aside).
fn census(rows: &[Row], kind: LockKind) -> Census {
    let mut census = Census::default();
    for &(seed, live) in rows.iter().filter(|(_, live)| *live) {
        debug_assert!(live);
        let seed_kind = match seed {
            Seed::Mine => {
                census.mine = Some(MINE);
                kind
            }
            Seed::Permit(n) => LockKind::Permit {
                permits: n,
                weight: 1,
            },
            Seed::Read => LockKind::Read,
            Seed::Write => LockKind::Write,
            Seed::Upgradeable => LockKind::UpgradeableRead,
            Seed::MyUpgradeable => {
                census.my_upgradeable = Some(100);
                LockKind::UpgradeableRead
            }
            Seed::Waiter => {
                census.waiting += 1;
                continue;
            }
        };
        census.holds += 1;
        match seed_kind {
            LockKind::UpgradeableRead => census.upgraders += 1,
            LockKind::Permit { permits, .. } => census.stored_permits = Some(i64::from(permits)),
            LockKind::Read => census.readers += 1,
            _ => census.writers += 1,
        }
    }
    census
}

/// A decision as a backend shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Admit,
    Renew,
    Refuse,
    Mismatch(u32),
}

fn expected(verdict: Verdict) -> Decision {
    match verdict {
        Verdict::Admit | Verdict::Upgrade => Decision::Admit,
        Verdict::Renew(_) => Decision::Renew,
        Verdict::Refuse => Decision::Refuse,
        Verdict::Mismatch(n) => Decision::Mismatch(u32::try_from(n).expect("a small count")),
    }
}

/// Writes one seeded row through the test's own connection.
trait Seeder {
    /// Inserts a row into the holds table `holds` that lives `left_ms` more (negative:
    /// expired that long ago).
    async fn insert(
        &self,
        holds: &str,
        primitive: &str,
        key: &str,
        holder: &str,
        kind: &str,
        permits: Option<i64>,
        version: i64,
        left_ms: i64,
    );
}

impl Seeder for sqlx::MySqlPool {
    async fn insert(
        &self,
        holds: &str,
        primitive: &str,
        key: &str,
        holder: &str,
        kind: &str,
        permits: Option<i64>,
        version: i64,
        left_ms: i64,
    ) {
        sqlx::query(&format!(
            "INSERT INTO `{holds}` (primitive, lock_key, holder, lock_name, kind, permits, version, expires_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL (? * 1000) MICROSECOND)"
        ))
        .bind(primitive)
        .bind(key)
        .bind(holder)
        .bind(key)
        .bind(kind)
        .bind(permits)
        .bind(version)
        .bind(left_ms)
        .execute(self)
        .await
        .expect("a seeded row");
    }
}

impl Seeder for sqlx::PgPool {
    async fn insert(
        &self,
        holds: &str,
        primitive: &str,
        key: &str,
        holder: &str,
        kind: &str,
        permits: Option<i64>,
        version: i64,
        left_ms: i64,
    ) {
        sqlx::query(&format!(
            "INSERT INTO \"{holds}\" (primitive, lock_key, holder, lock_name, kind, permits, version, expires_at) \
             VALUES ($1, $2, $3, $2, $4, $5::int4, $6, clock_timestamp() + $7::int8 * interval '1 millisecond')"
        ))
        .bind(primitive)
        .bind(key)
        .bind(holder)
        .bind(kind)
        .bind(permits.map(|p| i32::try_from(p).expect("small")))
        .bind(version)
        .bind(left_ms)
        .execute(self)
        .await
        .expect("a seeded row");
    }
}

impl Seeder for sqlx::SqlitePool {
    async fn insert(
        &self,
        holds: &str,
        primitive: &str,
        key: &str,
        holder: &str,
        kind: &str,
        permits: Option<i64>,
        version: i64,
        left_ms: i64,
    ) {
        sqlx::query(&format!(
            "INSERT INTO \"{holds}\" (primitive, lock_key, holder, lock_name, kind, permits, version, expires_at) \
             VALUES (?1, ?2, ?3, ?2, ?4, ?5, ?6, \
             CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) + ?7)"
        ))
        .bind(primitive)
        .bind(key)
        .bind(holder)
        .bind(kind)
        .bind(permits)
        .bind(version)
        .bind(left_ms)
        .execute(self)
        .await
        .expect("a seeded row");
    }
}

/// Runs every situation on `lock` (seeding through `db`) and compares each decision with the
/// Rust rule's.
async fn agree(lock: &SqlLock, db: &impl Seeder, dialect: &str) {
    let holds = crate::holds_sql::holds_table(lock.config().dialect(), &lock.config().table);
    let mut disagreements = Vec::new();
    for (i, (what, rows, kind)) in situations().into_iter().enumerate() {
        let key = format!("agree-{i}");
        let name = LockName::new(&key).expect("valid");
        let primitive = kind.primitive().as_str();
        let owner = OwnerToken::new();
        for (j, &(seed, live)) in rows.iter().enumerate() {
            let (holder, seed_kind, version) = match seed {
                Seed::Mine => (owner.to_string(), kind, MINE),
                Seed::Waiter => (format!("~waiter-{j}"), LockKind::Exclusive, 0),
                Seed::Permit(n) => (
                    format!("other-{j}"),
                    LockKind::Permit {
                        permits: n,
                        weight: 1,
                    },
                    100,
                ),
                Seed::Read => (format!("other-{j}"), LockKind::Read, 100),
                Seed::Write => (format!("other-{j}"), LockKind::Write, 100),
                Seed::Upgradeable => (format!("other-{j}"), LockKind::UpgradeableRead, 100),
                Seed::MyUpgradeable => (owner.to_string(), LockKind::UpgradeableRead, 100),
            };
            let column = crate::holds_sql::kind_column(seed_kind).unwrap_or("waiter");
            let permits = match seed_kind {
                LockKind::Permit { permits, .. } => Some(i64::from(permits)),
                _ => None,
            };
            let left_ms = if live { 60_000 } else { -60_000 };
            db.insert(
                &holds, primitive, &key, &holder, column, permits, version, left_ms,
            )
            .await;
        }
        let rule = expected(census(&rows, kind).verdict(kind));
        let outcome = lock
            .try_acquire_kind(&name, kind, owner, Duration::from_secs(30), None)
            .await;
        let seen = match outcome {
            Ok(TryAcquire::Acquired(lease))
                if lease.fencing_token().map(|t| t.get()) == Some(MINE as u64) =>
            {
                Decision::Renew
            }
            Ok(TryAcquire::Acquired(_)) => Decision::Admit,
            Ok(TryAcquire::Held(_)) => Decision::Refuse,
            Err(Error::PermitsMismatch { stored, .. }) => Decision::Mismatch(stored),
            Err(e) => panic!("{dialect}, {what}: {e}"),
        };
        if seen != rule {
            disagreements.push(format!("{what}: the Rust rule {rule:?}, {dialect} {seen:?}"));
        }
    }
    assert!(
        disagreements.is_empty(),
        "the admission rule's copies disagree:\n{}",
        disagreements.join("\n")
    );
}

fn table() -> String {
    format!("agree_{}", uuid::Uuid::new_v4().simple())
}

async fn client(config: SqlConfig, table: &str) -> SqlLock {
    config
        .with_table(table)
        .expect("a plain name")
        .with_purge_after(None)
        .expect("valid")
        .build()
        .await
        .expect("connects")
}

#[tokio::test]
async fn sqlite_applies_the_rust_rule() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("agree.db");
    let table = table();
    let lock = client(SqlConfig::sqlite(&path), &table).await;
    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("opens");
    agree(&lock, &db, "SQLite").await;
}

#[tokio::test]
async fn mysql_sql_agrees_with_the_rust_rule() {
    let url = tokio::task::spawn_blocking(distlock_testkit::shared::mysql_url)
        .await
        .expect("the starter thread")
        .expect("the shared MariaDB starts (run scripts/install-test-deps to install mariadb)");
    let table = table();
    let lock = client(SqlConfig::from_url(&url).expect("a URL"), &table).await;
    let db = sqlx::MySqlPool::connect(&url).await.expect("connects");
    agree(&lock, &db, "MariaDB").await;
}

#[tokio::test]
async fn plpgsql_agrees_with_the_rust_rule() {
    let url = tokio::task::spawn_blocking(distlock_testkit::shared::postgres_url)
        .await
        .expect("the starter thread")
        .expect("the shared PostgreSQL starts (run scripts/install-test-deps to install postgresql)");
    let table = table();
    let lock = client(SqlConfig::from_url(&url).expect("a URL"), &table).await;
    let db = sqlx::PgPool::connect(&url).await.expect("connects");
    agree(&lock, &db, "PostgreSQL").await;
}

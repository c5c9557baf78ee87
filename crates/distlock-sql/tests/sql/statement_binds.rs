//! Every value a statement binds lands in its own column, on every dialect: the rows written
//! by acquire, extend, hand-over, release, a permit's attempt, extend and release, and a
//! waiting writer's record (and on PostgreSQL a queued waiter) are read back by hand. The
//! values are told apart (a name whose key differs from it, distinct owners, a distinct TTL
//! per step), so two parameters bound in each other's place change a column this test reads.
#![cfg(all(feature = "mysql", feature = "postgres", feature = "sqlite"))]

use std::time::Duration;

use distlock_core::{
    Attempt, DistributedLock, DistributedLockExt, Lease, LockKind, LockName, OwnerToken, TryAcquire,
};
use distlock_sql::{SqlConfig, SqlLock};
use sqlx::Row as _;

/// The table of this run, so runs on a shared server never meet.
fn table() -> String {
    format!("binds_{:016x}", rand_u64())
}

fn rand_u64() -> u64 {
    let id = uuid::Uuid::new_v4();
    u64::from_le_bytes(id.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// A row of the mutex table.
#[derive(Debug)]
struct LockRow {
    name: String,
    owner: Option<String>,
    version: i64,
    left_ms: Option<i64>,
}

/// A row of the holds table (not the object's).
#[derive(Debug)]
struct HoldRow {
    holder: String,
    name: String,
    kind: String,
    permits: Option<i64>,
    version: i64,
    left_ms: i64,
}

/// A connection of the test's own to the database under test.
enum Db {
    MySql(sqlx::MySqlPool),
    Postgres(sqlx::PgPool),
    Sqlite(sqlx::SqlitePool),
}

impl Db {
    async fn lock_row(&self, table: &str, key: &str) -> LockRow {
        let row = match self {
            Db::MySql(pool) => sqlx::query(&format!(
                "SELECT CAST(lock_name AS CHAR CHARACTER SET utf8mb4), \
                 CAST(owner AS CHAR CHARACTER SET utf8mb4), version, \
                 TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) DIV 1000 \
                 FROM `{table}` WHERE lock_key = ?"
            ))
            .bind(key)
            .fetch_one(pool)
            .await
            .map(|r| LockRow {
                name: r.get(0),
                owner: r.get(1),
                version: r.get(2),
                left_ms: r.get(3),
            }),
            Db::Postgres(pool) => sqlx::query(&format!(
                "SELECT lock_name, owner::text, version, \
                 (extract(epoch FROM (expires_at - clock_timestamp())) * 1000)::bigint \
                 FROM \"{table}\" WHERE lock_key = $1"
            ))
            .bind(key)
            .fetch_one(pool)
            .await
            .map(|r| LockRow {
                name: r.get(0),
                owner: r.get(1),
                version: r.get(2),
                left_ms: r.get(3),
            }),
            Db::Sqlite(pool) => sqlx::query(&format!(
                "SELECT lock_name, owner, version, \
                 expires_at - CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) \
                 FROM \"{table}\" WHERE lock_key = ?1"
            ))
            .bind(key)
            .fetch_one(pool)
            .await
            .map(|r| LockRow {
                name: r.get(0),
                owner: r.get(1),
                version: r.get(2),
                left_ms: r.get(3),
            }),
        };
        row.expect("the lock's row reads back")
    }

    async fn hold_rows(&self, table: &str, primitive: &str, key: &str) -> Vec<HoldRow> {
        let holds = format!("{table}_holds");
        let rows = match self {
            Db::MySql(pool) => sqlx::query(&format!(
                "SELECT CAST(holder AS CHAR CHARACTER SET utf8mb4), \
                 CAST(lock_name AS CHAR CHARACTER SET utf8mb4), CAST(kind AS CHAR CHARACTER SET utf8mb4), \
                 CAST(permits AS SIGNED), version, \
                 TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) DIV 1000 \
                 FROM `{holds}` WHERE primitive = ? AND lock_key = ? AND kind <> 'object' \
                 AND expires_at > UTC_TIMESTAMP(6) ORDER BY holder"
            ))
            .bind(primitive)
            .bind(key)
            .fetch_all(pool)
            .await
            .map(|rows| rows.iter().map(hold_row).collect()),
            Db::Postgres(pool) => sqlx::query(&format!(
                "SELECT holder::text, lock_name, kind::text, permits::int8, version, \
                 (extract(epoch FROM (expires_at - clock_timestamp())) * 1000)::bigint \
                 FROM \"{holds}\" WHERE primitive = $1 AND lock_key = $2 AND kind <> 'object' \
                 AND expires_at > clock_timestamp() ORDER BY holder"
            ))
            .bind(primitive)
            .bind(key)
            .fetch_all(pool)
            .await
            .map(|rows| rows.iter().map(hold_row).collect()),
            Db::Sqlite(pool) => sqlx::query(&format!(
                "SELECT holder, lock_name, kind, permits, version, \
                 expires_at - CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) AS left_ms \
                 FROM \"{holds}\" WHERE primitive = ?1 AND lock_key = ?2 AND kind <> 'object' \
                 AND left_ms > 0 ORDER BY holder"
            ))
            .bind(primitive)
            .bind(key)
            .fetch_all(pool)
            .await
            .map(|rows| rows.iter().map(hold_row).collect()),
        };
        rows.expect("the holds read back")
    }
}

fn hold_row<R>(r: &R) -> HoldRow
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<i64>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    HoldRow {
        holder: r.get(0),
        name: r.get(1),
        kind: r.get(2),
        permits: r.get(3),
        version: r.get(4),
        left_ms: r.get(5),
    }
}

fn acquired(outcome: TryAcquire, what: &str) -> Lease {
    match outcome {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(holder) => panic!("{what}: held ({holder:?})"),
    }
}

/// `left` ms is what a TTL of `ttl` leaves a moment after it was set.
fn assert_left(left: Option<i64>, ttl: Duration, what: &str) {
    let ttl = i64::try_from(ttl.as_millis()).expect("fits");
    let left = left.unwrap_or_else(|| panic!("{what}: no expiry"));
    assert!(
        left <= ttl && left > ttl - 10_000,
        "{what}: {left} ms left, expected a little under {ttl} ms"
    );
}

fn token(lease: &Lease) -> i64 {
    i64::try_from(lease.fencing_token().expect("a fencing token").get()).expect("fits")
}

/// The steps and their checks, the same on every dialect.
async fn check(lock: &SqlLock, db: &Db, table: &str) {
    let name = LockName::new("bind check/é ü 'q'").expect("valid");
    let key = name.encode(255, |c| c.is_ascii_graphic()).into_owned();
    assert_ne!(key, name.as_str(), "the key must differ from the name");
    let owner = OwnerToken::new();

    // Acquire: key, name, owner, TTL, fencing token.
    let ttl = Duration::from_secs(60);
    let lease = acquired(
        lock.try_acquire(&name, owner, ttl).await.expect("acquire"),
        "acquire",
    );
    let row = db.lock_row(table, &key).await;
    assert_eq!(row.name, name.as_str(), "acquire: lock_name");
    assert_eq!(row.owner, Some(owner.to_string()), "acquire: owner");
    assert_eq!(row.version, token(&lease), "acquire: version");
    assert_left(row.left_ms, ttl, "acquire: expires_at");

    // An attempt of another owner: held, and the row unchanged.
    match lock
        .try_acquire(&name, OwnerToken::new(), Duration::from_secs(5))
        .await
        .expect("a second attempt")
    {
        TryAcquire::Held(holder) => {
            let left = holder.remaining.expect("the holder's remaining time");
            assert!(left > Duration::from_secs(50), "held: {left:?} left");
        }
        TryAcquire::Acquired(_) => panic!("a second owner took a held lock"),
    }
    let row = db.lock_row(table, &key).await;
    assert_eq!(row.owner, Some(owner.to_string()), "held: owner");
    assert_left(row.left_ms, ttl, "held: expires_at");

    // Extend: the TTL, matched by key and owner.
    let longer = Duration::from_secs(120);
    let lease = lock
        .extend(&lease, longer)
        .await
        .expect("extend")
        .expect("extended");
    assert_left(
        db.lock_row(table, &key).await.left_ms,
        longer,
        "extend: expires_at",
    );

    // Hand over: the next owner and its TTL, matched by key and owner.
    let next = OwnerToken::new();
    let handed = Duration::from_secs(90);
    let next_lease = lock
        .hand_over(&lease, next, handed)
        .await
        .expect("hand over")
        .expect("handed over");
    let row = db.lock_row(table, &key).await;
    assert_eq!(row.owner, Some(next.to_string()), "hand over: owner");
    assert_eq!(row.version, token(&next_lease), "hand over: version");
    assert_left(row.left_ms, handed, "hand over: expires_at");
    assert!(
        !lock.release(&lease).await.expect("a stale release"),
        "the old owner released"
    );

    // Release: matched by key and owner.
    assert!(lock.release(&next_lease).await.expect("release"), "release");
    let row = db.lock_row(table, &key).await;
    assert_eq!((row.owner, row.left_ms), (None, None), "release");

    // A permit: primitive, key, name, holder, kind, permits, TTL.
    let holder = OwnerToken::new();
    let permit_ttl = Duration::from_secs(45);
    let kind = LockKind::Permit {
        permits: 3,
        weight: 1,
    };
    let permit = acquired(
        lock.try_acquire_kind(&name, kind, holder, permit_ttl, None)
            .await
            .expect("a permit"),
        "a permit",
    );
    let rows = db.hold_rows(table, "semaphore", &key).await;
    assert_eq!(rows.len(), 1, "one permit: {rows:?}");
    assert_eq!(rows[0].holder, holder.to_string(), "permit: holder");
    assert_eq!(rows[0].name, name.as_str(), "permit: lock_name");
    assert_eq!(rows[0].kind, "permit", "permit: kind");
    assert_eq!(rows[0].permits, Some(3), "permit: permits");
    assert_eq!(rows[0].version, token(&permit), "permit: version");
    assert_left(Some(rows[0].left_ms), permit_ttl, "permit: expires_at");
    let permit_longer = Duration::from_secs(75);
    let permit = lock
        .extend(&permit, permit_longer)
        .await
        .expect("extend a permit")
        .expect("extended");
    let rows = db.hold_rows(table, "semaphore", &key).await;
    assert_left(
        Some(rows[0].left_ms),
        permit_longer,
        "permit extended: expires_at",
    );
    assert!(
        lock.release(&permit).await.expect("release a permit"),
        "permit released"
    );
    assert!(
        db.hold_rows(table, "semaphore", &key).await.is_empty(),
        "permit released"
    );

    // A waiting writer's record: its holder value and its stay, beside a reader's hold.
    let reader = acquired(
        lock.try_acquire_kind(&name, LockKind::Read, OwnerToken::new(), permit_ttl, None)
            .await
            .expect("a reader"),
        "a reader",
    );
    let stay = Duration::from_secs(7);
    let writer = lock
        .try_acquire_kind(
            &name,
            LockKind::Write,
            OwnerToken::new(),
            ttl,
            Some(("writer-1", stay)),
        )
        .await
        .expect("a writer");
    assert!(
        matches!(writer, TryAcquire::Held(_)),
        "the writer waits: {writer:?}"
    );
    let rows = db.hold_rows(table, "rw-lock", &key).await;
    let record = rows
        .iter()
        .find(|r| r.kind == "waiter")
        .unwrap_or_else(|| panic!("a waiting writer's record: {rows:?}"));
    assert_eq!(record.holder, "~writer-1", "waiting writer: holder");
    assert_left(Some(record.left_ms), stay, "waiting writer: expires_at");
    lock.withdraw(&name, LockKind::Write, "writer-1")
        .await
        .expect("withdraw");
    let rows = db.hold_rows(table, "rw-lock", &key).await;
    assert!(rows.iter().all(|r| r.kind != "waiter"), "withdrawn: {rows:?}");
    assert!(lock.release(&reader).await.expect("release the reader"));

    // PostgreSQL: a waiter queued by its attempt, with its id and its stay.
    if let Db::Postgres(pool) = db {
        let _held = acquired(
            lock.try_acquire(&name, OwnerToken::new(), ttl)
                .await
                .expect("acquire"),
            "acquire again",
        );
        let queued_stay = Duration::from_secs(9);
        let outcome = lock
            .attempt(&Attempt::mutex(name.clone(), OwnerToken::new(), ttl).waiting("waiter-2", queued_stay))
            .await
            .expect("a waiter's attempt");
        assert!(matches!(outcome, TryAcquire::Held(_)), "{outcome:?}");
        let (waiter, left): (String, i64) = sqlx::query_as(&format!(
            "SELECT waiter::text, (extract(epoch FROM (expires_at - clock_timestamp())) * 1000)::bigint \
             FROM \"{table}_waiters\" WHERE lock_key = $1"
        ))
        .bind(&key)
        .fetch_one(pool)
        .await
        .expect("one queued waiter");
        assert_eq!(waiter, "waiter-2", "queued waiter: waiter");
        assert_left(Some(left), queued_stay, "queued waiter: expires_at");
    }
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
async fn sqlite_binds_every_value_to_its_column() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("binds.db");
    let table = table();
    let lock = client(SqlConfig::sqlite(&path), &table).await;
    let db = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("opens");
    check(&lock, &Db::Sqlite(db), &table).await;
}

#[tokio::test]
async fn mysql_binds_every_value_to_its_column() {
    let url = tokio::task::spawn_blocking(distlock_testkit::shared::mysql_url)
        .await
        .expect("the starter thread")
        .expect("the shared MariaDB starts (run scripts/install-test-deps to install mariadb)");
    let table = table();
    let lock = client(SqlConfig::from_url(&url).expect("a URL"), &table).await;
    let db = sqlx::MySqlPool::connect(&url).await.expect("connects");
    check(&lock, &Db::MySql(db), &table).await;
}

#[tokio::test]
async fn postgres_binds_every_value_to_its_column() {
    let url = tokio::task::spawn_blocking(distlock_testkit::shared::postgres_url)
        .await
        .expect("the starter thread")
        .expect("the shared PostgreSQL starts (run scripts/install-test-deps to install postgresql)");
    let table = table();
    let lock = client(SqlConfig::from_url(&url).expect("a URL"), &table).await;
    let db = sqlx::PgPool::connect(&url).await.expect("connects");
    check(&lock, &Db::Postgres(db), &table).await;
}

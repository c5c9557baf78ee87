//! Weighted permits (`LockKind::Permit { permits, weight }`, `Semaphore::acquire_many`) on
//! every dialect: a SQLite file of the test's own, the shared MariaDB and the shared
//! PostgreSQL that distlock-testkit starts. Names are unique per check, so checks share a
//! server.
#![cfg(all(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, LockClient, LockKind, LockName, OwnerToken,
    Primitive, TryAcquire,
};
use distlock_sql::{SqlConfig, SqlLock};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);

use crate::dialects;

use dialects::{unique, Store};

fn permits(permits: u32, weight: u32) -> LockKind {
    LockKind::permits(permits, weight)
}

async fn attempt(lock: &SqlLock, name: &LockName, kind: LockKind) -> TryAcquire {
    lock.try_acquire_kind(name, kind, OwnerToken::new(), TTL, None)
        .await
        .expect("works")
}

fn won(outcome: TryAcquire, what: &str) -> distlock_core::Lease {
    match outcome {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("{what}: held ({h:?})"),
    }
}

fn refused(outcome: TryAcquire, what: &str) {
    if let TryAcquire::Acquired(lease) = outcome {
        panic!("{what}: acquired ({lease:?})")
    }
}

/// The permits the live holds of `name` take, by `inspect`.
async fn taken(lock: &SqlLock, name: &LockName) -> u32 {
    lock.inspect_holders(name, Primitive::Semaphore)
        .await
        .expect("works")
        .iter()
        .map(|h| h.kind.weight())
        .sum()
}

/// A hold of several permits takes them all as one hold: what is left is refused, inspect
/// reports one holder of that weight, and its release frees them all at once.
async fn a_weighted_hold_takes_and_frees_all_its_permits(store: &Store) {
    assert!(store.client().await.capabilities().weighted_permits);
    let lock = store.client().await;
    let name = unique("weighted");
    let big = won(attempt(&lock, &name, permits(4, 3)).await, "three of four");
    let holders = lock
        .inspect_holders(&name, Primitive::Semaphore)
        .await
        .expect("works");
    assert_eq!(holders.len(), 1, "one hold: {holders:?}");
    assert_eq!(holders[0].kind, permits(4, 3));
    refused(attempt(&lock, &name, permits(4, 2)).await, "two of the one left");
    let small = won(attempt(&lock, &name, permits(4, 1)).await, "the one left");
    refused(attempt(&lock, &name, permits(4, 1)).await, "none left");
    assert_eq!(taken(&lock, &name).await, 4);
    assert!(lock.release(&big).await.expect("works"));
    assert_eq!(taken(&lock, &name).await, 1);
    let again = won(attempt(&lock, &name, permits(4, 3)).await, "the three freed");
    assert!(lock.release(&again).await.expect("works"));
    assert!(lock.release(&small).await.expect("works"));
    let other = won(
        attempt(&lock, &name, permits(3, 1)).await,
        "a new count once no holder lives",
    );
    assert!(lock.release(&other).await.expect("works"));
}

/// Renewals keep the whole hold: after a renewal, the permits are still all taken.
async fn a_renewed_weighted_hold_keeps_all_its_permits(store: &Store) {
    let lock = store.client().await;
    let name = unique("renewed");
    let ttl = Duration::from_millis(800);
    let lease = match lock
        .try_acquire_kind(&name, permits(3, 3), OwnerToken::new(), ttl, None)
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("held: {h:?}"),
    };
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let renewed = lock.renew(std::slice::from_ref(&lease)).await;
        assert!(matches!(renewed[0], Ok(Some(_))), "{renewed:?}");
        refused(attempt(&lock, &name, permits(3, 1)).await, "all three held");
    }
    assert!(lock.release(&lease).await.expect("works"));
    assert_eq!(taken(&lock, &name).await, 0);
}

/// Twelve tasks, each with a client of its own, take holds of weights 1 to 3 of a semaphore
/// of five over and over: the weights held at once never add up to more than five, by the
/// tasks' own count and by inspect.
async fn mixed_weights_never_exceed_the_count(store: &Store) {
    const TASKS: u32 = 12;
    const ROUNDS: usize = 6;
    let name = unique("mixed");
    let held = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..TASKS {
        let lock = store.client().await;
        let (name, held, most) = (name.clone(), held.clone(), most.clone());
        let weight = i % 3 + 1;
        tasks.spawn(async move {
            let mut wins = 0;
            for _ in 0..ROUNDS {
                let deadline = Instant::now() + Duration::from_secs(30);
                let lease = loop {
                    match attempt(&lock, &name, permits(5, weight)).await {
                        TryAcquire::Acquired(lease) => break lease,
                        TryAcquire::Held(_) => {
                            assert!(Instant::now() < deadline, "starved");
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                };
                let now = held.fetch_add(weight, Ordering::SeqCst) + weight;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= 5, "{now} permits held at once");
                let seen = taken(&lock, &name).await;
                assert!(seen <= 5, "inspect: {seen} permits held at once");
                tokio::time::sleep(Duration::from_millis(10)).await;
                held.fetch_sub(weight, Ordering::SeqCst);
                assert!(lock.release(&lease).await.expect("works"));
                wins += 1;
            }
            wins
        });
    }
    while let Some(wins) = tasks.join_next().await {
        assert_eq!(wins.expect("the task"), ROUNDS);
    }
    assert!(most.load(Ordering::SeqCst) >= 3, "holds overlapped");
}

/// Through `LockClient`: a waiter for three permits gets in once three are free.
async fn a_waiter_for_three_gets_in_when_three_are_free(store: &Store) {
    let name = unique("waiter");
    let a = LockClient::new(store.client().await);
    let b = LockClient::new(store.client().await);
    let sem_a = a.semaphore(name.clone(), 4).expect("valid");
    let sem_b = b.semaphore(name.clone(), 4).expect("valid");
    let two = sem_a.acquire_many(2).await.expect("two of four");
    let one = sem_a.acquire().await.expect("one more");
    assert!(
        sem_b.try_acquire_many(3).await.expect("works").is_none(),
        "one free"
    );
    let opts = AcquireOptions::new().ttl(TTL).wait_for(Duration::from_secs(20));
    let waiting = tokio::spawn(async move { sem_b.acquire_many_with(3, &opts).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "two free are not three");
    let started = Instant::now();
    assert!(two.release().await.expect("works"));
    let three = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiter gets in")
        .expect("the task")
        .expect("three of four");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(three.kind(), permits(4, 3));
    assert!(
        sem_a.try_acquire().await.expect("works").is_none(),
        "all four held"
    );
    assert!(three.release().await.expect("works"));
    assert!(one.release().await.expect("works"));
}

/// A weighted attempt whose answer is lost (committed on the server, the reply never came
/// back) is ambiguous, and `LockClient`'s owner-checked cleanup frees all of its permits,
/// through a real proxy that drops the server's replies.
async fn an_ambiguous_weighted_attempt_is_freed_whole(store: &Store) {
    let Store::Server { url } = store else {
        unreachable!("a server")
    };
    let (proxied_url, proxies) = distlock_testkit::proxy::through_proxies(url).expect("a proxy");
    let proxied = SqlConfig::from_url(&proxied_url)
        .expect("a valid URL")
        .with_operation_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("the database answers");
    let client = LockClient::new(proxied);
    let observer = store.client().await;
    let name = unique("lost-answer");
    let semaphore = client.semaphore(name.clone(), 3).expect("valid");
    // A connection that has run an attempt already (its statements prepared), so the lost
    // reply is the attempt's own.
    let warm = client.semaphore(unique("warm-up"), 3).expect("valid");
    let guard = warm.acquire_many(2).await.expect("a warm-up hold");
    assert!(guard.release().await.expect("works"));

    proxies.drop_replies();
    let opts = AcquireOptions::new().ttl(TTL).no_wait();
    let lost = semaphore.acquire_many_with(3, &opts).await;
    assert!(
        matches!(&lost, Err(e) if e.is_ambiguous()),
        "an attempt without an answer: {lost:?}"
    );
    assert_eq!(taken(&observer, &name).await, 3, "the attempt committed");
    proxies.heal();
    let deadline = Instant::now() + Duration::from_secs(10);
    while taken(&observer, &name).await > 0 {
        assert!(Instant::now() < deadline, "the cleanup never freed the permits");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let next = won(attempt(&observer, &name, permits(3, 3)).await, "all three freed");
    assert!(observer.release(&next).await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_an_ambiguous_weighted_attempt_is_freed_whole() {
    an_ambiguous_weighted_attempt_is_freed_whole(&Store::mysql().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_ambiguous_weighted_attempt_is_freed_whole() {
    an_ambiguous_weighted_attempt_is_freed_whole(&Store::postgres().await).await;
}

/// One test per check and dialect.
macro_rules! on_every_dialect {
    ($($check:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(&super::Store::sqlite()).await;
                }
            )*
        }
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(&super::Store::mysql().await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(&super::Store::postgres().await).await;
                }
            )*
        }
    };
}

on_every_dialect!(
    a_weighted_hold_takes_and_frees_all_its_permits,
    a_renewed_weighted_hold_keeps_all_its_permits,
    mixed_weights_never_exceed_the_count,
    a_waiter_for_three_gets_in_when_three_are_free,
    a_schema_of_version_1_is_migrated_in_place,
    a_purge_deletes_the_weights_of_holds_that_are_gone,
);

/// Runs `sql` (several statements) on the store as its administrator.
async fn admin(store: &Store, sql: &str) {
    use sqlx::Connection;
    match store {
        Store::Sqlite { path, .. } => {
            let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
            let mut conn = sqlx::SqliteConnection::connect_with(&options)
                .await
                .expect("opens");
            sqlx::raw_sql(sql).execute(&mut conn).await.expect("runs");
        }
        Store::Server { url } if url.starts_with("mysql") => {
            let mut conn = sqlx::MySqlConnection::connect(url).await.expect("connects");
            sqlx::raw_sql(sql).execute(&mut conn).await.expect("runs");
        }
        Store::Server { url } => {
            let mut conn = sqlx::PgConnection::connect(url).await.expect("connects");
            sqlx::raw_sql(sql).execute(&mut conn).await.expect("runs");
        }
    }
}

/// A schema of version 1 (no weights table, on PostgreSQL no attempt function that counts
/// weights) with a live permit: a client that may create the schema migrates it in place (the
/// hold stays, and counts), and one that may not refuses to start, saying what to run.
async fn a_schema_of_version_1_is_migrated_in_place(store: &Store) {
    let table = format!("weights_v1_{}", uuid::Uuid::new_v4().simple());
    let lock = store.client_on(&table).await;
    let name = unique("v1");
    let old = won(attempt(&lock, &name, permits(3, 1)).await, "a permit");
    let quote = |t: &str| match store {
        Store::Server { url } if url.starts_with("mysql") => format!("`{t}`"),
        _ => format!("\"{t}\""),
    };
    let mut v1 = format!(
        "DROP TABLE {}; UPDATE {} SET version = 1;",
        quote(&format!("{table}_weights")),
        quote(&format!("{table}_schema"))
    );
    if matches!(store, Store::Server { url } if url.starts_with("postgres")) {
        v1.push_str(&format!(
            "DROP FUNCTION \"{table}_holds_try\"(text, text, text, text, text, integer, bigint, text, bigint, integer);"
        ));
    }
    admin(store, &v1).await;

    let config = |create| {
        let config = match store {
            Store::Sqlite { path, .. } => SqlConfig::sqlite(path),
            Store::Server { url } => SqlConfig::from_url(url).expect("a valid URL"),
        };
        config
            .with_table(&table)
            .expect("a plain name")
            .with_create_table(create)
    };
    let older = config(false).build().await;
    assert!(
        matches!(&older, Err(distlock_core::Error::InvalidConfig { reason }) if reason.contains("older")),
        "{older:?}"
    );
    let new = config(true).build().await.expect("migrates");
    refused(attempt(&new, &name, permits(3, 3)).await, "the old hold counts");
    let two = won(attempt(&new, &name, permits(3, 2)).await, "two of the two left");
    assert_eq!(taken(&new, &name).await, 3);
    assert!(new.release(&old).await.expect("works"));
    assert!(new.release(&two).await.expect("works"));
    assert!(config(false).build().await.is_ok(), "version 2 now");
}

/// A purge deletes the weight row of a released hold and keeps a live one's; on a table of the
/// check's own, whose rows are too young to purge otherwise.
async fn a_purge_deletes_the_weights_of_holds_that_are_gone(store: &Store) {
    let table = format!("weights_purge_{}", uuid::Uuid::new_v4().simple());
    let lock = store.client_on(&table).await;
    let (a, b) = (unique("a"), unique("b"));
    let released = won(attempt(&lock, &a, permits(3, 2)).await, "two of three");
    assert!(lock.release(&released).await.expect("works"));
    let live = won(attempt(&lock, &b, permits(3, 3)).await, "three of three");
    let purged = lock.purge_idle(Duration::from_secs(60)).await.expect("purges");
    assert_eq!(purged, 1, "the released hold's weight row");
    assert_eq!(taken(&lock, &b).await, 3, "the live hold keeps its weight");
    refused(attempt(&lock, &b, permits(3, 1)).await, "still full");
    assert!(lock.release(&live).await.expect("works"));
}

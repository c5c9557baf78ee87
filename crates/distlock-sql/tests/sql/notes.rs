//! Notes beside a mutex hold (`set_note`) and leader election on them, on every dialect: a
//! SQLite file of the test's own, the shared MariaDB and the shared PostgreSQL that
//! distlock-testkit starts (or the servers `DISTLOCK_TEST_MYSQL_URL` and
//! `DISTLOCK_TEST_POSTGRES_URL` name). Names are unique per check, so checks share a server.
#![cfg(all(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, LockClient, LockName, OwnerToken, Primitive,
    TryAcquire,
};
use distlock_sql::{SqlConfig, SqlLock};
use futures::StreamExt;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);

use crate::dialects;

use dialects::{unique, Store};

async fn take(lock: &SqlLock, name: &LockName, ttl: Duration) -> distlock_core::Lease {
    match lock
        .try_acquire(name, OwnerToken::new(), ttl)
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("held: {h:?}"),
    }
}

async fn note(lock: &SqlLock, name: &LockName) -> Option<String> {
    lock.inspect(name, Primitive::Mutex)
        .await
        .expect("works")
        .into_lock()
        .note
}

/// The holder's note is what inspect reports, also after renewals, and a second note replaces
/// the first.
async fn a_note_is_read_back_and_survives_renewal(store: &Store) {
    let lock = store.client().await;
    let name = unique("note");
    assert!(lock.capabilities().notes, "the backend declares notes");
    let lease = take(&lock, &name, TTL).await;
    assert!(lock.set_note(&lease, "10.0.0.7:8080").await.expect("works"));
    let other = store.client().await;
    assert_eq!(note(&other, &name).await.as_deref(), Some("10.0.0.7:8080"));
    let renewed = lock.renew(std::slice::from_ref(&lease)).await;
    let renewed = renewed[0].as_ref().expect("works").clone().expect("renewed");
    assert_eq!(note(&other, &name).await.as_deref(), Some("10.0.0.7:8080"));
    assert!(lock
        .set_note(&renewed, "héllo 'quoted' \"note\" \\")
        .await
        .expect("works"));
    assert_eq!(
        note(&other, &name).await.as_deref(),
        Some("héllo 'quoted' \"note\" \\")
    );
    assert!(lock.release(&lease).await.expect("works"));
    assert_eq!(note(&other, &name).await, None, "a free lock has no note");
}

/// A stale owner's note is refused and changes nothing; a later holder never shows an earlier
/// holder's note (after expiry, release or hand-over).
async fn a_later_holder_never_shows_an_earlier_note(store: &Store) {
    let lock = store.client().await;
    let name = unique("stale");
    let first = take(&lock, &name, Duration::from_millis(300)).await;
    assert!(lock.set_note(&first, "first").await.expect("works"));
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(note(&lock, &name).await, None, "expired: no note");
    let second = take(&lock, &name, TTL).await;
    assert_eq!(note(&lock, &name).await, None, "the new holder left none yet");
    assert!(
        !lock.set_note(&first, "stale").await.expect("works"),
        "a stale owner's note is refused"
    );
    assert_eq!(note(&lock, &name).await, None, "and changed nothing");
    assert!(lock.set_note(&second, "second").await.expect("works"));
    assert_eq!(note(&lock, &name).await.as_deref(), Some("second"));
    assert!(
        !lock.set_note(&first, "stale").await.expect("works"),
        "still refused"
    );
    assert_eq!(note(&lock, &name).await.as_deref(), Some("second"));

    // Handed over: the next owner starts without a note.
    let third = lock
        .hand_over(&second, OwnerToken::new(), TTL)
        .await
        .expect("works")
        .expect("handed over");
    assert_eq!(note(&lock, &name).await, None, "handed over: no note");
    assert!(lock.release(&third).await.expect("works"));

    // Released, then taken again by the same owner: the old note is gone too.
    let owner = OwnerToken::new();
    let TryAcquire::Acquired(a) = lock.try_acquire(&name, owner, TTL).await.expect("works") else {
        panic!("free")
    };
    assert!(lock.set_note(&a, "a").await.expect("works"));
    assert!(lock.release(&a).await.expect("works"));
    let TryAcquire::Acquired(again) = lock.try_acquire(&name, owner, TTL).await.expect("works") else {
        panic!("free")
    };
    assert_eq!(note(&lock, &name).await, None, "a new hold of the same owner");
    assert!(lock.release(&again).await.expect("works"));
    assert!(!lock.set_note(&again, "x").await.expect("works"), "nothing held");
}

/// Campaign, leader, resign and observe through `LockClient`; a second candidate waits and
/// takes office with a greater term.
async fn an_election_runs_through_the_client(store: &Store) {
    let name = unique("election");
    let a = LockClient::new(store.client().await);
    let b = LockClient::new(store.client().await);
    let election = a.election(name.clone()).expect("notes are declared");
    let rival = b.election(name.clone()).expect("notes are declared");
    let mut changes = rival.observe();

    let first = election.campaign("a:1").await.expect("campaigns");
    let seen = changes.next().await.expect("a change").expect("read");
    assert_eq!(seen.value, "a:1");
    assert_eq!(seen.term, first.term());
    let leader = rival.leader().await.expect("reads").expect("a leader");
    assert_eq!(leader.value, "a:1");
    assert!(
        rival.try_campaign("b:2").await.expect("works").is_none(),
        "one leader at a time"
    );

    let waiting = tokio::spawn(async move { rival.campaign("b:2").await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "the second candidate waits");
    let first_term = first.term().expect("SQL fences");
    assert!(first.resign().await.expect("works"));
    let second = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the second candidate takes office")
        .expect("the task")
        .expect("campaigns");
    assert!(second.term().expect("SQL fences") > first_term, "terms grow");
    let seen = tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("the change is observed")
        .expect("a change")
        .expect("read");
    assert_eq!(seen.value, "b:2");
    assert!(seen.term > Some(first_term));
    assert!(second.resign().await.expect("works"));
    assert!(election.leader().await.expect("reads").is_none());
}

/// Several candidates campaign at once and each resigns after a while: never two leaders at
/// once, and the terms grow from one leader to the next.
async fn one_leader_at_a_time_among_many(store: &Store) {
    let name = unique("many");
    let in_office = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..4 {
        let client = LockClient::new(store.client().await);
        let (name, in_office) = (name.clone(), in_office.clone());
        tasks.spawn(async move {
            let election = client.election(name).expect("notes are declared");
            let opts = AcquireOptions::new().ttl(TTL).wait_for(Duration::from_secs(60));
            let leadership = election
                .campaign_with(format!("candidate-{i}"), &opts)
                .await
                .expect("campaigns");
            let before = in_office.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            assert_eq!(before, 0, "two leaders at once");
            let leader = election.leader().await.expect("reads").expect("a leader");
            assert_eq!(leader.value, format!("candidate-{i}"));
            tokio::time::sleep(Duration::from_millis(100)).await;
            in_office.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            let term = leadership.term().expect("SQL fences");
            assert!(leadership.resign().await.expect("works"));
            term
        });
    }
    let mut terms = Vec::new();
    while let Some(term) = tasks.join_next().await {
        terms.push(term.expect("the candidate"));
    }
    terms.sort();
    terms.dedup();
    assert_eq!(terms.len(), 4, "every leader had a term of its own");
}

/// A leader whose process stops renewing (its guard leaked) is replaced within its TTL.
async fn a_silent_leader_is_replaced_within_the_ttl(store: &Store) {
    let name = unique("silent");
    let ttl = Duration::from_secs(1);
    let opts = AcquireOptions::new().ttl(ttl).wait_for(Duration::from_secs(20));
    // The leader's process stops: nothing renews its hold, nothing releases it.
    let a = LockClient::new(store.client().await).with_defaults(opts.clone().auto_renew(false));
    let b = LockClient::new(store.client().await).with_defaults(opts);
    let leadership = a
        .election(name.clone())
        .expect("notes")
        .campaign("a")
        .await
        .expect("campaigns");
    let old_term = leadership.term().expect("SQL fences");
    std::mem::forget(leadership);
    let started = Instant::now();
    let next = b
        .election(name.clone())
        .expect("notes")
        .campaign("b")
        .await
        .expect("takes office");
    assert!(
        started.elapsed() < ttl + Duration::from_secs(5),
        "replaced after {:?}",
        started.elapsed()
    );
    assert!(next.term().expect("SQL fences") > old_term);
    let leader = b.election(name).expect("notes").leader().await.expect("reads");
    assert_eq!(leader.map(|l| l.value).as_deref(), Some("b"));
    assert!(next.resign().await.expect("works"));
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
    a_note_is_read_back_and_survives_renewal,
    a_later_holder_never_shows_an_earlier_note,
    an_election_runs_through_the_client,
    one_leader_at_a_time_among_many,
    a_silent_leader_is_replaced_within_the_ttl,
    bad_notes_are_typed_errors,
    a_purge_deletes_the_notes_of_ended_holds_only,
);

/// A DBA's schema from before the notes table (a client that may not create tables): the
/// client starts, locks and inspects as before, declares no notes, and refuses a note with a
/// typed error; once the DDL of this version runs, a new client has notes.
#[tokio::test]
async fn sqlite_a_schema_without_the_notes_table_keeps_working() {
    use sqlx::Connection;

    let store = Store::sqlite();
    let Store::Sqlite { path, .. } = &store else {
        unreachable!("a SQLite store")
    };
    drop(store.client().await);
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
    let mut admin = sqlx::SqliteConnection::connect_with(&options)
        .await
        .expect("opens");
    sqlx::raw_sql("DROP TABLE \"distlock_locks_notes\"")
        .execute(&mut admin)
        .await
        .expect("the notes table was there");

    let dba = || SqlConfig::sqlite(path).with_create_table(false).build();
    let lock = dba().await.expect("starts on the older schema");
    assert!(!lock.capabilities().notes);
    let name = unique("old-schema");
    let lease = take(&lock, &name, TTL).await;
    let state = lock
        .inspect(&name, Primitive::Mutex)
        .await
        .expect("works")
        .into_lock();
    assert_eq!(state.owner, Some(lease.owner().to_string()));
    assert!(matches!(
        lock.set_note(&lease, "x").await,
        Err(distlock_core::Error::NotSupported { .. })
    ));
    assert!(LockClient::new(lock.clone()).election("e").is_err());

    sqlx::raw_sql(&SqlConfig::sqlite(path).ddl())
        .execute(&mut admin)
        .await
        .expect("the DDL of this version runs on the older schema");
    let upgraded = dba().await.expect("starts");
    assert!(upgraded.capabilities().notes);
    assert!(upgraded.set_note(&lease, "x").await.expect("works"));
    assert_eq!(note(&lock, &name).await, None, "the older client reads no notes");
    assert_eq!(note(&upgraded, &name).await.as_deref(), Some("x"));
    assert!(lock.release(&lease).await.expect("works"));
}

/// Bad input is a typed error, never a panic: a note too long for the column, a NUL on
/// PostgreSQL.
async fn bad_notes_are_typed_errors(store: &Store) {
    let lock = store.client().await;
    let name = unique("bad-note");
    let lease = take(&lock, &name, TTL).await;
    let long = "x".repeat(65_536);
    assert!(matches!(
        lock.set_note(&lease, &long).await,
        Err(distlock_core::Error::InvalidOptions { .. })
    ));
    match lock.set_note(&lease, "a\0b").await {
        Ok(stored) => {
            assert!(stored);
            assert_eq!(note(&lock, &name).await.as_deref(), Some("a\0b"));
        }
        Err(e) => assert!(matches!(e, distlock_core::Error::InvalidOptions { .. }), "{e:?}"),
    }
    assert!(lock.release(&lease).await.expect("works"));
}

/// A purge deletes the notes of holds that ended (released, expired) and keeps a live
/// holder's; on a table of the check's own, whose lock rows are too young to purge, so the
/// stale notes are all it deletes.
async fn a_purge_deletes_the_notes_of_ended_holds_only(store: &Store) {
    let table = format!("notes_purge_{}", uuid::Uuid::new_v4().simple());
    let lock = store.client_on(&table).await;
    let (a, b, c) = (unique("a"), unique("b"), unique("c"));
    let released = take(&lock, &a, TTL).await;
    assert!(lock.set_note(&released, "released").await.expect("works"));
    assert!(lock.release(&released).await.expect("works"));
    let live = take(&lock, &b, TTL).await;
    assert!(lock.set_note(&live, "live").await.expect("works"));
    let expiring = take(&lock, &c, Duration::from_millis(200)).await;
    assert!(lock.set_note(&expiring, "expired").await.expect("works"));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let purged = lock.purge_idle(Duration::from_secs(60)).await.expect("purges");
    assert_eq!(purged, 2, "the two notes of ended holds");
    assert_eq!(note(&lock, &b).await.as_deref(), Some("live"));
    assert_eq!(lock.purge_idle(Duration::from_secs(60)).await.expect("purges"), 0);
    assert!(lock.release(&live).await.expect("works"));
}

//! PostgreSQL waiters are woken by `NOTIFY`: a release wakes a waiter of another client long
//! before its safety-net poll; a release of a mutex wakes the first queued waiter of that name
//! only, a woken waiter that goes without trying passes the wake on, and a waiter that gave up
//! or died takes no wake with it; and a wait that began before the server restarted is still
//! woken by a release after the restart (the listening connection connects and listens again),
//! as is a wait whose listening connection went silent without breaking.
#![cfg(feature = "postgres")]

use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, Attempt, DistributedLock, DistributedLockExt, LockClient, LockName, OwnerToken,
    Primitive, ReleaseWatch, TryAcquire, WakeUp, Woke,
};
use distlock_sql::SqlLock;

use crate::postgres_support as support;

/// The waiters' polls: 20 s, so their safety net (a multiple of it) is far beyond every bound
/// below; only a notification can wake them in time.
const LONG_POLL: Duration = Duration::from_secs(20);
/// Generous: a notification arrives in milliseconds.
const PROMPT: Duration = Duration::from_secs(3);

fn waiting() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(60))
        .wait_for(Duration::from_secs(60))
        .poll_interval(LONG_POLL, LONG_POLL)
}

/// Starts a wait for `name` by `client`; returns when it holds the lock (and when).
fn wait_for(client: LockClient, name: &'static str) -> tokio::task::JoinHandle<Instant> {
    tokio::spawn(async move {
        let guard = client
            .acquire_with(name, &waiting())
            .await
            .expect("the waiter acquires");
        let at = Instant::now();
        assert!(guard.release().await.expect("released"));
        at
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_of_another_client_at_once() {
    let url = support::shared_url().await;
    let holder = LockClient::new(support::client(&url).await.expect("connects"));
    let waiter = LockClient::new(support::client(&url).await.expect("connects"));
    assert_eq!(waiter.capabilities().wake_up, WakeUp::Notification);

    let guard = holder
        .acquire_with("notify-mutex", &waiting())
        .await
        .expect("acquired");
    let woken = wait_for(waiter.clone(), "notify-mutex");
    tokio::time::sleep(Duration::from_millis(500)).await; // the waiter tried and listens
    let released = Instant::now();
    assert!(guard.release().await.expect("released"));
    let at = tokio::time::timeout(PROMPT, woken)
        .await
        .expect("the waiter is woken by the release, not by its 20 s poll")
        .expect("joined");
    println!("mutex handoff by notification: {:?}", at - released);

    // A permit of a semaphore, the same way.
    let permits = holder.semaphore("notify-permits", 1).expect("a semaphore");
    let permit = permits.acquire_with(&waiting()).await.expect("a permit");
    let other = waiter.semaphore("notify-permits", 1).expect("a semaphore");
    let woken = tokio::spawn(async move {
        let permit = other
            .acquire_with(&waiting())
            .await
            .expect("the waiter gets a permit");
        let at = Instant::now();
        assert!(permit.release().await.expect("released"));
        at
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    assert!(permit.release().await.expect("released"));
    let at = tokio::time::timeout(PROMPT, woken)
        .await
        .expect("the permit's waiter is woken by the release")
        .expect("joined");
    println!("permit handoff by notification: {:?}", at - released);
}

/// Queues the waiter of `watch` on `name` through `lock`: its attempt finds the lock held.
async fn queue(lock: &SqlLock, name: &LockName, watch: &ReleaseWatch) {
    let waiter = watch.waiter().expect("a watch of one waiter");
    let outcome = lock
        .attempt(
            &Attempt::mutex(name.clone(), OwnerToken::new(), Duration::from_secs(60)).waiting(waiter, STAY),
        )
        .await
        .expect("works");
    assert!(matches!(outcome, TryAcquire::Held(_)), "{outcome:?}");
}

/// How long a queued waiter stays in the queue without coming back.
const STAY: Duration = Duration::from_secs(30);

/// The entries in the queue of waiters of `name`, live or not.
async fn queued(url: &str, name: &LockName) -> i64 {
    let admin = sqlx::PgPool::connect(url).await.expect("connects");
    let count = sqlx::query_scalar(
        "SELECT count(*) FROM distlock_locks_waiters w JOIN distlock_locks l USING (lock_key) \
         WHERE l.lock_name = $1",
    )
    .bind(name.as_str())
    .fetch_one(&admin)
    .await
    .expect("counts");
    admin.close().await;
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_first_waiter_of_the_released_name_only() {
    let url = support::shared_url().await;
    let holder = LockClient::new(support::client(&url).await.expect("connects"));
    let watcher = support::client(&url).await.expect("connects");
    let probe = watcher
        .watch(&LockName::new("notify-probe").expect("valid"), Primitive::Mutex)
        .await
        .expect("listens");
    assert!(
        probe.is_notified() && probe.waiter().is_some(),
        "one waiter woken per release"
    );
    drop(probe);
    let released = LockName::new("notify-released").expect("valid");
    let other = LockName::new("notify-other").expect("valid");
    let guard = holder
        .acquire_with(released.as_str(), &waiting())
        .await
        .expect("acquired");
    let other_guard = holder
        .acquire_with(other.as_str(), &waiting())
        .await
        .expect("acquired");

    let mut first = watcher.watch(&released, Primitive::Mutex).await.expect("watches");
    let mut second = watcher.watch(&released, Primitive::Mutex).await.expect("watches");
    let mut on_other = watcher.watch(&other, Primitive::Mutex).await.expect("watches");
    let mut on_semaphore = watcher
        .watch(&released, Primitive::Semaphore)
        .await
        .expect("watches");
    assert!(first.is_notified());
    queue(&watcher, &released, &first).await;
    queue(&watcher, &released, &second).await;
    queue(&watcher, &other, &on_other).await;
    assert_eq!(queued(&url, &released).await, 2);

    assert!(guard.release().await.expect("released"));
    assert_eq!(first.wait(PROMPT).await, Woke::Released);
    assert_eq!(
        second.wait(Duration::from_secs(1)).await,
        Woke::TimedOut,
        "only the first is woken"
    );
    assert_eq!(on_other.wait(Duration::from_millis(200)).await, Woke::TimedOut);
    // The semaphore of the same name is another object.
    assert_eq!(
        on_semaphore.wait(Duration::from_millis(200)).await,
        Woke::TimedOut
    );
    // Woken, the first waiter goes without trying: the lock is free, so it passes the wake on.
    drop(first);
    assert_eq!(second.wait(PROMPT).await, Woke::Released);
    drop(second);
    assert!(other_guard.release().await.expect("released"));
    assert_eq!(on_other.wait(PROMPT).await, Woke::Released);
    drop(on_other);
    within_a_while("the queues empty", || async {
        queued(&url, &released).await == 0 && queued(&url, &other).await == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gave_up_or_died_takes_no_wake_with_it() {
    let url = support::shared_url().await;
    let holder = support::client(&url).await.expect("connects");
    let watcher = support::client(&url).await.expect("connects");
    let name = LockName::new("notify-gave-up").expect("valid");
    let ttl = Duration::from_secs(60);
    let TryAcquire::Acquired(lease) = holder
        .try_acquire(&name, OwnerToken::new(), ttl)
        .await
        .expect("works")
    else {
        panic!("the lock is free");
    };

    // Queued first: a waiter that died (no watch, a stay of 300 ms) and one that gives up.
    let dead = holder
        .attempt(
            &Attempt::mutex(name.clone(), OwnerToken::new(), ttl)
                .waiting("dead-waiter", Duration::from_millis(300)),
        )
        .await
        .expect("works");
    assert!(matches!(dead, TryAcquire::Held(_)));
    let gave_up = watcher.watch(&name, Primitive::Mutex).await.expect("watches");
    queue(&watcher, &name, &gave_up).await;
    let mut live = watcher.watch(&name, Primitive::Mutex).await.expect("watches");
    queue(&watcher, &name, &live).await;
    assert_eq!(queued(&url, &name).await, 3);
    drop(gave_up); // leaves the queue (in the background)
    tokio::time::sleep(Duration::from_millis(600)).await; // and the dead one's stay ends

    assert!(holder.release(&lease).await.expect("released"));
    assert_eq!(
        live.wait(PROMPT).await,
        Woke::Released,
        "the release wakes the live waiter, not the one that gave up nor the dead one"
    );
    drop(live);
    assert_eq!(
        queued(&url, &name).await,
        0,
        "the dead entry went with the release"
    );
}

/// Waits up to 5 s for `done`.
async fn within_a_while<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + Duration::from_secs(5);
    while !done().await {
        assert!(Instant::now() < until, "{what}: not within 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_from_before_a_restart_is_woken_by_a_release_after_it() {
    let server = std::sync::Arc::new(std::sync::Mutex::new(support::own_server().await));
    let url = server.lock().expect("not poisoned").url();
    let holder = LockClient::new(support::client(&url).await.expect("connects"));
    let waiter = LockClient::new(support::client(&url).await.expect("connects"));
    let guard = holder
        .acquire_with("notify-restart", &waiting())
        .await
        .expect("acquired");
    let woken = wait_for(waiter, "notify-restart");
    tokio::time::sleep(Duration::from_millis(500)).await; // the waiter tried and listens

    let restarting = server.clone();
    tokio::task::spawn_blocking(move || restarting.lock().expect("not poisoned").restart())
        .await
        .expect("the restarter thread")
        .expect("postgres restarts");
    // The listener connects again within its backoff (at most 1 s), then listens.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!woken.is_finished(), "the wait ended before the release");

    let released = Instant::now();
    assert!(guard.release().await.expect("released after the restart"));
    let at = tokio::time::timeout(PROMPT, woken)
        .await
        .expect("the waiter is woken by the release after the restart, not by its 20 s poll")
        .expect("joined");
    println!("handoff after a restart: {:?}", at - released);
}

/// A waiter queued by an attempt that held the lock's row while the release waited for it is
/// seen by that release: the release reads the queue after it took the row, not as of the
/// moment it arrived. The attempt is played by an admin transaction that holds the row and
/// queues the waiter, committing only once the release waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sees_a_waiter_queued_while_it_waited_for_the_row() {
    let url = support::shared_url().await;
    let holder = support::client(&url).await.expect("connects");
    let watcher = support::client(&url).await.expect("connects");
    let name = LockName::new("notify-queued-meanwhile").expect("valid");
    let TryAcquire::Acquired(lease) = holder
        .try_acquire(&name, OwnerToken::new(), Duration::from_secs(60))
        .await
        .expect("works")
    else {
        panic!("the lock is free");
    };
    let mut watch = watcher.watch(&name, Primitive::Mutex).await.expect("watches");
    let id = watch.waiter().expect("one waiter").clone();

    let admin = sqlx::PgPool::connect(&url).await.expect("connects");
    let mut attempt = admin.begin().await.expect("begins");
    sqlx::query("SELECT 1 FROM distlock_locks WHERE lock_name = $1 FOR UPDATE")
        .bind(name.as_str())
        .execute(&mut *attempt)
        .await
        .expect("takes the row");
    sqlx::query(
        "INSERT INTO distlock_locks_waiters (lock_key, waiter, queued_at, expires_at) \
         SELECT lock_key, $2, statement_timestamp(), statement_timestamp() + interval '30 seconds' \
         FROM distlock_locks WHERE lock_name = $1",
    )
    .bind(name.as_str())
    .bind(&*id)
    .execute(&mut *attempt)
    .await
    .expect("queues the waiter");
    let releasing = tokio::spawn(async move { holder.release(&lease).await });
    tokio::time::sleep(Duration::from_millis(300)).await; // the release waits for the row
    assert!(
        !releasing.is_finished(),
        "the release waits for the attempt's row lock"
    );
    attempt.commit().await.expect("commits");
    assert!(releasing.await.expect("joined").expect("released"));
    assert_eq!(
        watch.wait(PROMPT).await,
        Woke::Released,
        "the release woke the waiter queued while it waited"
    );
    admin.close().await;
}

/// The listening connection goes silent without breaking (its backend is frozen: a stateful
/// firewall that forgot the connection, a paused server process): no notification, no reply,
/// no error. The listener's keepalive finds it silent, listens on a new connection and wakes
/// every waiter, so a release during the silence hands over long before the waiters' safety
/// net (80 s here; the wait gives up after 60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_listening_connection_is_replaced_and_its_waiters_woken() {
    let server = support::own_server().await;
    let url = server.url();
    let holder = LockClient::new(support::client(&url).await.expect("connects"));
    let waiter = LockClient::new(support::client(&url).await.expect("connects"));
    let guard = holder
        .acquire_with("notify-silent", &waiting())
        .await
        .expect("acquired");
    let woken = wait_for(waiter, "notify-silent");
    tokio::time::sleep(Duration::from_millis(500)).await; // the waiter tried and listens

    let listening = server
        .sql("SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %'")
        .expect("psql");
    let pid: u32 = listening
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("one listening backend, found {listening:?}"));
    let paused = server.pause_backend(pid).expect("the listener's backend freezes");
    let released = Instant::now();
    assert!(guard.release().await.expect("released"));
    let at = tokio::time::timeout(Duration::from_secs(15), woken)
        .await
        .expect("the silent listener is replaced and the waiter woken, not left to its 80 s poll")
        .expect("joined");
    println!("handoff past a silent listener: {:?}", at - released);
    drop(paused);
}

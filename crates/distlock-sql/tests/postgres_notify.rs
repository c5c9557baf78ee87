//! PostgreSQL waiters are woken by `NOTIFY`: a release wakes a waiter of another client long
//! before its safety-net poll, only the waiters of the released name are woken, and a wait
//! that began before the server restarted is still woken by a release after the restart (the
//! listening connection connects and listens again).
#![cfg(feature = "postgres")]

use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, DistributedLock, LockClient, LockName, Primitive, WakeUp, Woke};

#[path = "support/postgres.rs"]
mod support;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_waiters_of_the_released_name_wake() {
    let url = support::shared_url().await;
    let holder = LockClient::new(support::client(&url).await.expect("connects"));
    let watcher = support::client(&url).await.expect("connects");
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

    let mut on_released = watcher.watch(&released).await.expect("watches");
    let mut on_other = watcher.watch(&other).await.expect("watches");
    let mut on_semaphore = watcher
        .watch_kind(&released, Primitive::Semaphore)
        .await
        .expect("watches");
    assert!(on_released.is_notified());
    assert!(guard.release().await.expect("released"));
    assert_eq!(on_released.wait(PROMPT).await, Woke::Released);
    assert_eq!(on_other.wait(Duration::from_secs(1)).await, Woke::TimedOut);
    // The semaphore of the same name is another object.
    assert_eq!(
        on_semaphore.wait(Duration::from_millis(200)).await,
        Woke::TimedOut
    );
    assert!(other_guard.release().await.expect("released"));
    assert_eq!(on_other.wait(PROMPT).await, Woke::Released);
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

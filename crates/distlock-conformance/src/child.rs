//! The child side of the cross-process case: the test binary re-runs itself as a lock holder.
//!
//! [`conformance_tests!`](crate::conformance_tests) adds an ignored test `__distlock_child_entry`
//! that does nothing in a normal run. The cross-process case starts the same binary with only
//! that test and [`CHILD_ENV`] set; the child builds the fixture (reaching the parent's store
//! through [`Fixture::child_env`]), acquires the lock, prints
//! [`STARTED`] before it asks and [`ACQUIRED`] once it holds, and releases when it reads `release` on stdin. On `watch` it reports its
//! guard's state every few milliseconds as [`STATE`] lines until the guard says lost (the
//! paused-holder case freezes it meanwhile).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, LockClient, LockName};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::Fixture;

/// The variable that turns the entry test into a holder: `<hex name>:<ttl ms>` for the lock of
/// the name, `<hex name>:<ttl ms>:<permits>` for a permit of its semaphore.
pub const CHILD_ENV: &str = "DISTLOCK_CONFORMANCE_CHILD";
/// Printed once the child has its client and starts its acquire (which may wait).
pub const STARTED: &str = "DISTLOCK-CHILD STARTED";
/// Printed once the child holds the lock.
pub const ACQUIRED: &str = "DISTLOCK-CHILD ACQUIRED";
/// Printed once the child released the lock.
pub const RELEASED: &str = "DISTLOCK-CHILD RELEASED";
/// Starts a line of `watch`: `<STATE> <monotonic ns> held|lost`, the clock read before the
/// guard was asked.
pub const STATE: &str = "DISTLOCK-CHILD STATE";

/// This machine's `CLOCK_MONOTONIC` in nanoseconds: one clock for the parent and its child
/// processes (std's `Instant` cannot cross a process boundary).
pub fn monotonic_ns() -> u128 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(t) => {
            u128::try_from(t.tv_sec()).unwrap_or_default() * 1_000_000_000
                + u128::try_from(t.tv_nsec()).unwrap_or_default()
        }
        Err(_) => 0, // CLOCK_MONOTONIC cannot fail on Linux
    }
}

/// Encodes the lock a child must take.
pub fn encode_spec(name: &LockName, ttl: Duration) -> String {
    let hex: String = name.as_str().bytes().map(|b| format!("{b:02x}")).collect();
    format!("{hex}:{}", ttl.as_millis())
}

/// Encodes a permit of the semaphore `name` with `permits` that a child must take.
pub fn encode_permit_spec(name: &LockName, ttl: Duration, permits: u32) -> String {
    format!("{}:{permits}", encode_spec(name, ttl))
}

/// The lock (and for a semaphore, its permits) a child must take.
fn decode_spec(spec: &str) -> Option<(LockName, Duration, Option<u32>)> {
    let mut parts = spec.split(':');
    let (hex, ttl) = (parts.next()?, parts.next()?);
    let permits = match parts.next() {
        Some(permits) => Some(permits.parse().ok()?),
        None => None,
    };
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    let name = LockName::new(String::from_utf8(bytes).ok()?).ok()?;
    Some((name, Duration::from_millis(ttl.parse().ok()?), permits))
}

/// The test name of the entry point generated in the module `module_path` (as given by
/// `module_path!()` where the macro expands).
pub fn entry_test_name(module_path: &str) -> String {
    match module_path.split_once("::") {
        Some((_crate, rest)) => format!("{rest}::__distlock_child_entry"),
        None => "__distlock_child_entry".to_owned(),
    }
}

/// Runs the child holder if [`CHILD_ENV`] is set; otherwise returns at once.
pub fn entry<F, Fut>(factory: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Arc<dyn Fixture>>,
{
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        println!("the child entry point only runs inside the cross-process case");
        return;
    };
    let (name, ttl, permits) = decode_spec(&spec).expect("a well-formed child spec");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async move {
        let fixture = factory().await;
        let client = LockClient::from_arc(fixture.backend().await.expect("the child reaches the store"));
        let opts = AcquireOptions::new().ttl(ttl).wait_for(Duration::from_secs(30));
        println!("{STARTED}");
        let guard = match permits {
            Some(permits) => {
                let semaphore = client
                    .semaphore(&name, permits)
                    .expect("the backend has semaphores");
                semaphore.acquire_with(&opts).await
            }
            None => client.acquire_with(&name, &opts).await,
        }
        .expect("the child acquires");
        println!("{ACQUIRED} {:?}", guard.fencing_token());
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            match line.trim() {
                "release" => {
                    let owned = guard.release().await.expect("the child releases");
                    println!("{RELEASED} {owned}");
                    return;
                }
                "watch" => loop {
                    let at = monotonic_ns();
                    if guard.is_lost() {
                        println!("{STATE} {at} lost");
                        return;
                    }
                    println!("{STATE} {at} held");
                    tokio::time::sleep(Duration::from_millis(2)).await;
                },
                _ => {}
            }
        }
        // The parent went away: leave the lock to its TTL, like a crashed process.
        let _ = guard.leak();
    });
}

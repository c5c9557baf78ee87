//! Fencing tokens make a paused former holder harmless (Kleppmann's example).
//!
//! Client A takes the lock with a short TTL and then stalls (a GC pause, a stopped VM) past
//! it without noticing. B takes the lock and writes. A wakes up and writes too: the storage
//! service rejects A's write because its fencing token is older than one it has seen.
//!
//! `cargo run --example fencing [-- --url URL]` (default: the embedded store).

use std::sync::Mutex;
use std::time::Duration;

use distlock::{AcquireOptions, FencingToken};

/// A storage service that accepts a write only with a token at least as new as any seen.
#[derive(Default)]
pub struct Storage {
    state: Mutex<(Option<FencingToken>, Vec<String>)>,
}

impl Storage {
    /// Applies `value` if `token` is not older than the newest token seen.
    pub fn write(&self, token: FencingToken, value: &str) -> Result<(), String> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.0.is_some_and(|newest| token < newest) {
            return Err(format!(
                "rejected {value:?}: token {token} is older than {}",
                state.0.unwrap_or(token)
            ));
        }
        state.0 = Some(token);
        state.1.push(value.to_owned());
        Ok(())
    }

    /// The accepted writes, in order.
    pub fn writes(&self) -> Vec<String> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .1
            .clone()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> distlock::Result<()> {
    run(&url_arg()).await.map(drop)
}

/// Runs the scenario against the store at `url`; returns the storage's accepted writes.
pub async fn run(url: &str) -> distlock::Result<Vec<String>> {
    let a = distlock::connect(url).await?;
    let b = distlock::connect(url).await?;
    let storage = Storage::default();
    let name = format!("fencing-example-{}", std::process::id());

    // A's lease is short and not renewed: its process is about to stall.
    let ttl = Duration::from_secs(1);
    let guard_a = a
        .acquire_with(name.as_str(), &AcquireOptions::new().ttl(ttl).auto_renew(false))
        .await?;
    let token_a = guard_a
        .fencing_token()
        .ok_or_else(|| distlock::Error::NotSupported {
            backend: a.backend().backend(),
            what: "fencing tokens",
        })?;
    println!("A holds the lock with token {token_a}, then stalls for 2x its TTL");
    tokio::time::sleep(ttl * 2).await;

    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait_for(Duration::from_secs(10));
    let guard_b = b.acquire_with(name.as_str(), &opts).await?;
    let token_b = guard_b.fencing_token().unwrap_or(token_a);
    println!("B holds the lock with token {token_b} and writes");
    storage
        .write(token_b, "B's write")
        .map_err(distlock::Error::invalid_options)?;

    println!("A wakes up, unaware, and writes with token {token_a}");
    match storage.write(token_a, "A's late write") {
        Ok(()) => println!("A's late write was ACCEPTED: the data is corrupt"),
        Err(why) => println!("storage {why}"),
    }
    println!("A's lost-lock signal fired meanwhile: {}", guard_a.is_lost());
    guard_b.release().await?;
    drop(guard_a);
    let writes = storage.writes();
    println!("accepted writes: {writes:?}");
    Ok(writes)
}

fn url_arg() -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--url")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(distlock::url_from_env)
}

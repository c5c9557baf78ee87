//! Reacting to a lost lock with `tokio::select!`: stop the protected work the moment the
//! lock is gone instead of finishing it unprotected.
//!
//! Here the loss comes from a maximum hold time (the watchdog stops renewing after 1 s); in
//! production it comes from a store that failed over, a partition, or an operator.
//!
//! `cargo run --example lost_lock [-- --url URL]` (default: the embedded store).

use std::time::Duration;

use distlock::AcquireOptions;

#[tokio::main(flavor = "current_thread")]
async fn main() -> distlock::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .iter()
        .position(|a| a == "--url")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(distlock::url_from_env);
    run(&url).await.map(drop)
}

/// Runs the scenario against the store at `url`; returns how many batches were done before
/// the loss stopped the work.
pub async fn run(url: &str) -> distlock::Result<u32> {
    let client = distlock::connect(url).await?;
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(2))
        .max_hold(Duration::from_secs(1));
    let guard = client.acquire_with("lost-lock-example", &opts).await?;
    println!("holding the lock; working in batches");

    let mut batches = 0u32;
    let work = async {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await; // one batch of work
            batches += 1;
        }
    };
    tokio::select! {
        reason = guard.lost() => println!("lock lost ({reason}); stopped after {batches} batches"),
        () = work => unreachable!("the work loop never ends by itself"),
    }
    // The lock is gone: release reports that we no longer owned it, or releases what is left.
    let owned = guard.release().await?;
    println!("release found the lock still ours: {owned}");
    Ok(batches)
}

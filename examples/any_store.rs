//! One business function, run unchanged against every store it is given: which store backs
//! the lock is a URL, nothing else.
//!
//! `cargo run --example any_store --all-features -- sqlite:///tmp/a.db redis://127.0.0.1:6379 ...`
//! (without arguments: the embedded default store).

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{AcquireOptions, LockClient, Result};
use tokio::sync::Mutex;

/// The business function: sell `count` seats of a show that has `seats` left, one seat at a
/// time under the show's lock. Knows nothing of the store behind `client`.
pub async fn sell_seats(client: &LockClient, show: &str, seats: Arc<Mutex<u32>>, count: u32) -> Result<u32> {
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait_for(Duration::from_secs(30));
    let mut sold = 0;
    for _ in 0..count {
        let seats = seats.clone();
        let got = client
            .with_lock(format!("show:{show}"), &opts, |_lock| async move {
                // Read, think, write: a lost update here would sell a seat twice.
                let left = *seats.lock().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
                if left == 0 {
                    return false;
                }
                *seats.lock().await = left - 1;
                true
            })
            .await?;
        sold += u32::from(got);
    }
    Ok(sold)
}

/// Runs the same sale (4 services x 10 requests for 30 seats) on each store; returns the
/// seats sold and left per store.
pub async fn run(urls: &[String]) -> Result<Vec<(String, u32, u32)>> {
    let mut results = Vec::new();
    for url in urls {
        let started = Instant::now();
        let seats = Arc::new(Mutex::new(30));
        let show = format!("premiere-{}-{}", std::process::id(), results.len());
        let mut services = Vec::new();
        for _ in 0..4 {
            // Each "service instance" has its own client (its own connections).
            let client = distlock::connect(url).await?;
            let (show, seats) = (show.clone(), seats.clone());
            services.push(tokio::spawn(async move {
                sell_seats(&client, &show, seats, 10).await
            }));
        }
        let mut sold = 0;
        for service in services {
            sold += service
                .await
                .map_err(|e| distlock::Error::backend("any_store", e))??;
        }
        let left = *seats.lock().await;
        println!(
            "{url:<60} sold {sold:>2}, left {left:>2}, in {:?}",
            started.elapsed()
        );
        results.push((url.clone(), sold, left));
    }
    Ok(results)
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut urls: Vec<String> = std::env::args().skip(1).collect();
    if urls.is_empty() {
        urls.push(distlock::url_from_env());
    }
    run(&urls).await.map(drop)
}

//! Weighted permits: a pool of 4 GPUs shared by jobs that need 1, 2, 3 or all 4 of them. Each
//! job takes what it needs as one hold (`Semaphore::acquire_many`), so the GPUs in use never
//! add up to more than 4, and no two jobs each holding part of what they need wait for each
//! other forever (as they could taking one permit at a time).
//!
//! `cargo run --example weighted_permits [-- --url URL]` (default: the memory store; any store
//! whose capabilities include weighted permits, `Capabilities::weighted_permits`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{Error, Result};

/// The GPUs in the pool.
const GPUS: u32 = 4;
/// What each job needs.
const JOBS: [u32; 6] = [1, 2, 4, 1, 3, 2];

#[tokio::main]
async fn main() -> Result<()> {
    let most = run(&url_arg()).await?;
    println!("at most {most} of {GPUS} GPUs in use at once");
    Ok(())
}

/// Runs the jobs against the store at `url`; returns the most GPUs in use at once.
pub async fn run(url: &str) -> Result<u32> {
    let name = format!("gpus-{}", std::process::id());
    let (in_use, most) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let mut jobs = Vec::new();
    for (job, gpus) in JOBS.into_iter().enumerate() {
        let pool = distlock::connect(url).await?.semaphore(name.as_str(), GPUS)?;
        let (in_use, most) = (in_use.clone(), most.clone());
        jobs.push(tokio::spawn(async move {
            // NotSupported on a store without weighted permits (for more than one).
            let guard = pool.acquire_many(gpus).await?;
            let now = in_use.fetch_add(gpus, Ordering::SeqCst) + gpus;
            most.fetch_max(now, Ordering::SeqCst);
            println!("job {job} runs on {gpus} GPU(s), {now} in use");
            tokio::time::sleep(Duration::from_millis(100)).await;
            in_use.fetch_sub(gpus, Ordering::SeqCst);
            guard.release().await.map(drop)
        }));
    }
    for job in jobs {
        job.await.map_err(|e| Error::backend("example", e))??;
    }
    Ok(most.load(Ordering::SeqCst))
}

fn url_arg() -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--url")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| "memory://weighted-permits-example".to_owned())
}

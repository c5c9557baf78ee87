//! Upgradeable reads: check, then act, with nothing in between. Several workers find the
//! cached catalog stale at once and each would rebuild it. Each takes the upgradeable read
//! lock (beside plain readers, but one at a time), checks the catalog, and only if it is still
//! stale upgrades to the write lock and rebuilds: the upgrade waits for the plain readers, and
//! no other writer can come between the check and the rebuild. So the catalog is rebuilt
//! once, not once per worker, and no reader ever sees it half built.
//!
//! `cargo run --example upgradeable_read [-- --url URL]` (default: the memory store; any store
//! whose capabilities include upgradeable reads, `Capabilities::upgradeable_reads`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use distlock::{Error, Result};

/// The workers that find the catalog stale.
const WORKERS: usize = 4;

/// The catalog, as a store of record would keep it: a version, and whether a rebuild is
/// under way (a reader that saw that would have read a half-built catalog).
#[derive(Debug, Default)]
struct Catalog {
    version: u64,
    rebuilding: bool,
    rebuilds: usize,
}

#[tokio::main]
async fn main() -> Result<()> {
    let rebuilds = run(&url_arg()).await?;
    println!("{WORKERS} workers found the catalog stale; it was rebuilt {rebuilds} time(s)");
    Ok(())
}

/// Runs the workers (and a reader) against the store at `url`; returns how many times the
/// catalog was rebuilt.
pub async fn run(url: &str) -> Result<usize> {
    let name = format!("catalog-{}", std::process::id());
    let catalog = Arc::new(Mutex::new(Catalog::default()));
    let mut tasks = Vec::new();
    for worker in 0..WORKERS {
        let lock = distlock::connect(url).await?.rw_lock(name.as_str())?;
        let catalog = catalog.clone();
        tasks.push(tokio::spawn(async move {
            // NotSupported on a store without upgradeable reads.
            let mut guard = lock.upgradeable_read().await?;
            let stale = catalog.lock().unwrap_or_else(PoisonError::into_inner).version == 0;
            if stale {
                // Waits for the plain readers; no writer gets in between.
                guard.upgrade().await?;
                catalog.lock().unwrap_or_else(PoisonError::into_inner).rebuilding = true;
                tokio::time::sleep(Duration::from_millis(100)).await;
                let mut catalog = catalog.lock().unwrap_or_else(PoisonError::into_inner);
                (catalog.version, catalog.rebuilding) = (1, false);
                catalog.rebuilds += 1;
                println!("worker {worker} rebuilt the catalog");
            } else {
                println!("worker {worker} found the catalog fresh");
            }
            guard.release().await.map(drop)
        }));
    }
    let lock = distlock::connect(url).await?.rw_lock(name.as_str())?;
    let reader_catalog = catalog.clone();
    tasks.push(tokio::spawn(async move {
        for _ in 0..5 {
            let guard = lock.read().await?;
            let torn = reader_catalog
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .rebuilding;
            assert!(!torn, "a reader saw a half-built catalog");
            guard.release().await?;
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        Ok(())
    }));
    for task in tasks {
        task.await.map_err(|e| Error::backend("example", e))??;
    }
    let rebuilds = catalog.lock().unwrap_or_else(PoisonError::into_inner).rebuilds;
    Ok(rebuilds)
}

fn url_arg() -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--url")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| "memory://upgradeable-read-example".to_owned())
}

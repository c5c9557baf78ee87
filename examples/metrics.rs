//! Lock metrics exported to Prometheus: takes a few locks (at once, contended, timed out,
//! renewed, a semaphore permit) and prints what a Prometheus scrape of this process would read.
//!
//! `cargo run --example metrics --features metrics [-- --url URL]`
//! (default store: `DISTLOCK_URL`, else the embedded SQLite file).
//!
//! A service would serve the same text on its `/metrics` endpoint: `PrometheusBuilder`'s
//! `with_http_listener` (feature `http-listener` of `metrics-exporter-prometheus`), or its own
//! HTTP route answering with `handle.render()`.

use std::process::ExitCode;
use std::time::Duration;

use distlock::{AcquireOptions, Error, Result};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Histogram buckets in seconds, from a fast store's round trip to a long hold.
const BUCKETS: &[f64] = &[0.001, 0.005, 0.025, 0.1, 0.5, 1.0, 5.0, 30.0, 300.0];

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .iter()
        .position(|a| a == "--url")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(distlock::url_from_env);
    match run(&url).await {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("metrics: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Installs the Prometheus recorder, takes the locks on `url`, and returns the scrape text.
async fn run(url: &str) -> Result<String> {
    // The recorder goes in first: clients built after it describe the metrics to it.
    let handle = install()?;
    let client = distlock::connect(url).await?;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(1));

    // Held for 700 ms with a 1 s TTL: the watchdog renews it twice meanwhile. A second client
    // finds it busy, then waits 200 ms in vain.
    let other = distlock::connect(url).await?;
    let guard = client.acquire_with("metrics:report", &opts).await?;
    if other.try_acquire("metrics:report").await?.is_some() {
        return Err(Error::backend("metrics", "a held lock was granted twice"));
    }
    match other
        .acquire_with(
            "metrics:report",
            &opts.clone().wait_for(Duration::from_millis(200)),
        )
        .await
    {
        Err(Error::Timeout { .. }) => {}
        outcome => {
            return Err(Error::backend(
                "metrics",
                format!("expected a timeout: {outcome:?}"),
            ))
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    guard.release().await?;

    // A semaphore permit where the store offers them, and a few quick locks.
    if client.capabilities().semaphores {
        let permit = client.semaphore("metrics:pool", 2)?.acquire_with(&opts).await?;
        permit.release().await?;
    }
    for _ in 0..5 {
        client.with_lock("metrics:quick", &opts, |_| async {}).await?;
    }
    Ok(handle.render())
}

fn install() -> Result<PrometheusHandle> {
    PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| Error::backend("metrics", e))
}

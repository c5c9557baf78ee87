//! `distlock bench`: latency, handoff and throughput of stores side by side, each next to its
//! own raw round trip measured in the same run.

use std::path::Path;
use std::time::{Duration, Instant};

use distlock::{AcquireOptions, Error, LockClient, LockGuard, LockName, Result};
use distlock_conformance::bench::{handoff_once, hot_lock, hot_semaphore, CONTENDERS};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::cli::BenchArgs;
use crate::exit;

/// The figures of one store. Latencies are medians in microseconds.
#[derive(Debug, Serialize)]
struct Figures {
    url: String,
    backend: &'static str,
    roundtrip_x2_us: f64,
    acquire_release_us: f64,
    acquire_release_p99_us: f64,
    handoff_us: f64,
    hot_lock_ops_per_s: f64,
    /// Permits per second of one semaphore of 2 permits contended by the same 16 clients, if
    /// the store has semaphores.
    hot_semaphore_ops_per_s: Option<f64>,
    /// An uncontended semaphore permit taken and released, if the store has semaphores.
    permit_us: Option<f64>,
    /// An uncontended write lock of a read-write lock taken and released, if the store has them.
    write_us: Option<f64>,
}

pub async fn run(urls: &[String], args: BenchArgs) -> Result<u8> {
    let iterations = args.iterations.max(10);
    let steps_per_store = u64::from(iterations) * 6 + u64::from(iterations / 4);
    let progress = ProgressBar::new(steps_per_store * urls.len() as u64);
    progress.set_style(
        ProgressStyle::with_template("{msg:>30} [{bar:30}] {pos}/{len}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let mut results = Vec::new();
    for url in urls {
        progress.set_message(redact(url));
        results.push(measure(url, iterations, &progress).await?);
    }
    progress.finish_and_clear();
    print_table(&results);
    if let Some(path) = &args.out {
        write_out(path, &results)?;
        println!("wrote {}", path.display());
    }
    Ok(exit::OK)
}

async fn measure(url: &str, iterations: u32, progress: &ProgressBar) -> Result<Figures> {
    let raw = distlock::open(url).await?;
    let client = LockClient::from_arc(raw.clone());
    let run = std::process::id();
    let name = |what: &str| LockName::new(format!("distlock-bench-{run}-{what}"));
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));

    let mut floor = Vec::new();
    for _ in 0..iterations {
        let started = Instant::now();
        raw.ping().await?;
        raw.ping().await?;
        floor.push(started.elapsed());
        progress.inc(1);
    }

    let free = name("free")?;
    let mut pairs = Vec::new();
    for _ in 0..iterations {
        let started = Instant::now();
        let guard = client
            .try_acquire_with(&free, &opts)
            .await?
            .ok_or_else(|| Error::backend(raw.backend(), "the benchmark lock is held by someone else"))?;
        guard.release().await?;
        pairs.push(started.elapsed());
        progress.inc(1);
    }

    let permits = match client.semaphore(name("permits")?, 4) {
        Ok(semaphore) => Some(pair_times(iterations, progress, || semaphore.try_acquire()).await?),
        Err(Error::NotSupported { .. }) => None,
        Err(error) => return Err(error),
    };
    let writes = match client.rw_lock(name("rw")?) {
        Ok(rw) => Some(pair_times(iterations, progress, || rw.try_write()).await?),
        Err(Error::NotSupported { .. }) => None,
        Err(error) => return Err(error),
    };
    if permits.is_none() {
        progress.inc(u64::from(iterations));
    }
    if writes.is_none() {
        progress.inc(u64::from(iterations));
    }

    let waiter = distlock::connect(url).await?;
    let hand = name("handoff")?;
    let mut handoffs = Vec::new();
    for _ in 0..iterations / 4 {
        handoffs.push(
            handoff_once(
                &client,
                &waiter,
                &hand,
                &opts.clone().wait_for(Duration::from_secs(30)),
            )
            .await,
        );
        progress.inc(1);
    }

    let mut contenders = Vec::new();
    for _ in 0..CONTENDERS {
        contenders.push(distlock::connect(url).await?);
    }
    let hot = name("hot")?;
    let elapsed = hot_lock(
        &contenders,
        &hot,
        &opts.clone().wait_for(Duration::from_secs(60)),
        u64::from(iterations),
    )
    .await;
    progress.inc(u64::from(iterations));
    let hot_permits = match hot_semaphore(
        &contenders,
        &name("hot-semaphore")?,
        2,
        &opts.clone().wait_for(Duration::from_secs(60)),
        u64::from(iterations),
    )
    .await
    {
        Ok(elapsed) => Some(f64::from(iterations) / elapsed.as_secs_f64().max(1e-9)),
        Err(Error::NotSupported { .. }) => None,
        Err(error) => return Err(error),
    };
    progress.inc(u64::from(iterations));

    Ok(Figures {
        url: redact(url),
        backend: raw.backend(),
        roundtrip_x2_us: micros(percentile(&mut floor, 0.5)),
        acquire_release_us: micros(percentile(&mut pairs, 0.5)),
        acquire_release_p99_us: micros(percentile(&mut pairs, 0.99)),
        handoff_us: micros(percentile(&mut handoffs, 0.5)),
        hot_lock_ops_per_s: f64::from(iterations) / elapsed.as_secs_f64().max(1e-9),
        hot_semaphore_ops_per_s: hot_permits,
        permit_us: permits.map(|mut times| micros(percentile(&mut times, 0.5))),
        write_us: writes.map(|mut times| micros(percentile(&mut times, 0.5))),
    })
}

/// `iterations` uncontended pairs of `take` (one attempt that must win) and a release.
async fn pair_times<F, Fut>(iterations: u32, progress: &ProgressBar, take: F) -> Result<Vec<Duration>>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Option<LockGuard>>>,
{
    let mut times = Vec::new();
    for _ in 0..iterations {
        let started = Instant::now();
        let guard = take().await?.ok_or_else(|| {
            Error::backend(
                "bench",
                "the benchmark's semaphore or read-write lock is held by someone else",
            )
        })?;
        guard.release().await?;
        times.push(started.elapsed());
        progress.inc(1);
    }
    Ok(times)
}

/// A figure, or `-` for a primitive the store lacks.
fn optional(value: Option<f64>, width: usize) -> String {
    value.map_or_else(|| format!("{:>width$}", "-"), |v| format!("{v:>width$.1}"))
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let index = ((samples.len() - 1) as f64 * p).round() as usize;
    samples[index.min(samples.len() - 1)]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Hides a password in a URL (`user:secret@` becomes `user:***@`).
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(start), Some(at)) if at > start => {
            let credentials = &url[start + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..start + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

fn print_table(results: &[Figures]) {
    println!(
        "{:<36} {:>12} {:>16} {:>7} {:>12} {:>12} {:>14} {:>18} {:>12} {:>12}",
        "store",
        "2x raw (us)",
        "acq+rel (us)",
        "ratio",
        "p99 (us)",
        "handoff (us)",
        "hot x16 (op/s)",
        "hot sem x16 (op/s)",
        "permit (us)",
        "write (us)"
    );
    for f in results {
        let ratio = f.acquire_release_us / f.roundtrip_x2_us.max(1e-9);
        println!(
            "{:<36} {:>12.1} {:>16.1} {:>6.1}x {:>12.1} {:>12.1} {:>14.0} {} {} {}",
            f.url,
            f.roundtrip_x2_us,
            f.acquire_release_us,
            ratio,
            f.acquire_release_p99_us,
            f.handoff_us,
            f.hot_lock_ops_per_s,
            optional(f.hot_semaphore_ops_per_s, 18),
            optional(f.permit_us, 12),
            optional(f.write_us, 12)
        );
    }
}

fn write_out(path: &Path, results: &[Figures]) -> Result<()> {
    let text = if path.extension().is_some_and(|e| e == "json") {
        serde_json::to_string_pretty(results).map_err(|e| Error::backend("bench", e))?
    } else {
        let mut csv = String::from("url,backend,roundtrip_x2_us,acquire_release_us,acquire_release_p99_us,handoff_us,hot_lock_ops_per_s,hot_semaphore_ops_per_s,permit_us,write_us\n");
        let cell = |value: Option<f64>| value.map_or_else(String::new, |v| format!("{v:.1}"));
        for f in results {
            csv.push_str(&format!(
                "{},{},{:.1},{:.1},{:.1},{:.1},{:.0},{},{},{}\n",
                f.url,
                f.backend,
                f.roundtrip_x2_us,
                f.acquire_release_us,
                f.acquire_release_p99_us,
                f.handoff_us,
                f.hot_lock_ops_per_s,
                cell(f.hot_semaphore_ops_per_s),
                cell(f.permit_us),
                cell(f.write_us)
            ));
        }
        csv
    };
    std::fs::write(path, text)
        .map_err(|e| Error::invalid_config(format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact("mysql://u:secret@h:3306/db"), "mysql://u:***@h:3306/db");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
    }
}

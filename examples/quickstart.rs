//! The main job: worker *processes* share one lock to update a counter file without losing
//! updates, on the embedded default store (a SQLite file; no server needed).
//!
//! `cargo run --example quickstart [-- --url URL] [--workers 4] [--rounds 25]`
//! (default store: `DISTLOCK_URL`, else the embedded SQLite file). A server store needs its
//! feature: `cargo run --example quickstart --features etcd -- --url etcd://127.0.0.1:2379`.

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use distlock::{AcquireOptions, Error, Result};

const LOCK: &str = "quickstart:counter";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let arg = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let url = arg("--url").unwrap_or_else(distlock::url_from_env);
    let rounds = arg("--rounds").and_then(|n| n.parse().ok()).unwrap_or(25);
    let outcome = match arg("--worker") {
        Some(counter) => worker(&url, Path::new(&counter), rounds),
        None => {
            let workers = arg("--workers").and_then(|n| n.parse().ok()).unwrap_or(4);
            // A store that is not compiled in or does not answer is one error, not one per worker.
            reachable(&url)
                .and_then(|()| std::env::current_exe().map_err(|e| Error::backend("quickstart", e)))
                .and_then(|exe| run(&exe, &url, workers, rounds))
                .map(drop)
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Starts `workers` processes from `exe` (this example's binary), each doing `rounds` locked
/// increments; returns the final count, which must be `workers * rounds`.
pub fn run(exe: &Path, url: &str, workers: u32, rounds: u32) -> Result<u64> {
    let dir = std::env::temp_dir().join(format!("distlock-quickstart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io)?;
    let counter = dir.join("counter");
    std::fs::write(&counter, "0").map_err(io)?;
    println!(
        "{workers} processes x {rounds} locked increments of {}, store {url}",
        counter.display()
    );
    let started = Instant::now();
    let children: Vec<_> = (0..workers)
        .map(|_| {
            Command::new(exe)
                .args([
                    "--worker",
                    &counter.to_string_lossy(),
                    "--url",
                    url,
                    "--rounds",
                    &rounds.to_string(),
                ])
                .spawn()
                .map_err(io)
        })
        .collect::<Result<_>>()?;
    for mut child in children {
        let status = child.wait().map_err(io)?;
        if !status.success() {
            return Err(Error::backend("quickstart", format!("a worker failed: {status}")));
        }
    }
    let total = read(&counter)?;
    let _ = std::fs::remove_dir_all(&dir);
    let expected = u64::from(workers) * u64::from(rounds);
    println!(
        "counter = {total} after {:?} (expected {expected})",
        started.elapsed()
    );
    if total != expected {
        return Err(Error::backend(
            "quickstart",
            format!("lost updates: {total} != {expected}"),
        ));
    }
    Ok(total)
}

/// Opens the store `url` names once and checks that it answers.
fn reachable(url: &str) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io)?;
    runtime.block_on(async { distlock::open(url).await?.ping().await })
}

/// One worker process: `rounds` read-modify-writes of the counter file under the lock.
fn worker(url: &str, counter: &Path, rounds: u32) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io)?;
    runtime.block_on(async {
        let client = distlock::connect(url).await?;
        let opts = AcquireOptions::new()
            .ttl(Duration::from_secs(10))
            .wait_for(Duration::from_secs(60));
        let mut last_token = None;
        for _ in 0..rounds {
            let token = client
                .with_lock(LOCK, &opts, |lock| async move {
                    // A read-modify-write that would lose updates without the lock.
                    let seen = read(counter)?;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    std::fs::write(counter, (seen + 1).to_string()).map_err(io)?;
                    Ok::<_, Error>(lock.fencing_token())
                })
                .await??;
            if token <= last_token {
                return Err(Error::backend("quickstart", "a fencing token went backwards"));
            }
            last_token = token;
        }
        println!(
            "worker {} done, last fencing token {last_token:?}",
            std::process::id()
        );
        Ok(())
    })
}

fn read(counter: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(counter).map_err(io)?;
    text.trim()
        .parse()
        .map_err(|e| Error::backend("quickstart", format!("counter file: {e}")))
}

fn io(e: std::io::Error) -> Error {
    Error::backend("quickstart", e)
}

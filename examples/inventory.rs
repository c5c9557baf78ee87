//! The seeds' problem: stock deduction by many concurrent workers in several processes.
//!
//! The "database" is a stock file that every worker reads, decrements after a short pause
//! (a remote call, a slow query) and writes back. First the workers run without a lock and
//! sell more than there is; then they run under a distributed lock and the books balance.
//!
//! `cargo run --example inventory -- --url redis://127.0.0.1:6379 [--processes 4] [--orders 25] [--stock 50]`
//! (default store: `DISTLOCK_URL` or the embedded default; it must be shared between processes).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use distlock::{AcquireOptions, Error, Result};

const LOCK: &str = "inventory:sku-42";

/// What one phase ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Phase {
    /// Orders that were told "sold".
    pub sold: u64,
    /// Stock left at the end.
    pub stock_left: i64,
    /// Units sold that did not exist.
    pub oversold: u64,
}

/// The scenario's size.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The lock store, shared by all worker processes.
    pub url: String,
    /// Worker processes per phase.
    pub processes: u32,
    /// Orders each worker places.
    pub orders: u32,
    /// Units in stock at the start.
    pub stock: i64,
}

fn main() -> std::process::ExitCode {
    match main_inner() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("inventory: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn main_inner() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let url = arg("--url").unwrap_or_else(distlock::url_from_env);
    if let Some(dir) = arg("--worker") {
        let locked = arg("--mode").as_deref() == Some("locked");
        let orders = arg("--orders").and_then(|n| n.parse().ok()).unwrap_or(25);
        return worker(&url, Path::new(&dir), locked, orders);
    }
    let plan = Plan {
        url,
        processes: arg("--processes").and_then(|n| n.parse().ok()).unwrap_or(4),
        orders: arg("--orders").and_then(|n| n.parse().ok()).unwrap_or(25),
        stock: arg("--stock").and_then(|n| n.parse().ok()).unwrap_or(50),
    };
    let exe = std::env::current_exe().map_err(|e| Error::backend("inventory", e))?;
    run(&exe, &plan).map(drop)
}

/// Runs both phases with worker processes started from `exe` (this example's binary).
pub fn run(exe: &Path, plan: &Plan) -> Result<(Phase, Phase)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::backend("inventory", e))?;
    let cross_process = runtime.block_on(async {
        let client = distlock::connect(&plan.url).await?;
        Ok::<_, Error>(client.capabilities().cross_process)
    })?;
    if !cross_process {
        return Err(Error::invalid_config(format!(
            "{} is not shared between processes; pass --url with a shared store",
            plan.url
        )));
    }
    let orders = u64::from(plan.processes) * u64::from(plan.orders);
    println!(
        "{} processes x {} orders = {orders} orders for {} units of stock, store {}",
        plan.processes, plan.orders, plan.stock, plan.url
    );
    let unlocked = phase(exe, plan, false)?;
    report("without a lock", plan, &unlocked);
    let locked = phase(exe, plan, true)?;
    report("with distlock", plan, &locked);
    Ok((unlocked, locked))
}

fn report(label: &str, plan: &Plan, p: &Phase) {
    println!(
        "{label:>15}: sold {:>4}, stock left {:>4}, oversold {:>4} (stock was {})",
        p.sold, p.stock_left, p.oversold, plan.stock
    );
}

fn phase(exe: &Path, plan: &Plan, locked: bool) -> Result<Phase> {
    let dir = tempfile_dir()?;
    std::fs::write(dir.join("stock"), plan.stock.to_string()).map_err(io)?;
    std::fs::write(dir.join("sales"), "").map_err(io)?;
    let started = Instant::now();
    let workers: Vec<_> = (0..plan.processes)
        .map(|_| {
            Command::new(exe)
                .args([
                    "--worker",
                    &dir.to_string_lossy(),
                    "--url",
                    &plan.url,
                    "--orders",
                    &plan.orders.to_string(),
                ])
                .args(["--mode", if locked { "locked" } else { "unlocked" }])
                .spawn()
                .map_err(io)
        })
        .collect::<Result<_>>()?;
    for mut worker in workers {
        let status = worker.wait().map_err(io)?;
        if !status.success() {
            return Err(Error::backend("inventory", format!("a worker failed: {status}")));
        }
    }
    let sold = std::fs::read_to_string(dir.join("sales"))
        .map_err(io)?
        .lines()
        .count() as u64;
    let stock_left: i64 = read_stock(&dir)?;
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "  ({} mode took {:?})",
        if locked { "locked" } else { "unlocked" },
        started.elapsed()
    );
    Ok(Phase {
        sold,
        stock_left,
        oversold: sold.saturating_sub(u64::try_from(plan.stock).unwrap_or(0)),
    })
}

/// One worker process: `orders` times, read the stock, pause, write it back decremented.
fn worker(url: &str, dir: &Path, locked: bool, orders: u32) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io)?;
    runtime.block_on(async {
        let client = distlock::connect(url).await?;
        let opts = AcquireOptions::new()
            .ttl(Duration::from_secs(10))
            .wait_for(Duration::from_secs(60));
        for _ in 0..orders {
            if locked {
                client.with_lock(LOCK, &opts, |_| deduct(dir)).await??;
            } else {
                deduct(dir).await?;
            }
        }
        Ok(())
    })
}

/// The unsafe read-modify-write the lock protects.
async fn deduct(dir: &Path) -> Result<()> {
    let stock = read_stock(dir)?;
    if stock <= 0 {
        return Ok(());
    }
    tokio::time::sleep(Duration::from_millis(2)).await;
    std::fs::write(dir.join("stock"), (stock - 1).to_string()).map_err(io)?;
    use std::io::Write;
    let mut sales = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("sales"))
        .map_err(io)?;
    writeln!(sales, "sold one at stock {stock}").map_err(io)?;
    Ok(())
}

fn read_stock(dir: &Path) -> Result<i64> {
    let text = std::fs::read_to_string(dir.join("stock")).map_err(io)?;
    // A torn read from an unlocked writer counts as empty, like a failed query.
    Ok(text.trim().parse().unwrap_or(0))
}

fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "distlock-inventory-{}-{}",
        std::process::id(),
        uuid_like()
    ));
    std::fs::create_dir_all(&dir).map_err(io)?;
    Ok(dir)
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn io(e: std::io::Error) -> Error {
    Error::backend("inventory", e)
}

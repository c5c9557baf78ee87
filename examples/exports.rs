//! A semaphore and a read-write lock across processes: nightly exports that the warehouse can
//! take only two at a time, reading a catalog that a publisher rewrites now and then.
//!
//! - Each export holds one of `--permits` permits of the semaphore `exports:warehouse`, so at
//!   most that many run at once, whichever process they run in. Every export appends a start
//!   line and an end line to a shared log (`O_APPEND`, one `write` per line); the log is
//!   replayed afterwards to find the most exports that ever ran at once.
//! - Before exporting, each export reads the catalog file under a read lock of the
//!   read-write lock `exports:catalog` (exports read together), while a publisher process
//!   rewrites the file line by line under the write lock. A reader that saw a half-written
//!   catalog would report it as torn.
//!
//! `cargo run --example exports [-- --url URL] [--processes 4] [--exports 3] [--permits 2]`
//! (default store: `DISTLOCK_URL`, else the embedded SQLite file; it must be shared between
//! processes, so not `memory://`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::time::Duration;

use distlock::{AcquireOptions, Error, Result};

const SEMAPHORE: &str = "exports:warehouse";
const CATALOG_LOCK: &str = "exports:catalog";
/// Lines of the catalog file, each `version N`: a complete catalog has them all, equal.
const CATALOG_LINES: usize = 20;
/// How long one export runs while holding its permit.
const EXPORT_TIME: Duration = Duration::from_millis(300);
/// Catalog versions the publisher writes.
const PUBLISHES: u64 = 3;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let arg = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let number = |flag: &str, default: u32| arg(flag).and_then(|n| n.parse().ok()).unwrap_or(default);
    let url = arg("--url").unwrap_or_else(distlock::url_from_env);
    if url.starts_with("memory://") {
        eprintln!("exports: memory:// lives in one process; give a store the processes share");
        return ExitCode::FAILURE;
    }
    let (permits, exports) = (number("--permits", 2), number("--exports", 3));
    let outcome = match (arg("--export"), arg("--publish")) {
        (Some(dir), _) => in_runtime(export(&url, Path::new(&dir), permits, exports)),
        (None, Some(dir)) => in_runtime(publish(&url, Path::new(&dir))),
        (None, None) => std::env::current_exe()
            .map_err(io)
            .and_then(|exe| run(&exe, &url, number("--processes", 4), exports, permits))
            .map(drop),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("exports: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Starts `processes` export processes (each running `exports` exports) and one publisher
/// from `exe` (this example's binary); returns the most exports that ran at once, an error if
/// that is more than `permits` or a catalog read was torn.
pub fn run(exe: &Path, url: &str, processes: u32, exports: u32, permits: u32) -> Result<usize> {
    let dir = std::env::temp_dir().join(format!("distlock-exports-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io)?;
    std::fs::write(catalog_path(&dir), catalog_line(0).repeat(CATALOG_LINES)).map_err(io)?;
    println!("{processes} processes x {exports} exports, {permits} permits, store {url}");
    let spawn = |args: &[&str]| {
        Command::new(exe)
            .args(args)
            .args(["--url", url, "--permits", &permits.to_string()])
            .args(["--exports", &exports.to_string()])
            .spawn()
            .map_err(io)
    };
    let dir_arg = dir.to_string_lossy();
    let mut children: Vec<Child> = (0..processes)
        .map(|_| spawn(&["--export", &dir_arg]))
        .collect::<Result<_>>()?;
    children.push(spawn(&["--publish", &dir_arg])?);
    for mut child in children {
        let status = child.wait().map_err(io)?;
        if !status.success() {
            return Err(Error::backend("exports", format!("a process failed: {status}")));
        }
    }
    let log = std::fs::read_to_string(dir.join("log")).map_err(io)?;
    let _ = std::fs::remove_dir_all(&dir);
    // Replays the log: +1 at each start, -1 at each end.
    let (mut running, mut most, mut done) = (0_usize, 0_usize, 0_u32);
    let mut versions = std::collections::BTreeSet::new();
    for line in log.lines() {
        if let Some(version) = line.split(" catalog ").nth(1) {
            running += 1;
            most = most.max(running);
            versions.insert(version.to_owned());
        } else {
            running = running.saturating_sub(1);
            done += 1;
        }
    }
    println!("max concurrent exports = {most} of {permits} permits");
    println!(
        "{done} exports; every catalog read was whole; catalog versions read: {}",
        versions.into_iter().collect::<Vec<_>>().join(", ")
    );
    if most > permits as usize {
        return Err(Error::backend(
            "exports",
            "the semaphore let too many exports run at once",
        ));
    }
    if done != processes * exports {
        return Err(Error::backend(
            "exports",
            format!("{done} exports ended, not {}", processes * exports),
        ));
    }
    Ok(most)
}

/// One export process: `exports` exports, each under a permit, after reading the catalog
/// under a read lock.
async fn export(url: &str, dir: &Path, permits: u32, exports: u32) -> Result<()> {
    let client = distlock::connect(url).await?;
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait_for(Duration::from_secs(60));
    let warehouse = client.semaphore(SEMAPHORE, permits)?;
    let catalog = &client.rw_lock(CATALOG_LOCK)?;
    let opts = &opts;
    for _ in 0..exports {
        warehouse
            .with_permit(opts, |permit| async move {
                let version = catalog.with_read(opts, |_| async { read_catalog(dir) }).await??;
                let token = permit.fencing_token().map_or("-".to_owned(), |t| t.to_string());
                let pid = std::process::id();
                record(dir, &format!("start {pid} permit {token} catalog {version}"))?;
                tokio::time::sleep(EXPORT_TIME).await;
                record(dir, &format!("end {pid}"))
            })
            .await??;
    }
    Ok(())
}

/// The publisher: rewrites the catalog `PUBLISHES` times, line by line, under the write lock.
async fn publish(url: &str, dir: &Path) -> Result<()> {
    let client = distlock::connect(url).await?;
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait_for(Duration::from_secs(60));
    let catalog = client.rw_lock(CATALOG_LOCK)?;
    for version in 1..=PUBLISHES {
        tokio::time::sleep(EXPORT_TIME).await;
        catalog
            .with_write(&opts, |_| write_catalog(dir, version))
            .await??;
    }
    Ok(())
}

/// Writes catalog `version` one line at a time, a pause between lines: a reader without the
/// read lock would see it half-written.
async fn write_catalog(dir: &Path, version: u64) -> Result<()> {
    let mut file = std::fs::File::create(catalog_path(dir)).map_err(io)?;
    for _ in 0..CATALOG_LINES {
        file.write_all(catalog_line(version).as_bytes()).map_err(io)?;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

fn catalog_line(version: u64) -> String {
    format!("version {version}\n")
}

/// The catalog's version, or an error if it is torn (lines missing or of two versions).
fn read_catalog(dir: &Path) -> Result<String> {
    let text = std::fs::read_to_string(catalog_path(dir)).map_err(io)?;
    let lines: Vec<&str> = text.lines().collect();
    match lines.first() {
        Some(first) if lines.len() == CATALOG_LINES && lines.iter().all(|l| l == first) => {
            Ok(first.trim_start_matches("version ").to_owned())
        }
        _ => Err(Error::backend(
            "exports",
            format!("torn catalog read: {} lines", lines.len()),
        )),
    }
}

/// Appends one line to the shared log in one `write` (`O_APPEND`: lines never interleave).
fn record(dir: &Path, line: &str) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("log"))
        .map_err(io)?;
    file.write_all(format!("{line}\n").as_bytes()).map_err(io)
}

fn catalog_path(dir: &Path) -> PathBuf {
    dir.join("catalog")
}

fn in_runtime(work: impl std::future::Future<Output = Result<()>>) -> Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io)?
        .block_on(work)
}

fn io(e: std::io::Error) -> Error {
    Error::backend("exports", e)
}

//! Many held locks: one `LockClient` holds N locks (10,000, then 40,000) on each store, started
//! on loopback by the testkit, through several renewal periods (TTL 3 s: the watchdog renews
//! every second). Per renewal period it reports the requests the store itself counted, the
//! client process's CPU time, and whether any lock was lost; then the 40k/10k ratios.
//!
//! ```text
//! cargo bench --bench many_locks --features redis,mysql,postgres,sqlite,memcached,zookeeper,etcd
//! cargo bench --bench many_locks --features redis -- redis --counts 2000,8000
//! ```
//!
//! The counters: Redis `total_reads_processed` (the reads of requests from clients: one per
//! pipeline unless it is larger than a read) beside `total_commands_processed`; MariaDB
//! `Questions` (statements) beside `Com_update`; PostgreSQL `pg_stat_statements` calls;
//! memcached every `cmd_*` counter (commands: a `cas` and an `mg` per renewal); ZooKeeper
//! `zk_packets_received`; etcd its gRPC messages received (`/metrics`). SQLite is embedded:
//! no requests, the CPU includes its work.

#[path = "many_locks/batches.rs"]
mod batches;
#[path = "many_locks/stores.rs"]
mod stores;

use std::time::{Duration, Instant};

use distlock::{AcquireOptions, LockClient, LockGuard};
use futures::stream::{self, StreamExt, TryStreamExt};

use batches::Batches;
use stores::{start, Store};

const TTL: Duration = Duration::from_secs(3);
/// The watchdog renews at a third of the TTL.
const PERIOD: Duration = Duration::from_secs(1);
/// Renewal periods measured per run.
const PERIODS: u32 = 5;
/// Acquisitions in flight while the locks are taken.
const IN_FLIGHT: usize = 64;

fn main() {
    // A test runner listing the workspace's targets (`cargo nextest run --all-targets` runs
    // `--list`) finds no test here: the benchmark runs only when asked for.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let mut counts = vec![10_000, 40_000];
    let mut only = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--counts" => {
                counts = args
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .filter_map(|n| n.trim().parse().ok())
                    .collect();
            }
            store => only.push(store.to_owned()),
        }
    }
    let batches = Batches::install();
    let stores = [
        "redis",
        "sqlite",
        "mysql",
        "postgres",
        "memcached",
        "zookeeper",
        "etcd",
    ]
    .into_iter()
    .filter(|s| only.is_empty() || only.iter().any(|o| o == s));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut rows = Vec::new();
    for name in stores {
        let Some(store) = start(name) else {
            eprintln!("{name}: not built in (enable its feature)");
            continue;
        };
        for &n in &counts {
            eprintln!("{name}: holding {n} locks");
            let row = runtime.block_on(hold_many(&store, n, &batches));
            println!("{}", row.line());
            rows.push(row);
        }
    }
    println!();
    println!("| store | locks | renewal batches | renewals | store's count of requests | CPU | CPU per 1,000 renewals | lost |");
    println!("|---|---|---|---|---|---|---|---|");
    for row in &rows {
        println!("{}", row.table_line());
    }
    println!();
    for pair in rows.windows(2) {
        let [small, large] = pair else { continue };
        if small.store == large.store && small.locks < large.locks {
            let head = |row: &Row| row.counters.first().map_or(0.0, |(_, v)| *v);
            let counter = small.counters.first().map_or("none", |(k, _)| *k);
            println!(
                "{}: {}x the locks: {:.2}x the {counter}, {:.2}x the CPU, {:.2}x the CPU per renewal",
                small.store,
                large.locks / small.locks.max(1),
                ratio(head(large), head(small)),
                ratio(large.cpu_ms, small.cpu_ms),
                ratio(large.cpu_per_thousand(), small.cpu_per_thousand()),
            );
        }
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

/// One run's figures, per renewal period.
struct Row {
    store: &'static str,
    locks: usize,
    /// Renewal batches (`renew` calls) and the leases in them.
    batches: f64,
    leases: f64,
    /// The store's counters.
    counters: Vec<(&'static str, f64)>,
    cpu_ms: f64,
    lost: usize,
    acquire: Duration,
}

impl Row {
    /// Leases renewed per period.
    fn renewals(&self) -> f64 {
        if self.batches > 0.0 {
            self.batches * self.leases
        } else {
            0.0
        }
    }

    fn cpu_per_thousand(&self) -> f64 {
        ratio(self.cpu_ms * 1000.0, self.renewals())
    }

    fn counted(&self) -> String {
        let counted: Vec<String> = self.counters.iter().map(|(k, v)| format!("{v:.0} {k}")).collect();
        match counted.is_empty() {
            true => "(embedded)".to_owned(),
            false => counted.join(", "),
        }
    }

    fn line(&self) -> String {
        format!(
            "{} {} locks (taken in {:.1?}), per renewal period: {:.1} batches of {:.0} leases; {}; \
             {:.1} ms CPU; {} lost",
            self.store,
            self.locks,
            self.acquire,
            self.batches,
            self.leases,
            self.counted(),
            self.cpu_ms,
            self.lost
        )
    }

    fn table_line(&self) -> String {
        format!(
            "| {} | {} | {:.1} | {:.0} | {} | {:.0} ms | {:.2} ms | {} |",
            self.store,
            self.locks,
            self.batches,
            self.renewals(),
            self.counted(),
            self.cpu_ms,
            self.cpu_per_thousand(),
            self.lost
        )
    }
}

async fn hold_many(store: &Store, n: usize, batches: &Batches) -> Row {
    let client = LockClient::from_arc(distlock::open(&store.url).await.expect("the store answers"));
    let opts = AcquireOptions::new().ttl(TTL);
    let run = std::process::id();
    let started = Instant::now();
    let guards: Vec<LockGuard> = stream::iter(0..n)
        .map(|i| {
            let (client, opts) = (&client, &opts);
            async move {
                let name = format!("many-{run}-{n}-{i}");
                client
                    .try_acquire_with(name.as_str(), opts)
                    .await
                    .map(|g| g.expect("a fresh name is free"))
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect()
        .await
        .expect("acquired");
    let acquire = started.elapsed();
    // The renewals of the holds taken last come within a period: let them settle.
    tokio::time::sleep(PERIOD * 2).await;
    let (before, batched, cpu_before, at) = ((store.counters)(), batches.read(), cpu_time(), Instant::now());
    tokio::time::sleep(PERIOD * PERIODS).await;
    let (after, batched_after, cpu_after) = ((store.counters)(), batches.read(), cpu_time());
    let periods = at.elapsed().as_secs_f64() / PERIOD.as_secs_f64();
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let per_period = |a: u64, b: u64| a.saturating_sub(b) as f64 / periods;
    let row = Row {
        store: store.name,
        locks: n,
        batches: per_period(batched_after.0, batched.0),
        leases: ratio(
            batched_after.1.saturating_sub(batched.1) as f64,
            batched_after.0.saturating_sub(batched.0) as f64,
        ),
        counters: after
            .iter()
            .zip(&before)
            .map(|((k, a), (_, b))| (*k, per_period(*a, *b)))
            .collect(),
        cpu_ms: (cpu_after - cpu_before).as_secs_f64() * 1000.0 / periods,
        lost,
        acquire,
    };
    stream::iter(guards)
        .for_each_concurrent(IN_FLIGHT, |g| async move {
            let _ = g.release().await;
        })
        .await;
    row
}

/// The process's user + system CPU time so far (its threads', not its children's).
#[allow(unsafe_code)] // one libc call, sound as said below
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct it is given; a zeroed rusage is a valid value.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

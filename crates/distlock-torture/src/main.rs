//! `distlock-torture`: a Jepsen-style fault harness for distlock's backends.
//!
//! It starts the store (through the testkit, so it can kill, pause and restart it) and at
//! least eight client processes, each behind a fault proxy, looping acquire / write to a
//! fenced resource / hold / write / release on a hot lock and a few cold ones. It injects
//! faults from a seeded schedule (holder kill -9 and SIGSTOP past the TTL, server kill -9 and
//! restart, server SIGSTOP, a Redis Cluster master's failover to its replica, and on the
//! holder's link or everyone's: partitions, dropped replies, latency, resets), records every
//! client's history on the machine's monotonic clock, and checks it: two holders at once,
//! stale writes accepted (by token, or for writes no token fences, against the holders'
//! intervals), fencing tokens out of order, slow recovery after a fault, locks left held,
//! faults scheduled but not injected. A documented loss excuses only pairs of grants that
//! straddle it (see the checker module). It prints a table per backend and fault kind (and JSON with
//! `--json`), saves the run with `--history` (checked again offline with `--check`), draws it
//! with `--picture`, and exits with 1 if a guarantee the backend declares was broken.
//!
//! `--primitive semaphore` (with `--permits`) or `--primitive rw` (with `--read-share`) makes
//! every name a semaphore or a read-write lock instead of a mutex; the checker then allows up
//! to `--permits` permit holders, or any number of readers but a writer only alone.
//!
//! ```text
//! distlock-torture --backend redis --duration 60s --seed 42
//! distlock-torture --backend redis --primitive semaphore --permits 3 --duration 60s
//! distlock-torture --backend all --duration 30s --json out.json
//! distlock-torture --backend sqlite --broken repeated-token --duration 10s   # must fail
//! distlock-torture --backend redis --seed 42 --history run.json --picture run.svg
//! distlock-torture --check run.json --picture run.svg   # the saved run checked again
//! ```

mod broken;
mod checker;
mod client;
mod faults;
mod history;
mod open;
mod picture;
mod primitive;
mod report;
mod resource;
mod run;
mod saved;
mod store;
mod wire;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::broken::Breakage;
use crate::primitive::Primitive;
use crate::run::RunError;
use crate::store::Backend;

#[derive(Debug, Parser)]
#[command(
    name = "distlock-torture",
    about = "A Jepsen-style fault harness for distlock's backends"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One client process of the workload (started by the harness).
    #[command(hide = true)]
    Client(client::ClientArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The backends to torture (`all`: every one, in turn).
    #[arg(long, value_delimiter = ',', default_value = "sqlite")]
    backend: Vec<BackendChoice>,
    /// A store the harness did not start (only client-side faults apply); with one backend.
    #[arg(long)]
    url: Option<String>,
    /// Client processes (at least 8).
    #[arg(long, default_value_t = 8)]
    clients: u32,
    /// How long each backend's workload runs (at least).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Go on past --duration, faults included, until each backend made this many
    /// acquisitions (for at most three times --duration).
    #[arg(long, default_value_t = 0)]
    min_acquisitions: usize,
    /// The lock TTL (ZooKeeper: the session timeout).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// The fault schedule's seed (random if not given; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Only these fault kinds (comma-separated: holder-kill, holder-pause, server-kill,
    /// server-pause, majority-kill, failover, lagged-failover, blackhole-holder, blackhole-all,
    /// drop-replies-holder, drop-replies-all, latency-holder, latency-all, reset-holder,
    /// reset-all, partition-follower, partition-leader; and, only when named here,
    /// clock-jump-forward and clock-jump-back, which start the server on a clock they step by
    /// three TTLs: Redis, Redlock's master 1, MariaDB, PostgreSQL, memcached).
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// The share of holds that outlast a third of the TTL, so renewals happen (fewer give
    /// more acquisitions per second).
    #[arg(long, default_value_t = 0.2)]
    long_holds: f64,
    /// The longest of those holds, in TTLs (they are uniform from 0.34 TTL to this). Past 1, a
    /// hold outlasts its TTL or session, so a partition that ends a ZooKeeper session finds
    /// holders still in their critical section.
    #[arg(long, default_value_t = 0.9)]
    long_hold_max: f64,
    /// Tasks per client process: they share its `LockClient` and contend with each other as
    /// with other processes (a release can hand the lock to a waiter of its own process).
    #[arg(long, default_value_t = 2)]
    tasks: u32,
    /// Cold lock names beside the hot one.
    #[arg(long, default_value_t = 3)]
    cold: u32,
    /// What every name (hot and cold) is: a mutex, a semaphore of --permits, or a read-write
    /// lock. A backend that does not offer it is refused (`--backend all`: skipped).
    #[arg(long, value_enum, default_value_t = Primitive::Mutex)]
    primitive: Primitive,
    /// A semaphore's permits (each acquisition takes one).
    #[arg(long, default_value_t = 2)]
    permits: u32,
    /// With --primitive rw, the share of acquisitions that take the read lock (the rest take
    /// the write lock).
    #[arg(long, default_value_t = 0.7)]
    read_share: f64,
    /// The share of acquisitions on the hot lock.
    #[arg(long, default_value_t = 0.7)]
    hot_share: f64,
    /// The longest short hold (short holds are uniform from zero to this).
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    short_hold: Duration,
    /// Extra quiet time after each fault's recovery (fewer faults, more acquisitions).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    quiet_time: Duration,
    /// Break the backend on purpose, to prove the checker catches it.
    #[arg(long, value_enum)]
    broken: Option<Breakage>,
    /// Also write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Save the run here (JSON: every recorded event, write and fault, and what the checker
    /// was told), the last backend's if several; `--check` checks it again.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Draw the run here (SVG: a timeline of the grants of each name with the faults shaded
    /// and the findings marked, and the recovery time after each fault), the last backend's if
    /// several.
    #[arg(long)]
    picture: Option<PathBuf>,
    /// Run nothing: check a run saved with `--history` again (with --json and --picture as
    /// for a run); exits 1 if it broke a declared guarantee.
    #[arg(long, value_name = "FILE")]
    check: Option<PathBuf>,
    /// No progress line.
    #[arg(long)]
    quiet: bool,
}

/// `--backend`: every backend in turn, or one (named as [`Backend`]'s values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BackendChoice {
    All,
    One(Backend),
}

/// `all`, then every backend.
const CHOICES: [BackendChoice; Backend::ALL.len() + 1] = {
    let mut choices = [BackendChoice::All; Backend::ALL.len() + 1];
    let mut i = 0;
    while i < Backend::ALL.len() {
        choices[i + 1] = BackendChoice::One(Backend::ALL[i]);
        i += 1;
    }
    choices
};

impl clap::ValueEnum for BackendChoice {
    fn value_variants<'a>() -> &'a [Self] {
        &CHOICES
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        match self {
            BackendChoice::All => Some(clap::builder::PossibleValue::new("all")),
            BackendChoice::One(backend) => backend.to_possible_value(),
        }
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("distlock-torture: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Some(Command::Client(args)) => match runtime.block_on(client::run(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("distlock-torture client: {error}");
                ExitCode::from(2)
            }
        },
        None => runtime.block_on(torture(cli.run)),
    }
}

/// Checks a saved run again (`--check`).
fn check_again(args: &RunArgs, path: &std::path::Path) -> ExitCode {
    let saved = match saved::Saved::read(path) {
        Ok(saved) => saved,
        Err(error) => {
            eprintln!("distlock-torture: {error}");
            return ExitCode::from(2);
        }
    };
    let outcome = saved.outcome();
    println!("{}", report::table(&outcome));
    let failed = outcome.verdict.violations().next().is_some();
    if let Some(picture) = &args.picture {
        if let Err(error) = picture::write(&saved, picture) {
            eprintln!("distlock-torture: {error}");
            return ExitCode::from(2);
        }
    }
    if let Some(json) = &args.json {
        if let Err(error) = write_json(json, &[outcome]) {
            eprintln!("distlock-torture: {error}");
            return ExitCode::from(2);
        }
    }
    match failed {
        true => ExitCode::from(1),
        false => ExitCode::SUCCESS,
    }
}

/// Writes the outcomes as JSON to `path`.
fn write_json(path: &std::path::Path, outcomes: &[run::Outcome]) -> Result<(), String> {
    serde_json::to_vec_pretty(outcomes)
        .map_err(std::io::Error::other)
        .and_then(|json| std::fs::write(path, json))
        .map_err(|error| format!("cannot write {}: {error}", path.display()))
}

async fn torture(args: RunArgs) -> ExitCode {
    if let Some(path) = &args.check {
        return check_again(&args, path);
    }
    if args.long_hold_max.is_nan() || args.long_hold_max <= 0.34 {
        eprintln!("distlock-torture: --long-hold-max must be above 0.34 (TTLs)");
        return ExitCode::from(2);
    }
    if args.clients < 8 {
        eprintln!("distlock-torture: --clients must be at least 8");
        return ExitCode::from(2);
    }
    if args.permits == 0 {
        eprintln!("distlock-torture: --permits must be at least 1");
        return ExitCode::from(2);
    }
    if !(0.0..=1.0).contains(&args.read_share) {
        eprintln!("distlock-torture: --read-share must be between 0 and 1");
        return ExitCode::from(2);
    }
    let every_backend = args.backend.contains(&BackendChoice::All);
    let backends: Vec<Backend> = if every_backend {
        Backend::ALL.to_vec()
    } else {
        args.backend.iter().filter_map(|b| to_backend(*b)).collect()
    };
    if args.url.is_some() && backends.len() != 1 {
        eprintln!("distlock-torture: --url needs exactly one --backend (the URL's)");
        return ExitCode::from(2);
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    eprintln!("distlock-torture: seed {seed} (replay with --seed {seed})");
    let logs = match tempfile::Builder::new().prefix("distlock-torture-").tempdir() {
        Ok(dir) => dir,
        Err(error) => {
            eprintln!("distlock-torture: {error}");
            return ExitCode::from(2);
        }
    };
    let mut outcomes = Vec::new();
    let mut failed = false;
    for backend in backends {
        let setup = run::Setup {
            backend,
            url: args.url.clone(),
            clients: args.clients,
            duration: args.duration,
            min_acquisitions: args.min_acquisitions,
            ttl: args.ttl,
            seed,
            workload: run::Workload {
                cold: args.cold,
                hot_share: args.hot_share,
                short_hold: args.short_hold,
                long_holds: args.long_holds,
                long_hold_max: args.long_hold_max,
                tasks: args.tasks,
                primitive: args.primitive,
                permits: args.permits,
                read_share: args.read_share,
            },
            broken: args.broken,
            only: args.faults.clone(),
            quiet: args.quiet_time,
            log_dir: logs.path().to_path_buf(),
            history: args.history.clone(),
            picture: args.picture.clone(),
            progress: !args.quiet,
        };
        match run::run(setup).await {
            Ok(outcome) => {
                println!("{}", report::table(&outcome));
                failed |= outcome.verdict.violations().next().is_some();
                outcomes.push(outcome);
            }
            Err(RunError::NotOffered(why)) if every_backend => {
                eprintln!("distlock-torture: skipped: {why}");
            }
            Err(error) => {
                eprintln!("distlock-torture: {}: {error}", backend.name());
                return ExitCode::from(2);
            }
        }
    }
    if let Some(path) = &args.json {
        if let Err(error) = write_json(path, &outcomes) {
            eprintln!("distlock-torture: {error}");
            return ExitCode::from(2);
        }
    }
    if failed {
        eprintln!("distlock-torture: a declared guarantee was broken (seed {seed})");
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn to_backend(choice: BackendChoice) -> Option<Backend> {
    match choice {
        BackendChoice::All => None,
        BackendChoice::One(backend) => Some(backend),
    }
}

//! `distlock-peer-bench`: prints one table, measured in one run on one Redis server, of
//! distlock, rslock and distributed-lock-redis.

use std::process::ExitCode;

use clap::Parser;
use distlock_peer_bench::{run, Settings};
use distlock_testkit::RedisServer;

/// distlock beside rslock and distributed-lock-redis on one Redis server, in one run.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The Redis server. Without it, a redis-server of its own is started on a free loopback port.
    #[arg(long)]
    url: Option<String>,
    /// Uncontended acquire+release pairs per library per round (a tenth as many handoffs, at
    /// least 3, and twice as many hot-lock acquisitions).
    #[arg(long, default_value_t = 300)]
    iterations: usize,
    /// Rounds; every round measures every library in turn. Many short rounds spread the
    /// machine's noise over all libraries alike.
    #[arg(long, default_value_t = 15)]
    rounds: usize,
    /// Handoffs per library per round, instead of a tenth of the iterations.
    #[arg(long)]
    handoffs: Option<usize>,
    /// Hot-lock acquisitions per library per round, instead of twice the iterations.
    #[arg(long)]
    hot: Option<usize>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut settings = Settings::new(args.rounds, args.iterations);
    settings.handoffs = args.handoffs.unwrap_or(settings.handoffs).max(1);
    settings.hot_acquisitions = args.hot.unwrap_or(settings.hot_acquisitions).max(1);

    let (url, _server) = match args.url {
        Some(url) => (url, None),
        None => match RedisServer::start() {
            Ok(server) => (server.url(), Some(server)),
            Err(e) => {
                eprintln!("distlock-peer-bench: cannot start redis-server: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let runtime = distlock_conformance::bench::runtime();
    // On a runtime worker, next to the connections' I/O, not on the thread that blocks on it.
    let outcome = runtime.block_on(async move {
        tokio::spawn(
            async move { run(&url, &settings, &|step| eprintln!("distlock-peer-bench: {step}")).await },
        )
        .await
    });
    match outcome {
        Ok(Ok(report)) => {
            print!("{}", report.to_markdown());
            ExitCode::SUCCESS
        }
        Ok(Err(e)) => {
            eprintln!("distlock-peer-bench: {e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("distlock-peer-bench: the measurement failed: {e}");
            ExitCode::FAILURE
        }
    }
}

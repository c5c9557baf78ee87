//! `distlock`: a distributed `flock(1)` for cron jobs and scripts on many hosts, plus lock
//! status, a conformance check and benchmarks against a live store.
//!
//! Exit codes are documented in [`exit`]; errors are one line on stderr.

mod bench;
mod check;
mod cli;
mod doctor;
mod exec;
mod exit;
mod group;
mod leader;
mod schema;
mod status;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    // `distlock exec` re-executes itself as its command's group leader: no runtime, no CLI.
    #[cfg(target_os = "linux")]
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == group::LEADER_ARG)
    {
        return group::lead();
    }
    let cli = Cli::parse();
    // `check` loses locks on purpose; its table reports what matters.
    let quiet = matches!(cli.command, Command::Check(_));
    init_tracing(cli.verbose, quiet);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("distlock: cannot start the async runtime: {e}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let code = runtime.block_on(run(cli));
    // Background releases of guards get a moment to finish; nothing waits longer.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    ExitCode::from(code)
}

async fn run(cli: Cli) -> u8 {
    let outcome = match cli.command {
        Command::Exec(args) => match one_url(&cli.url) {
            Ok(url) => exec::run(&url, args).await,
            Err(e) => Err(e),
        },
        Command::Leader(args) => match one_url(&cli.url) {
            Ok(url) => leader::run(&url, args).await,
            Err(e) => Err(e),
        },
        Command::Status(args) => match one_url(&cli.url) {
            Ok(url) => status::run(&url, args).await,
            Err(e) => Err(e),
        },
        Command::Check(args) => match one_url(&cli.url) {
            Ok(url) => check::run(&url, args).await,
            Err(e) => Err(e),
        },
        Command::Doctor(args) => match one_url(&cli.url) {
            Ok(url) => doctor::run(&url, args).await,
            Err(e) => Err(e),
        },
        Command::Bench(args) => {
            let urls = if cli.url.is_empty() {
                vec![distlock::url_from_env()]
            } else {
                cli.url.clone()
            };
            bench::run(&urls, args).await
        }
        Command::Schema(args) => one_url(&cli.url).and_then(|url| schema::run(&url, args)),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "distlock", &mut std::io::stdout());
            Ok(exit::OK)
        }
    };
    outcome.unwrap_or_else(|error| {
        eprintln!("distlock: {error}");
        exit::for_error(&error)
    })
}

/// The one store URL of a command: `--url`, else `DISTLOCK_URL`, else the embedded default.
fn one_url(urls: &[String]) -> distlock::Result<String> {
    match urls {
        [] => Ok(distlock::default_url()),
        [url] => Ok(url.clone()),
        _ => Err(distlock::Error::invalid_config(
            "give --url once (only `bench` compares several stores)",
        )),
    }
}

/// `-v` shows distlock's own events, `-vv` everything; `RUST_LOG` overrides both.
fn init_tracing(verbose: u8, quiet: bool) {
    // Without -v, warnings from distlock's own crates only: a client library's retries are
    // noise unless they end in an error, which distlock reports itself.
    const OWN_WARNINGS: &str = "error,distlock=warn,distlock_core=warn,distlock_cli=warn,distlock_sql=warn,\
                                distlock_redis=warn,distlock_zookeeper=warn,distlock_memcached=warn";
    let default = match verbose {
        0 if quiet => "error",
        0 => OWN_WARNINGS,
        1 => "distlock=debug,distlock_core=debug,info",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

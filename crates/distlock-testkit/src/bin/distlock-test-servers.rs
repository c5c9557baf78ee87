//! Starts one of each test server on loopback, prints the environment that points distlock's
//! tests (and `distlock --url`) at them, and keeps them running until stdin closes.
//!
//! `cargo run -p distlock-testkit --bin distlock-test-servers` (then paste the exports into
//! another shell, and press Ctrl-D here to stop the servers).
//!
//! With `--env-file FILE`, the exports are written to `FILE` once every server is up (to a
//! temporary file first, then renamed, so a reader never sees half of it): `scripts/test-all`
//! starts the servers of a whole test run this way.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use distlock_testkit::shared;

fn main() -> ExitCode {
    let env_file = match parse_args() {
        Ok(env_file) => env_file,
        Err(message) => {
            eprintln!("distlock-test-servers: {message}\nusage: distlock-test-servers [--env-file FILE]");
            return ExitCode::from(64);
        }
    };
    let servers = [
        (shared::REDIS_URL_ENV, shared::redis_url as fn() -> _),
        (shared::REDIS_CLUSTER_URL_ENV, shared::redis_cluster_url),
        (shared::MEMCACHED_URL_ENV, shared::memcached_url),
        (shared::MYSQL_URL_ENV, shared::mysql_url),
        (shared::POSTGRES_URL_ENV, shared::postgres_url),
        (shared::ZOOKEEPER_URL_ENV, shared::zookeeper_url),
        (shared::ZOOKEEPER_ENSEMBLE_URL_ENV, shared::zookeeper_ensemble_url),
        (shared::ETCD_URL_ENV, shared::etcd_url),
        (shared::ETCD_CLUSTER_URL_ENV, shared::etcd_cluster_url),
    ];
    let mut exports = String::new();
    for (variable, start) in servers {
        match start() {
            Ok(url) => exports.push_str(&format!("export {variable}={url}\n")),
            Err(e) => {
                eprintln!("distlock-test-servers: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    match env_file {
        Some(path) => {
            let partial = path.with_extension("partial");
            if let Err(e) = std::fs::write(&partial, &exports).and_then(|()| std::fs::rename(&partial, &path))
            {
                eprintln!("distlock-test-servers: writing {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
        None => print!("{exports}"),
    }
    eprintln!("servers running; close stdin (Ctrl-D) to stop them");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    ExitCode::SUCCESS
}

/// `--env-file FILE`, or nothing.
fn parse_args() -> Result<Option<PathBuf>, String> {
    let mut args = std::env::args_os().skip(1);
    match args.next() {
        None => Ok(None),
        Some(flag) if flag == "--env-file" => match (args.next(), args.next()) {
            (Some(path), None) => Ok(Some(PathBuf::from(path))),
            (None, _) => Err("--env-file needs a file".to_owned()),
            (Some(_), Some(extra)) => Err(format!("unexpected argument {}", extra.to_string_lossy())),
        },
        Some(other) => Err(format!("unexpected argument {}", other.to_string_lossy())),
    }
}

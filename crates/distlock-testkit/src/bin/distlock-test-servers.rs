//! Starts one of each test server on loopback, prints the environment that points distlock's
//! tests (and `distlock --url`) at them, and keeps them running until stdin closes.
//!
//! `cargo run -p distlock-testkit --bin distlock-test-servers` (then paste the exports into
//! another shell, and press Ctrl-D here to stop the servers).

use std::io::Read;
use std::process::ExitCode;

use distlock_testkit::shared;

fn main() -> ExitCode {
    let servers = [
        (shared::REDIS_URL_ENV, shared::redis_url as fn() -> _),
        (shared::REDIS_CLUSTER_URL_ENV, shared::redis_cluster_url),
        (shared::MEMCACHED_URL_ENV, shared::memcached_url),
        (shared::MYSQL_URL_ENV, shared::mysql_url),
        (shared::POSTGRES_URL_ENV, shared::postgres_url),
        (shared::ZOOKEEPER_URL_ENV, shared::zookeeper_url),
    ];
    for (variable, start) in servers {
        match start() {
            Ok(url) => println!("export {variable}={url}"),
            Err(e) => {
                eprintln!("distlock-test-servers: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    eprintln!("servers running; close stdin (Ctrl-D) to stop them");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    ExitCode::SUCCESS
}

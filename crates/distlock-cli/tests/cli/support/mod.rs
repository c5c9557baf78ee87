//! What the end-to-end tests of the built `distlock` binary share: running it against a store
//! URL, reading its output, waiting for it to exit.
#![allow(dead_code)] // not every module uses every part

use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_distlock");

/// A SQLite store in `dir`, shared by every process given the same URL.
pub fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("locks.db").display())
}

/// `distlock --url URL ARGS...`, with no store from the environment.
pub fn distlock(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .env_remove("DISTLOCK_URL")
        .arg("--url")
        .arg(url)
        .args(args);
    command
}

/// Runs `command` to its end.
pub fn run(command: &mut Command) -> Output {
    command.output().expect("distlock runs")
}

/// Output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The exit code of `child` once it exits, failing if that takes longer than `limit`.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("waitable") {
            return status.code();
        }
        assert!(
            Instant::now() < deadline,
            "distlock did not exit within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the store at `url` offers (semaphores, read-write locks), asked of the library.
pub fn capabilities(url: &str) -> distlock::Capabilities {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime
        .block_on(distlock::open(url))
        .expect("the store opens")
        .capabilities()
}

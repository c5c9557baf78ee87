//! distlock beside its Rust peers on the same Redis server, in one run: uncontended
//! acquire+release, handoff and one hot lock, for distlock, rslock and distributed-lock-redis,
//! alternating round by round, beside three floors on plain redis-rs measured in the same
//! rounds: two `PING`s back to back, two `PING`s after an idle pause, and notify-then-act (a
//! `PUBLISH` wakes a parked subscriber, which then makes one round trip: the least a handoff
//! can cost on this store and client library).
//!
//! ```text
//! cargo run --release --manifest-path crates/distlock-peer-bench/Cargo.toml -- --iterations 300 --rounds 15
//! ```
//!
//! Without `--url`, the binary starts a `redis-server` of its own on a free loopback port. It
//! prints the table as Markdown, ready for the guide (docs/src/benchmarks.md).
//!
//! This crate is a workspace of its own, with its own lock file: rslock 0.10 needs redis 1.8,
//! and in the main workspace that would raise the redis version locked for distlock-redis too.

pub mod libraries;
pub mod measure;
pub mod report;
pub mod rounds;

pub use report::{Report, Row};
pub use rounds::{run, Settings};

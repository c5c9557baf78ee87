//! The command line.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand};

const AFTER_HELP: &str = "\
Stores: redis://HOST:PORT[/DB], redis+cluster://H1:P1,H2:P2 (a Redis Cluster),
redlock://H1:P1,H2:P2,H3:P3, mysql://USER:PASS@HOST:PORT/DB,
postgres://USER:PASS@HOST:PORT/DB, sqlite://PATH,
zk://H1:P1,H2:P2/CHROOT, etcd://H1:P1,H2:P2[/ROOT][?lease_ttl=10s],
memcache://HOST:PORT, memory://NAME (one process).
Without --url or DISTLOCK_URL, the embedded default store is used.

What `exec` holds while the command runs (as with flock, a shared and an exclusive holder
of one NAME exclude each other; the semaphore NAME is an object of its own):
  (default)     the exclusive hold of NAME: the write lock of the read-write lock NAME,
                then the lock NAME (the lock alone on stores without read-write locks):
                one command at a time, never beside a --shared, --read or --write holder
  --permits N   a permit of the semaphore NAME: at most N commands at once; every holder
                must give the same N while any holds a permit
  --weight W    with --permits N: W of the N permits, taken and given back together
  --read        a read lock of the read-write lock NAME (alias --shared): readers run
                together, never beside a writer or a plain exec; once one waits, new
                readers wait
  --write       the write lock of the read-write lock NAME: no reader or writer beside it
`status --semaphore NAME` and `status --rw NAME` list the holders of those two.

`leader NAME --value V -- COMMAND` campaigns in the election NAME, runs COMMAND while it
leads (others read V with `leader NAME --show`, or follow each change with `--observe`),
stops it as `exec` does if the leadership is lost, and resigns when it exits; its exit codes
are those of `exec`.

Exit codes of `exec`: the command's own code (128+N if killed by signal N), or
  75  the lock (or a permit) was not acquired within --wait (or at once with --no-wait)
  76  the lock was lost while the command ran; it got SIGTERM, then SIGKILL after --grace
      or at the lease's deadline, whichever is first
  126 the command cannot be executed     127 the command was not found
  70  the command's process group could not be set up
Any command: 64 invalid name, duration, --permits (0, or another count than the live
holders of the semaphore gave) or --weight (0 or above --permits), 69 store unavailable,
78 bad URL, store not compiled in, or a store without what was asked (semaphores,
read-write locks, weighted permits, leader election, fencing tokens), 2 usage error. `check` exits 1 if a case failed; `doctor` exits 3 if a setting is unsafe.

`exec` runs the command in a process group of its own. On Linux that group is killed with
SIGKILL when distlock dies, however it dies (kill -9 included), and at the lease's local
deadline (TTL from the last renewal, minus a safety margin) even if distlock is frozen; for
session-bound stores (ZooKeeper, etcd) only the first holds. Whatever the command leaves in its
group is killed when it ends, before the lock is released. Processes that leave the group
(setsid, daemons) are not covered. Elsewhere, if distlock is killed or frozen the command
runs on while the lock expires after its TTL.";

/// A distributed flock(1): run commands under a lock shared by many hosts, and inspect,
/// check and benchmark lock stores.
#[derive(Debug, Parser)]
#[command(name = "distlock", version, after_help = AFTER_HELP)]
pub struct Cli {
    /// The lock store's URL (`bench` takes several to compare).
    #[arg(long, global = true, env = "DISTLOCK_URL", value_name = "URL", action = clap::ArgAction::Append)]
    pub url: Vec<String>,

    /// More logging on stderr (-v: distlock's events, -vv: everything). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding a lock (or a semaphore's permit, or a read or write lock);
    /// release it when the command exits.
    Exec(ExecArgs),
    /// Show whether a lock is held, by whom, its fencing token and remaining TTL (or the
    /// holders of a semaphore or read-write lock).
    Status(StatusArgs),
    /// Run a command while leading the election NAME (publishing a value others read), or
    /// show or follow who leads.
    Leader(LeaderArgs),
    /// Run the conformance suite against the store and print a table of the cases.
    Check(CheckArgs),
    /// Measure latency, handoff and throughput of one or more stores side by side.
    Bench(BenchArgs),
    /// Print the DDL a DBA runs once for a SQL store (mysql://, postgres://, sqlite://),
    /// for clients that may not create tables.
    Schema(crate::schema::SchemaArgs),
    /// Judge the store's configuration (eviction, persistence, replication, timeouts): one
    /// line per setting, ok, warn or unsafe, with the reason and the fix; exit 3 if unsafe.
    Doctor(crate::doctor::DoctorArgs),
    /// Print shell completions.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("primitive").args(["permits", "read", "write"])))]
pub struct ExecArgs {
    /// How long to wait for the lock (500ms, 30s, 2m); default: wait until it is free.
    #[arg(long, short, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,

    /// Fail at once (exit 75) if the lock is held (with --permits: if every permit is).
    #[arg(long, short = 'n')]
    pub no_wait: bool,

    /// Hold one of N permits of the semaphore NAME instead of the lock NAME: at most N
    /// commands run at once. Every holder must give the same N (else exit 64).
    #[arg(long, value_name = "N")]
    pub permits: Option<u32>,

    /// With --permits: hold W of the N permits at once, given back together (a command that
    /// needs more of what the semaphore shares). From 1 to N; default 1.
    #[arg(long, value_name = "W", requires = "permits")]
    pub weight: Option<u32>,

    /// Hold a read lock of the read-write lock NAME: readers run together, never beside a
    /// writer (`--write`) or a plain `exec NAME`; once one waits, new readers wait for it.
    #[arg(long, visible_alias = "shared")]
    pub read: bool,

    /// Hold the write lock of the read-write lock NAME: no reader or other writer runs
    /// beside it.
    #[arg(long)]
    pub write: bool,

    /// The lock's TTL; the lock is renewed every TTL/3 while the command runs.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    pub ttl: Duration,

    /// Pass the lock's fencing token to the command in this environment variable.
    #[arg(long, value_name = "NAME")]
    pub fencing_token_env: Option<String>,

    /// After a lost lock, how long the command gets between SIGTERM and SIGKILL; never past
    /// the lease's local deadline.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub grace: Duration,

    /// The name held: of the read-write lock and the lock (of the semaphore with --permits).
    pub name: String,

    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("read_only").args(["show", "observe"])))]
pub struct LeaderArgs {
    /// The value published while leading, for others to read (this replica's address, say).
    #[arg(long, value_name = "VALUE", required_unless_present_any = ["show", "observe"])]
    pub value: Option<String>,

    /// Print the current leader (value and term), or that no one leads, and exit.
    #[arg(long, conflicts_with_all = ["value", "command"])]
    pub show: bool,

    /// Print each change of leader as it happens, until interrupted.
    #[arg(long, conflicts_with_all = ["value", "command"])]
    pub observe: bool,

    /// With --show or --observe: print JSON (one object per line) instead of sentences.
    #[arg(long)]
    pub json: bool,

    /// How long to wait for the leadership (500ms, 30s, 2m); default: until it comes.
    #[arg(long, short, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,

    /// Fail at once (exit 75) if another candidate leads.
    #[arg(long, short = 'n')]
    pub no_wait: bool,

    /// The leadership's TTL; it is renewed every TTL/3 while the command runs.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    pub ttl: Duration,

    /// Pass the leader's term (its fencing token) to the command in this environment
    /// variable.
    #[arg(long, value_name = "NAME")]
    pub term_env: Option<String>,

    /// After a lost leadership, how long the command gets between SIGTERM and SIGKILL; never
    /// past the lease's local deadline.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10s")]
    pub grace: Duration,

    /// The election's name.
    pub name: String,

    /// The command and its arguments (after `--`), run while leading.
    #[arg(last = true, value_name = "COMMAND", required_unless_present_any = ["show", "observe"])]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON instead of a sentence.
    #[arg(long)]
    pub json: bool,

    /// List the holders of the semaphore NAME (`exec --permits`) instead of the lock NAME.
    #[arg(long, conflicts_with = "rw")]
    pub semaphore: bool,

    /// List the readers and writer of the read-write lock NAME (`exec --read`/`--write`).
    #[arg(long, visible_alias = "rw-lock")]
    pub rw: bool,

    /// The lock's name (the semaphore's with --semaphore, the read-write lock's with --rw).
    pub name: String,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Run only the cases whose names contain one of these (repeatable).
    #[arg(long = "case", value_name = "TEXT")]
    pub cases: Vec<String>,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Operations measured per figure.
    #[arg(long, default_value_t = 200)]
    pub iterations: u32,

    /// Also write the results to this file: CSV, or JSON if it ends in .json.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Parses `500ms`, `30s`, `2m`, `1h 30m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration like 500ms, 30s or 2m ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("soon").is_err());
    }
}

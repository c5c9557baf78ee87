//! What each operation's script does on the server, command by command: the commands a
//! script calls are counted by `INFO commandstats` like any other, so each operation runs on
//! a server of its own with its statistics reset, and the counts are checked against a fixed
//! table. A change to a script that adds, drops or moves a command on any path (the mutex,
//! fenced or not, with or without a waiter; permits, weighted or not; readers, upgradeable or
//! not; the writer and the upgrade; every release) shows here, and so does a script that no
//! longer does what another client of the same keys expects.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use distlock_core::{
    Attempt, DistributedLock, DistributedLockExt, Lease, LockKind, LockName, OwnerToken, TryAcquire,
};
use distlock_redis::{RedisLock, Redlock, RedlockConfig};
use distlock_testkit::RedisServer;

const TTL: Duration = Duration::from_secs(30);
const STAY: Duration = Duration::from_secs(10);

/// Commands that are not a script's work: the script call itself, and what the client and
/// this test send around it.
const NOT_SCRIPT_WORK: [&str; 8] = [
    "evalsha", "eval", "info", "config", "client", "hello", "ping", "select",
];

fn name(label: &str) -> LockName {
    LockName::new(format!("cmds-{label}")).expect("valid")
}

/// The commands run on `url` since the last reset, by name (lower case), without
/// [`NOT_SCRIPT_WORK`]; then resets the statistics.
async fn commands_since_reset(url: &str) -> BTreeMap<String, u64> {
    let mut raw = support::raw(url).await.expect("raw connection");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .expect("INFO");
    let counts = info
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (command, rest) = line.split_once(':')?;
            let calls = rest.strip_prefix("calls=")?.split(',').next()?.parse().ok()?;
            Some((command.to_owned(), calls))
        })
        .filter(|(command, _): &(String, u64)| {
            // Redis 7 names subcommands `client|getname`.
            let command = command.split('|').next().unwrap_or_default();
            !NOT_SCRIPT_WORK.contains(&command)
        })
        .collect();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut raw)
        .await
        .expect("CONFIG RESETSTAT");
    counts
}

fn table(entries: &[(&str, u64)]) -> BTreeMap<String, u64> {
    entries.iter().map(|(c, n)| ((*c).to_owned(), *n)).collect()
}

async fn acquired(outcome: distlock_core::Result<TryAcquire>) -> Lease {
    match outcome.expect("answered") {
        TryAcquire::Acquired(lease) => lease,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn held(outcome: distlock_core::Result<TryAcquire>) {
    assert!(
        matches!(outcome, Ok(TryAcquire::Held(_))),
        "expected the hold to be refused, got {outcome:?}"
    );
}

/// Runs `step` and records in `$wrong` how the commands it made the server run differ from
/// the table.
macro_rules! check {
    ($wrong:ident, $url:expr, $what:literal, $step:expr, [$(($command:literal, $n:literal)),* $(,)?]) => {{
        commands_since_reset($url).await;
        let out = $step;
        let (ran, expected) = (commands_since_reset($url).await, table(&[$(($command, $n)),*]));
        if ran != expected {
            $wrong.push(format!("{}: ran {ran:?}, expected {expected:?}", $what));
        }
        out
    }};
}

/// Fails with every operation whose commands differed.
fn assert_all_as_expected(wrong: &[String]) {
    assert!(wrong.is_empty(), "commands differ:\n{}", wrong.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_operation_runs_the_same_commands_on_one_server() {
    let server = support::start_server().await;
    let url = server.url();
    let lock = RedisLock::connect(&url).await.expect("connects");
    let (m, sem, rw) = (name("mutex"), name("sem"), name("rw"));
    let permit = LockKind::Permit {
        permits: 1,
        weight: 1,
    };
    let mut wrong = Vec::new();

    let first = check!(
        wrong,
        &url,
        "a mutex's grant",
        acquired(lock.try_acquire(&m, OwnerToken::new(), TTL).await).await,
        [("set", 1), ("incr", 1)]
    );
    check!(
        wrong,
        &url,
        "a mutex's refusal",
        held(lock.try_acquire(&m, OwnerToken::new(), TTL).await),
        [("set", 1), ("get", 1), ("pttl", 1)]
    );
    check!(
        wrong,
        &url,
        "a waiter's refusal",
        held(
            lock.attempt(&Attempt::mutex(m.clone(), OwnerToken::new(), TTL).waiting("waiter-1", STAY))
                .await
        ),
        [
            ("set", 1),
            ("get", 1),
            ("time", 1),
            ("zremrangebyscore", 1),
            ("zadd", 1),
            ("pttl", 2),
            ("pexpire", 1)
        ]
    );
    check!(
        wrong,
        &url,
        "a mutex's renewal",
        assert!(lock.extend(&first, TTL).await.expect("extends").is_some()),
        [("get", 1), ("pexpire", 1)]
    );
    check!(
        wrong,
        &url,
        "a mutex's release that wakes a waiter",
        assert!(lock.release(&first).await.expect("releases")),
        [
            ("get", 1),
            ("del", 1),
            ("exists", 1),
            ("time", 1),
            ("zremrangebyscore", 1),
            ("zrange", 1),
            ("zrem", 1),
            ("publish", 1)
        ]
    );
    let won = check!(
        wrong,
        &url,
        "a waiter's grant",
        acquired(
            lock.attempt(&Attempt::mutex(m.clone(), OwnerToken::new(), TTL).waiting("waiter-1", STAY))
                .await
        )
        .await,
        [("set", 1), ("zrem", 1), ("incr", 1)]
    );
    check!(
        wrong,
        &url,
        "a mutex's release with no waiter",
        assert!(lock.release(&won).await.expect("releases")),
        [("get", 1), ("del", 1), ("exists", 1)]
    );
    check!(
        wrong,
        &url,
        "a release of a lock no longer ours",
        assert!(!lock.release(&won).await.expect("answers")),
        [("get", 1)]
    );

    let p = check!(
        wrong,
        &url,
        "a permit's grant",
        acquired(
            lock.try_acquire_kind(&sem, permit, OwnerToken::new(), TTL, None)
                .await
        )
        .await,
        [
            ("time", 1),
            ("zremrangebyscore", 1),
            ("zcard", 1),
            ("zadd", 1),
            ("hset", 1),
            ("zrange", 1),
            ("pexpireat", 1),
            ("hincrby", 1)
        ]
    );
    check!(
        wrong,
        &url,
        "a permit's refusal that queues a waiter",
        held(
            lock.try_acquire_kind(&sem, permit, OwnerToken::new(), TTL, Some(("waiter-2", STAY)))
                .await
        ),
        [
            ("time", 2),
            ("zremrangebyscore", 2),
            ("zcard", 1),
            ("hget", 1),
            ("zscore", 1),
            ("zadd", 1),
            ("pttl", 1),
            ("pexpire", 1),
            ("zrange", 1)
        ]
    );
    check!(
        wrong,
        &url,
        "a permit's renewal",
        assert!(lock.extend(&p, TTL).await.expect("extends").is_some()),
        [
            ("time", 1),
            ("zscore", 1),
            ("zadd", 1),
            ("zrange", 1),
            ("pexpireat", 1)
        ]
    );
    check!(
        wrong,
        &url,
        "a permit's release that wakes a waiter",
        assert!(lock.release(&p).await.expect("releases")),
        [
            ("zscore", 1),
            ("zrem", 2),
            ("time", 2),
            ("exists", 1),
            ("zremrangebyscore", 1),
            ("zrange", 1),
            ("publish", 1)
        ]
    );

    let reader = check!(
        wrong,
        &url,
        "a reader's grant",
        acquired(
            lock.try_acquire_kind(&rw, LockKind::Read, OwnerToken::new(), TTL, None)
                .await
        )
        .await,
        [
            ("time", 1),
            ("zremrangebyscore", 2),
            ("zcard", 2),
            ("zscore", 1),
            ("get", 1),
            ("zadd", 1),
            ("zrange", 1),
            ("pexpireat", 1),
            ("incr", 1)
        ]
    );
    check!(
        wrong,
        &url,
        "a writer's refusal that records it waiting",
        held(
            lock.try_acquire_kind(
                &rw,
                LockKind::Write,
                OwnerToken::new(),
                TTL,
                Some(("waiter-3", STAY))
            )
            .await
        ),
        [
            ("time", 1),
            ("zremrangebyscore", 2),
            ("zcard", 2),
            ("get", 1),
            ("zscore", 1),
            ("zadd", 1),
            ("zrange", 2),
            ("pexpireat", 1)
        ]
    );
    check!(
        wrong,
        &url,
        "the last reader's release",
        assert!(lock.release(&reader).await.expect("releases")),
        [
            ("zscore", 1),
            ("zrem", 1),
            ("time", 1),
            ("zremrangebyscore", 1),
            ("zcard", 1),
            ("publish", 1)
        ]
    );
    let writer = check!(
        wrong,
        &url,
        "a waiting writer's grant",
        acquired(
            lock.try_acquire_kind(
                &rw,
                LockKind::Write,
                OwnerToken::new(),
                TTL,
                Some(("waiter-3", STAY))
            )
            .await
        )
        .await,
        [
            ("time", 1),
            ("zremrangebyscore", 2),
            ("zcard", 2),
            ("get", 1),
            ("set", 1),
            ("zrem", 1),
            ("incr", 1)
        ]
    );
    check!(
        wrong,
        &url,
        "the writer's renewal",
        assert!(lock.extend(&writer, TTL).await.expect("extends").is_some()),
        [("get", 1), ("pexpire", 1)]
    );
    check!(
        wrong,
        &url,
        "the writer's release",
        assert!(lock.release(&writer).await.expect("releases")),
        [("get", 1), ("del", 1), ("publish", 1)]
    );
    assert_all_as_expected(&wrong);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_redlock_operation_runs_the_same_commands_on_a_master() {
    let servers: Vec<RedisServer> = vec![
        support::start_server().await,
        support::start_server().await,
        support::start_server().await,
    ];
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock: Redlock = RedlockConfig::new(&urls)
        .expect("valid")
        .build()
        .await
        .expect("builds");
    let url = &urls[0];
    let m = name("redlock");
    let mut wrong = Vec::new();
    // The first request of a connection names it (CLIENT SETNAME, INFO server): not counted.
    let warm = acquired(redlock.try_acquire(&name("warm"), OwnerToken::new(), TTL).await).await;
    assert!(redlock.release(&warm).await.expect("releases"));

    let first = check!(
        wrong,
        url,
        "a Redlock grant",
        acquired(redlock.try_acquire(&m, OwnerToken::new(), TTL).await).await,
        [("set", 1)]
    );
    check!(
        wrong,
        url,
        "a Redlock waiter's refusal",
        held(
            redlock
                .attempt(&Attempt::mutex(m.clone(), OwnerToken::new(), TTL).waiting("waiter-4", STAY))
                .await
        ),
        [
            ("set", 1),
            ("get", 1),
            ("zremrangebyscore", 1),
            ("zadd", 1),
            ("pttl", 2),
            ("pexpire", 1)
        ]
    );
    check!(
        wrong,
        url,
        "a Redlock renewal",
        assert!(redlock.extend(&first, TTL).await.expect("extends").is_some()),
        [("get", 1), ("pexpire", 1)]
    );
    check!(
        wrong,
        url,
        "a Redlock release that wakes a waiter",
        assert!(redlock.release(&first).await.expect("releases")),
        [
            ("get", 1),
            ("del", 1),
            ("exists", 1),
            ("time", 1),
            ("zremrangebyscore", 1),
            ("zrange", 1),
            ("zrem", 1),
            ("publish", 1)
        ]
    );
    assert_all_as_expected(&wrong);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_permits_and_upgradeable_reads_run_these_commands() {
    let server = support::start_server().await;
    let url = server.url();
    let lock = RedisLock::connect(&url).await.expect("connects");
    let (sem, rw) = (name("weighted"), name("upgradeable"));
    let mut wrong = Vec::new();

    let one = acquired(
        lock.try_acquire_kind(&sem, LockKind::permit(4), OwnerToken::new(), TTL, None)
            .await,
    )
    .await;
    let three = check!(
        wrong,
        &url,
        "a weighted grant beside a holder (its weights summed)",
        acquired(
            lock.try_acquire_kind(&sem, LockKind::permits(4, 3), OwnerToken::new(), TTL, None)
                .await
        )
        .await,
        [
            ("time", 1),
            ("zremrangebyscore", 1),
            ("zcard", 1),
            ("hget", 1),
            ("zrange", 2),
            ("zadd", 1),
            ("hset", 1),
            ("pexpireat", 1),
            ("hincrby", 1)
        ]
    );
    check!(
        wrong,
        &url,
        "a weighted refusal that queues a waiter",
        held(
            lock.try_acquire_kind(
                &sem,
                LockKind::permits(4, 2),
                OwnerToken::new(),
                TTL,
                Some(("waiter-w", STAY))
            )
            .await
        ),
        [
            ("time", 2),
            ("zremrangebyscore", 2),
            ("zcard", 1),
            ("hget", 1),
            ("zrange", 2),
            ("zscore", 1),
            ("zadd", 1),
            ("pttl", 1),
            ("pexpire", 1)
        ]
    );
    check!(
        wrong,
        &url,
        "a weighted renewal",
        assert!(lock.extend(&three, TTL).await.expect("extends").is_some()),
        [
            ("time", 1),
            ("zscore", 1),
            ("zadd", 1),
            ("zrange", 1),
            ("pexpireat", 1)
        ]
    );
    check!(
        wrong,
        &url,
        "a weighted release that wakes the one waiter",
        assert!(lock.release(&three).await.expect("releases")),
        [
            ("zscore", 1),
            ("zrem", 2),
            ("time", 2),
            ("zcard", 1),
            ("exists", 1),
            ("zremrangebyscore", 1),
            ("zrange", 1),
            ("publish", 1)
        ]
    );
    assert!(lock.release(&one).await.expect("releases"));

    let owner = OwnerToken::new();
    let upgradeable = check!(
        wrong,
        &url,
        "an upgradeable reader's grant",
        acquired(
            lock.try_acquire_kind(&rw, LockKind::UpgradeableRead, owner, TTL, None)
                .await
        )
        .await,
        [
            ("time", 1),
            ("zremrangebyscore", 2),
            ("zcard", 2),
            ("zscore", 1),
            ("get", 1),
            ("zrange", 2),
            ("zadd", 1),
            ("pexpireat", 1),
            ("incr", 1)
        ]
    );
    check!(
        wrong,
        &url,
        "a second upgradeable reader's refusal",
        held(
            lock.try_acquire_kind(&rw, LockKind::UpgradeableRead, OwnerToken::new(), TTL, None)
                .await
        ),
        [
            ("time", 1),
            ("zremrangebyscore", 2),
            ("zcard", 2),
            ("zscore", 1),
            ("get", 1),
            ("zrange", 1)
        ]
    );
    check!(
        wrong,
        &url,
        "an upgradeable renewal",
        assert!(lock.extend(&upgradeable, TTL).await.expect("extends").is_some()),
        [
            ("time", 1),
            ("zscore", 1),
            ("zadd", 1),
            ("zrange", 1),
            ("pexpireat", 1)
        ]
    );
    let reader = acquired(
        lock.try_acquire_kind(&rw, LockKind::Read, OwnerToken::new(), TTL, None)
            .await,
    )
    .await;
    check!(
        wrong,
        &url,
        "a reader's release that leaves the upgradeable reader alone",
        assert!(lock.release(&reader).await.expect("releases")),
        [
            ("zscore", 1),
            ("zrem", 1),
            ("time", 1),
            ("zremrangebyscore", 1),
            ("zcard", 1),
            ("zrange", 1),
            ("publish", 1)
        ]
    );
    let upgraded = check!(
        wrong,
        &url,
        "the upgrade",
        acquired(
            lock.try_acquire_kind(&rw, LockKind::Write, owner, TTL, None)
                .await
        )
        .await,
        [
            ("time", 1),
            ("zremrangebyscore", 2),
            ("zcard", 2),
            ("get", 1),
            ("zscore", 1),
            ("zrem", 1),
            ("set", 1),
            ("incr", 1)
        ]
    );
    assert!(lock.release(&upgraded).await.expect("releases"));

    let upgradeable = acquired(
        lock.try_acquire_kind(&rw, LockKind::UpgradeableRead, OwnerToken::new(), TTL, None)
            .await,
    )
    .await;
    let reader = acquired(
        lock.try_acquire_kind(&rw, LockKind::Read, OwnerToken::new(), TTL, None)
            .await,
    )
    .await;
    check!(
        wrong,
        &url,
        "an upgradeable reader's release beside a reader",
        assert!(lock.release(&upgradeable).await.expect("releases")),
        [
            ("zscore", 1),
            ("zrem", 1),
            ("time", 1),
            ("zremrangebyscore", 1),
            ("zcard", 1),
            ("zrange", 1),
            ("publish", 1)
        ]
    );
    assert!(lock.release(&reader).await.expect("releases"));
    assert_all_as_expected(&wrong);
}

//! Round trips per operation on MariaDB, counted by the server: the general log records every
//! query, prepare and execute each client connection sends, and the global status counter
//! `Com_admin_commands` counts the pings (`COM_PING`, which the general log leaves out; the
//! test's own `mariadb` client sends none). Acquire (won or held), release and extend must each
//! be exactly one statement: no ping before it, and none after it when the connection goes back
//! to the pool. The same holds for semaphores and read-write locks, whose attempt is one text
//! query carrying its whole transaction. Each test owns its server (one turns the general log on; both read global
//! counters).
#![cfg(feature = "mysql")]

use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Lease, LockClient, LockName, OwnerToken, TryAcquire,
};
use distlock_sql::{SqlConfig, SqlLock};
use distlock_testkit::{MariaDbServer, MARIADB_USER};

/// Long enough on loopback for a ping sent after an operation returned (a pool checking the
/// connection it was handed back) to reach the server and be counted.
const SETTLE: Duration = Duration::from_millis(200);

/// A server of the test's own (the tests read and change global counters and the log).
async fn own_server() -> MariaDbServer {
    tokio::task::spawn_blocking(MariaDbServer::start)
        .await
        .expect("the starter thread")
        .expect("mariadbd starts (install mariadb-server)")
}

/// The commands the lock's connections sent while `op` ran and just after (the test's admin
/// commands run as root and are not counted).
async fn commands<T>(server: &MariaDbServer, op: impl std::future::Future<Output = T>) -> (T, Vec<String>) {
    server
        .sql("TRUNCATE TABLE mysql.general_log")
        .expect("truncates the log");
    let pings_before = admin_commands(server);
    let out = op.await;
    tokio::time::sleep(SETTLE).await;
    let pings = admin_commands(server) - pings_before;
    let log = server
        .sql(&format!(
            "SELECT command_type, LEFT(CONVERT(argument USING utf8mb4), 40) FROM mysql.general_log \
             WHERE user_host LIKE '{MARIADB_USER}[%' ORDER BY event_time"
        ))
        .expect("reads the log");
    let mut commands: Vec<String> = log.lines().map(str::to_owned).collect();
    commands.extend((0..pings).map(|_| "Ping".to_owned()));
    (out, commands)
}

/// The server's count of administrative commands (`COM_PING` among them) so far.
fn admin_commands(server: &MariaDbServer) -> i64 {
    counters(server, &["Com_admin_commands"])[0]
}

/// Global status counters of the server, read by one statement.
fn counters<const N: usize>(server: &MariaDbServer, names: &[&str; N]) -> [i64; N] {
    let list = names.map(|n| format!("'{n}'")).join(", ");
    let out = server
        .sql(&format!("SHOW GLOBAL STATUS WHERE Variable_name IN ({list})"))
        .expect("reads the status");
    names.map(|name| {
        out.lines()
            .find_map(|line| {
                let (key, value) = line.split_once('\t')?;
                key.eq_ignore_ascii_case(name)
                    .then(|| value.trim().parse().ok())?
            })
            .expect("a counter")
    })
}

/// How many connections the lock's user has open now.
fn open_connections(server: &MariaDbServer) -> i64 {
    server
        .sql(&format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = '{MARIADB_USER}'"
        ))
        .expect("reads the process list")
        .trim()
        .parse()
        .expect("a count")
}

fn won(outcome: TryAcquire) -> Lease {
    match outcome {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("held: {h:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_command_per_operation() {
    let server = own_server().await;
    // One connection, so every statement is prepared once and the counts below are steady.
    let lock: SqlLock = SqlConfig::from_url(&server.url())
        .expect("a valid URL")
        .with_max_connections(1)
        // The automatic purge runs a few seconds after the start, on a connection of its own:
        // its statements are not the operations counted here.
        .with_purge_after(None)
        .expect("no automatic purge")
        .build()
        .await
        .expect("the server answers");
    let ttl = Duration::from_secs(30);
    let name = LockName::new("round-trips").expect("valid");

    // Warm up: every statement once (prepared and cached on the connection).
    let a = won(lock
        .try_acquire(&name, OwnerToken::new(), ttl)
        .await
        .expect("works"));
    assert!(matches!(
        lock.try_acquire(&name, OwnerToken::new(), ttl)
            .await
            .expect("works"),
        TryAcquire::Held(_)
    ));
    assert!(lock.extend(&a, ttl).await.expect("works").is_some());
    assert!(lock.release(&a).await.expect("works"));
    server
        .sql("SET GLOBAL log_output = 'TABLE'; SET GLOBAL general_log = 1")
        .expect("turns the general log on");

    let (a, acquire) = commands(&server, lock.try_acquire(&name, OwnerToken::new(), ttl)).await;
    let a = won(a.expect("works"));
    let (held, held_cmds) = commands(&server, lock.try_acquire(&name, OwnerToken::new(), ttl)).await;
    match held.expect("works") {
        TryAcquire::Held(h) => {
            let left = h.remaining.expect("the holder's remaining time");
            assert!(left > Duration::from_secs(25) && left <= ttl, "{left:?}");
        }
        TryAcquire::Acquired(l) => panic!("acquired a held lock: {l:?}"),
    }
    let (extended, extend) = commands(&server, lock.extend(&a, ttl)).await;
    assert!(extended.expect("works").is_some());
    let (released, release) = commands(&server, lock.release(&a)).await;
    assert!(released.expect("works"));

    let counts = [
        ("acquire", acquire.len()),
        ("acquire (held)", held_cmds.len()),
        ("extend", extend.len()),
        ("release", release.len()),
    ];
    println!("commands per operation: {counts:?}");
    for (what, cmds) in [
        ("acquire", &acquire),
        ("acquire (held)", &held_cmds),
        ("extend", &extend),
        ("release", &release),
    ] {
        // One statement, and no ping before it or after it.
        assert!(cmds.len() == 1 && cmds[0] != "Ping", "{what}: {cmds:#?}");
    }
}

/// Many operations back to back through the default pool: after the first cycle (which opens
/// the connection and prepares the statements) each operation is one prepared statement's
/// execution, no ping is ever sent, and one connection serves them all (a connection handed
/// back is free for the next operation at once, not busy with a check of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ping_over_many_operations() {
    const CYCLES: i64 = 100;
    let server = own_server().await;
    // The default pool, without the automatic purge: it runs 1 to 3 s after the start on a
    // connection of its own, and on a loaded machine the cycles below are still running then.
    let lock: SqlLock = SqlConfig::from_url(&server.url())
        .expect("a valid URL")
        .with_purge_after(None)
        .expect("no automatic purge")
        .build()
        .await
        .expect("the server answers");
    let ttl = Duration::from_secs(30);
    let name = LockName::new("many-round-trips").expect("valid");
    let cycle = || async {
        let lease = won(lock
            .try_acquire(&name, OwnerToken::new(), ttl)
            .await
            .expect("works"));
        let lease = lock
            .extend(&lease, ttl)
            .await
            .expect("works")
            .expect("still ours");
        assert!(lock.release(&lease).await.expect("works"));
    };
    cycle().await;
    tokio::time::sleep(SETTLE).await;

    const NAMES: [&str; 4] = [
        "Com_admin_commands",
        "Com_stmt_execute",
        "Com_stmt_prepare",
        "Questions",
    ];
    // What reading the counters itself adds to them (the test's own statement).
    let idle = counters(&server, &NAMES);
    let before = counters(&server, &NAMES);
    let own = [0, 1, 2, 3].map(|i| before[i] - idle[i]);
    for _ in 0..CYCLES {
        cycle().await;
    }
    tokio::time::sleep(SETTLE).await;
    let after = counters(&server, &NAMES);
    let [pings, executes, prepares, questions] = [0, 1, 2, 3].map(|i| after[i] - before[i] - own[i]);
    let connections = open_connections(&server);
    println!(
        "{} operations: {pings} pings, {executes} executions, {prepares} prepares, \
         {questions} statements in all, {connections} connections open",
        3 * CYCLES
    );
    assert_eq!(pings, 0, "pings sent");
    assert_eq!(executes, 3 * CYCLES, "one statement per operation");
    assert_eq!(prepares, 0, "statements prepared once, at connect");
    assert_eq!(questions, 3 * CYCLES, "nothing else sent");
    assert_eq!(connections, 1, "one connection served every operation");
}

/// A handoff between two clients of one process is one statement: the release hands the row
/// to the waiting client's owner token in the same `UPDATE`, and the waiter, woken with the
/// lock already its own, sends nothing (a release and the waiter's own acquisition would be
/// two, plus the failed attempts of clients that race it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_within_a_process_is_one_statement() {
    let server = own_server().await;
    let client = || async {
        let lock: SqlLock = SqlConfig::from_url(&server.url())
            .expect("a valid URL")
            .with_max_connections(1)
            .with_purge_after(None)
            .expect("no automatic purge")
            .build()
            .await
            .expect("the server answers");
        LockClient::new(lock)
    };
    let (holder, waiter) = (client().await, client().await);
    let name = LockName::new("handoff-round-trips").expect("valid");
    let long_poll = Duration::from_secs(20);
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .poll_interval(long_poll, long_poll);
    let handoff = || async {
        let guard = holder.acquire_with(&name, &opts).await.expect("acquired");
        let waiting = {
            let (waiter, name, opts) = (waiter.clone(), name.clone(), opts.clone());
            tokio::spawn(async move { waiter.acquire_with(&name, &opts).await.expect("acquired") })
        };
        // Let the waiter fail its attempts and go to sleep.
        tokio::time::sleep(Duration::from_millis(300)).await;
        (guard, waiting)
    };

    // Warm up: every statement prepared on both connections.
    let (guard, waiting) = handoff().await;
    assert!(guard.release().await.expect("works"));
    let handed = waiting.await.expect("the waiter task");
    assert!(handed.release().await.expect("works"));
    server
        .sql("SET GLOBAL log_output = 'TABLE'; SET GLOBAL general_log = 1")
        .expect("turns the general log on");

    let (guard, waiting) = handoff().await;
    let (handed, cmds) = commands(&server, async {
        assert!(guard.release().await.expect("works"));
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("handed over long before the waiter's next poll")
            .expect("the waiter task")
    })
    .await;
    println!("commands for one handoff: {cmds:#?}");
    assert!(
        cmds.len() == 1 && cmds[0] != "Ping",
        "a handoff within a process: {cmds:#?}"
    );
    assert!(handed.release().await.expect("works"));
}

/// While a client of another process holds the lock, a waiter's polls are reads: it writes
/// (an attempt: the upsert, which locks the row) only when a read found the lock free, so a
/// crowd of waiters does not queue writes behind the holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_polls_with_reads_while_another_process_holds_the_lock() {
    let server = own_server().await;
    // The holder is the bare backend: its release wakes nobody here, as one in another
    // process would not.
    let elsewhere: SqlLock = SqlLock::connect(&server.url()).await.expect("the server answers");
    let waiter = LockClient::new(SqlLock::connect(&server.url()).await.expect("the server answers"));
    let name = LockName::new("polled").expect("valid");
    let held = won(elsewhere
        .try_acquire(&name, OwnerToken::new(), Duration::from_secs(30))
        .await
        .expect("works"));

    const NAMES: [&str; 2] = ["Com_insert", "Com_select"];
    let before = counters(&server, &NAMES);
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move {
            let opts = AcquireOptions::new()
                .ttl(Duration::from_secs(30))
                .poll_interval(Duration::from_millis(10), Duration::from_millis(50));
            waiter.acquire_with(&name, &opts).await.expect("acquired")
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = counters(&server, &NAMES);
    let [inserts, selects] = [0, 1].map(|i| after[i] - before[i]);
    println!("while held elsewhere for 2 s: {inserts} attempts, {selects} reads");
    assert!(
        inserts <= 2,
        "{inserts} attempts (writes) while the lock was held elsewhere"
    );
    assert!(
        selects >= 20,
        "{selects} reads in 2 s of polling up to every 50 ms"
    );

    assert!(elsewhere.release(&held).await.expect("works"));
    let guard = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("acquired once free")
        .expect("the waiter task");
    assert!(guard.release().await.expect("works"));
}

/// A permit of a semaphore and the sides of a read-write lock: an attempt (won, refused, or
/// a writer recording that it waits) is one text query of several statements, one
/// transaction; release, extend and withdraw are one prepared statement each. No ping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_command_per_operation_on_semaphores_and_rw_locks() {
    use distlock_core::LockKind;

    let server = own_server().await;
    let lock: SqlLock = SqlConfig::from_url(&server.url())
        .expect("a valid URL")
        .with_max_connections(1)
        // The automatic purge runs a few seconds after the start, on a connection of its own:
        // its statements are not the operations counted here.
        .with_purge_after(None)
        .expect("no automatic purge")
        .build()
        .await
        .expect("the server answers");
    let ttl = Duration::from_secs(30);
    let name = LockName::new("round-trips").expect("valid");
    let permit = LockKind::Permit {
        permits: 1,
        weight: 1,
    };
    let stay = Duration::from_secs(5);

    // Warm up: every prepared statement once.
    let a = won(lock
        .try_acquire_kind(&name, permit, OwnerToken::new(), ttl, None)
        .await
        .expect("works"));
    assert!(lock.extend(&a, ttl).await.expect("works").is_some());
    assert!(lock.release(&a).await.expect("works"));
    lock.withdraw(&name, LockKind::Write, "w").await.expect("works");
    server
        .sql("SET GLOBAL log_output = 'TABLE'; SET GLOBAL general_log = 1")
        .expect("turns the general log on");

    let (a, acquire) = commands(
        &server,
        lock.try_acquire_kind(&name, permit, OwnerToken::new(), ttl, None),
    )
    .await;
    let a = won(a.expect("works"));
    let (held, held_cmds) = commands(
        &server,
        lock.try_acquire_kind(&name, permit, OwnerToken::new(), ttl, None),
    )
    .await;
    match held.expect("works") {
        TryAcquire::Held(h) => {
            let left = h.remaining.expect("the holder's remaining time");
            assert!(left > Duration::from_secs(25) && left <= ttl, "{left:?}");
        }
        TryAcquire::Acquired(l) => panic!("acquired a full semaphore: {l:?}"),
    }
    let (extended, extend) = commands(&server, lock.extend(&a, ttl)).await;
    assert!(extended.expect("works").is_some());
    let (released, release) = commands(&server, lock.release(&a)).await;
    assert!(released.expect("works"));

    let reader = won(lock
        .try_acquire_kind(&name, LockKind::Read, OwnerToken::new(), ttl, None)
        .await
        .expect("works"));
    let (waits, wait_cmds) = commands(
        &server,
        lock.try_acquire_kind(&name, LockKind::Write, OwnerToken::new(), ttl, Some(("w", stay))),
    )
    .await;
    assert!(matches!(waits.expect("works"), TryAcquire::Held(_)));
    let (withdrawn, withdraw) = commands(&server, lock.withdraw(&name, LockKind::Write, "w")).await;
    withdrawn.expect("works");
    assert!(lock.release(&reader).await.expect("works"));

    let all = [
        ("acquire a permit", &acquire),
        ("acquire a permit (full)", &held_cmds),
        ("extend a permit", &extend),
        ("release a permit", &release),
        ("a writer waits", &wait_cmds),
        ("withdraw", &withdraw),
    ];
    println!(
        "commands per operation: {:?}",
        all.map(|(what, cmds)| (what, cmds.len()))
    );
    for (what, cmds) in all {
        // One command, and no ping before it or after it.
        assert!(cmds.len() == 1 && cmds[0] != "Ping", "{what}: {cmds:#?}");
    }
    // An attempt is one text query carrying its whole transaction.
    for (what, cmds) in [("acquire", &acquire), ("held", &held_cmds), ("waits", &wait_cmds)] {
        assert!(
            cmds[0].starts_with("Query\tSTART TRANSACTION;"),
            "{what}: {cmds:#?}"
        );
    }
}

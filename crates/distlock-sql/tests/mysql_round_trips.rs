//! Round trips per operation on MariaDB, counted by the server: the general log records every
//! query, prepare and execute each client connection sends, and the global status counter
//! `Com_admin_commands` counts the pings (which the general log leaves out). Acquire (won or
//! held), release and extend must each be one statement with no ping before it. Owns its server
//! (it turns the general log on).
#![cfg(feature = "mysql")]

use std::time::Duration;

use distlock_core::{DistributedLock, Lease, LockName, OwnerToken, TryAcquire};
use distlock_sql::{SqlConfig, SqlLock};
use distlock_testkit::{MariaDbServer, MARIADB_USER};

/// The commands the lock's connections sent while `op` ran (the test's admin commands run as
/// root and are not counted).
async fn commands<T>(server: &MariaDbServer, op: impl std::future::Future<Output = T>) -> (T, Vec<String>) {
    server
        .sql("TRUNCATE TABLE mysql.general_log")
        .expect("truncates the log");
    let pings_before = admin_commands(server);
    let out = op.await;
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
    let out = server
        .sql("SHOW GLOBAL STATUS LIKE 'Com_admin_commands'")
        .expect("reads the status");
    out.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("a counter")
}

fn won(outcome: TryAcquire) -> Lease {
    match outcome {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("held: {h:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_command_per_operation() {
    let server = tokio::task::spawn_blocking(MariaDbServer::start)
        .await
        .expect("the starter thread")
        .expect("mariadbd starts (install mariadb-server)");
    // One connection, so every statement is prepared once and the counts below are steady.
    let lock: SqlLock = SqlConfig::from_url(&server.url())
        .expect("a valid URL")
        .with_max_connections(1)
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
        // One statement, and no ping before it. The pool pings a connection once when it is
        // handed back, after the answer reached the caller: that one is off the critical path.
        let statements = cmds.iter().filter(|c| *c != "Ping").count();
        let pings = cmds.len() - statements;
        assert!(statements == 1 && pings <= 1, "{what}: {cmds:#?}");
    }
}

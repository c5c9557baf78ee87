//! A [`StoreClock`] moves a running server's wall clock by its jump, and only while it says so.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_testkit::{
    MariaDbOptions, MariaDbServer, PostgresOptions, PostgresServer, RedisOptions, RedisServer, StoreClock,
};

/// How far a server's clock may be from the expected one: the machine is loaded.
const SLACK_SECS: i64 = 10;

fn clock() -> StoreClock {
    StoreClock::new().expect("libfaketime is installed (run scripts/install-test-deps)")
}

fn now_secs() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970");
    i64::try_from(since.as_secs()).expect("fits")
}

fn assert_near(what: &str, server_secs: i64, expected: i64) {
    assert!(
        (server_secs - expected).abs() <= SLACK_SECS,
        "{what}: the server's clock reads {server_secs}, expected {expected} (within {SLACK_SECS} s)"
    );
}

/// Redis' `TIME`, seconds part.
fn redis_time(server: &RedisServer) -> i64 {
    let mut stream = TcpStream::connect(server.addr()).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout set");
    stream.write_all(b"TIME\r\n").expect("sent");
    let mut buf = [0u8; 128];
    let n = stream.read(&mut buf).expect("a reply");
    // *2\r\n$10\r\n<seconds>\r\n$6\r\n<micros>\r\n
    let reply = String::from_utf8_lossy(&buf[..n]).into_owned();
    reply
        .split("\r\n")
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("TIME answered {reply:?}"))
}

#[test]
fn redis_time_moves_by_the_jump_while_the_server_runs() {
    let clock = clock();
    let server = RedisServer::start_with(RedisOptions {
        clock: Some(clock.clone()),
        ..RedisOptions::default()
    })
    .expect("redis-server starts under libfaketime");
    assert_near("at +0", redis_time(&server), now_secs());
    clock.jump(3600).expect("jump");
    assert_eq!(clock.offset(), 3600);
    assert_near("at +3600s", redis_time(&server), now_secs() + 3600);
    clock.jump(-3600).expect("jump");
    assert_near("at -3600s", redis_time(&server), now_secs() - 3600);
    clock.jump(0).expect("jump");
    assert_near("back at +0", redis_time(&server), now_secs());
}

#[test]
fn postgres_clock_moves_by_the_jump_while_the_server_runs() {
    // PostgreSQL runs as another user when the tests run as root: it must read the clock too.
    let clock = clock();
    let server = PostgresServer::start_with(PostgresOptions {
        clock: Some(clock.clone()),
        ..PostgresOptions::default()
    })
    .expect("postgres starts under libfaketime");
    let read = || -> i64 {
        let out = server
            .sql("SELECT floor(extract(epoch FROM clock_timestamp()))::bigint")
            .expect("psql");
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("psql answered {out:?}"))
    };
    assert_near("at +0", read(), now_secs());
    clock.jump(-90).expect("jump");
    assert_near("at -90s", read(), now_secs() - 90);
}

#[test]
fn mariadb_clock_moves_by_the_jump_while_the_server_runs() {
    let clock = clock();
    let server = MariaDbServer::start_with(MariaDbOptions {
        clock: Some(clock.clone()),
        ..MariaDbOptions::default()
    })
    .expect("mariadbd starts under libfaketime");
    let read = || -> i64 {
        let out = server.sql("SELECT UNIX_TIMESTAMP()").expect("mariadb");
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("mariadb answered {out:?}"))
    };
    assert_near("at +0", read(), now_secs());
    clock.jump(90).expect("jump");
    assert_near("at +90s", read(), now_secs() + 90);
}

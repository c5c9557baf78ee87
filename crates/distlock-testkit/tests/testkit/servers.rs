//! Tests of the harness against the real servers (install them with
//! `scripts/install-test-deps`).

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use distlock_testkit::{
    probe, shared, HarnessError, MariaDbOptions, MariaDbServer, MemcachedOptions, MemcachedServer,
    PostgresOptions, PostgresServer, RedisOptions, RedisServer, ZkMode, ZooKeeperEnsemble, ZooKeeperOptions,
    ZooKeeperServer,
};

/// Short enough that a paused server makes the ping fail quickly.
const PING_TIMEOUT: Duration = Duration::from_millis(300);

/// Sends `request`, reads until `done` or EOF, all with short timeouts.
fn exchange(port: u16, request: &[u8], done: fn(&[u8]) -> bool) -> io::Result<Vec<u8>> {
    probe::exchange(probe::loopback(port), request, done, PING_TIMEOUT)
}

fn line(reply: &[u8]) -> bool {
    reply.ends_with(b"\r\n")
}

fn expect_reply(reply: Vec<u8>, prefix: &[u8]) -> io::Result<()> {
    if reply.starts_with(prefix) {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "unexpected reply {:?}",
            String::from_utf8_lossy(&reply)
        )))
    }
}

fn redis_ping(port: u16) -> io::Result<()> {
    expect_reply(exchange(port, b"PING\r\n", line)?, b"+PONG")
}

fn memcached_version(port: u16) -> io::Result<()> {
    expect_reply(exchange(port, b"version\r\n", line)?, b"VERSION ")
}

fn zk_ruok(port: u16) -> io::Result<()> {
    expect_reply(exchange(port, b"ruok", |_| false)?, b"imok")
}

/// The MySQL handshake: 4-byte header, then protocol version 10.
fn mysql_greeting(port: u16) -> io::Result<()> {
    let reply = exchange(port, b"", |reply| reply.len() >= 5)?;
    match reply.get(4) {
        Some(10) => Ok(()),
        _ => Err(io::Error::other(format!("unexpected greeting {reply:?}"))),
    }
}

/// PostgreSQL's `SSLRequest`: the server answers one byte, `N` (no TLS here) or `S`.
fn postgres_ssl_request(port: u16) -> io::Result<()> {
    let request = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    let reply = exchange(port, &request, |reply| !reply.is_empty())?;
    match reply.first() {
        Some(b'N' | b'S') => Ok(()),
        _ => Err(io::Error::other(format!("unexpected answer {reply:?}"))),
    }
}

fn assert_refused(port: u16) {
    let err = TcpStream::connect_timeout(&probe::loopback(port), PING_TIMEOUT)
        .expect_err("nothing should listen on the port any more");
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused, "{err}");
}

/// True once the process is gone (or a zombie nobody reaped yet).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if process_gone(pid) {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The common part of every lifecycle test: pause/resume, kill/restart on
/// the same port, and drop.
macro_rules! check_lifecycle {
    ($server:expr, $ping:expr) => {{
        let mut server = $server;
        let port = server.port();
        let ping = $ping;
        ping(port).expect("ready after start");

        server.pause().expect("pause");
        assert!(ping(port).is_err(), "a paused server must not answer");
        server.resume().expect("resume");
        ping(port).expect("answers after resume");

        let first_pid = server.pid().expect("running");
        server.kill().expect("kill -9");
        assert!(!server.is_running());
        assert_eq!(server.pid(), None);
        assert_refused(port);

        let started = Instant::now();
        server.restart().expect("restart");
        eprintln!("restart took {:?}", started.elapsed());
        assert_eq!(server.port(), port);
        ping(port).expect("answers after restart, same port");
        assert_ne!(server.pid(), Some(first_pid));

        server.stop().expect("graceful stop");
        assert_refused(port);
        server.restart().expect("restart after stop");
        ping(port).expect("answers after the second restart");

        let dir = server.dir().to_path_buf();
        let pid = server.pid().expect("running");
        assert!(dir.exists());
        drop(server);
        assert!(!dir.exists(), "drop must remove {}", dir.display());
        assert!(process_gone(pid), "drop must kill the server");
        assert_refused(port);
    }};
}

#[test]
fn redis_lifecycle() {
    let started = Instant::now();
    let redis = RedisServer::start().expect("start redis");
    eprintln!("redis start took {:?}", started.elapsed());
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{}", redis.port()));
    check_lifecycle!(redis, redis_ping);
}

#[test]
fn redis_persistence_survives_kill() {
    let mut redis = RedisServer::start_with(RedisOptions {
        persistence: true,
        ..RedisOptions::default()
    })
    .expect("start redis");
    let port = redis.port();
    let set = exchange(port, b"SET testkit-key kept\r\n", line).expect("SET");
    assert_eq!(set, b"+OK\r\n");
    redis.kill().expect("kill -9");
    redis.restart().expect("restart");
    let get = exchange(port, b"GET testkit-key\r\n", |r| r.ends_with(b"kept\r\n")).expect("GET");
    assert_eq!(get, b"$4\r\nkept\r\n");
}

#[test]
fn memcached_lifecycle() {
    let started = Instant::now();
    let memcached = MemcachedServer::start_with(MemcachedOptions {
        memory_mb: 16,
        extra_args: vec!["-M".into()],
        ..MemcachedOptions::default()
    })
    .expect("start memcached");
    eprintln!("memcached start took {:?}", started.elapsed());
    assert_eq!(
        memcached.url(),
        format!("memcache://127.0.0.1:{}", memcached.port())
    );
    check_lifecycle!(memcached, memcached_version);
}

#[test]
fn mariadb_lifecycle() {
    let started = Instant::now();
    let mut mariadb = MariaDbServer::start().expect("start mariadb");
    eprintln!("mariadb init+start took {:?}", started.elapsed());
    assert_eq!(
        mariadb.url(),
        format!(
            "mysql://distlock:distlock@127.0.0.1:{}/distlock_test",
            mariadb.port()
        )
    );
    assert_eq!(mariadb.sql("SELECT 1").expect("SELECT 1").trim(), "1");
    mariadb
        .sql("CREATE TABLE kept (v INT); INSERT INTO kept VALUES (42);")
        .expect("create a table");
    // Data survives kill -9 + restart (InnoDB crash recovery).
    mariadb.kill().expect("kill -9");
    mariadb.restart().expect("restart");
    assert_eq!(mariadb.sql("SELECT v FROM kept").expect("select").trim(), "42");
    check_lifecycle!(mariadb, mysql_greeting);
}

#[test]
fn postgres_lifecycle() {
    let started = Instant::now();
    let mut postgres = PostgresServer::start().expect("start postgres");
    eprintln!("postgres initdb+start took {:?}", started.elapsed());
    assert_eq!(
        postgres.url(),
        format!(
            "postgres://distlock:distlock@127.0.0.1:{}/distlock_test",
            postgres.port()
        )
    );
    assert_eq!(postgres.sql("SELECT 1").expect("SELECT 1").trim(), "1");
    postgres
        .sql("CREATE TABLE kept (v INT); INSERT INTO kept VALUES (42)")
        .expect("create a table");
    postgres.kill().expect("kill -9");
    postgres.restart().expect("restart");
    assert_eq!(postgres.sql("SELECT v FROM kept").expect("select").trim(), "42");
    check_lifecycle!(postgres, postgres_ssl_request);
}

#[test]
fn zookeeper_standalone_lifecycle() {
    let started = Instant::now();
    let zk = ZooKeeperServer::start().expect("start zookeeper");
    eprintln!("zookeeper standalone start took {:?}", started.elapsed());
    assert_eq!(zk.mode(), Some(ZkMode::Standalone));
    assert_eq!(zk.url(), format!("zk://127.0.0.1:{}", zk.port()));
    let log = std::fs::read_to_string(zk.process().log_path()).expect("read the log");
    assert!(
        log.contains("binding to port"),
        "ZooKeeper should log to server.log:\n{log}"
    );
    check_lifecycle!(zk, zk_ruok);
}

#[test]
fn zookeeper_ensemble_failover() {
    let started = Instant::now();
    let mut ensemble = ZooKeeperEnsemble::start().expect("start the ensemble");
    eprintln!("zookeeper ensemble start took {:?}", started.elapsed());
    let ports: Vec<u16> = ensemble.nodes().iter().map(|node| node.port()).collect();
    assert_eq!(
        ensemble.connect_string(),
        ports
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    assert_eq!(ensemble.url(), format!("zk://{}", ensemble.connect_string()));
    for port in &ports {
        zk_ruok(*port).expect("every node answers ruok");
    }
    let modes: Vec<_> = ensemble.nodes().iter().map(|node| node.mode()).collect();
    assert_eq!(
        modes.iter().filter(|m| **m == Some(ZkMode::Leader)).count(),
        1,
        "exactly one leader: {modes:?}"
    );
    assert_eq!(
        modes.iter().filter(|m| **m == Some(ZkMode::Follower)).count(),
        2,
        "two followers: {modes:?}"
    );

    let old_leader = ensemble.leader().expect("a leader");
    ensemble.node_mut(old_leader).kill().expect("kill the leader");
    assert_refused(ports[old_leader]);
    let failover = Instant::now();
    let new_leader = ensemble
        .wait_for_leader(Duration::from_secs(20))
        .expect("the two survivors elect a new leader");
    eprintln!("zookeeper failover took {:?}", failover.elapsed());
    assert_ne!(new_leader, old_leader);

    let rejoin = Instant::now();
    ensemble
        .node_mut(old_leader)
        .restart()
        .expect("restart the old leader");
    eprintln!("zookeeper rejoin took {:?}", rejoin.elapsed());
    assert_eq!(ensemble.node(old_leader).mode(), Some(ZkMode::Follower));
    assert_eq!(ensemble.leader(), Some(new_leader));

    // A paused follower does not answer; resumed, it serves again.
    let follower = (0..3).find(|i| *i != new_leader).expect("a follower");
    ensemble.node_mut(follower).pause().expect("pause");
    assert!(zk_ruok(ports[follower]).is_err());
    ensemble.node_mut(follower).resume().expect("resume");
    zk_ruok(ports[follower]).expect("answers after resume");

    let dir = ensemble.dir().to_path_buf();
    let pids: Vec<u32> = ensemble.nodes().iter().filter_map(|n| n.pid()).collect();
    assert_eq!(pids.len(), 3);
    drop(ensemble);
    assert!(!dir.exists());
    assert!(pids.iter().all(|pid| process_gone(*pid)));
}

#[test]
fn missing_programs_say_how_to_install_them() {
    let check = |err: HarnessError, program: &str, package: &str| {
        let message = err.to_string();
        eprintln!("{message}");
        assert!(matches!(err, HarnessError::MissingBinary { .. }), "{message}");
        assert!(message.contains(program), "{message}");
        assert!(message.contains("run scripts/install-test-deps"), "{message}");
        assert!(
            message.contains(&format!("apt-get install -y {package}")),
            "{message}"
        );
    };
    let err = RedisServer::start_with(RedisOptions {
        binary: Some("distlock-no-such-redis-server".into()),
        ..RedisOptions::default()
    })
    .expect_err("must fail");
    check(err, "distlock-no-such-redis-server", "redis-server");

    let err = MemcachedServer::start_with(MemcachedOptions {
        binary: Some("/nonexistent/memcached".into()),
        ..MemcachedOptions::default()
    })
    .expect_err("must fail");
    check(err, "/nonexistent/memcached", "memcached");

    let err = MariaDbServer::start_with(MariaDbOptions {
        install_db: Some("distlock-no-such-install-db".into()),
        ..MariaDbOptions::default()
    })
    .expect_err("must fail");
    check(err, "distlock-no-such-install-db", "mariadb-server");

    let err = PostgresServer::start_with(PostgresOptions {
        bin_dir: Some("/nonexistent/postgresql/bin".into()),
        ..PostgresOptions::default()
    })
    .expect_err("must fail");
    check(err, "/nonexistent/postgresql/bin/postgres", "postgresql");

    let err = ZooKeeperServer::start_with(ZooKeeperOptions {
        java: Some("distlock-no-such-java".into()),
        ..ZooKeeperOptions::default()
    })
    .expect_err("must fail");
    check(err, "distlock-no-such-java", "default-jre-headless");
}

#[test]
fn a_server_that_fails_to_start_reports_its_log() {
    let err = RedisServer::start_with(RedisOptions {
        extra_args: vec!["--no-such-directive".into(), "x".into()],
        ..RedisOptions::default()
    })
    .expect_err("redis must reject the option");
    let message = err.to_string();
    eprintln!("{message}");
    assert!(matches!(err, HarnessError::NotReady { .. }), "{message}");
    assert!(message.contains("exited"), "{message}");
    assert!(message.contains("no-such-directive"), "{message}");
}

#[test]
fn shared_servers_are_started_once() {
    let first = shared::redis().expect("shared redis");
    let second = shared::redis().expect("shared redis");
    assert!(std::ptr::eq(first, second));
    redis_ping(first.port()).expect("ping the shared redis");
    if std::env::var_os(shared::REDIS_URL_ENV).is_none() {
        assert_eq!(shared::redis_url().expect("url"), first.url());
    }
    let memcached = shared::memcached().expect("shared memcached");
    memcached_version(memcached.port()).expect("version");
}

#[test]
fn servers_outlive_the_thread_that_started_them() {
    // PR_SET_PDEATHSIG fires when the spawning *thread* exits; the testkit
    // spawns from its own long-lived thread, so this must not kill redis.
    let redis = thread::spawn(|| RedisServer::start().expect("start redis"))
        .join()
        .expect("thread");
    thread::sleep(Duration::from_millis(200));
    redis_ping(redis.port()).expect("still running");
}

const HELPER_ENV: &str = "DISTLOCK_TESTKIT_ORPHAN_HELPER";

/// Not a test on its own: `servers_die_with_the_test_process` runs the test
/// binary again with only this test and `HELPER_ENV` set.
#[test]
fn orphan_helper() {
    if std::env::var_os(HELPER_ENV).is_none() {
        return;
    }
    let (pid, dir) = if std::env::var_os(HELPER_ENV).is_some_and(|v| v == "postgres") {
        let postgres = PostgresServer::start().expect("start postgres");
        let found = (postgres.pid().expect("running"), postgres.dir().to_path_buf());
        std::mem::forget(postgres);
        found
    } else {
        let redis = RedisServer::start().expect("start redis");
        let found = (redis.pid().expect("running"), redis.dir().to_path_buf());
        std::mem::forget(redis);
        found
    };
    println!("HELPER pid={pid} dir={}", dir.display());
    io::stdout().flush().expect("flush");
    thread::sleep(Duration::from_secs(30));
}

#[test]
fn servers_die_with_the_test_process() {
    server_dies_with_the_test_process("redis");
}

/// As `servers_die_with_the_test_process`, for a postmaster run as another
/// user (as root, the `postgres` user): its parent-death signal survives the
/// change of user.
#[test]
fn postgres_dies_with_the_test_process() {
    server_dies_with_the_test_process("postgres");
}

fn server_dies_with_the_test_process(kind: &str) {
    let exe = std::env::current_exe().expect("current exe");
    let mut helper = Command::new(exe)
        .args([
            "--exact",
            &crate::test_name(module_path!(), "orphan_helper"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, kind)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run the helper");
    let stdout = helper.stdout.take().expect("piped");
    let report = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        // libtest prints "test servers::orphan_helper ... " on the same line.
        .find_map(|line| line.split_once("HELPER ").map(|(_, report)| report.to_string()))
        .expect("the helper reports its server");
    let (pid, dir) = report.split_once(" dir=").expect("pid and dir");
    let pid: u32 = pid.trim_start_matches("pid=").parse().expect("a numeric pid");
    assert!(!process_gone(pid));

    helper.kill().expect("kill -9 the test process");
    helper.wait().expect("reap it");
    assert!(
        wait_gone(pid, Duration::from_secs(5)),
        "{kind} {pid} must die with its test process"
    );
    // Nobody was left to remove it.
    let _ = std::fs::remove_dir_all(PathBuf::from(dir));
}

//! The stores the many-locks benchmark runs on, each started on loopback by the testkit, and
//! how to read each one's own counters of the requests it served.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use distlock_testkit::{
    EtcdServer, MariaDbServer, MemcachedServer, PostgresOptions, PostgresServer, RedisServer, ZooKeeperServer,
};

/// A store's counters by name, the headline one first in the table.
pub type Counters = Box<dyn Fn() -> Vec<(&'static str, u64)>>;

/// A store started for the benchmark: its URL, how to read its counters, and what keeps it up.
pub struct Store {
    pub name: &'static str,
    pub url: String,
    pub counters: Counters,
    _keep: Box<dyn std::any::Any>,
}

/// Starts the store `name` (`redis`, `sqlite`, `mysql`, `postgres`, `memcached`,
/// `zookeeper`, `etcd`), if its feature is on.
pub fn start(name: &'static str) -> Option<Store> {
    let store = match name {
        "redis" if cfg!(feature = "redis") => {
            let server = RedisServer::start().expect("redis-server starts (install redis-server)");
            let port = server.port();
            Store {
                name: "Redis",
                url: server.url(),
                counters: Box::new(move || redis_counters(port)),
                _keep: Box::new(server),
            }
        }
        "sqlite" if cfg!(feature = "sqlite") => {
            let dir = tempfile::tempdir().expect("a temporary directory");
            Store {
                name: "SQLite",
                url: format!("sqlite://{}", dir.path().join("locks.db").display()),
                counters: Box::new(Vec::new),
                _keep: Box::new(dir),
            }
        }
        "mysql" if cfg!(feature = "mysql") => {
            let server = Arc::new(MariaDbServer::start().expect("mariadbd starts (install mariadb-server)"));
            let read = server.clone();
            Store {
                name: "MariaDB",
                url: server.url(),
                counters: Box::new(move || {
                    let out = read
                        .sql("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_update')")
                        .expect("reads the status");
                    let value = |name: &str| {
                        out.lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once('\t')?;
                                k.eq_ignore_ascii_case(name).then(|| v.trim().parse().ok())?
                            })
                            .unwrap_or(0)
                    };
                    Vec::from([
                        ("Questions", value("Questions")),
                        ("Com_update", value("Com_update")),
                    ])
                }),
                _keep: Box::new(server),
            }
        }
        "postgres" if cfg!(feature = "postgres") => {
            let server = PostgresServer::start_with(PostgresOptions {
                extra_args: vec!["-c".into(), "shared_preload_libraries=pg_stat_statements".into()],
                ..PostgresOptions::default()
            })
            .expect("postgres starts (install postgresql)");
            server
                .sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                .expect("pg_stat_statements (postgresql-contrib)");
            let server = Arc::new(server);
            let read = server.clone();
            Store {
                name: "PostgreSQL",
                url: server.url(),
                counters: Box::new(move || {
                    let calls = read
                        .sql(
                            "SELECT COALESCE(SUM(calls), 0) FROM pg_stat_statements \
                             WHERE query NOT LIKE '%pg_stat_statements%'",
                        )
                        .expect("reads pg_stat_statements");
                    Vec::from([("statements", calls.trim().parse().unwrap_or(0))])
                }),
                _keep: Box::new(server),
            }
        }
        "memcached" if cfg!(feature = "memcached") => {
            let server = MemcachedServer::start().expect("memcached starts (install memcached)");
            let addr = server.addr();
            Store {
                name: "memcached",
                url: server.url(),
                counters: Box::new(move || memcached_counters(addr)),
                _keep: Box::new(server),
            }
        }
        "zookeeper" if cfg!(feature = "zookeeper") => {
            let server = ZooKeeperServer::start().expect("zookeeper starts (install zookeeper)");
            let addr = server.addr();
            Store {
                name: "ZooKeeper",
                url: server.url(),
                counters: Box::new(move || {
                    let mntr = distlock_testkit::four_letter_word(addr, "mntr", Duration::from_secs(5))
                        .expect("mntr answers");
                    let packets = stat_line(&mntr, "zk_packets_received").unwrap_or(0);
                    Vec::from([("packets", packets)])
                }),
                _keep: Box::new(server),
            }
        }
        "etcd" if cfg!(feature = "etcd") => {
            let server = EtcdServer::start().expect("etcd starts (install etcd-server)");
            let addr = server.addr();
            Store {
                name: "etcd",
                // The locks' lease kept alive each second, as the other stores renew.
                url: format!("{}?lease_ttl=3s", server.url()),
                counters: Box::new(move || Vec::from([("gRPC messages", etcd_messages(addr))])),
                _keep: Box::new(server),
            }
        }
        _ => return None,
    };
    Some(store)
}

fn redis_counters(port: u16) -> Vec<(&'static str, u64)> {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "INFO", "stats"])
        .output()
        .expect("redis-cli runs (install redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    Vec::from([
        ("reads", stat_line(&text, "total_reads_processed").unwrap_or(0)),
        (
            "commands",
            stat_line(&text, "total_commands_processed").unwrap_or(0),
        ),
    ])
}

fn memcached_counters(addr: SocketAddr) -> Vec<(&'static str, u64)> {
    let mut conn = TcpStream::connect(addr).expect("memcached answers");
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("a timeout");
    conn.write_all(b"stats\r\n").expect("sends stats");
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    while !text.ends_with("END\r\n") {
        let read = conn.read(&mut buf).expect("reads stats");
        if read == 0 {
            break;
        }
        text.push_str(&String::from_utf8_lossy(&buf[..read]));
    }
    let commands = text
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace().skip(1);
            let (name, value) = (parts.next()?, parts.next()?);
            name.starts_with("cmd_").then(|| value.parse::<u64>().ok())?
        })
        .sum();
    Vec::from([("commands", commands)])
}

/// The gRPC messages etcd has received (its `/metrics`, served on the client port): each call
/// and each message of a stream (a lease keep-alive) counts.
fn etcd_messages(addr: SocketAddr) -> u64 {
    let mut conn = TcpStream::connect(addr).expect("etcd answers");
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("a timeout");
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("asks for the metrics");
    let mut text = String::new();
    conn.read_to_string(&mut text).expect("reads the metrics");
    text.lines()
        .filter(|l| l.starts_with("grpc_server_msg_received_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The number after `name` in a `name:value` or `name\tvalue` line.
fn stat_line(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.trim().strip_prefix(name)?;
        rest.trim_start_matches([':', '\t', ' ']).trim().parse().ok()
    })
}

//! The fault proxy against a real redis-server, spoken to over raw TCP: each control does what
//! it says to live connections, and only that.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use distlock_testkit::{Direction, FaultProxies, FaultProxy, RedisServer};

fn redis() -> RedisServer {
    RedisServer::start().expect("redis-server starts (run scripts/install-test-deps)")
}

fn connect(proxy: &FaultProxy) -> TcpStream {
    let stream = TcpStream::connect(proxy.addr()).expect("connects to the proxy");
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout set");
    stream
}

/// Sends one `PING` and reads the reply (`Err` with the read's error kind if none came).
fn ping(stream: &mut TcpStream) -> Result<String, ErrorKind> {
    stream.write_all(b"PING\r\n").map_err(|e| e.kind())?;
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => Err(ErrorKind::UnexpectedEof),
        Ok(n) => Ok(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(e) => Err(e.kind()),
    }
}

fn is_timeout(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

#[test]
fn forwards_and_counts_bytes() {
    let server = redis();
    let proxy = FaultProxy::start(server.addr()).expect("proxy starts");
    let mut stream = connect(&proxy);
    assert_eq!(ping(&mut stream).as_deref(), Ok("+PONG\r\n"));
    // Counters are updated right after the write; give the proxy's thread a moment.
    std::thread::sleep(Duration::from_millis(50));
    let traffic = proxy.traffic();
    assert_eq!(traffic.to_server, 6, "PING\\r\\n");
    assert_eq!(traffic.to_client, 7, "+PONG\\r\\n");
    assert_eq!(proxy.connections(), 1);
}

#[test]
fn blackhole_is_silent_and_heals_without_losing_bytes() {
    let server = redis();
    let proxy = FaultProxy::start(server.addr()).expect("proxy starts");
    let mut stream = connect(&proxy);
    assert!(ping(&mut stream).is_ok());
    proxy.blackhole();
    // No reply, no RST, no FIN: the read just times out, and again.
    for _ in 0..2 {
        let outcome = ping(&mut stream);
        assert!(
            matches!(outcome, Err(kind) if is_timeout(kind)),
            "a black hole must be silent, got {outcome:?}"
        );
    }
    // A new connection is accepted and silent too.
    let mut fresh = connect(&proxy);
    assert!(matches!(ping(&mut fresh), Err(kind) if is_timeout(kind)));
    proxy.heal();
    // The held PINGs are delivered after the heal, as retransmission would.
    let mut replies = String::new();
    let mut buf = [0u8; 64];
    while replies.matches("+PONG").count() < 2 {
        let n = stream.read(&mut buf).expect("held replies arrive after heal");
        assert!(n > 0, "the connection stayed open");
        replies.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert_eq!(ping(&mut stream).as_deref(), Ok("+PONG\r\n"));
}

#[test]
fn silencing_open_connections_spares_new_ones() {
    let server = redis();
    let proxy = FaultProxy::start(server.addr()).expect("proxy starts");
    let mut old = connect(&proxy);
    assert!(ping(&mut old).is_ok());
    proxy.silence_open();
    let outcome = ping(&mut old);
    assert!(
        matches!(outcome, Err(kind) if is_timeout(kind)),
        "an open connection falls silent, got {outcome:?}"
    );
    let mut fresh = connect(&proxy);
    assert_eq!(ping(&mut fresh).as_deref(), Ok("+PONG\r\n"), "a new one forwards");
    let outcome = ping(&mut old);
    assert!(
        matches!(outcome, Err(kind) if is_timeout(kind)),
        "and the old one stays silent"
    );
    proxy.heal();
    let mut buf = [0u8; 64];
    let n = old.read(&mut buf).expect("held replies arrive after heal");
    assert!(n > 0, "the connection stayed open");
}

#[test]
fn dropped_replies_still_run_the_command() {
    let server = redis();
    let proxy = FaultProxy::start(server.addr()).expect("proxy starts");
    let mut stream = connect(&proxy);
    proxy.drop_replies();
    stream.write_all(b"SET proxied yes\r\n").expect("written");
    let mut buf = [0u8; 64];
    let read = stream.read(&mut buf);
    assert!(
        matches!(&read, Err(e) if is_timeout(e.kind())),
        "the reply must be lost, got {read:?}"
    );
    proxy.heal();
    // The command ran: a direct connection sees the key.
    let mut direct = TcpStream::connect(server.addr()).expect("direct");
    direct.write_all(b"GET proxied\r\n").expect("written");
    let n = direct.read(&mut buf).expect("reply");
    assert_eq!(&buf[..n], b"$3\r\nyes\r\n");
}

#[test]
fn reset_sends_rst_and_refuse_closes_new_connections() {
    let server = redis();
    let proxy = FaultProxy::start(server.addr()).expect("proxy starts");
    let mut stream = connect(&proxy);
    assert!(ping(&mut stream).is_ok());
    proxy.reset();
    // An RST alone, no FIN first: the client's next read fails with a reset, not an EOF.
    let mut buf = [0u8; 16];
    let read = stream.read(&mut buf).map_err(|e| e.kind());
    assert_eq!(read, Err(ErrorKind::ConnectionReset), "a reset must be an RST");
    assert_eq!(proxy.connections(), 0);
    // New connections work after a reset.
    assert!(ping(&mut connect(&proxy)).is_ok());

    proxy.refuse(true);
    let mut refused = connect(&proxy);
    std::thread::sleep(Duration::from_millis(100));
    assert!(ping(&mut refused).is_err(), "a refused connection is closed");
    proxy.heal();
    assert!(ping(&mut connect(&proxy)).is_ok());
}

#[test]
fn latency_delays_each_direction() {
    let server = redis();
    let proxy = FaultProxy::start(server.addr()).expect("proxy starts");
    let mut stream = connect(&proxy);
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout set");
    proxy.set_latency(Direction::ToServer, Duration::from_millis(150), Duration::ZERO);
    proxy.set_latency(
        Direction::ToClient,
        Duration::from_millis(100),
        Duration::from_millis(20),
    );
    let started = Instant::now();
    assert!(ping(&mut stream).is_ok());
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(3),
        "one round trip through 150 + 100..120 ms took {took:?}"
    );
    proxy.heal();
    let started = Instant::now();
    assert!(ping(&mut stream).is_ok());
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "healed: no added latency"
    );
}

#[test]
fn dropping_the_proxy_closes_its_listener_and_connections() {
    let server = redis();
    let proxy = FaultProxy::start(server.addr()).expect("proxy starts");
    let addr = proxy.addr();
    let mut stream = connect(&proxy);
    assert!(ping(&mut stream).is_ok());
    drop(proxy);
    let mut buf = [0u8; 16];
    let read = stream.read(&mut buf).map_err(|e| e.kind());
    assert!(
        matches!(read, Err(ErrorKind::ConnectionReset) | Ok(0)),
        "the connection must be closed, got {read:?}"
    );
    let refused = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
    assert!(refused.is_err(), "the listener must be closed");
}

#[test]
fn proxies_apply_each_control_to_every_member() {
    let servers = [redis(), redis()];
    let proxies = FaultProxies::start(servers.iter().map(RedisServer::addr)).expect("proxies start");
    assert_eq!(proxies.host_ports().split(',').count(), 2);
    let mut streams: Vec<_> = proxies.0.iter().map(connect).collect();
    proxies.blackhole();
    for stream in &mut streams {
        assert!(matches!(ping(stream), Err(kind) if is_timeout(kind)));
    }
    proxies.heal();
    for stream in &mut streams {
        let mut buf = [0u8; 64];
        let n = stream.read(&mut buf).expect("the held reply arrives");
        assert_eq!(&buf[..n], b"+PONG\r\n");
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(proxies.traffic().to_client, 14, "two PONGs, counted once each");
    assert_eq!(proxies.connections(), 2);
}

#[test]
fn one_way_blackhole_silences_that_way_only() {
    let server = redis();
    let proxy = FaultProxy::start(server.addr()).expect("proxy starts");
    let mut stream = connect(&proxy);
    assert!(ping(&mut stream).is_ok());
    std::thread::sleep(Duration::from_millis(50));
    let before = proxy.traffic();

    // Replies silenced: the request reaches the server, its reply is held.
    proxy.blackhole_toward(Direction::ToClient);
    assert!(matches!(ping(&mut stream), Err(kind) if is_timeout(kind)));
    let during = proxy.traffic();
    assert_eq!(during.to_server, before.to_server + 6, "the request went through");
    assert_eq!(during.to_client, before.to_client, "no reply came back");
    proxy.heal();
    let mut buf = [0u8; 64];
    let n = stream
        .read(&mut buf)
        .expect("the held reply arrives after the heal");
    assert_eq!(&buf[..n], b"+PONG\r\n");

    // Requests silenced: nothing reaches the server.
    std::thread::sleep(Duration::from_millis(50));
    let before = proxy.traffic();
    proxy.blackhole_toward(Direction::ToServer);
    assert!(matches!(ping(&mut stream), Err(kind) if is_timeout(kind)));
    assert_eq!(proxy.traffic(), before, "nothing moved either way");
    proxy.heal();
    let n = stream
        .read(&mut buf)
        .expect("the held request runs after the heal");
    assert_eq!(&buf[..n], b"+PONG\r\n");
}

#[test]
fn a_moved_upstream_takes_new_connections_and_open_ones_stay_until_reset() {
    let (first, second) = (redis(), redis());
    let proxy = FaultProxy::start(first.addr()).expect("proxy starts");
    let mut old = connect(&proxy);
    assert!(ping(&mut old).is_ok());
    proxy.set_upstream(second.addr());
    assert_eq!(proxy.upstream(), second.addr());
    let mut new = connect(&proxy);
    assert!(ping(&mut new).is_ok());
    // Each server counts the connection that asks, and one through the proxy.
    assert_eq!(
        redis_client_count(first.addr()),
        2,
        "the old connection stays on the first"
    );
    assert_eq!(
        redis_client_count(second.addr()),
        2,
        "the new connection goes to the second"
    );
    proxy.reset();
    assert!(
        ping(&mut old).is_err(),
        "the reset ends the connection to the old server"
    );
    let mut again = connect(&proxy);
    assert!(ping(&mut again).is_ok());
}

/// How many clients `addr`'s redis-server has connected, counted over a connection of its own.
fn redis_client_count(addr: std::net::SocketAddr) -> usize {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout set");
    stream.write_all(b"CLIENT LIST\r\n").expect("writes");
    // A bulk string: `$LEN\r\n`, LEN bytes, `\r\n`.
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).expect("the reply");
        assert!(n > 0, "the server closed the connection");
        reply.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&reply);
        if let Some((header, body)) = text.split_once("\r\n") {
            let len: usize = header.trim_start_matches('$').parse().expect("a bulk reply");
            if body.len() >= len {
                return body[..len].matches("id=").count();
            }
        }
    }
}

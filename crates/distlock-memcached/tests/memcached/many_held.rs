//! Many locks held through one client on memcached, through a proxy that adds 40 ms to every
//! request (under the 100 ms past which a reply counts as slow, see `stopped_server.rs`): the watchdog's renewal of a batch spreads its leases over the pool's connections,
//! so renewing every held lease at once is one round trip however many there are (not one per
//! 64 leases and connection), the server runs one `cas` and one `mg` per lock per renewal (its
//! `stats`), and no lock is lost.

use crate::support;

use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Lease, LockClient, LockGuard};
use distlock_memcached::MemcachedConfig;
use distlock_testkit::{Direction, FaultProxy, MemcachedOptions};
use futures::stream::{self, StreamExt, TryStreamExt};

const HELD: u64 = 2_000;
/// The watchdog renews at a third of the TTL: one renewal period is a second.
const TTL: Duration = Duration::from_secs(3);
const PERIODS: u64 = 3;
/// The TTL of the locks the test renews itself: they outlive the renewal periods above.
const UNRENEWED_TTL: Duration = Duration::from_secs(60);
/// Added to every request on its way to the server.
const LATENCY: Duration = Duration::from_millis(40);
/// The client's connections to the server: 2,000 leases in pipelines of 64 would be 32
/// pipelines, 16 rounds of two.
const CONNECTIONS: usize = 2;

/// The server's `cmd_get` + `cmd_set` (a `cas` counts as a set, an `mg` as a get) so far.
async fn commands(addr: &str) -> u64 {
    let mut total = 0;
    for stat in ["cmd_get", "cmd_set"] {
        let mut conn =
            tokio::io::BufReader::new(tokio::net::TcpStream::connect(addr).await.expect("connects"));
        tokio::io::AsyncWriteExt::write_all(conn.get_mut(), b"stats\r\n")
            .await
            .expect("sends");
        let mut line = String::new();
        loop {
            line.clear();
            tokio::io::AsyncBufReadExt::read_line(&mut conn, &mut line)
                .await
                .expect("reads");
            if line.starts_with("END") || line.is_empty() {
                break;
            }
            if let Some(n) = line.trim().strip_prefix(&format!("STAT {stat} ")) {
                total += n.parse::<u64>().expect("a count");
            }
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_held_locks_renew_in_one_round_trip_per_batch() {
    let server = support::start_server(MemcachedOptions::default()).await;
    let direct = server.addr().to_string();
    let proxy = FaultProxy::start(server.addr()).expect("the proxy starts");
    let lock = MemcachedConfig::from_url(&format!("memcache://{}", proxy.host_port()))
        .expect("valid URL")
        .with_max_connections(CONNECTIONS)
        .build()
        .expect("valid config");
    let client = LockClient::new(lock);
    let take = |prefix: &'static str, opts: AcquireOptions| {
        let client = &client;
        stream::iter(0..HELD)
            .map(move |i| {
                let opts = opts.clone();
                async move {
                    client
                        .try_acquire_with(format!("{prefix}-{i}"), &opts)
                        .await
                        .map(|g| g.expect("the lock is free"))
                }
            })
            .buffer_unordered(CONNECTIONS)
            .try_collect::<Vec<LockGuard>>()
    };
    let guards = take("entity", AcquireOptions::new().ttl(TTL))
        .await
        .expect("acquired");
    // Renewed below by the test alone, all at once: the watchdog renews none of them, so no
    // renewal of its own is in flight with another CAS (which would send each lease of the
    // test's batch on to a retry of its own).
    let unrenewed = take(
        "unrenewed",
        AcquireOptions::new().ttl(UNRENEWED_TTL).auto_renew(false),
    )
    .await
    .expect("acquired");
    // Taken at loopback speed; held and renewed at a distance.
    proxy.set_latency(Direction::ToServer, LATENCY, Duration::ZERO);

    let before = commands(&direct).await;
    tokio::time::sleep(TTL / 3 * PERIODS as u32).await;
    let sent = commands(&direct).await - before;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    // Every lease at once, as the watchdog sends a batch.
    let leases: Vec<Lease> = unrenewed.iter().map(LockGuard::lease).collect();
    let started = Instant::now();
    let renewed = client.backend().renew(&leases).await;
    let took = started.elapsed();
    let ours = renewed.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
    println!(
        "{HELD} held locks, {PERIODS} renewal periods: {sent} commands, {lost} lost; \
         all renewed at once in {took:?} ({ours} renewed)"
    );
    // Timed first: it says why locks were lost, if they were.
    assert!(
        took < LATENCY * 4,
        "renewing {HELD} leases at once took {took:?}: more than one round trip of {LATENCY:?}"
    );
    assert_eq!(lost, 0, "no lock is lost");
    // A renewal (cas + mg) comes every 0.23 to 0.33 TTL: up to 1.5 per lock and period.
    assert!(
        (HELD * PERIODS..=HELD * PERIODS * 3).contains(&sent),
        "{sent} commands for {HELD} locks in {PERIODS} renewal periods"
    );
    let failed = renewed.iter().find_map(|r| r.as_ref().err());
    assert_eq!(ours as u64, HELD, "every lease renewed (an error: {failed:?})");
    // The server is the test's own: the locks may end with their TTL.
    drop(guards);
    drop(unrenewed);
}

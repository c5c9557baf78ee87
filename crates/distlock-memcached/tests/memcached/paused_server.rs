//! A server stopped (SIGSTOP) while locks are held. memcached's clock is refreshed by a
//! one-second timer in its main thread, which does not run while the process is stopped; after
//! SIGCONT a worker thread can process a command queued during the stop before that timer
//! fires, with the clock of before the stop. A renewal sent during the stop then gives its
//! item an expiry counted from the stop's start, not from when the renewal was sent; so does
//! an acquisition's. No lease may count its deadline from such a send alone.

use crate::support;

use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, Lease, LockKind, LockName, OwnerToken, TryAcquire};
use distlock_memcached::{MemcachedConfig, MemcachedLock};
use distlock_testkit::{MemcachedOptions, MemcachedServer};
use futures::future::join_all;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Locks renewed at once during the stop, each on its own connection: the race between the
/// server's timer and its workers is run this many times per stop.
const LOCKS: usize = 16;
/// The TTL of each acquisition and renewal.
const TTL: Duration = Duration::from_secs(5);
/// How long the server is stopped before the renewals are sent (within the leases' TTL, as
/// a watchdog would send them), and after.
const STOPPED_BEFORE: Duration = Duration::from_secs(4);
const STOPPED_AFTER: Duration = Duration::from_secs(2);

/// A client whose requests outlast the stop.
fn patient(url: &str) -> MemcachedLock {
    MemcachedConfig::from_url(url)
        .expect("valid URL")
        .with_operation_timeout(Duration::from_secs(20))
        .with_connect_timeout(Duration::from_secs(20))
        .with_max_connections(LOCKS)
        .build()
        .expect("valid config")
}

async fn blocking(server: MemcachedServer, what: fn(&mut MemcachedServer)) -> MemcachedServer {
    tokio::task::spawn_blocking(move || {
        let mut server = server;
        what(&mut server);
        server
    })
    .await
    .expect("joined")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_queued_while_the_server_is_stopped_never_outlives_its_item() {
    renew_during_a_stop(false, false).await;
}

/// Renewed by a client whose connections open during the stop: its requests wait in the
/// connections' setup, and the renewals follow right after the server resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_on_a_connection_opened_while_the_server_is_stopped_never_outlives_its_item() {
    renew_during_a_stop(false, true).await;
}

/// The watchdog's way: leases renewed in pipelined batches (`extend_many`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_renewals_queued_while_the_server_is_stopped_never_outlives_its_items() {
    renew_during_a_stop(true, false).await;
}

/// Polls every name with `rival` (a mutex, or a permit of `kind`) until each lease in
/// `leases` has run out: every grant while its holder still had time left is a violation.
async fn taken_while_held(
    rival: &MemcachedLock,
    kind: Option<LockKind>,
    names: &[LockName],
    leases: &[Option<Lease>],
) -> Vec<String> {
    let mut violations = Vec::new();
    let mut watched: Vec<(&LockName, &Lease)> = names
        .iter()
        .zip(leases)
        .filter_map(|(name, lease)| lease.as_ref().map(|lease| (name, lease)))
        .collect();
    while !watched.is_empty() {
        let mut still = Vec::new();
        for (name, lease) in watched {
            let owner = OwnerToken::new();
            let ttl = Duration::from_secs(30);
            let attempt = match kind {
                Some(kind) => rival.try_acquire_kind(name, kind, owner, ttl, None).await,
                None => rival.try_acquire(name, owner, ttl).await,
            };
            let left = lease.remaining().unwrap_or_default();
            match attempt.expect("works") {
                TryAcquire::Acquired(_) if !left.is_zero() => {
                    violations.push(format!("{name}: taken while its holder had {left:?} left"));
                }
                TryAcquire::Held(_) if !left.is_zero() => still.push((name, lease)),
                _ => {}
            }
        }
        watched = still;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    violations
}

/// Holds [`LOCKS`] locks, stops the server, renews them (one by one, or in batches; by the
/// client that took them, or by a new client of the same server) during the stop, resumes
/// it, and checks that no lock reported renewed can be taken while its holder still believes
/// it holds it.
async fn renew_during_a_stop(batched: bool, new_client: bool) {
    let server = support::start_server(MemcachedOptions::default()).await;
    let url = server.url();
    let (holder, rival) = (patient(&url), support::lock(&url));
    let names: Vec<LockName> = (0..LOCKS)
        .map(|i| LockName::new(format!("paused-{i}")).expect("valid"))
        .collect();
    // Taken at once, so the holder opens one connection per lock before the stop.
    let leases: Vec<Lease> = join_all(
        names
            .iter()
            .map(|name| holder.try_acquire(name, OwnerToken::new(), TTL)),
    )
    .await
    .into_iter()
    .map(|outcome| match outcome.expect("works") {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("free names: {h:?}"),
    })
    .collect();

    let server = blocking(server, |s| s.pause().expect("SIGSTOP")).await;
    let stopped_at = Instant::now();
    tokio::time::sleep(STOPPED_BEFORE).await;
    assert!(
        leases
            .iter()
            .all(|lease| !lease.remaining().unwrap_or_default().is_zero()),
        "the renewals must go out while the leases are valid (the machine is too slow)"
    );
    // Renewals sent during the stop; each waits in its connection's socket until SIGCONT.
    let renewals = tokio::spawn({
        let holder = match new_client {
            true => patient(&url),
            false => holder.clone(),
        };
        let leases = leases.clone();
        async move {
            match batched {
                // Several batches, on as many connections: each runs the race with the
                // server's timer once.
                true => join_all(leases.chunks(2).map(|batch| holder.renew(batch)))
                    .await
                    .into_iter()
                    .flatten()
                    .collect(),
                false => join_all(leases.iter().map(|lease| holder.extend(lease, TTL))).await,
            }
        }
    });
    tokio::time::sleep(STOPPED_AFTER).await;
    let server = blocking(server, |s| s.resume().expect("SIGCONT")).await;
    let resumed_at = Instant::now();
    let renewed: Vec<Option<Lease>> = renewals
        .await
        .expect("joined")
        .into_iter()
        .map(|outcome| outcome.expect("the renewal gets an answer after the stop"))
        .collect();
    println!(
        "stopped {:?}; {} of {LOCKS} renewals reported renewed",
        resumed_at - stopped_at,
        renewed.iter().flatten().count()
    );

    // A lock the rival can take must not be one its holder still believes it holds.
    let violations = taken_while_held(&rival, None, &names, &renewed).await;
    drop(server);
    assert!(
        violations.is_empty(),
        "a renewal processed with the server's clock of before the stop outlived its item: {violations:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_queued_while_the_server_is_stopped_never_outlives_its_item() {
    let server = support::start_server(MemcachedOptions::default()).await;
    let url = server.url();
    let (holder, rival) = (patient(&url), support::lock(&url));
    let names: Vec<LockName> = (0..LOCKS)
        .map(|i| LockName::new(format!("paused-acquire-{i}")).expect("valid"))
        .collect();
    // One connection per lock before the stop (the names are free again at once).
    for outcome in join_all(names.iter().map(|name| holder.inspect_lock(name))).await {
        outcome.expect("works");
    }

    let server = blocking(server, |s| s.pause().expect("SIGSTOP")).await;
    tokio::time::sleep(STOPPED_BEFORE).await;
    let attempts = tokio::spawn({
        let holder = holder.clone();
        let names = names.clone();
        async move {
            join_all(
                names
                    .iter()
                    .map(|name| holder.try_acquire(name, OwnerToken::new(), TTL)),
            )
            .await
        }
    });
    tokio::time::sleep(STOPPED_AFTER).await;
    let server = blocking(server, |s| s.resume().expect("SIGCONT")).await;
    let granted: Vec<Option<Lease>> = attempts
        .await
        .expect("joined")
        .into_iter()
        .map(
            |outcome| match outcome.expect("the attempt gets an answer after the stop") {
                TryAcquire::Acquired(lease) => Some(lease),
                TryAcquire::Held(_) => None,
            },
        )
        .collect();
    println!(
        "{} of {LOCKS} acquisitions granted",
        granted.iter().flatten().count()
    );

    let violations = taken_while_held(&rival, None, &names, &granted).await;
    drop(server);
    assert!(
        violations.is_empty(),
        "an acquisition processed with the server's clock of before the stop outlived its item: {violations:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_renewed_while_the_server_is_stopped_never_outlives_its_hold() {
    let server = support::start_server(MemcachedOptions::default()).await;
    let url = server.url();
    let (holder, rival) = (patient(&url), support::lock(&url));
    let names: Vec<LockName> = (0..LOCKS)
        .map(|i| LockName::new(format!("paused-permit-{i}")).expect("valid"))
        .collect();
    let one = LockKind::Permit {
        permits: 1,
        weight: 1,
    };
    let leases: Vec<Lease> = join_all(
        names
            .iter()
            .map(|name| holder.try_acquire_kind(name, one, OwnerToken::new(), TTL, None)),
    )
    .await
    .into_iter()
    .map(|outcome| match outcome.expect("works") {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("free semaphores: {h:?}"),
    })
    .collect();

    let server = blocking(server, |s| s.pause().expect("SIGSTOP")).await;
    tokio::time::sleep(STOPPED_BEFORE).await;
    assert!(
        leases
            .iter()
            .all(|lease| !lease.remaining().unwrap_or_default().is_zero()),
        "the renewals must go out while the leases are valid (the machine is too slow)"
    );
    let renewals = tokio::spawn({
        let holder = holder.clone();
        let leases = leases.clone();
        async move { join_all(leases.iter().map(|lease| holder.extend(lease, TTL))).await }
    });
    tokio::time::sleep(STOPPED_AFTER).await;
    let server = blocking(server, |s| s.resume().expect("SIGCONT")).await;
    let renewed: Vec<Option<Lease>> = renewals
        .await
        .expect("joined")
        .into_iter()
        .map(|outcome| outcome.expect("the renewal gets an answer after the stop"))
        .collect();
    println!(
        "{} of {LOCKS} permits reported renewed",
        renewed.iter().flatten().count()
    );

    let violations = taken_while_held(&rival, Some(one), &names, &renewed).await;
    drop(server);
    assert!(
        violations.is_empty(),
        "a permit renewed with the server's clock of before the stop outlived its hold: {violations:?}"
    );
}

/// The server's count of `cas` commands that wrote (renewals, and acquisitions' second round
/// trips).
async fn cas_hits(addr: &str) -> u64 {
    let mut stream = BufReader::new(TcpStream::connect(addr).await.expect("connects"));
    stream.get_mut().write_all(b"stats\r\n").await.expect("writes");
    let mut line = String::new();
    loop {
        line.clear();
        stream.read_line(&mut line).await.expect("reads");
        assert!(
            !line.starts_with("END") && !line.is_empty(),
            "no cas_hits in stats"
        );
        if let Some(value) = line.strip_prefix("STAT cas_hits ") {
            return value.trim().parse().expect("a number");
        }
    }
}

/// Only the server's part of a round trip can hide a stop: a renewal that first waited for a
/// connection (here, thousands at once on one) is not repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_waited_for_a_connection_is_not_repeated() {
    const MANY: usize = 20_000;
    let server = support::start_server(MemcachedOptions::default()).await;
    let one_connection = MemcachedConfig::from_url(&server.url())
        .expect("valid URL")
        .with_operation_timeout(Duration::from_secs(60))
        .with_max_connections(1)
        .build()
        .expect("valid config");
    let ttl = Duration::from_secs(60);
    let leases: Vec<Lease> = join_all((0..MANY).map(|i| {
        let lock = &one_connection;
        async move {
            let name = LockName::new(format!("queued-{i}")).expect("valid");
            match lock
                .try_acquire(&name, OwnerToken::new(), ttl)
                .await
                .expect("works")
            {
                TryAcquire::Acquired(lease) => lease,
                TryAcquire::Held(h) => panic!("free names: {h:?}"),
            }
        }
    }))
    .await;

    let addr = server.addr().to_string();
    let before = cas_hits(&addr).await;
    let started = Instant::now();
    let renewed = join_all(leases.iter().map(|lease| one_connection.extend(lease, ttl))).await;
    let took = started.elapsed();
    let after = cas_hits(&addr).await;
    assert!(
        renewed.iter().all(|r| matches!(r, Ok(Some(_)))),
        "every renewal succeeds: {:?}",
        renewed.iter().find(|r| !matches!(r, Ok(Some(_))))
    );
    assert!(
        took > Duration::from_millis(300),
        "the renewals took {took:?}: too fast for the last ones to wait long for the connection"
    );
    // Each renewal writes once; one whose own round trip was slow on a loaded machine is
    // repeated, rightly, but those are a few, not every one that queued for the connection.
    let writes = after - before;
    assert!(
        writes < (MANY + MANY / 20) as u64,
        "{MANY} renewals in {took:?} wrote {writes} times: renewals that only waited for a \
         connection were repeated"
    );
}

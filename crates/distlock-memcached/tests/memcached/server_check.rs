//! What the client checks about the server process behind an address: a memcached whose meta
//! protocol mishandles our commands is refused; a release still finds its item after the
//! server's identity item was replaced; an acquisition that ends up not ours gives its item
//! back; several processes behind one address (a load balancer) are refused.

use crate::support;

use std::time::Duration;

use crate::support::fake::{Behaviour, FakeMemcached};
use distlock_core::{DistributedLock, DistributedLockExt, Error, LockName, OwnerToken, TryAcquire};
use distlock_testkit::{FaultProxy, MemcachedOptions};
use tokio::net::{TcpListener, TcpStream};

const TTL: Duration = Duration::from_secs(30);

fn fake(version: &str) -> Behaviour {
    Behaviour {
        version: version.to_owned(),
        bump_cas_before_cas: false,
    }
}

/// memcached before 1.6.13 mishandles `md <key> C<cas>`, the delete every release relies on:
/// such a server is refused at connect with a configuration error naming the version, and
/// 1.6.13 is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memcached_older_than_1_6_13_is_refused() {
    let name = LockName::new("old-server").expect("valid");
    for version in ["1.6.12", "1.6.9", "1.5.22", "1.4.15"] {
        let server = FakeMemcached::start(fake(version)).await;
        let lock = support::lock(&format!("memcache://{}", server.addr));
        match lock.try_acquire(&name, OwnerToken::new(), TTL).await {
            Err(Error::InvalidConfig { reason: message }) => assert!(
                message.contains(version) && message.contains("1.6.13"),
                "{version}: {message}"
            ),
            other => panic!("memcached {version} was not refused: {other:?}"),
        }
        assert!(
            matches!(lock.ping().await, Err(Error::InvalidConfig { .. })),
            "{version}: ping must refuse it too"
        );
    }
    let server = FakeMemcached::start(fake("1.6.13")).await;
    let lock = support::lock(&format!("memcache://{}", server.addr));
    let outcome = lock.try_acquire(&name, OwnerToken::new(), TTL).await;
    assert!(
        matches!(outcome, Ok(TryAcquire::Acquired(_))),
        "1.6.13: {outcome:?}"
    );
}

/// A server whose `version` is not memcached's (another implementation of the protocol, whose
/// meta commands may differ) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_memcached_is_refused() {
    let name = LockName::new("other-server").expect("valid");
    for version in ["", "df-v1.2", "mcrouter"] {
        let server = FakeMemcached::start(fake(version)).await;
        let lock = support::lock(&format!("memcache://{}", server.addr));
        let outcome = lock.try_acquire(&name, OwnerToken::new(), TTL).await;
        assert!(
            matches!(outcome, Err(Error::InvalidConfig { .. })),
            "version {version:?} was not refused: {outcome:?}"
        );
    }
}

/// The identity item replaced while a lock is held (evicted, or deleted by an operator) and
/// the connections cut: the release reaches the same process under a new identity. It must
/// still delete our item (by our owner token), not report it lost and leave it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_under_a_new_server_identity_deletes_our_item() {
    let server = support::start_server(MemcachedOptions::default()).await;
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let lock = support::lock(&format!("memcache://{}", proxy.host_port()));
    let name = LockName::new("identity-replaced").expect("valid");
    let lease = match lock
        .try_acquire(&name, OwnerToken::new(), TTL)
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("free: {h:?}"),
    };
    let addr = server.addr().to_string();
    assert_eq!(
        support::raw(&addr, "delete distlock:server-identity\r\n")
            .await
            .expect("raw"),
        "DELETED"
    );
    proxy.reset();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = lock.release(&lease).await.expect("works");
    let left = support::raw(&addr, &format!("mg {} v\r\n", lock.lock_key(&name)))
        .await
        .expect("raw");
    assert!(
        released && left == "EN",
        "released: {released}, the lock item afterwards: {left:?}"
    );
}

/// The winner's second round trip finds the item's CAS changed (another write landed in
/// between): the attempt reports the lock held, and must not leave its own item behind to
/// block every client until the TTL runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_that_reports_held_gives_its_item_back() {
    let server = FakeMemcached::start(Behaviour {
        bump_cas_before_cas: true,
        ..fake("1.6.18")
    })
    .await;
    let lock = support::lock(&format!("memcache://{}", server.addr));
    let name = LockName::new("token-record-lost").expect("valid");
    let outcome = lock
        .try_acquire(&name, OwnerToken::new(), TTL)
        .await
        .expect("works");
    assert!(matches!(outcome, TryAcquire::Held(_)), "{outcome:?}");
    assert!(
        !server.has(&lock.lock_key(&name)),
        "the attempt reported the lock held and left its own item in place"
    );
}

/// A TCP balancer on loopback that sends each new connection to the next of `upstreams`.
async fn round_robin(upstreams: [String; 2]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let addr = listener.local_addr().expect("bound").to_string();
    tokio::spawn(async move {
        let mut next = 0_usize;
        while let Ok((mut client, _)) = listener.accept().await {
            let upstream = upstreams[next % upstreams.len()].clone();
            next += 1;
            tokio::spawn(async move {
                if let Ok(mut server) = TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    addr
}

/// Two memcached processes behind one address: each holds its own locks, so two clients can
/// hold one name at once. Once the pool has live connections to both (different identities),
/// every operation is refused with a configuration error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_processes_behind_one_address_are_refused() {
    let (a, b) = (
        support::start_server(MemcachedOptions::default()).await,
        support::start_server(MemcachedOptions::default()).await,
    );
    let balancer = round_robin([a.addr().to_string(), b.addr().to_string()]).await;
    let lock = support::lock(&format!("memcache://{balancer}"));
    let mut refused = None;
    for round in 0..5 {
        // Two attempts at once need two connections: the balancer sends them to both.
        let names = [format!("split-{round}-a"), format!("split-{round}-b")]
            .map(|n| LockName::new(n).expect("valid"));
        let attempts = names
            .iter()
            .map(|name| lock.try_acquire(name, OwnerToken::new(), TTL));
        for outcome in futures::future::join_all(attempts).await {
            match outcome {
                Ok(TryAcquire::Acquired(lease)) => {
                    let _ = lock.release(&lease).await;
                }
                Ok(TryAcquire::Held(h)) => panic!("a fresh name was held: {h:?}"),
                Err(error) => {
                    refused.get_or_insert((round, error));
                }
            }
        }
    }
    match refused {
        Some((_, Error::InvalidConfig { reason: message })) => {
            assert!(message.contains("several"), "{message}");
            // And it stays refused.
            let name = LockName::new("split-after").expect("valid");
            let outcome = lock.try_acquire(&name, OwnerToken::new(), TTL).await;
            assert!(matches!(outcome, Err(Error::InvalidConfig { .. })), "{outcome:?}");
        }
        other => panic!("two processes behind one address were not refused: {other:?}"),
    }
}

/// One process whose identity item is replaced while the pool holds connections of the old
/// identity: live connections then disagree on the identity, but each reads the new one, so
/// nothing is refused (the stale connections are closed). An attempt caught by the change may
/// report the lock held (its two round trips reached two identities: a spurious miss, its item
/// given back), never an error; once the pool has settled, every attempt wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_identity_item_is_not_taken_for_a_second_process() {
    let server = support::start_server(MemcachedOptions::default()).await;
    let lock = support::lock(&server.url());
    // `count` attempts at once on fresh names (as many connections); with `settled`, each
    // wins.
    let attempts = |round: usize, count: usize, settled: bool| {
        let lock = &lock;
        async move {
            let names: Vec<LockName> = (0..count)
                .map(|n| LockName::new(format!("one-{round}-{n}")).expect("valid"))
                .collect();
            let attempts = names
                .iter()
                .map(|name| lock.try_acquire(name, OwnerToken::new(), TTL));
            for outcome in futures::future::join_all(attempts).await {
                match outcome {
                    Ok(TryAcquire::Acquired(lease)) => {
                        assert!(lock.release(&lease).await.expect("works"));
                    }
                    Ok(TryAcquire::Held(_)) if !settled => {}
                    other => panic!("round {round}: {other:?}"),
                }
            }
        }
    };
    attempts(0, 2, true).await;
    let addr = server.addr().to_string();
    for round in 1..4 {
        assert_eq!(
            support::raw(&addr, "delete distlock:server-identity\r\n")
                .await
                .expect("raw"),
            "DELETED"
        );
        // More attempts at once than the pool has connections, until one has opened (and
        // stored a new identity) beside connections of the old one.
        for more in 0.. {
            attempts(round * 100 + more, 3 + more + round, false).await;
            let identity = support::raw(&addr, "mg distlock:server-identity v\r\n")
                .await
                .expect("raw");
            if identity.starts_with("VA") {
                break;
            }
            assert!(more < 10, "no new connection was opened");
        }
        attempts(round * 100 + 50, 3, true).await;
        attempts(round * 100 + 60, 3, true).await;
    }
}

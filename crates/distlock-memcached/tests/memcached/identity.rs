//! A server's identity must survive containers: a memcached that is pid 1 in its pid
//! namespace and restarts within the same second has the same pid and start time as the
//! process before it, and restarts its CAS counter, so a new holder's item can carry the
//! very CAS an old lease remembers. The old lease must still never release or extend it.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_core::{DistributedLock, DistributedLockExt, Lease, LockName, OwnerToken, TryAcquire};
use distlock_memcached::MemcachedLock;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// memcached as pid 1 of a new pid namespace (`unshare -fp`), killed with its `unshare`.
struct Namespaced(Child);

impl Namespaced {
    async fn start(port: u16) -> Self {
        let mut args = vec!["-fp", "--kill-child", "memcached", "-l", "127.0.0.1", "-U", "0"];
        let port = port.to_string();
        args.extend(["-p", &port, "-u", "root"]);
        let child = Command::new("unshare")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("unshare and memcached are installed (run scripts/install-test-deps; needs root)");
        let server = Self(child);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while stats(&format!("127.0.0.1:{port}")).await.is_none() {
            assert!(tokio::time::Instant::now() < deadline, "memcached did not start");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        server
    }

    fn kill(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Namespaced {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `(pid, time - uptime)` from `stats`: the identity the server reports.
async fn stats(addr: &str) -> Option<(u64, u64)> {
    let stream = TcpStream::connect(addr).await.ok()?;
    let mut stream = BufReader::new(stream);
    stream.get_mut().write_all(b"stats\r\n").await.ok()?;
    let (mut pid, mut time, mut uptime) = (None, None, None);
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line == "END" {
            break;
        }
        let mut parts = line.split(' ').skip(1);
        let (key, value) = (parts.next()?, parts.next()?);
        let slot = match key {
            "pid" => &mut pid,
            "time" => &mut time,
            "uptime" => &mut uptime,
            _ => continue,
        };
        *slot = value.parse::<u64>().ok();
    }
    Some((pid?, time? - uptime?))
}

async fn take(lock: &MemcachedLock, name: &LockName) -> Lease {
    match lock
        .try_acquire(name, OwnerToken::new(), Duration::from_secs(30))
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("{name:?} should be free: {h:?}"),
    }
}

fn cas(lease: &Lease) -> u64 {
    lease
        .handle()
        .and_then(|h| h.strip_prefix("cas="))
        .and_then(|h| h.split(';').next())
        .and_then(|c| c.parse().ok())
        .expect("a CAS handle")
}

/// Sleeps until just after the next whole second of the wall clock.
async fn next_second() {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970");
    let into = Duration::from_nanos(u64::from(now.subsec_nanos()));
    tokio::time::sleep(Duration::from_secs(1) - into + Duration::from_millis(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_the_same_pid_in_the_same_second_is_still_another_server() {
    let port = distlock_testkit::free_port().expect("a free port");
    let addr = format!("127.0.0.1:{port}");
    let url = format!("memcache://{addr}");
    let name = LockName::new("same-pid-same-second").expect("valid");
    for attempt in 1..=5 {
        next_second().await;
        let server = Namespaced::start(port).await;
        let before = stats(&addr).await.expect("stats");
        let (a, b) = (support::lock(&url), support::lock(&url));
        let old = take(&a, &name).await;
        server.kill();
        let server = Namespaced::start(port).await;
        let after = stats(&addr).await.expect("stats");
        if before != after {
            // The restart crossed a second boundary: not the case under test; try again.
            println!("attempt {attempt}: identities differ ({before:?} vs {after:?}), retrying");
            drop(server);
            continue;
        }
        println!("pid {} started {} both times", before.0, before.1);
        let new = take(&b, &name).await;
        assert_eq!(cas(&old), cas(&new), "the test expects the CAS values to collide");
        assert!(
            a.extend(&old, Duration::from_secs(30))
                .await
                .expect("works")
                .is_none(),
            "the old lease must not extend the new holder's lock"
        );
        assert!(
            !a.release(&old).await.expect("works"),
            "the old lease must not release the new holder's lock"
        );
        let state = b.inspect_lock(&name).await.expect("works");
        assert_eq!(state.owner, Some(new.owner().to_string()), "B still holds it");
        assert!(b.release(&new).await.expect("works"));
        drop(server);
        return;
    }
    panic!("could not restart memcached within one second in 5 attempts");
}

/// Losing the identity item (evicted, or deleted by an operator) gives the server a new
/// nonce on the next connection: leases bound to the old one are not renewed there, which is
/// a spurious loss for their holders and never a second grant. Their release falls back to
/// the owner-checked one and gives the lock back (the item outlived the identity item).
#[tokio::test]
async fn a_lost_identity_item_makes_old_leases_lost_and_their_release_frees_their_locks() {
    let server = support::start_server(distlock_testkit::MemcachedOptions::default()).await;
    let url = server.url();
    let name = LockName::new("identity-item-lost").expect("valid");
    let old = take(&support::lock(&url), &name).await;
    let deleted = support::raw(&server.addr().to_string(), "md distlock:server-identity\r\n")
        .await
        .expect("reaches the server");
    assert_eq!(deleted, "HD");

    let fresh = support::lock(&url); // new connections: a new nonce
    assert!(
        fresh
            .extend(&old, Duration::from_secs(30))
            .await
            .expect("works")
            .is_none(),
        "a lease of the old identity is not renewed"
    );
    let contender = fresh
        .try_acquire(&name, OwnerToken::new(), Duration::from_secs(30))
        .await
        .expect("works");
    assert!(
        matches!(contender, TryAcquire::Held(_)),
        "the lock item is untouched: still held, {contender:?}"
    );
    assert!(
        fresh.release(&old).await.expect("works"),
        "the release falls back to the owner-checked one and frees it"
    );
    let contender = fresh
        .try_acquire(&name, OwnerToken::new(), Duration::from_secs(30))
        .await
        .expect("works");
    assert!(
        matches!(contender, TryAcquire::Acquired(_)),
        "free: {contender:?}"
    );
    drop(server);
}

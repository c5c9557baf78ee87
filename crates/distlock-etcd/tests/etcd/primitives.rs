//! Semaphores and read-write locks on a real etcd: permits counted exactly, FIFO service,
//! refused counts, writers not starved, cancel safety, release by owner after an ambiguous
//! attempt.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{
    AcquireOptions, Attempt, DistributedLock, DistributedLockExt, Error, Lease, LockClient, LockKind,
    LockName, OwnerToken, TryAcquire,
};
use distlock_etcd::EtcdLock;
use distlock_testkit::{etcdctl, EtcdCluster, EtcdServer};
use tokio::time::Instant;

async fn server() -> EtcdServer {
    tokio::task::spawn_blocking(EtcdServer::start)
        .await
        .expect("joined")
        .expect("etcd starts (run scripts/install-test-deps to install etcd)")
}

async fn backend(server: &EtcdServer) -> EtcdLock {
    EtcdLock::connect_url(&format!("{}?lease_ttl=5s", server.url()))
        .await
        .expect("connects")
}

async fn client(server: &EtcdServer) -> LockClient {
    LockClient::new(backend(server).await)
}

/// The keys under `prefix`, read with etcdctl.
async fn keys_under(server: &EtcdServer, prefix: &str) -> Vec<String> {
    let (endpoint, prefix) = (server.endpoint(), prefix.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        etcdctl(&endpoint, &["get", "--prefix", "--keys-only", &prefix]).expect("etcdctl get")
    })
    .await
    .expect("joined");
    out.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

fn wait(seconds: u64) -> AcquireOptions {
    AcquireOptions::new().wait_for(Duration::from_secs(seconds))
}

/// Ten clients of `url` take a permit of the semaphore `name` five times each, half waiting
/// in the queue and half trying again and again: the most holders seen at once.
async fn most_permit_holders(url: &str, name: &str, permits: u32) -> usize {
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for worker in 0..10 {
        let client = LockClient::new(EtcdLock::connect_url(url).await.expect("connects"));
        let semaphore = client.semaphore(name, permits).expect("semaphores");
        let (inside, most) = (inside.clone(), most.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..5 {
                let guard = if worker % 2 == 0 {
                    semaphore.acquire_with(&wait(120)).await.expect("a permit")
                } else {
                    loop {
                        if let Some(guard) = semaphore.try_acquire().await.expect("works") {
                            break guard;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                };
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(guard.release().await.expect("released"), "still ours");
            }
        }));
    }
    for worker in workers {
        worker.await.expect("a worker finished");
    }
    most.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_counted_exactly_among_many_concurrent_acquirers() {
    const PERMITS: u32 = 3;
    let server = server().await;
    let url = format!("{}?lease_ttl=5s", server.url());
    let most = most_permit_holders(&url, "pool", PERMITS).await;
    assert!(most <= PERMITS as usize, "{most} holders of {PERMITS} permits");
    assert_eq!(most, PERMITS as usize, "ten clients never filled three permits");

    let semaphore = client(&server)
        .await
        .semaphore("pool", PERMITS)
        .expect("semaphores");
    let mut held = Vec::new();
    for _ in 0..PERMITS {
        held.push(
            semaphore
                .try_acquire()
                .await
                .expect("works")
                .expect("a free permit"),
        );
    }
    assert!(
        semaphore.try_acquire().await.expect("works").is_none(),
        "a fourth of three"
    );
    let tokens: Vec<_> = held.iter().map(|g| g.fencing_token()).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens grow: {tokens:?}");
    let holders = semaphore.holders().await.expect("inspect");
    assert_eq!(holders.len(), 3, "{holders:?}");
    assert!(
        holders.iter().all(|h| h.kind
            == LockKind::Permit {
                permits: 3,
                weight: 1
            }),
        "{holders:?}"
    );
    for guard in held {
        assert!(guard.release().await.expect("released"));
    }
    assert!(keys_under(&server, "distlock/semaphore:pool/").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_waiters_are_served_in_arrival_order() {
    let server = server().await;
    let semaphore = client(&server).await.semaphore("fifo", 1).expect("semaphores");
    let first = semaphore.try_acquire().await.expect("works").expect("free");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..4 {
        let semaphore = client(&server).await.semaphore("fifo", 1).expect("semaphores");
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let guard = semaphore.acquire_with(&wait(60)).await.expect("a permit");
            order.lock().expect("not poisoned").push(i);
            tokio::time::sleep(Duration::from_millis(50)).await;
            guard.release().await.expect("released");
        }));
        // Each waiter is in line before the next comes.
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    first.release().await.expect("released");
    for waiter in waiters {
        waiter.await.expect("joined");
    }
    assert_eq!(
        *order.lock().expect("not poisoned"),
        vec![0, 1, 2, 3],
        "served in arrival order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_permit_count_is_refused_and_leaves_nothing_behind() {
    let server = server().await;
    let two = client(&server).await.semaphore("agree", 2).expect("semaphores");
    let three = client(&server).await.semaphore("agree", 3).expect("semaphores");
    let held = two.try_acquire().await.expect("works").expect("free");
    let before = keys_under(&server, "distlock/semaphore:agree/").await;
    match three.try_acquire().await {
        Err(Error::PermitsMismatch { stored, asked, .. }) => assert_eq!((stored, asked), (2, 3)),
        other => panic!("a count of 3 beside a holder of 2: {other:?}"),
    }
    match three.acquire_with(&wait(5)).await {
        Err(Error::PermitsMismatch { stored, asked, .. }) => assert_eq!((stored, asked), (2, 3)),
        other => panic!("a wait with a count of 3 beside a holder of 2: {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        keys_under(&server, "distlock/semaphore:agree/").await,
        before,
        "nothing left"
    );
    let second = two
        .try_acquire()
        .await
        .expect("works")
        .expect("the refusals took nothing");
    held.release().await.expect("released");
    second.release().await.expect("released");
    let now = three
        .try_acquire()
        .await
        .expect("works")
        .expect("a new count once none is held");
    now.release().await.expect("released");
    assert!(matches!(
        client(&server).await.semaphore("agree", 0),
        Err(Error::InvalidOptions { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_permit_wait_leaves_nothing() {
    let server = server().await;
    let semaphore = client(&server).await.semaphore("dropped", 1).expect("semaphores");
    let held = semaphore.try_acquire().await.expect("works").expect("free");
    let other = client(&server).await.semaphore("dropped", 1).expect("semaphores");
    let waiting = tokio::spawn(async move { other.acquire_with(&wait(60)).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        keys_under(&server, "distlock/semaphore:dropped/locks/")
            .await
            .len(),
        1,
        "the waiter holds `locks`"
    );
    waiting.abort();
    let _ = waiting.await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let keys = keys_under(&server, "distlock/semaphore:dropped/").await;
    assert_eq!(keys.len(), 1, "only the holder's lease is left: {keys:?}");
    held.release().await.expect("released");
    let next = semaphore
        .acquire_with(&AcquireOptions::new().wait_for(Duration::from_millis(1)))
        .await
        .expect("the dropped waiter blocks nobody");
    next.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_a_writer_excludes_and_a_waiting_writer_keeps_later_readers_out() {
    let server = server().await;
    let (a, b) = (client(&server).await, client(&server).await);
    let (lock_a, lock_b) = (a.rw_lock("doc").expect("rw"), b.rw_lock("doc").expect("rw"));
    let r1 = lock_a.try_read().await.expect("works").expect("a reader");
    let r2 = lock_b.try_read().await.expect("works").expect("readers share");
    assert!(
        lock_a.try_write().await.expect("works").is_none(),
        "a writer beside readers"
    );
    let holders = lock_b.holders().await.expect("inspect");
    assert_eq!(holders.len(), 2, "{holders:?}");
    assert!(holders.iter().all(|h| h.kind == LockKind::Read));

    // A writer waits; from then on, no new reader gets in.
    let writer_lock = client(&server).await.rw_lock("doc").expect("rw");
    let writer = tokio::spawn(async move { writer_lock.write_with(&wait(60)).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        lock_b.try_read().await.expect("works").is_none(),
        "a reader passed a waiting writer"
    );
    let late_reader = {
        let lock = client(&server).await.rw_lock("doc").expect("rw");
        tokio::spawn(async move { lock.read_with(&wait(60)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !late_reader.is_finished(),
        "a queued reader passed a waiting writer"
    );
    let last_read = r2.fencing_token();
    r1.release().await.expect("released");
    r2.release().await.expect("released");
    let writer = writer.await.expect("joined").expect("the writer gets in");
    assert!(writer.fencing_token() > last_read, "fencing grows");
    assert_eq!(lock_a.holders().await.expect("inspect")[0].kind, LockKind::Write);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!late_reader.is_finished(), "a reader beside the writer");
    writer.release().await.expect("released");
    let reader = late_reader
        .await
        .expect("joined")
        .expect("the reader after the writer");
    reader.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_never_overlap_anyone_under_contention() {
    let server = server().await;
    let readers = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for worker in 0..6 {
        let lock = client(&server).await.rw_lock("busy").expect("rw");
        let (readers, writing) = (readers.clone(), writing.clone());
        workers.push(tokio::spawn(async move {
            for round in 0..6 {
                if (worker + round) % 3 == 0 {
                    let guard = lock.write_with(&wait(120)).await.expect("the writer");
                    assert!(!writing.swap(true, Ordering::SeqCst), "two writers");
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer beside readers");
                    tokio::time::sleep(Duration::from_millis(15)).await;
                    writing.store(false, Ordering::SeqCst);
                    guard.release().await.expect("released");
                } else {
                    let guard = lock.read_with(&wait(120)).await.expect("a reader");
                    readers.fetch_add(1, Ordering::SeqCst);
                    assert!(!writing.load(Ordering::SeqCst), "a reader beside the writer");
                    tokio::time::sleep(Duration::from_millis(15)).await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.expect("released");
                }
            }
        }));
    }
    for worker in workers {
        worker.await.expect("a worker finished");
    }
    assert!(keys_under(&server, "distlock/rw-lock:busy/").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_write_wait_lets_readers_in() {
    let server = server().await;
    let lock = client(&server).await.rw_lock("gave-up").expect("rw");
    let reader = lock.try_read().await.expect("works").expect("free");
    let writer_lock = client(&server).await.rw_lock("gave-up").expect("rw");
    let writer = tokio::spawn(async move { writer_lock.write_with(&wait(60)).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        lock.try_read().await.expect("works").is_none(),
        "the writer waits"
    );
    writer.abort();
    let _ = writer.await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = lock
        .try_read()
        .await
        .expect("works")
        .expect("readers once the writer left");
    reader.release().await.expect("released");
    second.release().await.expect("released");
    assert!(keys_under(&server, "distlock/rw-lock:gave-up/").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_whose_reply_was_lost_is_released_by_its_owner() {
    let server = server().await;
    let raw = backend(&server).await;
    let other = client(&server).await;
    let name = LockName::new("unknown").expect("valid");
    for kind in [
        LockKind::Permit {
            permits: 1,
            weight: 1,
        },
        LockKind::Write,
        LockKind::Read,
    ] {
        // The attempt was applied, but its caller saw an error: it cleans up by owner.
        let owner = OwnerToken::new();
        let attempt = Attempt::new(name.clone(), kind, owner, Duration::from_secs(30));
        let sent_at = tokio::time::Instant::now();
        assert!(matches!(
            raw.attempt(&attempt).await.expect("works"),
            TryAcquire::Acquired(_)
        ));
        let cleanup = attempt.cleanup_lease(sent_at);
        assert!(
            raw.release(&cleanup).await.expect("works"),
            "{kind}: found by owner"
        );
        assert!(
            !raw.release(&cleanup).await.expect("works"),
            "{kind}: released once"
        );
    }
    let semaphore = other.semaphore(&name, 1).expect("semaphores");
    semaphore
        .try_acquire()
        .await
        .expect("works")
        .expect("the permit is free")
        .release()
        .await
        .expect("released");
    let rw = other.rw_lock(&name).expect("rw");
    rw.try_write()
        .await
        .expect("works")
        .expect("the rw lock is free")
        .release()
        .await
        .expect("released");
    assert!(keys_under(&server, "distlock/semaphore:unknown/")
        .await
        .is_empty());
    assert!(keys_under(&server, "distlock/rw-lock:unknown/").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_outlive_the_lease_ttl_while_the_client_lives() {
    let server = server().await;
    let url = format!("{}?lease_ttl=3s", server.url());
    let holder = LockClient::new(EtcdLock::connect_url(&url).await.expect("connects"));
    let permit = holder
        .semaphore("long", 1)
        .expect("semaphores")
        .try_acquire()
        .await
        .expect("works")
        .expect("free");
    let writer = holder
        .rw_lock("long")
        .expect("rw")
        .try_write()
        .await
        .expect("works")
        .expect("free");
    // Three lease TTLs: the keeper must have renewed the lease several times.
    tokio::time::sleep(Duration::from_secs(9)).await;
    for guard in [&permit, &writer] {
        assert!(
            !guard.is_lost(),
            "{:?} lost while its client lives",
            guard.lease().kind()
        );
        assert!(
            !guard.is_suspended(),
            "{:?} suspended on a healthy server",
            guard.lease().kind()
        );
    }
    let other = client(&server).await;
    let semaphore = other.semaphore("long", 1).expect("semaphores");
    assert!(
        semaphore.try_acquire().await.expect("works").is_none(),
        "the permit is still held"
    );
    let rw = other.rw_lock("long").expect("rw");
    assert!(
        rw.try_read().await.expect("works").is_none(),
        "the write lock is still held"
    );
    assert!(
        permit.release().await.expect("works"),
        "the permit was still ours"
    );
    assert!(
        writer.release().await.expect("works"),
        "the write lock was still ours"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_lease_frees_and_extends_nothing() {
    let server = server().await;
    let raw = backend(&server).await;
    let holder = client(&server).await;
    let permit = holder
        .semaphore("forged", 1)
        .expect("semaphores")
        .try_acquire()
        .await
        .expect("works")
        .expect("free");
    let name = LockName::new("forged").expect("valid");
    for kind in [
        LockKind::Permit {
            permits: 1,
            weight: 1,
        },
        LockKind::Read,
        LockKind::Exclusive,
    ] {
        // An owner that holds nothing, without a key: what a stale or forged lease looks like.
        let forged = Lease::new(
            name.clone(),
            OwnerToken::new(),
            Duration::from_secs(30),
            Instant::now(),
        )
        .with_kind(kind);
        assert!(
            !raw.release(&forged).await.expect("works"),
            "{kind}: a forged release"
        );
        let extended = raw.extend(&forged, Duration::from_secs(30)).await;
        assert!(
            matches!(extended, Ok(None)),
            "{kind}: a forged extend must find nothing to extend: {extended:?}"
        );
    }
    assert!(!permit.is_lost());
    assert!(
        permit.release().await.expect("works"),
        "the permit was still ours"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_dropped_while_its_create_is_out_leaves_nothing() {
    let server = server().await;
    let (dropped, next) = (client(&server).await, client(&server).await);
    let quick = wait(5);
    let mut stranded = Vec::new();
    // Dropped at many points of the first round trips, on a free object each time.
    for step in 0..240u64 {
        let after = Duration::from_micros(step * 25);
        let name = format!("midflight-{step}");
        let semaphore = dropped.semaphore(&name, 1).expect("semaphores");
        let _ = tokio::time::timeout(after, semaphore.acquire_with(&quick)).await;
        let rw = dropped.rw_lock(&name).expect("rw");
        let _ = tokio::time::timeout(after, rw.write_with(&quick)).await;
        let permit = next
            .semaphore(&name, 1)
            .expect("semaphores")
            .acquire_with(&quick)
            .await;
        match permit {
            Ok(guard) => assert!(guard.release().await.expect("works")),
            Err(e) => stranded.push(format!("step {step}: permit: {e}")),
        }
        match next.rw_lock(&name).expect("rw").write_with(&quick).await {
            Ok(guard) => assert!(guard.release().await.expect("works")),
            Err(e) => stranded.push(format!("step {step}: write: {e}")),
        }
    }
    assert!(stranded.is_empty(), "dropped waits stranded holds: {stranded:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_sent_again_adopts_its_read_key_without_writing_it_again() {
    let server = server().await;
    let raw = backend(&server).await;
    let name = LockName::new("again").expect("valid");
    // The same attempt twice: what a caller that retries after a lost reply sends.
    let attempt = Attempt::new(name, LockKind::Read, OwnerToken::new(), Duration::from_secs(30));
    let first = match raw.attempt(&attempt).await.expect("works") {
        TryAcquire::Acquired(lease) => lease,
        other => panic!("a free rw lock: {other:?}"),
    };
    let second = match raw.attempt(&attempt).await.expect("works") {
        TryAcquire::Acquired(lease) => lease,
        other => panic!("our own key is ahead of every writer: {other:?}"),
    };
    assert_eq!(
        first.fencing_token(),
        second.fencing_token(),
        "one key, one token"
    );
    // etcd's own RWMutex orders keys by mod revision: ours must still be its create revision.
    let endpoint = server.endpoint();
    let json = tokio::task::spawn_blocking(move || {
        etcdctl(
            &endpoint,
            &["get", "--prefix", "-w", "json", "distlock/rw-lock:again/"],
        )
        .expect("etcdctl get")
    })
    .await
    .expect("joined");
    let field = |name: &str| {
        let at = json.find(&format!("\"{name}\":")).expect("the field") + name.len() + 3;
        json[at..].split([',', '}']).next().expect("a value").to_owned()
    };
    assert_eq!(
        field("create_revision"),
        field("mod_revision"),
        "the key was written again: {json}"
    );
    assert!(raw.release(&second).await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_counted_exactly_by_clients_of_every_member_of_a_cluster() {
    const PERMITS: u32 = 2;
    let cluster = tokio::task::spawn_blocking(|| {
        let cluster = EtcdCluster::start()?;
        cluster.wait_for_leader(Duration::from_secs(30))?;
        Ok::<_, distlock_testkit::HarnessError>(cluster)
    })
    .await
    .expect("joined")
    .expect("a 3-member etcd cluster starts (run scripts/install-test-deps to install etcd)");
    // Each client balances its requests over the three members.
    let url = format!("{}?lease_ttl=5s", cluster.url());
    let most = most_permit_holders(&url, "cluster-pool", PERMITS).await;
    assert!(most <= PERMITS as usize, "{most} holders of {PERMITS} permits");
    assert_eq!(most, PERMITS as usize, "ten clients never filled two permits");
}

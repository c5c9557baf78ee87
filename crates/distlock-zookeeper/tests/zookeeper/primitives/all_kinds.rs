//! Every kind: fencing per object, three objects of one name, the node layout Curator's
//! recipes expect, and bad kinds as typed errors.

use super::*;

/// Every new hold of an object is fenced above every earlier one: permits taken while others
/// hold and after they left, and the write lock after readers and before later readers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_grow_with_every_hold_of_an_object() {
    let fixture = ZkFixture::shared().await;
    let client = LockClient::new(support::connect(fixture.url()).await);
    let name = unique("fencing");
    let semaphore = client.semaphore(&name, 2).expect("a semaphore");
    let mut last = None;
    let mut held = Vec::new();
    for round in 0..6 {
        if held.len() == 2 {
            let oldest: distlock_core::LockGuard = held.remove(0);
            assert!(oldest.release().await.expect("released"));
        }
        let guard = semaphore
            .acquire_with(&waiting(Duration::from_secs(5)))
            .await
            .expect("a permit");
        let token = guard.fencing_token();
        assert!(token > last, "round {round}: {token:?} after {last:?}");
        last = token;
        held.push(guard);
    }
    for guard in held {
        assert!(guard.release().await.expect("released"));
    }

    let rw = client.rw_lock(&name).expect("an rw lock");
    let r1 = rw
        .read_with(&waiting(Duration::from_secs(5)))
        .await
        .expect("read");
    let r2 = rw
        .read_with(&waiting(Duration::from_secs(5)))
        .await
        .expect("read");
    assert!(r2.fencing_token() > r1.fencing_token());
    let raw = support::raw(fixture.url()).await;
    let path = support::connect(fixture.url()).await.rw_lock_path(&name);
    let writer = tokio::spawn({
        let rw = rw.clone();
        async move { rw.write_with(&waiting(Duration::from_secs(10))).await }
    });
    until_children(&raw, &path, Duration::from_secs(5), |c| c.len() == 3).await;
    let reader = tokio::spawn({
        let rw = rw.clone();
        async move { rw.read_with(&waiting(Duration::from_secs(10))).await }
    });
    until_children(&raw, &path, Duration::from_secs(5), |c| c.len() == 4).await;
    let readers_token = r2.fencing_token();
    assert!(r1.release().await.expect("released"));
    assert!(r2.release().await.expect("released"));
    let w = writer.await.expect("joined").expect("the writer gets in");
    let writers_token = w.fencing_token();
    assert!(writers_token > readers_token);
    assert!(w.release().await.expect("released"));
    let r3 = reader.await.expect("joined").expect("the later reader gets in");
    assert!(r3.fencing_token() > writers_token);
    assert!(r3.release().await.expect("released"));
}

/// The mutex, the semaphore and the read-write lock of one name are three objects: all held
/// at once, and each still excludes by its own rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_name_three_objects() {
    let fixture = ZkFixture::shared().await;
    let client = LockClient::new(support::connect(fixture.url()).await);
    let name = unique("namespaces");
    let mutex = client.try_acquire(&name).await.expect("works").expect("free");
    let permit = client
        .semaphore(&name, 1)
        .expect("a semaphore")
        .try_acquire()
        .await
        .expect("works")
        .expect("free");
    let rw = client.rw_lock(&name).expect("an rw lock");
    let writer = rw.try_write().await.expect("works").expect("free");
    assert!(client.try_acquire(&name).await.expect("works").is_none());
    assert!(client
        .semaphore(&name, 1)
        .expect("a semaphore")
        .try_acquire()
        .await
        .expect("works")
        .is_none());
    assert!(rw.try_read().await.expect("works").is_none());
    let backend = client.backend();
    assert_eq!(
        backend
            .inspect_holders(&name, Primitive::Mutex)
            .await
            .expect("listed")
            .len(),
        1
    );
    let permits = backend
        .inspect_holders(&name, Primitive::Semaphore)
        .await
        .expect("listed");
    assert_eq!(permits.len(), 1);
    assert_eq!(
        permits[0].kind,
        LockKind::Permit {
            permits: 1,
            weight: 1
        }
    );
    assert_eq!(permits[0].owner, Some(permit.owner().to_string()));
    assert_eq!(permits[0].fencing, permit.fencing_token());
    for guard in [mutex, permit, writer] {
        assert!(guard.release().await.expect("released"));
    }
}

/// The layout Curator's recipes use, so that they and this crate share one object:
/// `InterProcessSemaphoreV2` on [`ZooKeeperLock::semaphore_path`] (`locks/_c_<uuid>-lock-<seq>`,
/// `leases/_c_<uuid>-lease-<seq>`) and `InterProcessReadWriteLock` on
/// [`ZooKeeperLock::rw_lock_path`] (`_c_<uuid>-__READ__<seq>`, `_c_<uuid>-__WRIT__<seq>`);
/// Curator-shaped nodes planted by another session take part as Curator's would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_follow_curators_layout() {
    let fixture = ZkFixture::shared().await;
    let lock = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;
    let name = LockName::new(format!("{} a/b", unique("curator"))).expect("valid");
    let semaphore = lock.semaphore_path(&name);
    let rw = lock.rw_lock_path(&name);
    let mutex = lock.lock_path(&name);
    let encoded = mutex.strip_prefix("/distlock/").expect("under the root");
    assert!(encoded.ends_with("%20a%2Fb"), "{mutex}");
    assert_eq!(semaphore, format!("/distlock/semaphore:{encoded}"));
    assert_eq!(rw, format!("/distlock/rw-lock:{encoded}"));

    // A lease: leases/_c_<owner>-lease-<10 digits>, its count as data, its czxid the token.
    let owner = OwnerToken::new();
    let permit = LockKind::Permit {
        permits: 2,
        weight: 1,
    };
    let lease = acquired(lock.try_acquire_kind(&name, permit, owner, TTL, None).await);
    let node = lease.handle().expect("the node path").to_owned();
    let child = node
        .strip_prefix(&format!("{semaphore}/leases/"))
        .expect("under leases");
    let sequence = child
        .strip_prefix(&format!("_c_{owner}-lease-"))
        .expect("Curator's protected lease name");
    assert!(
        sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit()),
        "{child}"
    );
    let (data, stat) = raw.get_data(&node).await.expect("the lease exists");
    assert_eq!(data, b"permits=2");
    assert_ne!(stat.ephemeral_owner, 0, "ephemeral");
    assert_eq!(Some(stat.czxid as u64), lease.fencing_token().map(|t| t.get()));
    assert!(
        children(&raw, &format!("{semaphore}/locks")).await.is_empty(),
        "the locks mutex is let go"
    );

    // A Curator lease (its data is the client's address) counts, and carries no count.
    let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let curator_lease = format!("{semaphore}/leases/_c_{}-lease-", uuid::Uuid::new_v4());
    let (_, sequence) = raw
        .create(&curator_lease, b"10.0.0.7", &ephemeral)
        .await
        .expect("planted");
    let curator_lease = format!("{curator_lease}{sequence}");
    held(
        lock.try_acquire_kind(&name, permit, OwnerToken::new(), TTL, None)
            .await,
    );
    // A waiter takes the `locks` mutex Curator's way: locks/_c_<owner>-lock-<10 digits>.
    let waiter_owner = OwnerToken::new();
    let waiter = tokio::spawn({
        let (lock, name) = (lock.clone(), name.clone());
        async move {
            lock.wait_queued(&Attempt::new(name.clone(), permit, waiter_owner, TTL), None)
                .await
        }
    });
    let locks = until_children(&raw, &format!("{semaphore}/locks"), Duration::from_secs(5), |c| {
        c.len() == 1
    })
    .await;
    let sequence = locks[0]
        .strip_prefix(&format!("_c_{waiter_owner}-lock-"))
        .expect("Curator's protected lock name");
    assert_eq!(sequence.len(), 10, "{locks:?}");
    raw.delete(&curator_lease, None)
        .await
        .expect("the Curator lease leaves");
    let granted = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter gets in once the Curator lease leaves")
        .expect("joined")
        .expect("works")
        .expect("a permit");
    assert!(lock.release(&granted).await.expect("released"));
    assert!(lock.release(&lease).await.expect("released"));

    // A Curator client at the head of `locks` is ahead of a single attempt.
    let curator_lock = format!("{semaphore}/locks/_c_{}-lock-", uuid::Uuid::new_v4());
    let (_, sequence) = raw
        .create(&curator_lock, b"10.0.0.7", &ephemeral)
        .await
        .expect("planted");
    let curator_lock = format!("{curator_lock}{sequence}");
    held(
        lock.try_acquire_kind(&name, permit, OwnerToken::new(), TTL, None)
            .await,
    );
    let in_locks = children(&raw, &format!("{semaphore}/locks")).await;
    assert_eq!(in_locks.len(), 1, "the attempt left nothing behind: {in_locks:?}");
    assert!(curator_lock.ends_with(&in_locks[0]));
    assert!(children(&raw, &format!("{semaphore}/leases")).await.is_empty());
    raw.delete(&curator_lock, None).await.expect("deleted");

    // Read-write: _c_<owner>-__READ__<seq> and _c_<owner>-__WRIT__<seq>, the owner as data.
    let reader_owner = OwnerToken::new();
    let reader = acquired(
        lock.try_acquire_kind(&name, LockKind::Read, reader_owner, TTL, None)
            .await,
    );
    let child = reader
        .handle()
        .expect("a node")
        .strip_prefix(&format!("{rw}/"))
        .expect("under the lock")
        .to_owned();
    let sequence = child
        .strip_prefix(&format!("_c_{reader_owner}-__READ__"))
        .expect("Curator's read name");
    assert!(
        sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit()),
        "{child}"
    );
    let (data, _) = raw
        .get_data(reader.handle().expect("a node"))
        .await
        .expect("exists");
    assert_eq!(data, reader_owner.to_string().as_bytes());
    assert!(lock.release(&reader).await.expect("released"));
    let writer_owner = OwnerToken::new();
    let writer = acquired(
        lock.try_acquire_kind(&name, LockKind::Write, writer_owner, TTL, None)
            .await,
    );
    let child = writer
        .handle()
        .expect("a node")
        .strip_prefix(&format!("{rw}/"))
        .expect("under the lock")
        .to_owned();
    assert!(
        child.starts_with(&format!("_c_{writer_owner}-__WRIT__")),
        "{child}"
    );
    assert!(lock.release(&writer).await.expect("released"));

    // Curator's writer excludes our readers and writers; Curator's reader only our writers.
    let (_, sequence) = raw
        .create(
            &format!("{rw}/_c_{}-__WRIT__", uuid::Uuid::new_v4()),
            b"10.0.0.7",
            &ephemeral,
        )
        .await
        .expect("planted");
    held(
        lock.try_acquire_kind(&name, LockKind::Read, OwnerToken::new(), TTL, None)
            .await,
    );
    held(
        lock.try_acquire_kind(&name, LockKind::Write, OwnerToken::new(), TTL, None)
            .await,
    );
    let curator_writer = children(&raw, &rw).await;
    assert_eq!(
        curator_writer.len(),
        1,
        "failed attempts leave nothing: {curator_writer:?}"
    );
    assert!(curator_writer[0].ends_with(&format!("__WRIT__{sequence}")));
    raw.delete(&format!("{rw}/{}", curator_writer[0]), None)
        .await
        .expect("deleted");
    raw.create(
        &format!("{rw}/_c_{}-__READ__", uuid::Uuid::new_v4()),
        b"10.0.0.7",
        &ephemeral,
    )
    .await
    .expect("planted");
    let reader = acquired(
        lock.try_acquire_kind(&name, LockKind::Read, OwnerToken::new(), TTL, None)
            .await,
    );
    held(
        lock.try_acquire_kind(&name, LockKind::Write, OwnerToken::new(), TTL, None)
            .await,
    );
    let holders = lock
        .inspect_holders(&name, Primitive::RwLock)
        .await
        .expect("listed");
    assert_eq!(holders.len(), 2, "{holders:?}");
    assert!(holders.iter().any(|h| h.owner.as_deref() == Some("10.0.0.7")));
    assert!(lock.release(&reader).await.expect("released"));
}

/// Bad input is a typed error: a semaphore of no permits. The mutex goes through the same
/// methods as the other kinds (one `wait_queued` for every kind): it is not bad input there,
/// and waits in the mutex's own queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_kinds_are_typed_errors() {
    let fixture = ZkFixture::shared().await;
    let lock: ZooKeeperLock = support::connect(fixture.url()).await;
    let name = unique("bad");
    let zero = lock
        .try_acquire_kind(
            &name,
            LockKind::Permit {
                permits: 0,
                weight: 1,
            },
            OwnerToken::new(),
            TTL,
            None,
        )
        .await;
    assert!(matches!(zero, Err(Error::InvalidOptions { .. })), "{zero:?}");
    let mutex = lock
        .wait_queued(
            &Attempt::new(name.clone(), LockKind::Exclusive, OwnerToken::new(), TTL),
            None,
        )
        .await
        .expect("waits in the mutex's queue")
        .expect("the mutex is free");
    assert_eq!(mutex.kind(), LockKind::Exclusive);
    assert!(lock.inspect_lock(&name).await.expect("inspects").is_held());
    assert!(lock.release(&mutex).await.expect("released"));
    let caps = lock.capabilities();
    assert!(caps.offers(Primitive::Semaphore) && caps.offers(Primitive::RwLock));
}

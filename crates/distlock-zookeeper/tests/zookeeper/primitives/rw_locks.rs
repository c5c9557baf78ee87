//! Read-write locks: readers together and writers alone, a waiting writer keeping later
//! readers out, and dropped waits leaving no node.

use super::*;

/// Readers hold together; a writer holds alone, and nobody else gets in while it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_holds_alone() {
    let fixture = ZkFixture::shared().await;
    let name = unique("rw-share");
    let one = LockClient::new(support::connect(fixture.url()).await)
        .rw_lock(&name)
        .expect("an rw lock");
    let two = LockClient::new(support::connect(fixture.url()).await)
        .rw_lock(&name)
        .expect("an rw lock");

    let first = one.try_read().await.expect("works").expect("free");
    let second = two.try_read().await.expect("works").expect("readers share");
    let third = one.try_read().await.expect("works").expect("readers share");
    assert!(
        two.try_write().await.expect("works").is_none(),
        "readers keep the writer out"
    );
    let holders = one.holders().await.expect("listed");
    assert_eq!(holders.len(), 3);
    assert!(holders.iter().all(|h| h.kind == LockKind::Read));
    let mut owners: Vec<_> = holders.iter().filter_map(|h| h.owner.clone()).collect();
    owners.sort();
    let mut expected: Vec<_> = [&first, &second, &third]
        .iter()
        .map(|g| g.owner().to_string())
        .collect();
    expected.sort();
    assert_eq!(owners, expected);
    for guard in [first, second, third] {
        assert!(guard.release().await.expect("released"));
    }

    let writer = two.try_write().await.expect("works").expect("free");
    assert!(
        one.try_read().await.expect("works").is_none(),
        "the writer keeps readers out"
    );
    assert!(
        one.try_write().await.expect("works").is_none(),
        "and other writers"
    );
    let holders = one.holders().await.expect("listed");
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].kind, LockKind::Write);
    assert_eq!(holders[0].owner, Some(writer.owner().to_string()));
    assert_eq!(holders[0].fencing, writer.fencing_token());
    assert!(writer.release().await.expect("released"));
    assert!(one.holders().await.expect("listed").is_empty());
}

/// FIFO: a writer waiting behind a reader keeps a later reader out (a single attempt is
/// refused, a wait queues behind the writer); when the first reader leaves, the writer gets in
/// first, and the later reader only after the writer has released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_keeps_later_readers_out_then_gets_in() {
    let fixture = ZkFixture::shared().await;
    let name = unique("rw-fifo");
    let raw = support::raw(fixture.url()).await;
    let path = support::connect(fixture.url()).await.rw_lock_path(&name);
    let readers = LockClient::new(support::connect(fixture.url()).await)
        .rw_lock(&name)
        .expect("an rw lock");
    let writers = LockClient::new(support::connect(fixture.url()).await)
        .rw_lock(&name)
        .expect("an rw lock");
    let order = Arc::new(Mutex::new(Vec::new()));
    let writing = Arc::new(AtomicBool::new(false));

    let first = readers.try_read().await.expect("works").expect("free");
    let writer = {
        let (writers, order, writing) = (writers.clone(), order.clone(), writing.clone());
        tokio::spawn(async move {
            let guard = writers
                .write_with(&waiting(Duration::from_secs(30)))
                .await
                .expect("the writer gets in");
            writing.store(true, Ordering::SeqCst);
            order
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push("writer");
            tokio::time::sleep(Duration::from_millis(300)).await;
            writing.store(false, Ordering::SeqCst);
            assert!(guard.release().await.expect("released"));
        })
    };
    until_children(&raw, &path, Duration::from_secs(5), |c| c.len() == 2).await;
    assert!(
        readers.try_read().await.expect("works").is_none(),
        "a new reader is refused while a writer waits"
    );
    let later = {
        let (readers, order, writing) = (readers.clone(), order.clone(), writing.clone());
        tokio::spawn(async move {
            let guard = readers
                .read_with(&waiting(Duration::from_secs(30)))
                .await
                .expect("the later reader gets in");
            assert!(
                !writing.load(Ordering::SeqCst),
                "a reader in while the writer writes"
            );
            order
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push("later reader");
            assert!(guard.release().await.expect("released"));
        })
    };
    until_children(&raw, &path, Duration::from_secs(5), |c| c.len() == 3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        order.lock().unwrap_or_else(PoisonError::into_inner).is_empty(),
        "nobody got in while the first reader held"
    );
    assert!(first.release().await.expect("released"));
    for task in [writer, later] {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("both finish")
            .expect("no panic");
    }
    let order = order.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(order, ["writer", "later reader"]);
    assert!(children(&raw, &path).await.is_empty());
}

/// A wait dropped at any point leaves no node: a writer queued behind a reader, a permit
/// waiter holding the semaphore's `locks` mutex, and one queued behind it in `locks`. The
/// line still moves afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_wait_leaves_no_node() {
    let fixture = ZkFixture::shared().await;
    let lock = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;

    let name = unique("drop-rw");
    let path = lock.rw_lock_path(&name);
    let reader = acquired(
        lock.try_acquire_kind(&name, LockKind::Read, OwnerToken::new(), TTL, None)
            .await,
    );
    let waited = tokio::time::timeout(
        Duration::from_millis(500),
        lock.wait_queued(
            &Attempt::new(name.clone(), LockKind::Write, OwnerToken::new(), TTL),
            None,
        ),
    )
    .await;
    assert!(waited.is_err(), "the writer was still waiting");
    let left = until_children(&raw, &path, Duration::from_secs(2), |c| c.len() == 1).await;
    assert!(left[0].contains("__READ__"), "{left:?}");
    assert!(lock.release(&reader).await.expect("released"));
    let writer = acquired(
        lock.try_acquire_kind(&name, LockKind::Write, OwnerToken::new(), TTL, None)
            .await,
    );
    assert!(lock.release(&writer).await.expect("released"));

    let name = unique("drop-sem");
    let semaphore = lock.semaphore_path(&name);
    let (locks, leases) = (format!("{semaphore}/locks"), format!("{semaphore}/leases"));
    let permit = LockKind::Permit {
        permits: 1,
        weight: 1,
    };
    let holder = acquired(
        lock.try_acquire_kind(&name, permit, OwnerToken::new(), TTL, None)
            .await,
    );
    let other = support::connect(fixture.url()).await;
    let first = tokio::spawn({
        let other = other.clone();
        let name = name.clone();
        async move {
            other
                .wait_queued(&Attempt::new(name.clone(), permit, OwnerToken::new(), TTL), None)
                .await
        }
    });
    // The first waiter holds `locks` and has its lease in: two leases, one `locks` node.
    until_children(&raw, &leases, Duration::from_secs(5), |c| c.len() == 2).await;
    until_children(&raw, &locks, Duration::from_secs(5), |c| c.len() == 1).await;
    let second = tokio::time::timeout(
        Duration::from_millis(500),
        lock.wait_queued(&Attempt::new(name.clone(), permit, OwnerToken::new(), TTL), None),
    )
    .await;
    assert!(second.is_err(), "the second waiter was still waiting");
    until_children(&raw, &locks, Duration::from_secs(2), |c| c.len() == 1).await;
    first.abort();
    assert!(first.await.is_err(), "aborted while waiting");
    until_children(&raw, &leases, Duration::from_secs(2), |c| c.len() == 1).await;
    until_children(&raw, &locks, Duration::from_secs(2), <[String]>::is_empty).await;

    // Through the client too: the wait's task is dropped with its caller.
    let client = LockClient::new(other.clone());
    let dropped = tokio::time::timeout(
        Duration::from_millis(500),
        client
            .semaphore(&name, 1)
            .expect("a semaphore")
            .acquire_with(&waiting(Duration::from_secs(30))),
    )
    .await;
    assert!(dropped.is_err(), "the client's wait was still waiting");
    until_children(&raw, &leases, Duration::from_secs(2), |c| c.len() == 1).await;
    until_children(&raw, &locks, Duration::from_secs(2), <[String]>::is_empty).await;

    assert!(lock.release(&holder).await.expect("released"));
    let next = acquired(
        other
            .try_acquire_kind(&name, permit, OwnerToken::new(), TTL, None)
            .await,
    );
    assert!(other.release(&next).await.expect("released"));
}

//! Read-write locks: readers overlap, a writer excludes everyone, a waiting writer keeps new
//! readers out and gets in, and its withdrawal lets them in.

use super::*;

/// Readers share the lock; a writer waits for the last reader and then excludes readers and
/// other writers. Refused attempts say when a hold could free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_overlap_and_a_writer_excludes_everyone() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let rw = name("rw");
    let r1 = take(&lock, &rw, LockKind::Read, Duration::from_secs(5)).await;
    let r2 = take(&lock, &rw, LockKind::Read, Duration::from_secs(10)).await;
    let until_readers_leave = refused(&lock, &rw, LockKind::Write).await.expect("known");
    assert!(
        until_readers_leave > Duration::from_secs(9) && until_readers_leave <= Duration::from_secs(10),
        "the last reader's expiry: {until_readers_leave:?}"
    );
    assert!(lock.release(&r1).await.expect("releases"));
    assert!(matches!(
        attempt(&lock, &rw, LockKind::Write, LONG).await,
        TryAcquire::Held(_)
    ));
    assert!(lock.release(&r2).await.expect("releases"));

    let w = take(&lock, &rw, LockKind::Write, Duration::from_secs(5)).await;
    match attempt(&lock, &rw, LockKind::Read, LONG).await {
        TryAcquire::Held(holder) => {
            assert_eq!(holder.owner, Some(owner_of(&w)));
            let left = holder.remaining.expect("the writer's expiry");
            assert!(
                left > Duration::from_secs(4) && left <= Duration::from_secs(5),
                "{left:?}"
            );
        }
        won => panic!("a reader got in beside a writer: {won:?}"),
    }
    assert!(matches!(
        attempt(&lock, &rw, LockKind::Write, LONG).await,
        TryAcquire::Held(_)
    ));
    assert_eq!(
        owners(&lock, &rw, Primitive::RwLock).await,
        vec![(owner_of(&w), LockKind::Write)]
    );
    assert!(lock.release(&w).await.expect("releases"));
    let r3 = take(&lock, &rw, LockKind::Read, LONG).await;
    assert!(lock.release(&r3).await.expect("releases"));
}

/// A writer that found readers and will wait is recorded: new readers are refused (readers
/// already in keep their hold), the writer gets in when the last reader leaves and its
/// record goes, and readers come in again after the writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_keeps_new_readers_out_and_gets_in() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let rw = name("writer-first");
    let r1 = take(&lock, &rw, LockKind::Read, LONG).await;
    let stay = Duration::from_secs(5);
    let writer = OwnerToken::new();
    let refused_writer = lock
        .try_acquire_kind(&rw, LockKind::Write, writer, LONG, Some(("w-1", stay)))
        .await
        .expect("answers");
    assert!(matches!(refused_writer, TryAcquire::Held(_)));
    let left = refused(&lock, &rw, LockKind::Read)
        .await
        .expect("until the waiting writer's record ends");
    assert!(left > Duration::from_secs(4) && left <= stay, "{left:?}");
    assert!(
        lock.extend(&r1, LONG).await.expect("answers").is_some(),
        "readers in stay in"
    );

    assert!(lock.release(&r1).await.expect("releases"));
    let w = match lock
        .try_acquire_kind(&rw, LockKind::Write, writer, LONG, Some(("w-1", stay)))
        .await
        .expect("answers")
    {
        TryAcquire::Acquired(lease) => lease,
        held => panic!("the waiting writer did not get in: {held:?}"),
    };
    assert!(lock.release(&w).await.expect("releases"));
    let r2 = take(&lock, &rw, LockKind::Read, LONG).await;
    assert!(lock.release(&r2).await.expect("releases"));

    // Through the client: the writer waits, is woken by the last reader's release (far
    // sooner than its 2 s safety-net re-check), and readers wait for it.
    let client = LockClient::new(lock.clone());
    let rw_lock = client.rw_lock(&rw).expect("valid");
    let reader = rw_lock.read().await.expect("reads");
    let writing = tokio::spawn({
        let rw_lock = rw_lock.clone();
        async move {
            let opts = AcquireOptions::new().ttl(LONG).wait_for(Duration::from_secs(20));
            let guard = rw_lock.write_with(&opts).await.expect("writes in the end");
            (guard, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        rw_lock.try_read().await.expect("answers").is_none(),
        "a new reader got in ahead of a waiting writer"
    );
    let released = Instant::now();
    assert!(reader.release().await.expect("releases"));
    let (guard, at) = writing.await.expect("joined");
    let handoff = at.saturating_duration_since(released);
    assert!(
        handoff < Duration::from_secs(1),
        "the writer was not woken by the release: {handoff:?}"
    );
    let reading = tokio::spawn({
        let rw_lock = rw_lock.clone();
        async move {
            let opts = AcquireOptions::new().ttl(LONG).wait_for(Duration::from_secs(20));
            let guard = rw_lock.read_with(&opts).await.expect("reads in the end");
            (guard, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert!(guard.release().await.expect("releases"));
    let (reader, at) = reading.await.expect("joined");
    let handoff = at.saturating_duration_since(released);
    assert!(
        handoff < Duration::from_secs(1),
        "the reader was not woken by the writer's release: {handoff:?}"
    );
    assert!(reader.release().await.expect("releases"));
}

/// A waiting writer that withdraws lets readers in at once (a reader waiting for it is woken),
/// and so does one whose wait timed out (the client withdraws it in the background).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withdrawing_a_waiting_writer_lets_readers_in() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let rw = name("withdraw");
    let r1 = take(&lock, &rw, LockKind::Read, LONG).await;
    let outcome = lock
        .try_acquire_kind(&rw, LockKind::Write, OwnerToken::new(), LONG, Some(("w-1", LONG)))
        .await
        .expect("answers");
    assert!(matches!(outcome, TryAcquire::Held(_)));
    assert!(refused(&lock, &rw, LockKind::Read).await.is_some());

    let client = LockClient::new(lock.clone());
    let rw_lock = client.rw_lock(&rw).expect("valid");
    let reading = tokio::spawn({
        let rw_lock = rw_lock.clone();
        async move {
            let opts = AcquireOptions::new().ttl(LONG).wait_for(Duration::from_secs(20));
            let guard = rw_lock.read_with(&opts).await.expect("reads in the end");
            (guard, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let withdrawn = Instant::now();
    lock.withdraw(&rw, LockKind::Write, "w-1")
        .await
        .expect("withdraws");
    let (r2, at) = reading.await.expect("joined");
    let waited = at.saturating_duration_since(withdrawn);
    assert!(
        waited < Duration::from_secs(1),
        "the reader was not woken by the withdrawal: {waited:?}"
    );
    assert!(r2.release().await.expect("releases"));

    // A writer's wait that times out is withdrawn by the client.
    let opts = AcquireOptions::new()
        .ttl(LONG)
        .wait_for(Duration::from_millis(400));
    assert!(matches!(
        rw_lock.write_with(&opts).await,
        Err(Error::Timeout { .. })
    ));
    let ended = Instant::now();
    let reader = loop {
        if let Some(reader) = rw_lock.try_read().await.expect("answers") {
            break reader;
        }
        assert!(
            ended.elapsed() < Duration::from_secs(2),
            "the timed-out writer's record kept readers out (its stay is about 3 s)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(reader.release().await.expect("releases"));
    assert!(lock.release(&r1).await.expect("releases"));
}

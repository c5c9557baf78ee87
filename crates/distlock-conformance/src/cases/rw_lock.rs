//! Read-write locks: readers share, a writer excludes everyone, a waiting writer is not
//! starved by readers that keep coming, and a writer that stops waiting lets readers in.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Error, Fencing, LockKind, Primitive};

use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::Ctx;

/// The skip of a read-write case on a backend without read-write locks.
pub(crate) fn without_rw_locks(ctx: &Ctx) -> Option<Outcome> {
    (!ctx.caps().offers(Primitive::RwLock)).then(|| {
        ctx.skip(
            Reason::RwLocks,
            "the backend has no read-write locks (Capabilities::rw_locks is false)",
        )
    })
}

/// Case 36: Three readers hold a read-write lock at once; a writer cannot get in while one
/// reader is left; alone, a writer keeps readers and other writers out; the mutex and the
/// semaphore of the same name are other objects; holders are listed with their kinds.
pub async fn c36_readers_share_a_writer_excludes(ctx: Ctx) -> Outcome {
    if let Some(skip) = without_rw_locks(&ctx) {
        return skip;
    }
    let name = ctx.name("rw-basic");
    let (a, b) = (ctx.client().await, ctx.client().await);
    let (lock_a, lock_b) = (
        a.rw_lock(&name).expect("rw locks"),
        b.rw_lock(&name).expect("rw locks"),
    );
    let mutex = a
        .acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL))
        .await
        .expect("the mutex");

    let readers = [
        lock_a.try_read().await.expect("works").expect("a reader"),
        lock_b.try_read().await.expect("works").expect("readers share"),
        lock_b.try_read().await.expect("works").expect("readers share"),
    ];
    assert!(
        lock_a.try_write().await.expect("works").is_none(),
        "a writer beside readers"
    );
    if ctx.caps().inspect {
        match lock_b.holders().await {
            Ok(holders) => {
                assert_eq!(holders.len(), 3, "three readers listed: {holders:?}");
                assert!(holders.iter().all(|h| h.kind == LockKind::Read), "{holders:?}");
            }
            Err(Error::NotSupported { .. }) => ctx.note("holders cannot be listed"),
            Err(e) => panic!("listing holders: {e}"),
        }
    }
    let [r1, r2, r3] = readers;
    for reader in [r1, r2] {
        assert!(reader.release().await.expect("works"));
    }
    assert!(
        lock_a.try_write().await.expect("works").is_none(),
        "a writer beside one reader"
    );
    let last_read_token = r3.fencing_token();
    assert!(r3.release().await.expect("works"));

    let writer = lock_a
        .try_write()
        .await
        .expect("works")
        .expect("the writer, once no reader is left");
    if ctx.caps().fencing == Fencing::Monotonic {
        assert!(
            writer.fencing_token() > last_read_token,
            "the writer's token is not above the readers'"
        );
    }
    assert!(
        lock_b.try_read().await.expect("works").is_none(),
        "a reader beside the writer"
    );
    assert!(
        lock_b.try_write().await.expect("works").is_none(),
        "a second writer"
    );
    assert!(!mutex.is_lost(), "the rw lock touched the mutex of its name");
    assert!(writer.release().await.expect("works"));
    assert!(mutex.release().await.expect("works"));
    let reader = lock_b.try_read().await.expect("works").expect("free again");
    assert!(reader.release().await.expect("works"));
    Outcome::Passed
}

/// Case 37: Readers keep arriving, each overlapping the last, so the lock is never free of
/// readers; a writer that waits still gets in, in bounded time, and once it waits no new
/// reader gets in. A writer whose wait runs out lets waiting readers in at once.
pub async fn c37_waiting_writer_is_not_starved(ctx: Ctx) -> Outcome {
    if let Some(skip) = without_rw_locks(&ctx) {
        return skip;
    }
    let name = ctx.name("rw-writer");
    let lock = ctx.client().await.rw_lock(&name).expect("rw locks");
    let first = lock.try_read().await.expect("works").expect("a first reader");

    // A stream of readers, each holding 150 ms, a new one every 50 ms, until the writer is in.
    let stop = Arc::new(AtomicBool::new(false));
    let admitted_while_writer_waited = Arc::new(AtomicUsize::new(0));
    let writer_waits = Arc::new(AtomicBool::new(false));
    let stream = {
        let (client, name) = (ctx.client().await, name.clone());
        let (stop, admitted, writer_waits) = (
            stop.clone(),
            admitted_while_writer_waited.clone(),
            writer_waits.clone(),
        );
        tokio::spawn(async move {
            let lock = client.rw_lock(&name).expect("rw locks");
            let mut held = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let waited_before = writer_waits.load(Ordering::SeqCst);
                if let Some(reader) = lock.try_read().await.expect("works") {
                    if waited_before {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                    held.push((Instant::now(), reader));
                }
                // Readers leave 150 ms after they came.
                let mut kept = Vec::new();
                for (since, reader) in held {
                    if since.elapsed() >= Duration::from_millis(150) {
                        let _ = reader.release().await;
                    } else {
                        kept.push((since, reader));
                    }
                }
                held = kept;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            for (_, reader) in held {
                let _ = reader.release().await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(first);

    let writer_lock = ctx.client().await.rw_lock(&name).expect("rw locks");
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(30))
        .poll_interval(Duration::from_millis(5), Duration::from_millis(100));
    let started = Instant::now();
    let waiting = tokio::spawn(async move { writer_lock.write_with(&opts).await });
    // The writer's first attempt records it; readers that try after that are kept out.
    tokio::time::sleep(Duration::from_millis(300)).await;
    writer_waits.store(true, Ordering::SeqCst);
    let writer = within(Duration::from_secs(40), "the waiting writer gets in", waiting)
        .await
        .expect("the writer task")
        .expect("the writer gets in while readers keep coming");
    stop.store(true, Ordering::SeqCst);
    ctx.note(format!("the writer got in after {:?}", started.elapsed()));
    let admitted = admitted_while_writer_waited.load(Ordering::SeqCst);
    assert_eq!(admitted, 0, "{admitted} reader(s) got in while a writer waited");
    assert!(!writer.is_lost());
    assert!(writer.release().await.expect("works"));
    stream.await.expect("the reader stream");

    // A writer that gives up lets readers in at once: well before its record would lapse by
    // itself (it waits with pauses of up to 5 s, so its record would live over 5 s).
    let reader = lock.try_read().await.expect("works").expect("free for readers");
    let quitter = ctx.client().await.rw_lock(&name).expect("rw locks");
    let gave_up = quitter
        .write_with(
            &AcquireOptions::new()
                .ttl(LONG_TTL)
                .wait_for(Duration::from_millis(300))
                .poll_interval(Duration::from_millis(5), Duration::from_secs(5)),
        )
        .await;
    assert!(
        matches!(gave_up, Err(Error::Timeout { .. })),
        "a writer beside a reader: {gave_up:?}"
    );
    let late = within(
        Duration::from_secs(3),
        "a reader gets in after the writer gave up",
        async {
            loop {
                if let Some(guard) = lock.try_read().await.expect("works") {
                    return guard;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await;
    assert!(late.release().await.expect("works"));
    assert!(reader.release().await.expect("works"));
    Outcome::Passed
}

/// Case 38: Six clients take one read-write lock as readers and writers, ten rounds each: a
/// writer never overlaps a reader or another writer.
pub async fn c38_rw_lock_exclusion_under_contention(ctx: Ctx) -> Outcome {
    if let Some(skip) = without_rw_locks(&ctx) {
        return skip;
    }
    const CLIENTS: usize = 6;
    const ROUNDS: usize = 10;
    let name = ctx.name("rw-contended");
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(120))
        .poll_interval(Duration::from_millis(2), Duration::from_millis(50));
    let mut workers = Vec::new();
    for i in 0..CLIENTS {
        let lock = ctx.client().await.rw_lock(&name).expect("rw locks");
        let (readers, writers, most_readers, opts) = (
            readers.clone(),
            writers.clone(),
            most_readers.clone(),
            opts.clone(),
        );
        workers.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                if (i + round) % 3 == 0 {
                    let guard = lock.write_with(&opts).await.expect("the write lock");
                    assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers at once");
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer beside readers");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    assert_eq!(
                        readers.load(Ordering::SeqCst),
                        0,
                        "a reader came in beside the writer"
                    );
                    writers.fetch_sub(1, Ordering::SeqCst);
                    assert!(
                        guard.release().await.expect("works"),
                        "the write lock was still ours"
                    );
                } else {
                    let guard = lock.read_with(&opts).await.expect("a read lock");
                    let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    most_readers.fetch_max(now, Ordering::SeqCst);
                    assert_eq!(writers.load(Ordering::SeqCst), 0, "a reader beside the writer");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    assert_eq!(
                        writers.load(Ordering::SeqCst),
                        0,
                        "a writer came in beside a reader"
                    );
                    readers.fetch_sub(1, Ordering::SeqCst);
                    assert!(
                        guard.release().await.expect("works"),
                        "the read lock was still ours"
                    );
                }
            }
        }));
    }
    for worker in workers {
        worker.await.expect("a client finished");
    }
    ctx.note(format!(
        "up to {} readers at once",
        most_readers.load(Ordering::SeqCst)
    ));
    Outcome::Passed
}

//! A release whose reply is lost: the store freed the lock, the client never heard it. Owns
//! case 50; the proxy, warm-up and hang bound come from the fault cases.

use std::time::Duration;

use distlock_core::{AcquireOptions, LockClient, LockGuard, LockName, Primitive, Result};
use distlock_testkit::FaultProxies;
use tokio::task::JoinHandle;

use super::faults::{proxied, warm_up, NO_HANG};
use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::Ctx;

/// Case 50: A release whose reply is lost, while the lease is still valid, is never reported
/// as "not ours": once the store has freed the lock (or the release has returned), the proxy
/// heals and resets the connections (a client that re-sends does so on a new one), and the
/// release answers `Ok(true)` or an ambiguous error, never `Ok(false)`; the name is then free
/// to another client (at once, or after the background retry of a release that stopped
/// before it reached the store).
/// Under the same fault, `with_lock` (and `with_permit`) returns the output of work that
/// finished under the lock, not `LockLost`. The same for a one-permit semaphore's permit.
pub async fn c50_release_whose_reply_is_lost_is_not_not_owned(ctx: Ctx) -> Outcome {
    let permits = ctx.caps().offers(Primitive::Semaphore);
    let mut primitives = vec![Primitive::Mutex];
    if permits {
        primitives.push(Primitive::Semaphore);
    }
    for primitive in primitives {
        let (client, faults) = match proxied(&ctx).await {
            Ok(pair) => pair,
            Err(skip) => return skip,
        };
        warm_up(&ctx, &client, &format!("c50-{primitive}")).await;
        let opts = AcquireOptions::new().ttl(LONG_TTL).no_wait();
        // A release of this kind on a healthy network first, so that what the store needs
        // for it (a script it loads on first use) is in place before the fault.
        let warm = ctx.name(&format!("warm-release-{primitive}"));
        let guard = within(
            NO_HANG,
            "a warm-up acquire",
            take(&client, primitive, &warm, &opts),
        )
        .await
        .unwrap_or_else(|e| panic!("{primitive}: acquiring on a healthy network failed: {e}"));
        assert!(
            guard.release().await.expect("released"),
            "{primitive}: the warm-up hold was ours"
        );

        let name = ctx.name(&format!("lost-release-{primitive}"));
        let guard = within(NO_HANG, "an acquire", take(&client, primitive, &name, &opts))
            .await
            .unwrap_or_else(|e| panic!("{primitive}: acquiring on a healthy network failed: {e}"));
        faults.drop_replies();
        let release = tokio::spawn(guard.release());
        applied(&ctx, &faults, primitive, &name, &release).await;
        let released = within(NO_HANG, "the release returns", release)
            .await
            .expect("joined");
        ctx.note(format!("{primitive}: release with a lost reply: {released:?}"));
        match &released {
            Ok(true) => {}
            Err(error) if error.is_ambiguous() => {}
            Ok(false) => panic!(
                "{primitive}: a release whose reply was lost reported \"not ours\" while the lease was valid"
            ),
            Err(error) => panic!("{primitive}: a lost reply must be an ambiguous error, got {error}"),
        }
        free_at_once(&ctx, primitive, &name).await;

        let name = ctx.name(&format!("lost-with-lock-{primitive}"));
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let (finish_tx, finish) = tokio::sync::oneshot::channel::<()>();
        let work = move |_| async move {
            let _ = started_tx.send(());
            let _ = finish.await;
            42_u32
        };
        let run = {
            let (client, name, opts) = (client.clone(), name.clone(), opts.clone());
            tokio::spawn(async move {
                match primitive {
                    Primitive::Semaphore => client.semaphore(&name, 1)?.with_permit(&opts, work).await,
                    _ => client.with_lock(&name, &opts, work).await,
                }
            })
        };
        within(NO_HANG, "the work starts under the lock", started)
            .await
            .expect("the work started");
        faults.drop_replies();
        finish_tx.send(()).expect("the work is waiting");
        applied(&ctx, &faults, primitive, &name, &run).await;
        let output = within(NO_HANG, "with_lock returns", run).await.expect("joined");
        ctx.note(format!(
            "{primitive}: with_lock whose release reply was lost: {output:?}"
        ));
        assert!(
            matches!(output, Ok(42)),
            "{primitive}: work that finished under the lock must return its output although the release's reply was lost, got {output:?}"
        );
        free_at_once(&ctx, primitive, &name).await;
    }
    if permits {
        Outcome::Passed
    } else {
        ctx.partial(
            Reason::Semaphores,
            "the permit part: the backend has no semaphores",
        )
    }
}

/// One acquisition of a lock or of a one-permit semaphore's permit.
async fn take(
    client: &LockClient,
    primitive: Primitive,
    name: &LockName,
    opts: &AcquireOptions,
) -> Result<LockGuard> {
    match primitive {
        Primitive::Semaphore => client.semaphore(name, 1)?.acquire_with(opts).await,
        _ => client.acquire_with(name, opts).await,
    }
}

/// Waits until a direct client finds `name` free (the release reached the store although
/// its reply was lost) or the release has returned (a release of several round trips stops
/// at its first lost reply), then heals the network and resets every connection, so that a
/// client that re-sends does so now, on a new connection.
async fn applied<T>(
    ctx: &Ctx,
    faults: &FaultProxies,
    primitive: Primitive,
    name: &LockName,
    release: &JoinHandle<T>,
) {
    let direct = ctx.client().await;
    let probe = AcquireOptions::new().ttl(LONG_TTL).no_wait();
    let mut last = None;
    let reached = tokio::time::timeout(NO_HANG, async {
        while !release.is_finished() {
            match take(&direct, primitive, name, &probe).await {
                Ok(guard) => {
                    guard.release().await.expect("the probe's release works");
                    break;
                }
                Err(error) => {
                    last = Some(error);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
    .await;
    if reached.is_err() {
        let sent = faults.traffic();
        panic!(
            "{primitive}: the release never reached the store within {NO_HANG:?} (traffic {sent:?}); a direct client's last attempt: {last:?}"
        );
    }
    faults.heal();
    faults.reset();
}

/// Another client takes `name` at once, or within a few operation timeouts where the
/// release ended before it reached the store and its background retry frees it after the
/// heal (never at the TTL).
async fn free_at_once(ctx: &Ctx, primitive: Primitive, name: &LockName) {
    let other = ctx.client().await;
    let op = ctx.fixture().operation_timeout();
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(op * 3 + Duration::from_secs(3));
    let guard = within(
        NO_HANG,
        "another client's acquire",
        take(&other, primitive, name, &opts),
    )
    .await
    .unwrap_or_else(|e| panic!("{primitive}: the name must be free after the release: {e}"));
    assert!(
        guard.release().await.expect("released"),
        "{primitive}: the other client's lock was its own"
    );
}

//! Upgradeable reads: one upgradeable reader beside plain readers, an upgrade that waits for
//! them, and no writer between what was read and what is written.

use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Fencing, LockKind};

use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::Ctx;

/// How long a wait that must not end yet is watched.
const STILL_WAITING: Duration = Duration::from_millis(400);
/// A bound on a handover that must happen (the machine may be loaded).
const HANDOVER: Duration = Duration::from_secs(5);

/// The skip of an upgradeable-read case on a backend without them.
fn without_upgradeable_reads(ctx: &Ctx) -> Option<Outcome> {
    (!ctx.caps().upgradeable_reads).then(|| {
        ctx.skip(
            Reason::UpgradeableReads,
            "no upgradeable reads (Capabilities::upgradeable_reads is false)",
        )
    })
}

/// Case 55: An upgradeable reader holds beside a plain reader; a second upgradeable reader and
/// a writer are refused. Its upgrade waits while the plain reader holds, and meanwhile a new
/// reader is refused (it waits behind the upgrade); a writer that starts waiting then gets in
/// only after the upgraded guard is released, never between the read and the write, and the
/// upgraded hold keeps readers out.
pub async fn c55_upgradeable_read_excludes_writers_until_released(ctx: Ctx) -> Outcome {
    if let Some(skip) = without_upgradeable_reads(&ctx) {
        return skip;
    }
    let name = ctx.name("upgradeable");
    let (a, b, c) = (ctx.client().await, ctx.client().await, ctx.client().await);
    let (lock_a, lock_b, lock_c) = (
        a.rw_lock(&name).expect("rw locks"),
        b.rw_lock(&name).expect("rw locks"),
        c.rw_lock(&name).expect("rw locks"),
    );
    let opts = AcquireOptions::new().ttl(LONG_TTL);
    let mut upgradeable = lock_a
        .upgradeable_read_with(&opts)
        .await
        .expect("the upgradeable read of a free lock");
    assert_eq!(upgradeable.kind(), LockKind::UpgradeableRead);
    let reader = lock_b
        .try_read()
        .await
        .expect("works")
        .expect("a plain reader beside the upgradeable reader");
    assert!(
        lock_c.try_upgradeable_read().await.expect("works").is_none(),
        "two upgradeable readers at once"
    );
    assert!(
        lock_c.try_write().await.expect("works").is_none(),
        "a writer beside an upgradeable reader"
    );
    assert!(
        !upgradeable.try_upgrade().await.expect("works"),
        "upgraded while a plain reader holds"
    );

    let waiting = opts.clone().wait_for(Duration::from_secs(60));
    let upgrade = {
        let waiting = waiting.clone();
        tokio::spawn(async move {
            upgradeable
                .upgrade_with(&waiting)
                .await
                .map(|()| (Instant::now(), upgradeable))
        })
    };
    tokio::time::sleep(STILL_WAITING).await;
    assert!(!upgrade.is_finished(), "the upgrade got in beside a plain reader");
    assert!(
        lock_c.try_read().await.expect("works").is_none(),
        "a new reader passed a waiting upgrade"
    );
    let writer = {
        let (lock_c, waiting) = (lock_c.clone(), waiting.clone());
        tokio::spawn(async move {
            let guard = lock_c.write_with(&waiting).await;
            (Instant::now(), guard)
        })
    };
    tokio::time::sleep(STILL_WAITING).await;
    assert!(!writer.is_finished(), "a writer got in beside the readers");

    let read_token = reader.fencing_token();
    assert!(reader.release().await.expect("works"));
    let (upgraded_at, upgradeable) = within(HANDOVER, "the upgrade once the reader left", upgrade)
        .await
        .expect("joined")
        .expect("upgraded");
    assert!(upgradeable.is_upgraded());
    assert_eq!(upgradeable.kind(), LockKind::Write);
    if ctx.caps().fencing == Fencing::Monotonic {
        assert!(
            upgradeable.fencing_token() > read_token,
            "the upgraded hold's token is not above the reader's"
        );
    }
    assert!(
        lock_b.try_read().await.expect("works").is_none(),
        "a reader beside the upgraded hold"
    );
    tokio::time::sleep(STILL_WAITING).await;
    assert!(!writer.is_finished(), "a writer got in beside the upgraded hold");
    let write_token = upgradeable.fencing_token();
    let released_at = Instant::now();
    assert!(upgradeable.release().await.expect("works"));
    let (written_at, guard) = within(HANDOVER, "the waiting writer once the upgraded hold left", writer)
        .await
        .expect("joined");
    let guard = guard.expect("the waiting writer");
    ctx.note(format!(
        "upgraded {:?} before its release; the waiting writer got in {:?} after it",
        released_at - upgraded_at,
        written_at - released_at
    ));
    assert!(
        written_at >= released_at,
        "the waiting writer got in before the upgraded hold was released"
    );
    if ctx.caps().fencing == Fencing::Monotonic {
        assert!(
            guard.fencing_token() > write_token,
            "the writer's token is not above the upgraded hold's"
        );
    }
    assert!(guard.release().await.expect("works"));
    let again = lock_b
        .try_upgradeable_read()
        .await
        .expect("works")
        .expect("free again");
    assert!(again.release().await.expect("works"));
    Outcome::Passed
}

//! Partitions between the members of a replicated store ([`Fixture::members`]): a holder whose
//! member is cut off from the others must hear of its loss before the majority side grants
//! the lock to someone else. Each case records the instants it measures with `ctx.note`.

use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Error, LockClient, LockGuard};

use super::faults::NO_HANG;
use super::{within, Outcome};
use crate::expect::Reason;
use crate::{Ctx, Members};

/// Which member the holder is pinned to.
#[derive(Debug, Clone, Copy)]
enum Side {
    /// A follower, cut off from its leader and the other followers.
    Follower,
    /// The leader, isolated with its holder; the others elect another.
    Leader,
}

/// Case 52: a holder connected to one member only, and another client connected to all the
/// others; the holder's member is cut off from the others (silently, both ways), first a
/// follower, then (on a new store) the leader. The holder's lost signal must fire before the
/// other client, which waits for the lock on the majority side, gets it: the store's own
/// timeouts (a follower's `syncLimit`, the leader's quorum check, the session's expiry on the
/// majority's leader) run on both sides, and the holder's must end first.
pub async fn c52_partitioned_member_holder_hears_of_loss_first(ctx: Ctx) -> Outcome {
    for side in [Side::Follower, Side::Leader] {
        let Some(members) = ctx.fixture().members().await else {
            return ctx.skip(Reason::Members, "the store has no members to partition");
        };
        let members = members.expect("the fixture starts a store of several members");
        partitioned_holder(&ctx, &*members, side).await;
    }
    Outcome::Passed
}

async fn partitioned_holder(ctx: &Ctx, members: &dyn Members, side: Side) {
    let leader = within(NO_HANG, "the store elects a leader", members.leader())
        .await
        .expect("a leader");
    let cut = match side {
        Side::Follower => (leader + 1) % members.count(),
        Side::Leader => leader,
    };
    let rest: Vec<usize> = (0..members.count()).filter(|m| *m != cut).collect();
    let client = |on: Vec<usize>| async move {
        let lock = within(NO_HANG, "a pinned client connects", members.client(&on))
            .await
            .expect("a client pinned to chosen members");
        LockClient::from_arc(lock)
    };
    let (holder, other) = (client(vec![cut]).await, client(rest.clone()).await);
    let op = ctx.fixture().operation_timeout();
    let opts = AcquireOptions::new().ttl((op * 3).max(ctx.short_ttl()));
    let name = ctx.name(&format!("{side:?}").to_lowercase());
    let guard = within(NO_HANG, "the holder acquires", holder.acquire_with(&name, &opts))
        .await
        .expect("the holder acquires");
    // A while of ordinary traffic (heartbeats, renewals) before the cut.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!guard.is_lost(), "lost before the partition");

    within(NO_HANG, "the partition", members.isolate(cut))
        .await
        .expect("the member is cut off");
    let at = Instant::now();
    let lost = async {
        let reason = within(NO_HANG, "the cut-off holder hears of the loss", guard.lost()).await;
        (Instant::now(), reason)
    };
    let acquired = acquire_on_the_majority(&other, &name, &opts, at + NO_HANG);
    let ((lost_at, reason), (acquired_at, other_guard)) = tokio::join!(lost, acquired);
    ctx.note(format!(
        "{side:?} {cut} cut off (leader {leader}, the other client on {rest:?}) at 0: the holder's \
         lost signal at {:?} ({reason}), the other client acquired at {:?}",
        lost_at - at,
        acquired_at - at
    ));
    assert!(
        lost_at < acquired_at,
        "two holders: with the holder's {side:?} cut off, the other client acquired at {:?}, the \
         holder's lost signal fired only at {:?}",
        acquired_at - at,
        lost_at - at
    );
    assert!(
        within(NO_HANG, "the release", other_guard.release())
            .await
            .expect("released"),
        "still the other client's"
    );
    drop(guard);
    within(NO_HANG, "the heal", members.heal()).await.expect("healed");
}

/// The other client waits for `name` until `give_up`. Its own session can end meanwhile (a
/// member of the majority side stops serving during an election, or a loaded machine delays
/// the leader's answers past its session): its wait then fails with `Unavailable`, and it
/// waits again. What the case measures is only when it gets the lock.
async fn acquire_on_the_majority(
    other: &LockClient,
    name: &distlock_core::LockName,
    opts: &AcquireOptions,
    give_up: Instant,
) -> (Instant, LockGuard) {
    loop {
        let wait = opts
            .clone()
            .wait_for(give_up.saturating_duration_since(Instant::now()));
        match other.acquire_with(name, &wait).await {
            Ok(guard) => return (Instant::now(), guard),
            Err(Error::Unavailable { .. }) if Instant::now() < give_up => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the other client acquires on the majority side: {e}"),
        }
    }
}

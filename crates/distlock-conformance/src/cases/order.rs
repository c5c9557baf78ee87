//! Arrival order: on a store with its own FIFO queue, waiters for a lock and for a
//! semaphore's permit are served in the order they arrived.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, Fairness, LockClient};

use super::wakeup::Waited;
use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::observed::Observed;
use crate::Ctx;

/// How many clients wait in line.
const WAITERS: usize = 6;
/// The time between two arrivals: far longer than joining the store's queue takes.
const GAP: Duration = Duration::from_millis(500);

/// Case 49: With [`Fairness::Fifo`], waiters are served in arrival order: six clients that
/// start waiting one after another (each 500 ms after the one before had started) behind a
/// holder acquire in that order, for a lock and for a semaphore's one permit.
pub async fn c49_waiters_are_served_in_arrival_order(ctx: Ctx) -> Outcome {
    if ctx.caps().fairness != Fairness::Fifo {
        return ctx.skip(
            Reason::NoQueue,
            "the store keeps no arrival order: any waiter may win",
        );
    }
    served_in_order(&ctx, Waited::Lock).await;
    if !ctx.caps().semaphores {
        return ctx.partial(Reason::Semaphores, "no semaphores (the lock's order held)");
    }
    served_in_order(&ctx, Waited::Permit).await;
    Outcome::Passed
}

/// Six waiters for `waited` arrive one after another behind a holder and must be served in
/// that order.
async fn served_in_order(ctx: &Ctx, waited: Waited) {
    let name = ctx.name(&format!("order-{waited:?}"));
    let holder = ctx.client().await;
    let guard = waited
        .take(&holder, &name, &AcquireOptions::new().ttl(LONG_TTL))
        .await;
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(120));
    let (served_tx, mut served) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let attempts = Arc::new(AtomicUsize::new(0));
        let client = LockClient::new(Observed::counting(ctx.backend().await, attempts.clone()));
        let (name, opts, served_tx) = (name.clone(), opts.clone(), served_tx.clone());
        waiters.push(tokio::spawn(async move {
            let guard = waited.take(&client, &name, &opts).await;
            let _ = served_tx.send(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(guard.release().await.expect("released"));
        }));
        within(Duration::from_secs(10), "the waiter starts waiting", async {
            while attempts.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        tokio::time::sleep(GAP).await;
    }
    assert!(guard.release().await.expect("released"));
    let mut order = Vec::new();
    for _ in 0..WAITERS {
        let next = within(
            Duration::from_secs(10),
            "the next waiter in line acquires",
            served.recv(),
        )
        .await
        .expect("a waiter");
        order.push(next);
    }
    for waiter in waiters {
        within(Duration::from_secs(10), "the waiter ends", waiter)
            .await
            .expect("no waiter panicked");
    }
    ctx.note(format!("{waited:?}: served in the order {order:?}"));
    assert_eq!(
        order,
        (0..WAITERS).collect::<Vec<_>>(),
        "{waited:?}: waiters were not served in arrival order"
    );
}

//! Leader election: one leader at a time, terms that only go up, a value anyone can read,
//! observers that see every change, and a leader replaced when it resigns, dies or is cut off.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Expiry, Fencing, FencingToken, Leader, LockClient};
use futures::StreamExt;

use super::faults::{proxied, warm_up, NO_HANG};
use super::{take, within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::Ctx;

/// A bound on a handover that must happen at once (the machine may be loaded).
const HANDOVER: Duration = Duration::from_secs(5);

/// The skip of an election case on a backend that cannot publish a leader's value.
fn without_notes(ctx: &Ctx) -> Option<Outcome> {
    (!ctx.caps().notes).then(|| {
        ctx.skip(
            Reason::Notes,
            "no notes beside a hold, so no leader election (Capabilities::notes is false)",
        )
    })
}

/// A leader as a case records it: its value and term.
type Seen = (String, Option<FencingToken>);

/// Options of a candidate that waits as long as a case may.
fn candidate(ttl: Duration) -> AcquireOptions {
    AcquireOptions::new()
        .ttl(ttl)
        .wait_for(Duration::from_secs(60))
        .poll_interval(Duration::from_millis(5), Duration::from_millis(100))
}

/// Asserts that each term is above the one before, on a store that fences.
fn assert_terms_increase(ctx: &Ctx, terms: &[Option<FencingToken>], what: &str) {
    if ctx.caps().fencing == Fencing::Monotonic {
        assert!(
            terms.windows(2).all(|w| w[0].is_some() && w[0] < w[1]),
            "{what}: terms do not strictly increase: {terms:?}"
        );
    }
}

/// Case 56: Four candidates campaign four times each: never two leaders at once (a shared
/// counter of leaders in office), terms strictly increase from leader to leader on a store
/// that fences, and a client that never campaigns reads each leader's value and term
/// (`leader()`) while it leads, and no leader once the last has resigned. A resigned leader is
/// replaced by a waiting candidate at once; a leader that died (its hold neither renewed nor
/// released: TTL stores; its session ended: session stores) within its TTL plus a bound.
pub async fn c56_one_leader_at_a_time(ctx: Ctx) -> Outcome {
    if let Some(skip) = without_notes(&ctx) {
        return skip;
    }
    const CANDIDATES: usize = 4;
    const ROUNDS: usize = 4;
    let name = ctx.name("election");
    let watcher = ctx.client().await.election(&name).expect("elections");
    assert_eq!(
        watcher.leader().await.expect("works"),
        None,
        "a leader before any campaign"
    );
    let in_office = Arc::new(AtomicUsize::new(0));
    let terms: Arc<Mutex<Vec<Option<FencingToken>>>> = Arc::default();
    let mut workers = Vec::new();
    for c in 0..CANDIDATES {
        let election = ctx.client().await.election(&name).expect("elections");
        let (in_office, terms, watcher) = (in_office.clone(), terms.clone(), watcher.clone());
        let opts = candidate(LONG_TTL);
        workers.push(tokio::spawn(async move {
            for r in 0..ROUNDS {
                let value = format!("candidate-{c}-round-{r}");
                let leadership = election
                    .campaign_with(value.clone(), &opts)
                    .await
                    .unwrap_or_else(|e| panic!("{value} campaigns: {e}"));
                assert_eq!(
                    in_office.fetch_add(1, Ordering::SeqCst),
                    0,
                    "{value} leads beside another leader"
                );
                terms
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(leadership.term());
                let seen = watcher
                    .leader()
                    .await
                    .expect("works")
                    .expect("a leader in office");
                assert_eq!(seen.value, value, "another value read while {value} leads");
                assert_eq!(
                    seen.term,
                    leadership.term(),
                    "another term read while {value} leads"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
                in_office.fetch_sub(1, Ordering::SeqCst);
                assert!(leadership.resign().await.expect("works"), "{value} still led");
            }
        }));
    }
    within(Duration::from_secs(90), "every candidate's campaigns", async {
        for worker in workers {
            worker.await.expect("a candidate finished");
        }
    })
    .await;
    let terms = terms.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert_eq!(terms.len(), CANDIDATES * ROUNDS);
    assert_terms_increase(&ctx, &terms, "leaders one after another");
    assert_eq!(
        watcher.leader().await.expect("works"),
        None,
        "a leader after all resigned"
    );

    // A resigned leader is replaced at once by a waiting candidate.
    let (first, second) = (
        ctx.client().await.election(&name).expect("elections"),
        ctx.client().await.election(&name).expect("elections"),
    );
    let leader = first
        .campaign_with("resigns", &candidate(LONG_TTL))
        .await
        .expect("leads");
    let next = tokio::spawn(async move {
        let leadership = second.campaign_with("follows", &candidate(LONG_TTL)).await;
        (Instant::now(), leadership)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!next.is_finished(), "a second leader beside the first");
    let resigned_at = Instant::now();
    assert!(leader.resign().await.expect("works"));
    let (led_at, follower) = within(HANDOVER, "the waiting candidate leads", next)
        .await
        .expect("joined");
    let follower = follower.expect("leads");
    ctx.note(format!(
        "a resigned leader was replaced in {:?}",
        led_at - resigned_at
    ));
    let seen = watcher.leader().await.expect("works").expect("a leader");
    assert_eq!(seen.value, "follows");
    assert!(follower.resign().await.expect("works"));

    // A dead leader: its hold is neither renewed nor released (its process is gone).
    let ttl = ctx.short_ttl();
    let dead = ctx.backend().await;
    let lease = take(&*dead, &name, ttl).await;
    assert!(
        dead.set_note(&lease, "dies").await.expect("works"),
        "the note of a live hold"
    );
    assert_eq!(
        watcher.leader().await.expect("works").map(|l| l.value),
        Some("dies".to_owned())
    );
    let died_at = Instant::now();
    if ctx.caps().expiry == Expiry::Session {
        drop(dead); // ends the leader's session
    }
    let heir = ctx.client().await.election(&name).expect("elections");
    let limit = ttl * 2 + Duration::from_secs(10);
    let heir = within(
        limit,
        "a candidate replaces a dead leader",
        heir.campaign_with("heir", &candidate(LONG_TTL)),
    )
    .await
    .expect("leads");
    ctx.note(format!(
        "a dead leader (TTL {ttl:?}) was replaced after {:?}",
        died_at.elapsed()
    ));
    let seen = watcher.leader().await.expect("works").expect("a leader");
    assert_eq!(seen.value, "heir");
    if ctx.caps().fencing == Fencing::Monotonic {
        assert!(
            seen.term > lease.fencing_token(),
            "the heir's term is not above the dead leader's"
        );
    }
    assert!(heir.resign().await.expect("works"));
    Outcome::Passed
}

/// Case 57: Two observers (clients that never campaign) see every change of leader in order,
/// while three candidates campaigning at once each lead for 300 ms: each observer's first
/// three changes are the leaders in the order they took office, with the same terms.
pub async fn c57_observers_see_every_leader_in_order(ctx: Ctx) -> Outcome {
    if let Some(skip) = without_notes(&ctx) {
        return skip;
    }
    const CANDIDATES: usize = 3;
    const TENURE: Duration = Duration::from_millis(300);
    let name = ctx.name("observed");
    let mut observers = Vec::new();
    for _ in 0..2 {
        observers.push(ctx.client().await.election(&name).expect("elections").observe());
    }
    let log: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let mut candidates = Vec::new();
    for c in 0..CANDIDATES {
        let election = ctx.client().await.election(&name).expect("elections");
        let log = log.clone();
        candidates.push(tokio::spawn(async move {
            let value = format!("candidate-{c}");
            let leadership = election
                .campaign_with(value.clone(), &candidate(LONG_TTL))
                .await
                .unwrap_or_else(|e| panic!("{value} campaigns: {e}"));
            log.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((value, leadership.term()));
            tokio::time::sleep(TENURE).await;
            assert!(leadership.resign().await.expect("works"));
        }));
    }
    let seen = futures::future::join_all(observers.into_iter().map(|observer| {
        within(NO_HANG, "an observer sees three leaders", async move {
            observer
                .take(CANDIDATES)
                .map(|change| {
                    let leader: Leader = change.expect("the observer reads the leader");
                    (leader.value, leader.term)
                })
                .collect::<Vec<_>>()
                .await
        })
    }))
    .await;
    within(NO_HANG, "every candidate leads once", async {
        for candidate in candidates {
            candidate.await.expect("a candidate finished");
        }
    })
    .await;
    let log = log.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let terms: Vec<_> = log.iter().map(|(_, term)| *term).collect();
    assert_terms_increase(&ctx, &terms, "leaders in office");
    for (i, changes) in seen.iter().enumerate() {
        assert_eq!(
            changes, &log,
            "observer {i} saw other changes than the leaders in office"
        );
    }
    ctx.note(format!("both observers saw {} leaders in order", log.len()));
    Outcome::Passed
}

/// Case 58: A leader behind a fault proxy is cut off silently (no RST, no FIN) while another
/// candidate waits: the leader's lost signal fires before the other candidate leads, and a
/// client that never campaigns then reads the new leader.
pub async fn c58_cut_off_leader_hears_of_loss_first(ctx: Ctx) -> Outcome {
    if let Some(skip) = without_notes(&ctx) {
        return skip;
    }
    let (proxied, faults) = match proxied(&ctx).await {
        Ok(pair) => pair,
        Err(skip) => return skip,
    };
    warm_up(&ctx, &proxied, "leader").await;
    let op = ctx.fixture().operation_timeout();
    let ttl = (op * 3).max(ctx.short_ttl());
    let name = ctx.name("cut-off-leader");
    let leader = proxied
        .election(&name)
        .expect("elections")
        .campaign_with("cut off", &AcquireOptions::new().ttl(ttl))
        .await
        .expect("leads");
    let other: LockClient = ctx.client().await;
    let watcher = ctx.client().await.election(&name).expect("elections");
    let cut = Instant::now();
    faults.blackhole();
    let heir = {
        let election = other.election(&name).expect("elections");
        let opts = AcquireOptions::new().ttl(LONG_TTL).wait_for(NO_HANG);
        tokio::spawn(async move {
            let leadership = election.campaign_with("heir", &opts).await;
            (Instant::now(), leadership)
        })
    };
    let reason = within(NO_HANG, "the cut-off leader hears of its loss", leader.lost()).await;
    let lost_at = Instant::now();
    let (led_at, heir) = within(NO_HANG, "the other candidate leads", heir)
        .await
        .expect("joined");
    let heir = heir.expect("the other candidate leads in the end");
    ctx.note(format!(
        "cut off at 0: the leader's lost signal at {:?} ({reason}), the next leader at {:?}",
        lost_at - cut,
        led_at - cut
    ));
    assert!(
        lost_at < led_at,
        "the cut-off leader heard of its loss {:?} AFTER another took office: two leaders",
        lost_at - led_at
    );
    let seen = watcher.leader().await.expect("works").expect("a leader");
    assert_eq!(seen.value, "heir");
    if ctx.caps().fencing == Fencing::Monotonic {
        assert!(
            seen.term > leader.term(),
            "the heir's term is not above the cut-off leader's"
        );
    }
    faults.heal();
    drop(leader);
    assert!(heir.resign().await.expect("works"));
    Outcome::Passed
}

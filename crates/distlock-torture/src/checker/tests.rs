//! The checker's rules, each on a hand-made history.

use super::*;
use crate::history::{ClientEvent, FaultRecord, HoldKind, Stamped, Write};

fn fault(kind: &str, start: Nanos, end: Nanos) -> FaultRecord {
    FaultRecord {
        kind: kind.to_owned(),
        target: "test".to_owned(),
        start,
        end,
        injected: true,
        lost_at: None,
    }
}

const MS: Nanos = 1_000_000;

fn judgement(monotonic: bool) -> Judgement {
    Judgement {
        monotonic_fencing: monotonic,
        documented_losses: HashSet::from(["server-kill".to_owned()]),
        hot: "hot".to_owned(),
        recovery_bound: 1000 * MS,
        kinds: Vec::new(),
        permits: 2,
        in_flight: MS,
    }
}

fn ev(at: Nanos, client: u32, event: ClientEvent) -> Stamped<ClientEvent> {
    Stamped { at, client, event }
}

fn hold(h: &mut History, client: u32, grant: &str, token: u64, from: Nanos, until: Nanos) {
    hold_of(h, HoldKind::Exclusive, client, grant, token, (from, until));
}

/// A hold of `kind` of the name `hot`, believed from `during.0` to `during.1`.
fn hold_of(h: &mut History, kind: HoldKind, client: u32, grant: &str, token: u64, during: (Nanos, Nanos)) {
    let (from, until) = during;
    h.events.push(ev(
        from - MS,
        client,
        ClientEvent::AcquireInvoked { name: "hot".into() },
    ));
    h.events.push(ev(
        from,
        client,
        ClientEvent::Granted {
            name: "hot".into(),
            grant: grant.into(),
            token: Some(token),
            kind,
        },
    ));
    h.events
        .push(ev(until, client, ClientEvent::Affirmed { grant: grant.into() }));
    h.events.push(ev(
        until + MS,
        client,
        ClientEvent::ReleaseInvoked {
            grant: grant.into(),
            believed: false,
        },
    ));
}

fn write(h: &mut History, at: Nanos, grant: &str, token: u64, accepted: bool) {
    h.writes.push(Write {
        at,
        name: "hot".into(),
        grant: grant.into(),
        token: Some(token),
        kind: HoldKind::Exclusive,
        accepted,
    });
}

#[test]
fn a_clean_history_passes() {
    let mut h = History::default();
    hold(&mut h, 1, "a", 1, 10 * MS, 20 * MS);
    hold(&mut h, 2, "b", 2, 30 * MS, 40 * MS);
    write(&mut h, 15 * MS, "a", 1, true);
    write(&mut h, 35 * MS, "b", 2, true);
    write(&mut h, 36 * MS, "a", 1, false);
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(true), &[], &[]);
    assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
    assert_eq!(v.acquisitions, 2);
    assert_eq!(v.rows[0].fenced_writes_rejected, 1);
}

#[test]
fn overlapping_beliefs_are_two_holders() {
    let mut h = History::default();
    hold(&mut h, 1, "a", 1, 10 * MS, 50 * MS);
    hold(&mut h, 2, "b", 2, 30 * MS, 60 * MS);
    let v = check(&h, &judgement(true), &[], &[]);
    let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    assert_eq!(kinds, ["exclusion"]);
}

#[test]
fn an_overlap_under_a_documented_fault_is_counted_not_failed() {
    // a was granted before the restart, b after it: the restart lost a's lock.
    let mut h = History::default();
    h.faults.push(fault("server-kill", 20 * MS, 21 * MS));
    hold(&mut h, 1, "a", 1, 10 * MS, 50 * MS);
    hold(&mut h, 2, "b", 2, 30 * MS, 60 * MS);
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(true), &[], &[]);
    assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
    let row = v.rows.iter().find(|r| r.fault == "server-kill").expect("a row");
    assert_eq!(row.exclusion_violations, 1);
    assert!(row.documented_loss);
}

#[test]
fn an_overlap_is_measured_with_when_the_first_holder_was_told() {
    let mut h = History::default();
    // A failover between a's grant and b's, another between b's and c's.
    h.faults.push(fault("failover", 20 * MS, 21 * MS));
    h.faults.push(fault("failover", 52 * MS, 53 * MS));
    hold(&mut h, 1, "a", 1, 10 * MS, 50 * MS);
    hold(&mut h, 2, "b", 2, 30 * MS, 60 * MS);
    h.events.push(ev(
        45 * MS,
        1,
        ClientEvent::Lost {
            grant: "a".into(),
            reason: "not owned".into(),
        },
    ));
    hold(&mut h, 3, "c", 3, 55 * MS, 70 * MS);
    h.stopped = 100 * MS;
    let mut j = judgement(true);
    j.documented_losses = HashSet::from(["failover".to_owned()]);
    let v = check(&h, &j, &[], &[]);
    assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
    let row = v.rows.iter().find(|r| r.fault == "failover").expect("a row");
    assert_eq!(row.exclusion_violations, 2);
    // a (believed until 50) overlaps b (granted at 30) by 20 ms and was told 15 ms after b's
    // grant; b (believed until 60) overlaps c (granted at 55) by 5 ms and was never told.
    assert_eq!(row.overlap_max_ms, Some(20.0));
    assert_eq!(row.overlap_p50_ms, Some(20.0));
    assert_eq!(row.told_after_max_ms, Some(15.0));
    assert_eq!(row.told_lost, 1);
    assert_eq!(row.told_lost_but_held, 0);
    let never: Vec<_> = v.findings.iter().filter(|f| f.told_after_ms.is_none()).collect();
    assert_eq!(never.len(), 1, "{:?}", v.findings);
    assert_eq!(never[0].overlap_ms, Some(5.0));
}

#[test]
fn a_repeated_token_lets_a_stale_write_through() {
    let mut h = History::default();
    hold(&mut h, 1, "a", 7, 10 * MS, 20 * MS);
    hold(&mut h, 2, "b", 7, 30 * MS, 40 * MS);
    write(&mut h, 35 * MS, "b", 7, true);
    write(&mut h, 45 * MS, "a", 7, true);
    let v = check(&h, &judgement(true), &[], &[]);
    let kinds: HashSet<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    assert!(kinds.contains("stale-write"), "{kinds:?}");
    assert!(kinds.contains("repeated-token"), "{kinds:?}");
    assert!(kinds.contains("token-order"), "{kinds:?}");
}

#[test]
fn best_effort_fencing_counts_stale_writes_against_the_state_loss() {
    let mut h = History::default();
    // The restart between a's grant and b's reset the counter.
    h.faults.push(fault("server-kill", 22 * MS, 23 * MS));
    h.faults.push(fault("holder-kill", 25 * MS, 25 * MS));
    hold(&mut h, 1, "a", 7, 10 * MS, 20 * MS);
    hold(&mut h, 2, "b", 7, 30 * MS, 40 * MS);
    write(&mut h, 35 * MS, "b", 7, true);
    write(&mut h, 45 * MS, "a", 7, true);
    let v = check(&h, &judgement(false), &[], &[]);
    assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
    let stale: Vec<&str> = v
        .findings
        .iter()
        .filter(|f| f.kind == "stale-write")
        .map(|f| f.fault.as_str())
        .collect();
    assert_eq!(stale, ["server-kill"]);
    // Monotonic fencing declares it impossible.
    let v = check(&h, &judgement(true), &[], &[]);
    assert!(v.violations().any(|f| f.kind == "stale-write"));
}

#[test]
fn a_slow_recovery_and_a_lock_left_held_fail_liveness() {
    let mut h = History::default();
    h.faults.push(fault("holder-kill", 10 * MS, 10 * MS));
    hold(&mut h, 2, "b", 2, 2000 * MS, 2100 * MS);
    h.stopped = 3000 * MS;
    let v = check(&h, &judgement(true), &["hot".to_owned()], &[]);
    let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    assert_eq!(kinds, ["liveness", "left-held"]);
    let row = v.rows.iter().find(|r| r.fault == "holder-kill").expect("a row");
    assert_eq!(row.recovery_max_ms, Some(1990.0));
}

#[test]
fn a_grant_during_the_fault_is_an_immediate_recovery() {
    let mut h = History::default();
    h.faults.push(fault("holder-pause", 10 * MS, 900 * MS));
    hold(&mut h, 2, "b", 2, 500 * MS, 600 * MS);
    h.stopped = 3000 * MS;
    let v = check(&h, &judgement(true), &[], &[]);
    assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
    let row = v.rows.iter().find(|r| r.fault == "holder-pause").expect("a row");
    assert_eq!(row.recovery_max_ms, Some(0.0));
}

#[test]
fn more_permits_at_once_than_the_semaphore_has_are_found() {
    // Two permits: a and b overlap (allowed); c comes while both still believe.
    let mut h = History::default();
    hold_of(&mut h, HoldKind::Permit, 1, "a", 1, (10 * MS, 50 * MS));
    hold_of(&mut h, HoldKind::Permit, 2, "b", 2, (20 * MS, 60 * MS));
    hold_of(&mut h, HoldKind::Permit, 3, "c", 3, (30 * MS, 40 * MS));
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(true), &[], &[]);
    let found: Vec<&Finding> = v.violations().collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, "exclusion");
    // All three held from 30 until a stopped believing at 50.
    assert_eq!(found[0].overlap_ms, Some(20.0));
    for holder in [
        "a (client 1)",
        "b (client 2)",
        "c (client 3)",
        "3 holders at once",
    ] {
        assert!(found[0].detail.contains(holder), "{}", found[0].detail);
    }
    // With three permits, the same history is fine.
    let mut three = judgement(true);
    three.permits = 3;
    let v = check(&h, &three, &[], &[]);
    assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
}

#[test]
fn as_many_permits_at_once_as_the_semaphore_has_pass() {
    // Two permits: never more than two believed at one instant (c starts as a stops).
    let mut h = History::default();
    hold_of(&mut h, HoldKind::Permit, 1, "a", 1, (10 * MS, 30 * MS));
    hold_of(&mut h, HoldKind::Permit, 2, "b", 2, (20 * MS, 60 * MS));
    hold_of(&mut h, HoldKind::Permit, 3, "c", 3, (31 * MS, 70 * MS));
    hold_of(&mut h, HoldKind::Permit, 4, "d", 4, (61 * MS, 80 * MS));
    write_of(&mut h, 25 * MS, "a", 1, HoldKind::Permit, true);
    write_of(&mut h, 35 * MS, "c", 3, HoldKind::Permit, true);
    // b writes after c and d: an earlier permit rightly outlives later ones.
    write_of(&mut h, 40 * MS, "b", 2, HoldKind::Permit, true);
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(true), &[], &[]);
    assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
    assert_eq!(v.acquisitions, 4);
}

#[test]
fn a_permit_token_from_two_holds_is_a_stale_write() {
    let mut h = History::default();
    hold_of(&mut h, HoldKind::Permit, 1, "a", 5, (10 * MS, 20 * MS));
    hold_of(&mut h, HoldKind::Permit, 2, "b", 5, (15 * MS, 30 * MS));
    write_of(&mut h, 16 * MS, "a", 5, HoldKind::Permit, true);
    write_of(&mut h, 17 * MS, "b", 5, HoldKind::Permit, true);
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(true), &[], &[]);
    let kinds: HashSet<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    // b asked after a was granted: its token is out of order as well.
    assert_eq!(
        kinds,
        HashSet::from(["stale-write", "repeated-token", "token-order"]),
        "{:?}",
        v.findings
    );
}

#[test]
fn a_writer_beside_a_reader_is_found_and_readers_together_are_not() {
    // Two readers overlap freely.
    let mut h = History::default();
    hold_of(&mut h, HoldKind::Read, 1, "r1", 1, (10 * MS, 50 * MS));
    hold_of(&mut h, HoldKind::Read, 2, "r2", 2, (20 * MS, 60 * MS));
    hold_of(&mut h, HoldKind::Write, 3, "w1", 3, (61 * MS, 70 * MS));
    write_of(&mut h, 30 * MS, "r1", 1, HoldKind::Read, true);
    write_of(&mut h, 31 * MS, "r2", 2, HoldKind::Read, true);
    write_of(&mut h, 65 * MS, "w1", 3, HoldKind::Write, true);
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(true), &[], &[]);
    assert_eq!(v.violations().count(), 0, "{:?}", v.findings);

    // A writer granted while a reader still believes.
    let mut h = History::default();
    hold_of(&mut h, HoldKind::Read, 1, "r1", 1, (10 * MS, 50 * MS));
    hold_of(&mut h, HoldKind::Write, 2, "w1", 2, (40 * MS, 60 * MS));
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(true), &[], &[]);
    let found: Vec<&Finding> = v.violations().collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, "exclusion");
    assert_eq!(found[0].overlap_ms, Some(10.0));
    assert!(found[0].detail.contains("the write lock"), "{}", found[0].detail);

    // A reader granted while a writer still believes, and two writers at once.
    let mut h = History::default();
    hold_of(&mut h, HoldKind::Write, 1, "w1", 1, (10 * MS, 50 * MS));
    hold_of(&mut h, HoldKind::Read, 2, "r1", 2, (20 * MS, 30 * MS));
    hold_of(&mut h, HoldKind::Write, 3, "w2", 3, (45 * MS, 60 * MS));
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(true), &[], &[]);
    let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    assert_eq!(kinds, ["exclusion", "exclusion"], "{:?}", v.findings);
}

#[test]
fn a_token_of_a_read_and_a_write_is_checked_across_both() {
    // The writer's token is not above the reader's, granted before the writer asked.
    let mut h = History::default();
    hold_of(&mut h, HoldKind::Read, 1, "r1", 4, (10 * MS, 20 * MS));
    hold_of(&mut h, HoldKind::Write, 2, "w1", 4, (30 * MS, 40 * MS));
    write_of(&mut h, 15 * MS, "r1", 4, HoldKind::Read, true);
    write_of(&mut h, 35 * MS, "w1", 4, HoldKind::Write, true);
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(true), &[], &[]);
    let kinds: HashSet<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    assert_eq!(
        kinds,
        HashSet::from(["stale-write", "repeated-token", "token-order"]),
        "{:?}",
        v.findings
    );
}

// The narrowed exemptions: each history below was excused by the earlier rules.

#[test]
fn a_best_effort_stale_write_without_a_state_reset_is_a_violation() {
    // A holder kill resets nothing: the store kept its counter, so a token accepted from
    // two holds is a stale write as under monotonic fencing.
    let mut h = History::default();
    h.faults.push(fault("holder-kill", 25 * MS, 25 * MS));
    hold(&mut h, 1, "a", 7, 10 * MS, 20 * MS);
    hold(&mut h, 2, "b", 7, 30 * MS, 40 * MS);
    write(&mut h, 35 * MS, "b", 7, true);
    write(&mut h, 45 * MS, "a", 7, true);
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(false), &[], &[]);
    let kinds: HashSet<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    assert!(kinds.contains("stale-write"), "{:?}", v.findings);
}

#[test]
fn a_best_effort_stale_write_between_grants_after_the_reset_is_a_violation() {
    // The server restarted empty at 5 ms; both grants came after it: one state epoch.
    let mut h = History::default();
    h.faults.push(fault("server-kill", 5 * MS, 6 * MS));
    hold(&mut h, 1, "a", 7, 10 * MS, 20 * MS);
    hold(&mut h, 2, "b", 7, 30 * MS, 40 * MS);
    write(&mut h, 35 * MS, "b", 7, true);
    write(&mut h, 45 * MS, "a", 7, true);
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(false), &[], &[]);
    let kinds: HashSet<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    assert!(kinds.contains("stale-write"), "{:?}", v.findings);
}

#[test]
fn best_effort_tokens_are_ordered_within_one_state_epoch() {
    // No reset at all: a repeated token and one that went back are violations.
    let mut h = History::default();
    hold(&mut h, 1, "a", 7, 10 * MS, 20 * MS);
    hold(&mut h, 2, "b", 7, 30 * MS, 40 * MS);
    hold(&mut h, 3, "c", 3, 50 * MS, 60 * MS);
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(false), &[], &[]);
    let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    assert!(kinds.contains(&"repeated-token"), "{:?}", v.findings);
    assert!(kinds.contains(&"token-order"), "{:?}", v.findings);
    // Across a restart without persistence the counter may go back: not checked.
    let mut h = History::default();
    hold(&mut h, 1, "a", 7, 10 * MS, 20 * MS);
    h.faults.push(fault("server-kill", 25 * MS, 26 * MS));
    hold(&mut h, 2, "b", 7, 30 * MS, 40 * MS);
    hold(&mut h, 3, "c", 8, 50 * MS, 60 * MS);
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(false), &[], &[]);
    assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
}

#[test]
fn two_holders_both_granted_after_a_documented_fault_are_a_violation() {
    // The restart at 5 ms explains losing a lock granted before it, not two grants after it.
    let mut h = History::default();
    h.faults.push(fault("server-kill", 5 * MS, 6 * MS));
    hold(&mut h, 1, "a", 1, 10 * MS, 50 * MS);
    hold(&mut h, 2, "b", 2, 30 * MS, 60 * MS);
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(true), &[], &[]);
    let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    assert_eq!(kinds, ["exclusion"], "{:?}", v.findings);
}

#[test]
fn a_slow_recovery_after_a_documented_fault_is_a_violation() {
    // A documented loss excuses two holders, never a lock that stays unavailable.
    let mut h = History::default();
    h.faults.push(fault("server-kill", 10 * MS, 20 * MS));
    hold(&mut h, 2, "b", 2, 2000 * MS, 2100 * MS);
    h.stopped = 3000 * MS;
    let v = check(&h, &judgement(true), &[], &[]);
    let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    assert_eq!(kinds, ["liveness"], "{:?}", v.findings);
}

/// The grants of `h` as a backend without tokens gives them.
fn without_tokens(h: &mut History) {
    for stamped in &mut h.events {
        if let ClientEvent::Granted { token, .. } = &mut stamped.event {
            *token = None;
        }
    }
}

/// A write without a token (the resource accepts it whatever the order).
fn unfenced_write(h: &mut History, at: Nanos, grant: &str, kind: HoldKind) {
    h.writes.push(Write {
        at,
        name: "hot".into(),
        grant: grant.into(),
        token: None,
        kind,
        accepted: true,
    });
}

#[test]
fn a_write_without_a_token_after_the_next_holder_was_granted_is_stale() {
    // a last affirmed at 20 ms (then its process stopped); b was granted at 30 ms and
    // wrote; a's write landed at 45 ms, after b's grant: no token could stop it.
    let mut h = History::default();
    hold(&mut h, 1, "a", 0, 10 * MS, 20 * MS);
    hold(&mut h, 2, "b", 0, 30 * MS, 40 * MS);
    without_tokens(&mut h);
    unfenced_write(&mut h, 15 * MS, "a", HoldKind::Exclusive);
    unfenced_write(&mut h, 35 * MS, "b", HoldKind::Exclusive);
    unfenced_write(&mut h, 45 * MS, "a", HoldKind::Exclusive);
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(false), &[], &[]);
    let found: Vec<&Finding> = v.violations().collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, "stale-write");
    assert!(found[0].detail.contains("b (client 2)"), "{}", found[0].detail);
}

#[test]
fn a_permit_write_beside_as_many_later_permits_as_the_semaphore_has_is_found() {
    // Two permits: a believed until 20 ms; b and c were granted at 25 and 30 ms and still
    // believed at 45 ms, when a's write landed: three holders acted at once.
    let mut h = History::default();
    hold_of(&mut h, HoldKind::Permit, 1, "a", 1, (10 * MS, 20 * MS));
    hold_of(&mut h, HoldKind::Permit, 2, "b", 2, (25 * MS, 60 * MS));
    hold_of(&mut h, HoldKind::Permit, 3, "c", 3, (30 * MS, 60 * MS));
    write_of(&mut h, 15 * MS, "a", 1, HoldKind::Permit, true);
    write_of(&mut h, 45 * MS, "a", 1, HoldKind::Permit, true);
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(true), &[], &[]);
    let found: Vec<&Finding> = v.violations().collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, "stale-write");
    // With three permits it is allowed.
    let mut three = judgement(true);
    three.permits = 3;
    let v = check(&h, &three, &[], &[]);
    assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
}

fn write_of(h: &mut History, at: Nanos, grant: &str, token: u64, kind: HoldKind, accepted: bool) {
    h.writes.push(Write {
        at,
        name: "hot".into(),
        grant: grant.into(),
        token: Some(token),
        kind,
        accepted,
    });
}

#[test]
fn a_grant_found_lost_at_its_first_check_believed_nothing() {
    // A holder stopped between its acquire's return and the recording of the grant: the
    // grant is recorded when the process runs again, long after its lease ran out, and its
    // guard says lost at the first check (no affirmation). Two others hold meanwhile.
    let mut h = History::default();
    hold_of(&mut h, HoldKind::Permit, 1, "a", 2, (10 * MS, 60 * MS));
    hold_of(&mut h, HoldKind::Permit, 2, "b", 3, (20 * MS, 60 * MS));
    // It asked before the others were granted, and its acquire returned then.
    h.events
        .push(ev(5 * MS, 3, ClientEvent::AcquireInvoked { name: "hot".into() }));
    h.events.push(ev(
        40 * MS,
        3,
        ClientEvent::Granted {
            name: "hot".into(),
            grant: "late".into(),
            token: Some(1),
            kind: HoldKind::Permit,
        },
    ));
    h.events.push(ev(
        40 * MS,
        3,
        ClientEvent::Lost {
            grant: "late".into(),
            reason: "the lease expired before it was renewed".into(),
        },
    ));
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(false), &[], &[]);
    assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
    // Once it affirms, even at its grant's instant, it is a third holder of two permits.
    h.events
        .push(ev(40 * MS, 3, ClientEvent::Affirmed { grant: "late".into() }));
    let v = check(&h, &judgement(false), &[], &[]);
    let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    assert_eq!(kinds, ["exclusion"], "{:?}", v.findings);
}

#[test]
fn a_fault_scheduled_but_not_injected_fails_the_run() {
    let mut h = History::default();
    h.faults.push(fault("holder-pause", 10 * MS, 10 * MS));
    h.faults.push(FaultRecord {
        injected: false,
        ..fault("holder-pause", 20 * MS, 20 * MS)
    });
    hold(&mut h, 1, "a", 1, 12 * MS, 14 * MS);
    hold(&mut h, 1, "b", 2, 22 * MS, 24 * MS);
    h.stopped = 100 * MS;
    let v = check(&h, &judgement(true), &[], &[]);
    let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    assert_eq!(kinds, ["fault-missed"], "{:?}", v.findings);
    let row = v.rows.iter().find(|r| r.fault == "holder-pause").expect("a row");
    assert_eq!((row.faults, row.scheduled), (1, 2));
}

#[test]
fn two_holders_both_granted_well_inside_a_failover_after_its_kill_are_a_violation() {
    // The failover killed the master at 20 ms and took until 900 ms to finish; a and b were
    // both granted by the promoted replica long after the kill: one state epoch.
    let mut h = History::default();
    h.faults.push(fault("failover", 20 * MS, 900 * MS));
    hold(&mut h, 1, "a", 1, 300 * MS, 500 * MS);
    hold(&mut h, 2, "b", 2, 400 * MS, 600 * MS);
    h.stopped = 1000 * MS;
    let mut j = judgement(true);
    j.documented_losses = HashSet::from(["failover".to_owned()]);
    let v = check(&h, &j, &[], &[]);
    let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    assert_eq!(kinds, ["exclusion"], "{:?}", v.findings);
}

/// A clock jump back planned from 20 ms to 120 ms whose restore really began at 2000 ms (the
/// harness got to it late), the loss recorded there.
fn late_restore() -> FaultRecord {
    FaultRecord {
        lost_at: Some(2000 * MS),
        ..fault("clock-jump-back", 20 * MS, 2001 * MS)
    }
}

fn clock_judgement() -> Judgement {
    let mut j = judgement(true);
    j.documented_losses = HashSet::from(["clock-jump-back".to_owned()]);
    j
}

#[test]
fn a_grant_after_a_clock_step_that_landed_late_is_attributed_to_it() {
    // a was granted on the stepped-back clock (its lease already over on the true one), b after
    // the restore really began: the restore lost a's lock, long after the planned instant.
    let mut h = History::default();
    h.faults.push(late_restore());
    hold(&mut h, 1, "a", 1, 1500 * MS, 2300 * MS);
    hold(&mut h, 2, "b", 2, 2100 * MS, 2400 * MS);
    h.stopped = 3000 * MS;
    let v = check(&h, &clock_judgement(), &[], &[]);
    assert_eq!(v.violations().count(), 0, "{:?}", v.findings);
    let row = v
        .rows
        .iter()
        .find(|r| r.fault == "clock-jump-back")
        .expect("a row");
    assert_eq!(row.exclusion_violations, 1);
    assert!(
        v.findings[0].detail.contains("straddle the clock-jump-back"),
        "{:?}",
        v.findings
    );
}

#[test]
fn two_holders_both_granted_before_a_late_clock_step_are_a_violation() {
    // Both grants came before the restore began: the step explains neither.
    let mut h = History::default();
    h.faults.push(late_restore());
    hold(&mut h, 1, "a", 1, 1500 * MS, 1900 * MS);
    hold(&mut h, 2, "b", 2, 1700 * MS, 1950 * MS);
    h.stopped = 3000 * MS;
    let v = check(&h, &clock_judgement(), &[], &[]);
    let kinds: Vec<&str> = v.violations().map(|f| f.kind.as_str()).collect();
    assert_eq!(kinds, ["exclusion"], "{:?}", v.findings);
}

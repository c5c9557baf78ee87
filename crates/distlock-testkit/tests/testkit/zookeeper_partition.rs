//! The ensemble's partition API against real ZooKeeper servers (install them with
//! `scripts/install-test-deps`): what each side of a partition between members does, as
//! `srvr` reports it, polled every 100 ms. Each timeline is printed (`--nocapture`).

use std::thread;
use std::time::{Duration, Instant};

use distlock_testkit::{four_letter_word, ZkMode, ZooKeeperEnsemble, ZooKeeperOptions};

/// The harness's default tick (500 ms) and syncLimit (5 ticks): a member gives up on a
/// silent peer after 2.5 s.
const SYNC: Duration = Duration::from_millis(2500);
/// Generous: an election on a loaded machine, after `SYNC`.
const LIMIT: Duration = Duration::from_secs(30);

fn ensemble() -> ZooKeeperEnsemble {
    let options = ZooKeeperOptions {
        peer_proxies: true,
        ..ZooKeeperOptions::default()
    };
    ZooKeeperEnsemble::start_with(options).expect("the ensemble starts with proxies between its members")
}

/// Every member's mode (`None`: not serving).
fn modes(ensemble: &ZooKeeperEnsemble) -> Vec<Option<ZkMode>> {
    ensemble.nodes().iter().map(|n| n.mode()).collect()
}

/// Polls until `done` holds of the modes, printing each change with its time since `since`.
fn watch(
    ensemble: &ZooKeeperEnsemble,
    since: Instant,
    what: &str,
    done: impl Fn(&[Option<ZkMode>]) -> bool,
) -> Duration {
    let mut last = None;
    loop {
        let now = modes(ensemble);
        if last.as_ref() != Some(&now) {
            eprintln!("+{:?}: {now:?}", since.elapsed());
            last = Some(now.clone());
        }
        if done(&now) {
            return since.elapsed();
        }
        assert!(since.elapsed() < LIMIT, "{what}: not after {LIMIT:?} ({now:?})");
        thread::sleep(Duration::from_millis(100));
    }
}

fn heal_and_wait(ensemble: &ZooKeeperEnsemble) {
    ensemble.heal_links().expect("healed");
    let healed = Instant::now();
    watch(
        ensemble,
        healed,
        "every member serves again after the heal",
        |m| m.iter().all(Option::is_some) && m.iter().filter(|m| **m == Some(ZkMode::Leader)).count() == 1,
    );
}

/// The isolated leader goes LOOKING (stops serving: `srvr` answers that it is not serving)
/// once `syncLimit` passes without a quorum of followers; the other two elect a leader of
/// their own. Healed, the old leader rejoins as a follower.
#[test]
fn isolated_leader_steps_down_and_the_majority_elects_another() {
    let ensemble = ensemble();
    let leader = ensemble.wait_for_leader(LIMIT).expect("a leader");
    ensemble.isolate(leader).expect("isolated");
    let cut = Instant::now();
    let elected = watch(&ensemble, cut, "a new leader on the majority side", |m| {
        (0..3).any(|i| i != leader && m[i] == Some(ZkMode::Leader))
    });
    let stepped_down = watch(&ensemble, cut, "the old leader stops serving", |m| {
        m[leader].is_none()
    });
    let srvr = four_letter_word(ensemble.node(leader).addr(), "srvr", Duration::from_secs(1))
        .unwrap_or_else(|e| e.to_string());
    eprintln!(
        "leader {leader} isolated: a new leader at +{elected:?}, the old one not serving at \
         +{stepped_down:?} (srvr: {:?})",
        srvr.lines().next()
    );
    assert!(
        stepped_down >= SYNC / 2,
        "the old leader stopped serving at once (+{stepped_down:?}): it should keep its \
         followers for syncLimit"
    );
    heal_and_wait(&ensemble);
    assert_ne!(ensemble.leader(), Some(leader), "the new leader stays leader");
}

/// A follower isolated alone stops serving after `syncLimit`; the leader keeps its quorum
/// with the other follower. One direction cut (the leader's words no longer reach a
/// follower, the follower's still reach the leader) does the same to that follower. A split
/// of the follower as a minority is the same partition as its isolation.
#[test]
fn cut_off_follower_stops_serving_and_the_leader_stays() {
    let ensemble = ensemble();
    let leader = ensemble.wait_for_leader(LIMIT).expect("a leader");
    let follower = (leader + 1) % 3;

    ensemble.split(&[follower]).expect("split");
    let cut = Instant::now();
    let stopped = watch(&ensemble, cut, "the follower stops serving", |m| {
        m[follower].is_none()
    });
    assert_eq!(
        ensemble.node(leader).mode(),
        Some(ZkMode::Leader),
        "the leader keeps its quorum"
    );
    eprintln!("follower {follower} split off: not serving at +{stopped:?}");
    heal_and_wait(&ensemble);

    let leader = ensemble.wait_for_leader(LIMIT).expect("a leader");
    let follower = (leader + 1) % 3;
    ensemble.cut_one_way(leader, follower).expect("cut one way");
    let cut = Instant::now();
    let stopped = watch(
        &ensemble,
        cut,
        "the follower that no longer hears its leader stops serving",
        |m| m[follower].is_none(),
    );
    eprintln!("leader {leader} → follower {follower} cut: the follower not serving at +{stopped:?}");
    heal_and_wait(&ensemble);

    let leader = ensemble.wait_for_leader(LIMIT).expect("a leader");
    let follower = (leader + 1) % 3;
    ensemble.cut_one_way(follower, leader).expect("cut one way");
    let cut = Instant::now();
    let stopped = watch(
        &ensemble,
        cut,
        "the follower whose words no longer reach its leader stops serving",
        |m| m[follower].is_none(),
    );
    eprintln!("follower {follower} → leader {leader} cut: the follower not serving at +{stopped:?}");
    heal_and_wait(&ensemble);
}

#[test]
fn bad_partitions_are_errors() {
    let plain = ZooKeeperEnsemble::start().expect("the ensemble starts");
    assert!(plain.isolate(0).is_err(), "no proxies between the members");
    drop(plain);
    let ensemble = ensemble();
    assert!(ensemble.isolate(3).is_err());
    assert!(ensemble.split(&[]).is_err());
    assert!(ensemble.cut_one_way(1, 1).is_err());
}

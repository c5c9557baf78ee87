//! One tiny run of the benchmark (a few iterations of everything) against a `redis-server` of
//! the test's own, so the measurements of every library keep working.

use std::time::Duration;

use distlock_peer_bench::measure::Waiting;
use distlock_peer_bench::{run, Settings};
use distlock_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_run_measures_every_library() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("joined")
        .expect("redis-server starts (run scripts/install-test-deps)");
    let settings = Settings {
        rounds: 2,
        iterations: 5,
        handoffs: 2,
        hot_acquisitions: 32,
    };
    let report = run(&server.url(), &settings, &|_| {})
        .await
        .expect("the run completes");

    assert!(report.two_pings > Duration::ZERO);
    // The parked floors: two PINGs after an idle pause, and a PUBLISH waking a parked
    // subscriber that then makes one round trip (at least that round trip).
    assert!(report.two_pings_after_pause > Duration::ZERO);
    assert!(
        report.notify_then_act > Duration::ZERO,
        "notify-then-act: {:?}",
        report.notify_then_act
    );
    for tag in ["distlock", "rslock", "dlr"] {
        let own = report.row(tag, Waiting::Blocking).expect("a row per library");
        let (p50, p99) = own.acquire_release.expect("acquire+release measured");
        assert!(
            Duration::ZERO < p50 && p50 <= p99,
            "{tag}: p50 {p50:?}, p99 {p99:?}"
        );
        // Handoff and hot lock by the library's own blocking acquire, or in a labelled try loop.
        let waited = report
            .rows
            .iter()
            .find(|row| row.tag == tag && row.handoff.is_some())
            .expect("a handoff figure");
        assert!(
            waited.hot_per_s.is_some_and(|per_s| per_s > 0.0),
            "{tag}: {waited:?}"
        );
    }
    let ours = report.row("distlock", Waiting::Blocking).expect("distlock's row");
    assert!(ours.handoff.is_some(), "distlock's blocking acquire waits");
    assert!(report.distlock_hot_over_rslock().is_some());

    let table = report.to_markdown();
    for label in [
        "two `PING`s on a plain redis-rs connection",
        "two `PING`s after an idle pause",
        "notify-then-act on plain redis-rs",
        "÷ notify-then-act",
        "× notify-then-act p50",
        "distlock 0.1",
        "rslock 0.10",
        "distributed-lock-redis 0.2",
    ] {
        assert!(table.contains(label), "{label} missing from\n{table}");
    }
}

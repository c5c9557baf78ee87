//! Runs the examples as tests, so they cannot rot.

#[allow(dead_code)]
#[path = "../examples/quickstart.rs"]
mod quickstart;

#[allow(dead_code)]
#[path = "../examples/fencing.rs"]
mod fencing;

#[allow(dead_code)]
#[path = "../examples/lost_lock.rs"]
mod lost_lock;

#[test]
fn quickstart_runs_and_counts_exactly() {
    quickstart::main().expect("the quickstart example succeeds");
}

#[tokio::test]
async fn fencing_rejects_the_paused_clients_late_write() {
    let writes = fencing::run("memory://fencing-example")
        .await
        .expect("the example runs");
    assert_eq!(
        writes,
        vec!["B's write".to_owned()],
        "only the current holder's write is accepted"
    );
}

#[tokio::test]
async fn lost_lock_stops_the_work_at_the_loss() {
    let batches = lost_lock::run("memory://lost-lock-example")
        .await
        .expect("the example runs");
    // A 1 s maximum hold and 100 ms batches: the work stops near 10 batches, not later.
    assert!((5..=15).contains(&batches), "{batches} batches");
}

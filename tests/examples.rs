//! Runs the examples as tests, so they cannot rot.

#[allow(dead_code)]
#[path = "../examples/quickstart.rs"]
mod quickstart;

#[test]
fn quickstart_runs_and_counts_exactly() {
    quickstart::main().expect("the quickstart example succeeds");
}

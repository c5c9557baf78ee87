//! The tests of the ZooKeeper backend beside the conformance suites, one module per area, in
//! one test binary (one link instead of one per area).

#[path = "../support/mod.rs"]
mod support;

mod cleanup;
mod doctor;
mod election;
mod ensemble;
mod failures;
mod lagging_follower;
mod one_way;
mod partition;
mod primitives;
mod queue;
mod recipe;
mod upgrade;
mod weighted;

/// The name libtest gives the test `name` of the module at `module_path` (the module path
/// less this binary's name), for a test that runs another of its module's tests in a child
/// process.
fn test_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    }
}

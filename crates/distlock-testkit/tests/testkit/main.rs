//! The tests of the test harness (the servers, clusters and faults it starts), one module per
//! area, in one test binary (one link instead of one per area).

mod clock;
mod etcd;
mod etcd_partition;
mod mariadb_replica;
mod postgres_standby;
mod proxy;
mod redis_cluster;
mod redis_sentinel;
mod servers;
mod shared_etcd;
mod zookeeper_partition;

/// The name libtest gives the test `name` of the module at `module_path` (the module path
/// less this binary's name), for a test that runs another of its module's tests in a child
/// process.
fn test_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    }
}

//! The tests of the etcd backend beside the conformance suites, one module per area, in one
//! test binary (one link instead of one per area).

#[path = "../support/mod.rs"]
mod support;

#[path = "../faults/mod.rs"]
mod faults;

mod auth;
mod cancelled;
mod election;
mod etcdctl;
mod etcdctl_child;
mod etcdctl_elect;
mod failover;
mod lease;
mod partition;
mod primitives;
mod smoke;
mod stolen;
mod tls;
mod upgradeable_read;
mod weighted_permits;

//! The tests of the Redis, Redis Cluster, Sentinel and Redlock backends beside the conformance
//! suites, one module per area, in one test binary (one link instead of one per area).

#[path = "../support/mod.rs"]
mod support;

mod clock;
mod cluster;
mod cluster_memory;
mod cluster_round_trips;
mod doctor;
mod eviction;
mod fast_path;
mod faults;
mod foreign;
mod handoff;
mod hot_lock;
mod many_held;
mod notes;
mod primitives;
mod redis;
mod redlock;
mod redlock_faults;
mod redlock_first_use;
mod redlock_notes;
mod replicas;
mod script_commands;
mod sentinel_failover;
mod subscriber;
mod upgradeable_reads;
mod weighted_permits;

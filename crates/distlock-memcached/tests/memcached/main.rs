//! The tests of the memcached backend beside the conformance suite, one module per area, in
//! one test binary (one link instead of one per area).

#[path = "../support/mod.rs"]
mod support;

mod ambiguous;
mod cas_disabled;
mod doctor;
mod eviction;
mod identity;
mod many_held;
mod notes;
mod paused_server;
mod primitives;
mod race;
mod renewal;
mod restart;
mod server_check;
mod servers;
mod upgradeable;
mod weighted;

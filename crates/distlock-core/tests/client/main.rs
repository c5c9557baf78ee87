//! The tests of the lock client on test stores, one module per area, in one test binary (one
//! link instead of one per area). The metrics and blocking tests stay binaries of their own:
//! each needs its feature (`[[test]]` in Cargo.toml), and the metrics tests read one recorder
//! installed for the whole process.

mod closed_watch;
mod hardening;
mod loss_decision;
mod polling_waiters;
mod session;
mod upgrade;
mod watchdog;

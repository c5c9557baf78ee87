//! [`Failover`]: a replicated store of a case's own that fails over to a replica its
//! configuration promises has every acknowledged write
//! ([`Fixture::failover`](crate::Fixture::failover)).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{DistributedLock, Result};

/// A store with a primary (leader) and a replica that holds every write the primary
/// acknowledged (a synchronous standby, a semi-synchronous replica, a Redis replica that
/// `WAIT` counts, a ZooKeeper ensemble's quorum). Dropping it stops the store.
#[async_trait]
pub trait Failover: Send + Sync {
    /// A new, independent client of the store that follows it to the new primary (through
    /// the Sentinels, the address a failover moves, the ensemble's other members).
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>>;

    /// A TTL that rides the failover out: the store serves on its new primary well within a
    /// third of it, so a holder's watchdog, renewing every third, keeps the lock if the store
    /// kept it. A session-bound store ignores it (its session timeout plays the part).
    fn ttl(&self) -> Duration;

    /// Fails the store over: the primary goes away at once (`kill -9`, its host silent) and
    /// the replica is promoted, by the store's own machinery where it has one (the Sentinels,
    /// the ensemble's election) or as an operator would. Returns once the new primary serves
    /// and, where the store's promise of acknowledged writes needs a replica, once one is
    /// back. An error if the failover did not happen: the case then fails.
    async fn fail_over(&self) -> Result<()>;
}

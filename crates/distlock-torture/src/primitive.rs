//! What the workload locks, per name: the mutex, a permit of a semaphore, or a side of a
//! read-write lock; taking one hold of it, and finding it free once the clients stopped.

use std::time::Duration;

use distlock::{AcquireOptions, LockClient, LockGuard};
use serde::{Deserialize, Serialize};

use crate::history::HoldKind;

/// The primitive every name of a run is (`--primitive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Primitive {
    /// The lock of each name: one holder at a time.
    #[default]
    Mutex,
    /// A semaphore of `--permits` permits per name; each acquisition takes one.
    Semaphore,
    /// A read-write lock per name; each acquisition takes the read lock with probability
    /// `--read-share`, else the write lock.
    Rw,
}

impl Primitive {
    /// The core's primitive (what `Capabilities::offers` is asked about).
    pub fn core(self) -> distlock::Primitive {
        match self {
            Primitive::Mutex => distlock::Primitive::Mutex,
            Primitive::Semaphore => distlock::Primitive::Semaphore,
            Primitive::Rw => distlock::Primitive::RwLock,
        }
    }

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::Semaphore => "semaphore",
            Primitive::Rw => "rw",
        }
    }

    /// The primitive of a run, for people: `mutexes`, `semaphores of 2 permits`,
    /// `read-write locks (70% reads)`.
    pub fn describe(self, permits: u32, read_share: f64) -> String {
        match self {
            Primitive::Mutex => "mutexes".to_owned(),
            Primitive::Semaphore => format!("semaphores of {permits} permits"),
            Primitive::Rw => format!("read-write locks ({:.0}% reads)", read_share * 100.0),
        }
    }
}

/// Takes a hold of `kind` on the object `name` of `client`'s store (a semaphore of `permits`),
/// waiting as `opts` say.
///
/// # Errors
/// The core's: a timeout, a store error, [`distlock::Error::NotSupported`] for a primitive
/// the backend does not offer.
pub async fn take(
    client: &LockClient,
    name: &str,
    kind: HoldKind,
    permits: u32,
    opts: &AcquireOptions,
) -> distlock::Result<LockGuard> {
    match kind {
        HoldKind::Exclusive => client.acquire_with(name, opts).await,
        HoldKind::Permit => client.semaphore(name, permits)?.acquire_with(opts).await,
        HoldKind::Read => client.rw_lock(name)?.read_with(opts).await,
        HoldKind::Write => client.rw_lock(name)?.write_with(opts).await,
    }
}

/// Whether nothing holds the object `name` any more: the mutex or the write lock can be taken,
/// or all `permits` permits of the semaphore at once (then released again). `Ok(false)` if
/// something still holds it.
///
/// # Errors
/// Store errors.
pub async fn is_free(
    client: &LockClient,
    primitive: Primitive,
    name: &str,
    permits: u32,
) -> distlock::Result<bool> {
    let no_wait = AcquireOptions::new().no_wait().ttl(Duration::from_secs(10));
    let mut taken = Vec::new();
    let wanted = match primitive {
        Primitive::Semaphore => permits,
        _ => 1,
    };
    let kind = match primitive {
        Primitive::Mutex => HoldKind::Exclusive,
        Primitive::Semaphore => HoldKind::Permit,
        Primitive::Rw => HoldKind::Write,
    };
    let mut outcome = Ok(true);
    while u32::try_from(taken.len()).unwrap_or(u32::MAX) < wanted {
        match take(client, name, kind, permits, &no_wait).await {
            Ok(guard) => taken.push(guard),
            Err(distlock::Error::Timeout { .. }) => {
                outcome = Ok(false);
                break;
            }
            Err(error) => {
                outcome = Err(error);
                break;
            }
        }
    }
    for guard in taken {
        let _ = guard.release().await;
    }
    outcome
}

//! The recorded history: what each client did and saw, what the fenced resource accepted,
//! and which faults the harness injected, each stamped with the machine's monotonic clock
//! (`CLOCK_MONOTONIC`, one clock for every process on the host).

use serde::{Deserialize, Serialize};

/// Nanoseconds on the machine's monotonic clock, comparable across processes.
pub type Nanos = u64;

/// Reads the machine's monotonic clock.
pub fn now() -> Nanos {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(t) => {
            u64::try_from(t.tv_sec()).unwrap_or_default() * 1_000_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or_default()
        }
        Err(_) => 0, // CLOCK_MONOTONIC cannot fail on Linux
    }
}

/// One acquisition, named across the whole run: `client.incarnation.sequence`.
pub type GrantId = String;

/// What a client records (sent to the harness as it happens, one JSON line each).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ClientEvent {
    /// An acquire (with a wait) was invoked.
    AcquireInvoked { name: String },
    /// The acquire returned a guard.
    Granted {
        name: String,
        grant: GrantId,
        token: Option<u64>,
        /// What the guard holds (histories recorded before kinds were kept read as the lock).
        #[serde(default)]
        kind: HoldKind,
    },
    /// The acquire failed.
    AcquireFailed {
        name: String,
        error: String,
        ambiguous: bool,
    },
    /// The holder checked its guard (clock read first) and still held: it believed it held
    /// at least until this event's time.
    Affirmed { grant: GrantId },
    /// The guard's lost signal fired (or a check found it lost).
    Lost { grant: GrantId, reason: String },
    /// A release was invoked; `believed` is whether the guard still said held then.
    ReleaseInvoked { grant: GrantId, believed: bool },
    /// The release returned: `Ok(still owned)` or the error.
    ReleaseReturned {
        grant: GrantId,
        owned: Option<bool>,
        error: Option<String>,
    },
}

/// What one grant holds: the lock of a name (a mutex), a permit of a semaphore, or a side of
/// a read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldKind {
    /// The lock of a name: one holder at a time.
    #[default]
    Exclusive,
    /// One permit of a semaphore (the run's `--permits` holders at once).
    Permit,
    /// A read lock: shared with other readers, never with a writer.
    Read,
    /// The write lock: one writer, no readers.
    Write,
}

impl HoldKind {
    /// The kind of a guard's hold.
    pub fn of(kind: distlock::LockKind) -> Self {
        match kind {
            distlock::LockKind::Permit { .. } => HoldKind::Permit,
            distlock::LockKind::Read => HoldKind::Read,
            distlock::LockKind::Write => HoldKind::Write,
            _ => HoldKind::Exclusive,
        }
    }

    /// Whether a hold of this kind and one of `other` on the same object may never overlap
    /// (permits are counted instead).
    pub fn excludes(self, other: HoldKind) -> bool {
        matches!(
            (self, other),
            (HoldKind::Exclusive, HoldKind::Exclusive)
                | (HoldKind::Read, HoldKind::Write)
                | (HoldKind::Write, HoldKind::Read | HoldKind::Write)
        )
    }

    /// A name for people: `the lock`, `a permit`, `a read lock`, `the write lock`.
    pub fn describe(self) -> &'static str {
        match self {
            HoldKind::Exclusive => "the lock",
            HoldKind::Permit => "a permit",
            HoldKind::Read => "a read lock",
            HoldKind::Write => "the write lock",
        }
    }
}

/// A stamped client event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamped<E> {
    /// When it happened (the event's own process clock read).
    pub at: Nanos,
    /// The client process (stable across restarts of the same slot).
    pub client: u32,
    /// The event.
    pub event: E,
}

/// A write the fenced resource received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    /// When the resource decided.
    pub at: Nanos,
    /// The lock name (one register per name).
    pub name: String,
    /// The acquisition the writer holds.
    pub grant: GrantId,
    /// The writer's fencing token, if its backend gives one.
    pub token: Option<u64>,
    /// What the writer holds: a reader's write is a read of the register (see
    /// [`crate::resource`]).
    #[serde(default)]
    pub kind: HoldKind,
    /// Whether the resource accepted it (see [`crate::resource`] for the rule of each kind).
    pub accepted: bool,
}

/// A fault the harness injected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRecord {
    /// The fault kind's name (see [`crate::faults::FaultKind`]).
    pub kind: String,
    /// What it hit (a client slot, the server, "all clients").
    pub target: String,
    /// When it began.
    pub start: Nanos,
    /// When it was undone (the process resumed or restarted, the proxy healed).
    pub end: Nanos,
    /// Whether it took effect (the process was there to stop, a proxy to break); a fault
    /// scheduled but not injected fails the run.
    #[serde(default = "injected")]
    pub injected: bool,
    /// For a fault that resets the store's state, when it was lost: the kill (after a lagged
    /// failover's lag); for a clock jump, the instant the step that frees the store's leases
    /// really began (the jump forward; the restore after a jump back), however late the
    /// harness got to it. `None`: at its start.
    #[serde(default)]
    pub lost_at: Option<Nanos>,
}

/// Histories recorded before faults said whether they took effect: they did.
fn injected() -> bool {
    true
}

/// Everything one run recorded.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct History {
    /// Client events, in arrival order.
    pub events: Vec<Stamped<ClientEvent>>,
    /// The fenced resource's decisions, in order.
    pub writes: Vec<Write>,
    /// The faults injected.
    pub faults: Vec<FaultRecord>,
    /// Client processes killed by the harness (`kill -9`) and when: their beliefs end there.
    pub kills: Vec<(u32, Nanos)>,
    /// When the workload started and stopped.
    pub started: Nanos,
    /// When the workload stopped.
    pub stopped: Nanos,
}

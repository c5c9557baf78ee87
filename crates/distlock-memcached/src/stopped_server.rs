//! A server that was stopped (SIGSTOP, a frozen VM or container) while our request waited.
//!
//! memcached's clock (`current_time`) is refreshed only by a once-a-second timer in its main
//! thread (`clock_handler` in `memcached.c`). While the process is stopped that timer cannot
//! run, and after it resumes, worker threads process requests that queued up during the stop
//! before the main thread has refreshed the clock (4 to 16 of 16 in two runs of
//! `tests/memcached/paused_server.rs`). Such a request sees the clock of before the stop, so an expiry it
//! sets is counted from the stop's start, not from when the request was sent: an item renewed
//! (or added) that way expires up to the stop's length before the lease's deadline.
//!
//! The thaw cannot be seen in the reply, but a request that waited out a stop was slow:
//! its reply took at least as long as the part of the stop after it was sent. So a renewal
//! whose reply took longer than [`PROMPT_REPLY`] is repeated after [`CLOCK_CATCH_UP`]: the
//! server's main thread runs its overdue timer as soon as it runs again, so the repeat sets
//! the expiry from a current clock, and the lease's deadline (counted from the first
//! renewal's send time, as always) is covered; if the refreshed clock has already ended the
//! item, the repeat finds it gone and the renewal reports the lock lost. A slow reply costs
//! one more round trip; a prompt one nothing. A winning acquisition is covered by its
//! second round trip (the `cas` recording its fencing token), which rewrites the item with the
//! same expiry once the `add`'s reply has come back; after a slow `add` it too waits
//! [`CLOCK_CATCH_UP`] first (without the wait, the clock had caught up in time in every run of
//! `tests/memcached/paused_server.rs` but one, beside a CPU-heavy test).
//!
//! A semaphore's or read-write lock's operation reads the server's clock (`holders.rs`) and
//! records each hold until that clock's second plus the TTL and the slack: a read whose reply
//! was slow is made again after [`CLOCK_CATCH_UP`] (once per operation), and the hold is
//! recorded from the second read's clock, the lease's deadline from its send time.
//!
//! What remains: a follow-up sent before a CPU-starved server's main thread has run, and a
//! request sent less than [`PROMPT_REPLY`] before the server resumes, which is answered
//! promptly and may still have met the clock of before the stop (renewals sent 30 ms
//! before the end of a 4 s stop, with the tests' other settings: the locks ended 1.9 s before
//! their holders' deadlines). The reply carries nothing that tells it apart: its `t` flag
//! counts from the same stale clock, and the server's clock read by other means (`stats`,
//! an absolute expiry's `t`) is whole seconds behind real time by up to two seconds anyway,
//! so a lag from a stop shorter than that cannot be told from the usual one.
//!
//! This module owns only the rule and its two constants; the operations call it.

use std::time::Duration;

use tokio::time::Instant;

/// A reply slower than this may have waited out a stop of the server, and the request may
/// have been processed with the server's clock of before the stop.
pub(crate) const PROMPT_REPLY: Duration = Duration::from_millis(100);

/// How long to wait after a slow reply before the follow-up write: time for the server's main
/// thread to run its overdue clock timer after a stop (well under a millisecond on an idle
/// machine; 20 ms was once too short on a machine loaded by other tests).
pub(crate) const CLOCK_CATCH_UP: Duration = Duration::from_millis(50);

/// True if replies just read came too late to trust the server's clock when it processed
/// the batch: `written_at` is when the server's part of the round trip began (after any wait
/// for a free connection slot, which no stop of the server explains, but before opening or
/// checking the connection, whose requests a stopped server holds up too).
pub(crate) fn was_slow(written_at: Instant) -> bool {
    written_at.elapsed() > PROMPT_REPLY
}

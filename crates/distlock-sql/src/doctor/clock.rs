//! The database clock against this host's, for the server stores.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_core::{Finding, Verdict};

/// How far the database clock may be from this host's before it is a warning. Hosts kept by
/// NTP agree within tens of milliseconds; a second or more means one of the two clocks is not
/// synchronised (or was stepped). The backend compares no client clock, but expiry follows the
/// clock of whichever server runs the statement and fencing tokens grow from it, so the
/// servers of a replicated database (and a failover's new primary) must agree.
pub(crate) const CLOCK_BOUND: Duration = Duration::from_secs(1);

/// This host's clock as µs since the epoch.
pub(crate) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The `clock` finding: `server_us` read by a statement sent at `sent_us` and answered at
/// `received_us` (this host's clock); the server read it somewhere in between, so the offset
/// is known to within half the round trip, which is subtracted before judging.
pub(crate) fn clock(server_us: i64, sent_us: i64, received_us: i64, at: &str) -> Finding {
    let half_trip = (received_us - sent_us).max(0) / 2;
    let offset = server_us - (sent_us + half_trip);
    let beyond = offset.abs().saturating_sub(half_trip);
    let found = format!(
        "database clock {} ms {} this host's (± {} ms)",
        offset.abs() / 1000,
        if offset >= 0 { "ahead of" } else { "behind" },
        half_trip / 1000
    );
    let finding = Finding::new("clock", Verdict::Ok, found).at(at);
    let bound = i64::try_from(CLOCK_BOUND.as_micros()).unwrap_or(i64::MAX);
    if beyond <= bound {
        return finding.because("expiry is judged by the database clock alone; it agrees with this host's, as synchronised clocks do");
    }
    finding
        .with_verdict(Verdict::Warn)
        .because("one of the two clocks is not synchronised: the backend compares no client clock, but expiry follows the clock of the server that runs each statement and fencing tokens grow from it, so a replica promoted with another clock frees holds early or repeats tokens")
        .fix("synchronise the database server's clock (NTP, chrony) and those of its replicas; never step it backwards")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_is_judged_beyond_half_the_round_trip() {
        let sent = 1_000_000_000;
        assert_eq!(clock(sent + 500, sent, sent + 1000, "db").verdict, Verdict::Ok);
        let ahead = clock(sent + 3_000_000, sent, sent + 1000, "db");
        assert_eq!(ahead.verdict, Verdict::Warn, "{ahead:?}");
        assert!(ahead.found.contains("2999 ms ahead of"), "{ahead:?}");
        let behind = clock(sent - 1_500_000, sent, sent + 2000, "db");
        assert_eq!(behind.verdict, Verdict::Warn, "{behind:?}");
        assert!(behind.found.contains("behind"), "{behind:?}");
        // A slow round trip widens what the offset may be: 1.2 s off, 0.6 s each way.
        let slow = clock(sent + 1_800_000, sent, sent + 1_200_000, "db");
        assert_eq!(slow.verdict, Verdict::Ok, "{slow:?}");
    }
}

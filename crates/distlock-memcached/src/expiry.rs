//! Times as the server counts them: a lease's TTL turned into the expiry sent (whole seconds,
//! plus the slack memcached's lagging clock needs), the TTL bounds, and the seed of a
//! re-created fencing counter. Pure; sends nothing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_core::{Error, Result};

/// memcached reads an expiry above 30 days as an absolute unix time.
pub(crate) const SERVER_MAX_RELATIVE_SECS: u64 = 30 * 24 * 3600;
/// Added to every expiry we send. memcached's clock is `floor(monotonic seconds)` sampled by
/// a once-a-second timer whose phase drifts (each firing re-arms it), so it can lag real
/// time by up to two seconds, and an item can expire up to two seconds before
/// `received + expiry` (one second with a perfectly periodic timer, two when the drift
/// carries the monotonic clock's fraction across a whole second). With two extra seconds the
/// server keeps the item at least until the lease's local deadline (`sent + TTL`), less the
/// lateness of one timer firing (modelled in the unit tests).
pub(crate) const EXPIRY_SLACK_SECS: u64 = 2;

/// The shortest TTL: one second, memcached's granularity.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// The longest TTL: 30 days minus the two seconds of expiry slack (a longer relative expiry
/// would be read as an absolute unix time).
pub const MAX_TTL: Duration = Duration::from_secs(SERVER_MAX_RELATIVE_SECS - EXPIRY_SLACK_SECS);

/// The lease's TTL (rounded up to whole seconds) and the expiry to send (two seconds more).
pub(crate) fn ttl_on_server(ttl: Duration) -> Result<(Duration, u32)> {
    if ttl.is_zero() {
        return Err(Error::invalid_options("the TTL must be greater than zero"));
    }
    let secs = ttl.as_secs().saturating_add(u64::from(ttl.subsec_nanos() > 0));
    let expiry = secs.saturating_add(EXPIRY_SLACK_SECS);
    if expiry > SERVER_MAX_RELATIVE_SECS {
        return Err(Error::invalid_options(format!(
            "a TTL of {ttl:?} is longer than memcached can hold ({MAX_TTL:?})"
        )));
    }
    let expiry = u32::try_from(expiry).map_err(|_| Error::invalid_options("TTL out of range"))?;
    Ok((Duration::from_secs(secs), expiry))
}

/// The seed of a (re)created fencing counter: the unix time in microseconds.
pub(crate) fn fence_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_and_get_two_seconds_of_slack() {
        let ok = |ms| ttl_on_server(Duration::from_millis(ms)).expect("valid");
        assert_eq!(ok(1), (Duration::from_secs(1), 3));
        assert_eq!(ok(1000), (Duration::from_secs(1), 3));
        assert_eq!(ok(1500), (Duration::from_secs(2), 4));
        assert_eq!(MAX_TTL, Duration::from_secs(30 * 24 * 3600 - 2));
        assert!(ttl_on_server(MAX_TTL).is_ok());
        assert!(ttl_on_server(MAX_TTL + Duration::from_millis(1)).is_err());
        assert!(ttl_on_server(Duration::ZERO).is_err());
        assert!(ttl_on_server(Duration::MAX).is_err());
    }

    /// memcached 1.6's clock, in microseconds of real time. `current_time` is
    /// `floor(monotonic seconds) - start`, refreshed only when a timer fires: every
    /// `period_us` (one second plus the timer's lateness; each firing re-arms it, so its
    /// phase drifts), first at `first_tick_us`. An item stored with a relative expiry `e` gets
    /// `exptime = current_time + e` and is expired from the first refresh at which
    /// `current_time >= exptime` (`do_item_get`). Between the floor and the stale refresh,
    /// `current_time` lags real time by up to two seconds.
    struct ServerClock {
        /// The monotonic clock's reading (microseconds) at real time 0.
        monotonic_at_0_us: u64,
        first_tick_us: u64,
        period_us: u64,
    }

    impl ServerClock {
        fn current_time(&self, t_us: u64) -> u64 {
            let ticks = (t_us - self.first_tick_us) / self.period_us;
            let last_tick = self.first_tick_us + ticks * self.period_us;
            (self.monotonic_at_0_us + last_tick) / 1_000_000
        }

        /// When an item stored at real time `t_us` with relative expiry `expiry` expires.
        fn expires_at(&self, t_us: u64, expiry: u64) -> u64 {
            let exptime = self.current_time(t_us) + expiry;
            // The first refresh whose monotonic reading has reached `exptime` seconds.
            let due = (exptime * 1_000_000).saturating_sub(self.monotonic_at_0_us);
            let ticks = due.saturating_sub(self.first_tick_us).div_ceil(self.period_us);
            (self.first_tick_us + ticks * self.period_us).max(t_us)
        }
    }

    /// Over many phases of memcached's clock (the monotonic clock's fraction, the timer's
    /// phase, where in a tick the command lands), an item stored with the expiry we send
    /// never expires before the lease's local deadline, `sent + TTL`, where `sent` is no later
    /// than the server's receipt. A late timer eats into the margin by its lateness only;
    /// the core's safety margin before the lost signal covers that.
    #[test]
    fn items_never_expire_before_the_local_deadline_on_a_lagging_server_clock() {
        let mut worst_us = i64::MAX;
        for lateness_us in [0, 500, 20_000] {
            let period_us = 1_000_000 + lateness_us;
            for fraction in (0..1_000_000).step_by(37_813).chain([999_999]) {
                for phase in (0..period_us).step_by(41_077).chain([period_us - 1]) {
                    let clock = ServerClock {
                        monotonic_at_0_us: 5_000_000 + fraction,
                        first_tick_us: phase,
                        period_us,
                    };
                    for ttl_ms in [1, 1_000, 2_500, 30_000] {
                        let (lease_ttl, expiry) =
                            ttl_on_server(Duration::from_millis(ttl_ms)).expect("valid");
                        let lease_ttl_us = u64::try_from(lease_ttl.as_micros()).expect("small");
                        let tick = phase + 3 * period_us;
                        for into in (0..period_us).step_by(29_311).chain([0, period_us - 1]) {
                            let received = tick + into;
                            let expires = clock.expires_at(received, u64::from(expiry));
                            let lifetime = i64::try_from(expires - received).expect("small");
                            let lease = i64::try_from(lease_ttl_us).expect("small");
                            let late = i64::try_from(lateness_us).expect("small");
                            worst_us = worst_us.min(lifetime - lease + late);
                            assert!(
                                lifetime + late >= lease,
                                "stored at {received} us with expiry {expiry} s (lease TTL \
                                 {lease_ttl:?}), the item expires after {lifetime} us, before \
                                 the local deadline (timer late by {lateness_us} us)"
                            );
                        }
                    }
                }
            }
        }
        assert!(worst_us >= 0, "worst margin {worst_us} us");
    }
}

//! The table of a run, as Markdown (ready for the guide), with the ratios to the floors.

use std::fmt::Write as _;
use std::time::Duration;

use crate::libraries::TTL;
use crate::measure::{Waiting, CONTENDERS, WAITER_HEAD_START};
use crate::rounds::Settings;

/// One row of the table: a library, waiting its own way or in a try loop.
#[derive(Debug, Clone)]
pub struct Row {
    /// The library and version (and how it waits, for a try-loop row).
    pub label: String,
    /// The library's tag ([`Library::TAG`](crate::libraries::Library::TAG)).
    pub tag: &'static str,
    /// How its waiters wait in the handoff and hot-lock columns.
    pub waiting: Waiting,
    /// Uncontended acquire+release: medians over the rounds of each round's p50 and p99.
    pub acquire_release: Option<(Duration, Duration)>,
    /// Handoff: median over the rounds of each round's p50.
    pub handoff: Option<Duration>,
    /// Hot lock: median over the rounds of acquisitions per second.
    pub hot_per_s: Option<f64>,
}

/// Everything one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// `redis-server VERSION at HOST:PORT`.
    pub server: String,
    /// What the run measured.
    pub settings: Settings,
    /// The floor: median over the rounds of each round's p50 of two `PING`s.
    pub two_pings: Duration,
    /// The same, each pair after an idle pause (as a handoff's release): median over the rounds
    /// of each round's p50.
    pub two_pings_after_pause: Duration,
    /// The handoff floor: a `PUBLISH` wakes a parked subscriber, which then makes one round trip
    /// ([`NotifyThenAct`](crate::measure::NotifyThenAct)): median over the rounds of each
    /// round's p50.
    pub notify_then_act: Duration,
    /// One or two rows per library.
    pub rows: Vec<Row>,
    /// What a library's blocking acquire did instead of waiting.
    pub notes: Vec<String>,
}

impl Report {
    /// The row of the library tagged `tag` whose waiters wait as `waiting` says.
    pub fn row(&self, tag: &str, waiting: Waiting) -> Option<&Row> {
        self.rows
            .iter()
            .find(|row| row.tag == tag && row.waiting == waiting)
    }

    /// distlock's hot-lock acquisitions per second divided by rslock's.
    pub fn distlock_hot_over_rslock(&self) -> Option<f64> {
        let ours = self.row("distlock", Waiting::Blocking)?.hot_per_s?;
        let theirs = self.row("rslock", Waiting::Blocking)?.hot_per_s?;
        Some(ours / theirs)
    }

    /// The table and the lines under it, in Markdown.
    pub fn to_markdown(&self) -> String {
        let floor = self.two_pings.as_secs_f64();
        let parked = self.two_pings_after_pause.as_secs_f64();
        let notified = self.notify_then_act.as_secs_f64();
        let pause = WAITER_HEAD_START.as_millis();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| library | acquire+release p50 | p99 | p50 ÷ two PINGs | handoff p50 | ÷ two PINGs \
             | ÷ two PINGs after an idle pause | ÷ notify-then-act \
             | hot lock, {CONTENDERS} clients (acquisitions/s) | × three PINGs' time \
             | × notify-then-act p50 |"
        );
        let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
        let _ = writeln!(
            out,
            "| two `PING`s on a plain redis-rs connection (the floor) | {} | | 1.00 | | | | | | | |",
            duration(self.two_pings)
        );
        let _ = writeln!(
            out,
            "| two `PING`s after an idle pause ({pause} ms), same connection | | | | {} | {} | 1.00 | {} | | | |",
            duration(self.two_pings_after_pause),
            times(parked / floor),
            times(parked / notified),
        );
        let _ = writeln!(
            out,
            "| notify-then-act on plain redis-rs (the handoff floor) | | | | {} | {} | {} | 1.00 | | | |",
            duration(self.notify_then_act),
            times(notified / floor),
            times(notified / parked),
        );
        let mut note = 0;
        for row in &self.rows {
            let (p50, p99, ratio) = match row.acquire_release {
                Some((p50, p99)) => (duration(p50), duration(p99), times(p50.as_secs_f64() / floor)),
                None => (String::new(), String::new(), String::new()),
            };
            let waits =
                !(row.waiting == Waiting::Blocking && row.handoff.is_none() && row.hot_per_s.is_none());
            let handoff_cells = if waits {
                match row.handoff {
                    Some(d) => {
                        let secs = d.as_secs_f64();
                        format!(
                            "{} | {} | {} | {}",
                            duration(d),
                            times(secs / floor),
                            times(secs / parked),
                            times(secs / notified)
                        )
                    }
                    None => " | | |".to_owned(),
                }
            } else {
                note += 1;
                format!("blocking acquire does not wait ({note}) | | |")
            };
            let hot_cells = if waits {
                match row.hot_per_s {
                    Some(h) => format!(
                        "{} | {} | {}",
                        thousands(h),
                        times(h * 1.5 * floor),
                        times(h * notified)
                    ),
                    None => " | |".to_owned(),
                }
            } else {
                format!("blocking acquire does not wait ({note}) | |")
            };
            let _ = writeln!(
                out,
                "| {} | {p50} | {p99} | {ratio} | {handoff_cells} | {hot_cells} |",
                row.label
            );
        }
        out.push('\n');
        for (index, text) in self.notes.iter().enumerate() {
            let _ = writeln!(out, "- ({}) {text}", index + 1);
        }
        if let Some(ratio) = self.distlock_hot_over_rslock() {
            let _ = writeln!(out, "- distlock's hot lock ÷ rslock's: {ratio:.2}");
        }
        let _ = writeln!(
            out,
            "- Floors, all on plain redis-rs: two `PING`s back to back on a busy connection; the same \
             after an idle pause of {pause} ms before each pair (as a handoff's release comes after \
             one); notify-then-act: after the same pause, a `PUBLISH` on one connection until a \
             parked subscriber (async pub/sub) has the reply to one `PING` on its own connection, \
             the least a handoff costs on this store and client library."
        );
        let s = &self.settings;
        let _ = writeln!(
            out,
            "- {}; TTL {} s for all; medians over {} rounds, each measuring every library in turn: \
             {} acquire+release pairs (and as many PING pairs), {} handoffs (and as many samples of \
             each parked floor), {} hot-lock acquisitions.",
            self.server,
            TTL.as_secs(),
            s.rounds,
            s.iterations,
            s.handoffs,
            s.hot_acquisitions
        );
        out
    }
}

/// `159 µs`, `2.4 ms`, `74 ms`.
fn duration(d: Duration) -> String {
    let micros = d.as_secs_f64() * 1e6;
    if micros < 1000.0 {
        format!("{micros:.0} µs")
    } else if micros < 10_000.0 {
        format!("{:.1} ms", micros / 1000.0)
    } else {
        format!("{:.0} ms", micros / 1000.0)
    }
}

/// `1.19`, `4.5`, `552`.
fn times(ratio: f64) -> String {
    if ratio < 10.0 {
        format!("{ratio:.2}")
    } else if ratio < 100.0 {
        format!("{ratio:.1}")
    } else {
        format!("{ratio:.0}")
    }
}

/// `9,264`.
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(duration(Duration::from_micros(159)), "159 µs");
        assert_eq!(duration(Duration::from_micros(2400)), "2.4 ms");
        assert_eq!(duration(Duration::from_millis(74)), "74 ms");
        assert_eq!(thousands(9264.4), "9,264");
        assert_eq!(thousands(124.0), "124");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
        assert_eq!(times(1.193), "1.19");
        assert_eq!(times(552.2), "552");
    }
}

//! The picture of a run, for a person: one self-contained SVG file. On top, a timeline (as
//! Jepsen's): time runs left to right, each name has a band, each grant is a bar from its grant
//! to its holder's last "held" (overlapping grants get lanes of their own, so two holders at
//! once show as two bars one above the other), the faults are shaded across every band, and the
//! findings are marked above the bands (red: a violation; grey: a documented loss). Below, the
//! time from each fault's end to the hot lock's next grant, against the bound. Every mark has a
//! tooltip with its details.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::checker::{holds, Hold};
use crate::history::{HoldKind, Nanos};
use crate::saved::Saved;

const WIDTH: f64 = 1400.0;
const LEFT: f64 = 110.0;
const RIGHT: f64 = 30.0;
const LANE: f64 = 9.0;
/// Lanes per band at most (more overlapping grants share the last lane).
const MAX_LANES: usize = 12;
const RECOVERY_HEIGHT: f64 = 170.0;

/// Draws `saved` into `path`.
///
/// # Errors
/// A message naming the file if it cannot be written.
pub fn write(saved: &Saved, path: &Path) -> Result<(), String> {
    std::fs::write(path, draw(saved)).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The SVG text of `saved`.
pub fn draw(saved: &Saved) -> String {
    let history = &saved.history;
    let outcome = saved.outcome();
    let holds = holds(history);
    let from = match history.started {
        0 => holds.first().map_or(0, |h| h.granted),
        started => started,
    };
    let until = holds
        .iter()
        .map(|h| h.believed_until)
        .chain(history.faults.iter().map(|f| f.end))
        .chain([history.stopped])
        .max()
        .unwrap_or(from)
        .max(from + 1);
    let axis = Axis { from, until };

    // Bands: the hot name first, then the others by name.
    let mut by_name: BTreeMap<(bool, &str), Vec<&Hold>> = BTreeMap::new();
    for hold in &holds {
        by_name
            .entry((hold.name != saved.judgement.hot, hold.name.as_str()))
            .or_default()
            .push(hold);
    }
    // Band backgrounds under the fault shading, the grants over it.
    let mut bands = String::new();
    let mut body = String::new();
    let top = 110.0;
    let mut y = top;
    for ((_, name), list) in &by_name {
        let (lanes, count) = lanes(list);
        let height = f64::from(u32::try_from(count).unwrap_or(1)) * LANE + 8.0;
        let _ = writeln!(
            bands,
            r##"<rect x="{LEFT}" y="{y:.1}" width="{:.1}" height="{height:.1}" fill="#f2f2f2"/><text x="{:.1}" y="{:.1}" font-size="12" text-anchor="end">{}</text>"##,
            WIDTH - LEFT - RIGHT,
            LEFT - 6.0,
            y + height / 2.0 + 4.0,
            escape(&short_name(name, &saved.judgement.hot))
        );
        // Alternate shades along a lane, so that one grant handed to the next shows.
        let mut parity = vec![false; count];
        for (hold, &lane) in list.iter().zip(&lanes) {
            parity[lane] = !parity[lane];
            let x = axis.x(hold.granted);
            let w = (axis.x(hold.believed_until) - x).max(1.5);
            let lane_y = y + 4.0 + f64::from(u32::try_from(lane).unwrap_or(0)) * LANE;
            let _ = writeln!(
                body,
                r#"<rect x="{x:.1}" y="{lane_y:.1}" width="{w:.1}" height="{:.1}" fill="{}"><title>{}</title></rect>"#,
                LANE - 2.0,
                colour_of(hold.kind, parity[lane]),
                escape(&format!(
                    "{} (client {}): {}{}, granted at {:.3} s, held (as its holder believed) until {:.3} s{}",
                    hold.grant,
                    hold.client,
                    hold.kind.describe(),
                    hold.token.map(|t| format!(", token {t}")).unwrap_or_default(),
                    axis.seconds(hold.granted),
                    axis.seconds(hold.believed_until),
                    hold.lost_at
                        .map(|at| format!("; told it lost it at {:.3} s", axis.seconds(at)))
                        .unwrap_or_default()
                ))
            );
        }
        y += height + 4.0;
    }
    let bottom = y.max(top + 20.0);

    // Faults, shaded over every band, their names staggered above.
    let mut shades = String::new();
    for (i, fault) in history.faults.iter().enumerate() {
        let x = axis.x(fault.start);
        let w = (axis.x(fault.end) - x).max(2.0);
        let documented = saved.judgement.documented_losses.contains(&fault.kind);
        let title = escape(&format!(
            "{} on {}, {:.3} s to {:.3} s{}{}",
            fault.kind,
            fault.target,
            axis.seconds(fault.start),
            axis.seconds(fault.end),
            if documented { " (a documented loss)" } else { "" },
            if fault.injected { "" } else { " (NOT injected)" }
        ));
        let colour = fault_colour(&fault.kind);
        let label_y = 54.0 + f64::from(u32::try_from(i % 3).unwrap_or(0)) * 13.0;
        let _ = writeln!(
            shades,
            r#"<rect x="{x:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{colour}" fill-opacity="0.28"><title>{title}</title></rect><line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{colour}" stroke-width="1"/><text x="{:.1}" y="{label_y:.1}" font-size="10" fill="{colour}">{}<title>{title}</title></text>"#,
            top - 14.0,
            bottom - top + 14.0,
            label_y + 2.0,
            bottom,
            x + 2.0,
            escape(&fault.kind)
        );
    }

    // Findings, marked above the bands.
    let mut marks = String::new();
    for finding in &outcome.verdict.findings {
        let x = axis.x(finding.at.max(from));
        let colour = if finding.documented { "#888888" } else { "#d00000" };
        let _ = writeln!(
            marks,
            r#"<path d="M {:.1} {:.1} L {:.1} {:.1} L {x:.1} {:.1} Z" fill="{colour}"><title>{}</title></path>"#,
            x - 5.0,
            top - 12.0,
            x + 5.0,
            top - 12.0,
            top - 3.0,
            escape(&format!(
                "{}{} under {}: {}",
                finding.kind,
                if finding.documented { " (documented)" } else { "" },
                finding.fault,
                finding.detail
            ))
        );
    }

    let axis_svg = axis.ticks(bottom);
    let (recovery, recovery_height) = recovery_plot(saved, &holds, &axis, bottom + 40.0);
    let height = bottom + 40.0 + recovery_height + 50.0;
    let verdict = &outcome.verdict;
    let title = format!(
        "{} (fencing {}, TTL {} ms, seed {}{})",
        saved.backend,
        saved.fencing,
        saved.ttl_ms,
        saved.seed,
        saved
            .broken
            .as_ref()
            .map(|b| format!(", broken: {b}"))
            .unwrap_or_default(),
    );
    let counts = format!(
        "{:.0} s: {} acquisitions, {} faults, {} violations of a declared guarantee, {} findings under a documented loss",
        axis.seconds(history.stopped.max(from)),
        verdict.acquisitions,
        history.faults.len(),
        verdict.violations().count(),
        verdict.findings.iter().filter(|f| f.documented).count()
    );
    let legend = legend(height - 18.0);
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{}</text>
<text x="{LEFT}" y="35" font-size="12">{}</text>
{bands}{shades}{body}{marks}{axis_svg}{recovery}{legend}</svg>
"##,
        escape(&title),
        escape(&counts)
    )
}

/// The time axis of the timeline.
struct Axis {
    from: Nanos,
    until: Nanos,
}

impl Axis {
    fn x(&self, at: Nanos) -> f64 {
        #[allow(clippy::cast_precision_loss)] // drawing only
        let share = at.saturating_sub(self.from) as f64 / (self.until - self.from) as f64;
        LEFT + share.min(1.0) * (WIDTH - LEFT - RIGHT)
    }

    fn seconds(&self, at: Nanos) -> f64 {
        #[allow(clippy::cast_precision_loss)] // display only
        let seconds = at.saturating_sub(self.from) as f64 / 1e9;
        seconds
    }

    /// Ticks in seconds under the bands, at `y`.
    fn ticks(&self, y: f64) -> String {
        let span = self.seconds(self.until);
        let step = [1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0]
            .into_iter()
            .find(|step| span / step <= 15.0)
            .unwrap_or(600.0);
        let mut out = format!(
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#444"/>"##,
            WIDTH - RIGHT
        );
        let mut t: f64 = 0.0;
        while t <= span {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // t >= 0, small
            let x = self.x(self.from + (t * 1e9) as Nanos);
            let _ = write!(
                out,
                r##"<line x1="{x:.1}" y1="{y:.1}" x2="{x:.1}" y2="{:.1}" stroke="#444"/><text x="{x:.1}" y="{:.1}" font-size="10" text-anchor="middle">{t:.0} s</text>"##,
                y + 4.0,
                y + 15.0
            );
            t += step;
        }
        out.push('\n');
        out
    }
}

/// Each grant's lane in its band (the first lane free at its grant), and how many lanes.
fn lanes(list: &[&Hold]) -> (Vec<usize>, usize) {
    let mut ends: Vec<Nanos> = Vec::new();
    let mut out = Vec::with_capacity(list.len());
    for hold in list {
        let lane = match ends.iter().position(|&end| end < hold.granted) {
            Some(lane) => lane,
            None if ends.len() < MAX_LANES => {
                ends.push(0);
                ends.len() - 1
            }
            None => MAX_LANES - 1,
        };
        ends[lane] = ends[lane].max(hold.believed_until);
        out.push(lane);
    }
    (out, ends.len().max(1))
}

/// The recovery time after each fault (its end to the hot lock's next grant; zero if it was
/// granted during the fault), against the bound; at `top`. Returns the SVG and its height.
fn recovery_plot(saved: &Saved, holds: &[Hold], axis: &Axis, top: f64) -> (String, f64) {
    let bound = saved.judgement.recovery_bound;
    let hot: Vec<Nanos> = holds
        .iter()
        .filter(|h| h.name == saved.judgement.hot)
        .map(|h| h.granted)
        .collect();
    let points: Vec<(&crate::history::FaultRecord, Option<Nanos>)> = saved
        .history
        .faults
        .iter()
        .map(|f| {
            let next = hot.iter().find(|&&at| at >= f.start);
            (f, next.map(|&at| at.saturating_sub(f.end)))
        })
        .collect();
    let highest = points
        .iter()
        .filter_map(|(_, r)| *r)
        .chain([bound])
        .max()
        .unwrap_or(1)
        .max(1);
    #[allow(clippy::cast_precision_loss)] // drawing only
    let y_of = |nanos: Nanos| top + RECOVERY_HEIGHT - (nanos as f64 / highest as f64) * RECOVERY_HEIGHT;
    let mut out = format!(
        r##"<text x="{LEFT}" y="{:.1}" font-size="12" font-weight="bold">recovery: from each fault's end to the hot lock's next grant (ms; dashed: the bound, {:.0} ms)</text>
<rect x="{LEFT}" y="{top:.1}" width="{:.1}" height="{RECOVERY_HEIGHT}" fill="#fbfbfb" stroke="#ccc"/>
<line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#d00000" stroke-dasharray="6 4"/>
"##,
        top - 8.0,
        ms(bound),
        WIDTH - LEFT - RIGHT,
        y_of(bound),
        WIDTH - RIGHT,
        y_of(bound)
    );
    for fraction in [0.0, 0.5, 1.0] {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let value = (highest as f64 * fraction) as Nanos;
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end">{:.0} ms</text>"#,
            LEFT - 6.0,
            y_of(value) + 3.0,
            ms(value)
        );
    }
    for (fault, recovery) in points {
        let x = axis.x(fault.end);
        let colour = fault_colour(&fault.kind);
        let _ = match recovery {
            Some(r) => write!(
                out,
                r##"<circle cx="{x:.1}" cy="{:.1}" r="4.5" fill="{colour}" stroke="{}"><title>{}</title></circle>"##,
                y_of(r),
                if r > bound { "#d00000" } else { "#333" },
                escape(&format!(
                    "{} on {}: the hot lock granted again {:.0} ms after it ended",
                    fault.kind,
                    fault.target,
                    ms(r)
                ))
            ),
            None => write!(
                out,
                r##"<text x="{x:.1}" y="{:.1}" font-size="14" fill="#d00000" text-anchor="middle">✕<title>{}</title></text>"##,
                top + 12.0,
                escape(&format!(
                    "{} on {}: the hot lock was never granted again",
                    fault.kind, fault.target
                ))
            ),
        };
    }
    out.push('\n');
    (out, RECOVERY_HEIGHT)
}

/// What the colours mean, at `y`.
fn legend(y: f64) -> String {
    let items = [
        (colour_of(HoldKind::Exclusive, true), "lock", false),
        (colour_of(HoldKind::Permit, true), "permit", false),
        (colour_of(HoldKind::Read, true), "read lock", false),
        (colour_of(HoldKind::Write, true), "write lock", false),
        (fault_colour("holder-kill"), "holder fault", true),
        (fault_colour("server-kill"), "server fault", true),
        (fault_colour("blackhole-all"), "network fault", true),
        ("#d00000", "violation (marker above)", false),
        ("#888888", "documented loss (marker above)", false),
    ];
    let mut out = String::new();
    let mut x = LEFT;
    for (colour, label, shaded) in items {
        let _ = write!(
            out,
            r#"<rect x="{x:.1}" y="{:.1}" width="12" height="10" fill="{colour}" fill-opacity="{}"/><text x="{:.1}" y="{y:.1}" font-size="11">{label}</text>"#,
            y - 9.0,
            if shaded { 0.4 } else { 1.0 },
            x + 16.0
        );
        #[allow(clippy::cast_precision_loss)] // a label's length
        let width = label.len() as f64 * 6.2 + 34.0;
        x += width;
    }
    out.push('\n');
    out
}

/// A hold's colour by kind, in a darker or a lighter shade.
fn colour_of(kind: HoldKind, darker: bool) -> &'static str {
    match (kind, darker) {
        (HoldKind::Exclusive, true) => "#1d4e89",
        (HoldKind::Exclusive, false) => "#4f8fc0",
        (HoldKind::Permit, true) => "#1f776e",
        (HoldKind::Permit, false) => "#52b5a8",
        (HoldKind::Read, true) => "#4a7336",
        (HoldKind::Read, false) => "#8cbf6e",
        (HoldKind::Write, true) => "#8f4f16",
        (HoldKind::Write, false) => "#d98c45",
    }
}

/// A fault's colour by what it hits: a holder, the server, the network.
fn fault_colour(kind: &str) -> &'static str {
    if kind.starts_with("holder-") {
        "#e9a100"
    } else if kind.starts_with("server-") || kind.contains("failover") || kind == "majority-kill" {
        "#d62828"
    } else {
        "#7b5ea7"
    }
}

/// `hot` for the hot name, `cold-N` for the others.
fn short_name(name: &str, hot: &str) -> String {
    if name == hot {
        return "hot".to_owned();
    }
    name.strip_prefix(hot)
        .map_or_else(|| name.to_owned(), |rest| rest.trim_start_matches('-').to_owned())
}

fn ms(nanos: Nanos) -> f64 {
    #[allow(clippy::cast_precision_loss)] // display only
    let ms = nanos as f64 / 1e6;
    ms
}

/// Text made safe for XML.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

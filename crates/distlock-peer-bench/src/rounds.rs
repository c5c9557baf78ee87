//! A run: every library measured on one server, round by round and in turn (the first library
//! of a round rotates), so that machine noise hits all alike; the figures are medians over the
//! rounds.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use redis::aio::MultiplexedConnection;

use crate::libraries::{Distlock, DistributedLockRedis, Library, Result, Rslock};
use crate::measure::{self, percentile, Waiting, CONTENDERS};
use crate::report::{Report, Row};

/// How much a run measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Rounds; every round measures every library.
    pub rounds: usize,
    /// Uncontended acquire+release pairs per library per round (and as many `PING` pairs).
    pub iterations: usize,
    /// Handoffs per library per round (and as many samples of each parked floor: two `PING`s
    /// after an idle pause, notify-then-act).
    pub handoffs: usize,
    /// Acquisitions of the hot lock per library per round, shared out over the contenders.
    pub hot_acquisitions: usize,
}

impl Settings {
    /// `rounds` rounds of `iterations` acquire+release pairs, a tenth as many handoffs (at
    /// least 3) and twice as many hot-lock acquisitions.
    pub fn new(rounds: usize, iterations: usize) -> Self {
        Settings {
            rounds: rounds.max(1),
            iterations: iterations.max(1),
            handoffs: (iterations / 10).max(3),
            hot_acquisitions: (iterations * 2).max(CONTENDERS),
        }
    }
}

/// One step of a round.
#[derive(Debug, Clone, Copy)]
enum Step {
    AcquireRelease,
    Handoff,
    HotLock,
}

type StepFuture<'a> = Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;

/// A library in the run, whatever its types, so the rounds can take the libraries in turn.
trait Contestant: Send {
    fn step<'a>(&'a mut self, step: Step, settings: &'a Settings) -> StepFuture<'a>;
    fn rows(&self) -> (Vec<Row>, Option<String>);
}

/// A library's clients, lock names and per-round figures.
struct Clients<L: Library> {
    client: L::Client,
    waiter: L::Client,
    contenders: Vec<L::Client>,
    names: [String; 3],
    /// What its blocking acquire does instead of waiting, if it does not wait.
    blocking_problem: Option<String>,
    acquire_release_p50: Vec<Duration>,
    acquire_release_p99: Vec<Duration>,
    handoff_p50: Vec<Duration>,
    hot_per_s: Vec<f64>,
}

impl<L: Library> Clients<L> {
    async fn connect(url: &str, run: &str) -> Result<Self> {
        let name = |what: &str| format!("peer-bench-{run}-{}-{what}", L::TAG);
        let client = L::connect(url).await?;
        let waiter = L::connect(url).await?;
        let mut contenders = Vec::with_capacity(CONTENDERS);
        for _ in 0..CONTENDERS {
            contenders.push(L::connect(url).await?);
        }
        let blocking_problem =
            measure::blocking_acquire_problem::<L>(&client, &waiter, &name("probe")).await?;
        Ok(Clients {
            client,
            waiter,
            contenders,
            names: [name("free"), name("handoff"), name("hot")],
            blocking_problem,
            acquire_release_p50: Vec::new(),
            acquire_release_p99: Vec::new(),
            handoff_p50: Vec::new(),
            hot_per_s: Vec::new(),
        })
    }

    fn waiting(&self) -> Waiting {
        if self.blocking_problem.is_some() {
            Waiting::TryLoop
        } else {
            Waiting::Blocking
        }
    }

    async fn measure(&mut self, step: Step, settings: &Settings) -> Result<()> {
        let [free, handoff, hot] = &self.names;
        match step {
            Step::AcquireRelease => {
                let mut samples =
                    measure::acquire_release::<L>(&self.client, free, settings.iterations).await?;
                self.acquire_release_p50.push(percentile(&mut samples, 0.5));
                self.acquire_release_p99.push(percentile(&mut samples, 0.99));
            }
            Step::Handoff => {
                let mut samples = Vec::with_capacity(settings.handoffs);
                for _ in 0..settings.handoffs {
                    samples.push(
                        measure::handoff_once::<L>(&self.client, &self.waiter, handoff, self.waiting())
                            .await?,
                    );
                }
                self.handoff_p50.push(percentile(&mut samples, 0.5));
            }
            Step::HotLock => {
                let per_s =
                    measure::hot_lock::<L>(&self.contenders, hot, settings.hot_acquisitions, self.waiting())
                        .await?;
                self.hot_per_s.push(per_s);
            }
        }
        Ok(())
    }
}

impl<L: Library> Contestant for Clients<L> {
    fn step<'a>(&'a mut self, step: Step, settings: &'a Settings) -> StepFuture<'a> {
        Box::pin(self.measure(step, settings))
    }

    fn rows(&self) -> (Vec<Row>, Option<String>) {
        let handoff = median(&self.handoff_p50);
        let hot = median_f64(&self.hot_per_s);
        let mut row = Row {
            label: L::LABEL.to_owned(),
            tag: L::TAG,
            waiting: Waiting::Blocking,
            acquire_release: median(&self.acquire_release_p50).zip(median(&self.acquire_release_p99)),
            handoff,
            hot_per_s: hot,
        };
        let Some(problem) = &self.blocking_problem else {
            return (vec![row], None);
        };
        row.handoff = None;
        row.hot_per_s = None;
        let try_loop = Row {
            label: format!(
                "{}, try loop ({} ms pauses)",
                L::LABEL,
                measure::TRY_LOOP_PAUSE.as_millis()
            ),
            tag: L::TAG,
            waiting: Waiting::TryLoop,
            acquire_release: None,
            handoff,
            hot_per_s: hot,
        };
        (vec![row, try_loop], Some(format!("{}: {problem}.", L::LABEL)))
    }
}

fn median(values: &[Duration]) -> Option<Duration> {
    let mut values = values.to_vec();
    (!values.is_empty()).then(|| percentile(&mut values, 0.5))
}

fn median_f64(values: &[f64]) -> Option<f64> {
    let mut values = values.to_vec();
    values.sort_unstable_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// Measures distlock, rslock and distributed-lock-redis on the Redis server at `url` and
/// returns the table. `progress` hears of each round as it starts.
pub async fn run(url: &str, settings: &Settings, progress: &(dyn Fn(&str) + Sync)) -> Result<Report> {
    let mut connection = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let server = server_version(&mut connection).await?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    progress("connecting the clients");
    let mut contestants: Vec<Box<dyn Contestant>> = vec![
        Box::new(Clients::<Distlock>::connect(url, &run).await?),
        Box::new(Clients::<Rslock>::connect(url, &run).await?),
        Box::new(Clients::<DistributedLockRedis>::connect(url, &run).await?),
    ];
    let mut notify_then_act =
        measure::NotifyThenAct::connect(url, &format!("peer-bench-{run}-notify-then-act")).await?;
    let mut floors = Vec::with_capacity(settings.rounds);
    let mut parked_floors = Vec::with_capacity(settings.rounds);
    let mut notify_floors = Vec::with_capacity(settings.rounds);
    for round in 0..settings.rounds {
        progress(&format!("round {} of {}", round + 1, settings.rounds));
        let mut pings = measure::two_pings(&mut connection, settings.iterations).await?;
        floors.push(percentile(&mut pings, 0.5));
        // The parked floors, as many samples as each library's handoffs.
        let mut parked = measure::two_pings_after_pause(&mut connection, settings.handoffs).await?;
        parked_floors.push(percentile(&mut parked, 0.5));
        let mut notified = notify_then_act.measure(settings.handoffs).await?;
        notify_floors.push(percentile(&mut notified, 0.5));
        for step in [Step::AcquireRelease, Step::Handoff, Step::HotLock] {
            for turn in 0..contestants.len() {
                let next = (round + turn) % contestants.len();
                contestants[next].step(step, settings).await?;
            }
        }
    }
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for contestant in &contestants {
        let (more, note) = contestant.rows();
        rows.extend(more);
        notes.extend(note);
    }
    Ok(Report {
        server: format!("redis-server {server} on {}", host_of(url)),
        settings: settings.clone(),
        two_pings: median(&floors).unwrap_or_default(),
        two_pings_after_pause: median(&parked_floors).unwrap_or_default(),
        notify_then_act: median(&notify_floors).unwrap_or_default(),
        rows,
        notes,
    })
}

/// The server's `redis_version`.
async fn server_version(connection: &mut MultiplexedConnection) -> Result<String> {
    let info: String = redis::cmd("INFO").arg("server").query_async(connection).await?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .unwrap_or("(unknown version)")
        .trim()
        .to_owned())
}

/// The host of a URL, without credentials, port or database.
fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let authority = rest.split('/').next().unwrap_or(rest);
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_of_drops_credentials_port_and_database() {
        assert_eq!(host_of("redis://:secret@10.0.0.1:6379/2"), "10.0.0.1");
        assert_eq!(host_of("redis://127.0.0.1:6379"), "127.0.0.1");
        assert_eq!(host_of("redis://[::1]:6379"), "[::1]");
        assert_eq!(host_of("redis://[::1]"), "[::1]");
    }

    #[test]
    fn medians() {
        assert_eq!(median_f64(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[]), None);
    }
}

//! The measurements, the same for every library: uncontended acquire+release, handoff, and one
//! hot lock shared by [`CONTENDERS`] clients; and the floors they are compared with, on plain
//! redis-rs: two `PING`s back to back, two `PING`s after an idle pause, and notify-then-act
//! (a `PUBLISH` wakes a parked subscriber, which then makes one round trip). Handoff and hot
//! lock have the shape of distlock's own benchmark (`distlock_conformance::bench`).

use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use redis::aio::{MultiplexedConnection, PubSubSink};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::libraries::{Library, Result, WAIT};

/// How many independent clients contend for the hot lock.
pub const CONTENDERS: usize = distlock_conformance::bench::CONTENDERS;

/// The pause between tries of a [`Waiting::TryLoop`].
pub const TRY_LOOP_PAUSE: Duration = Duration::from_millis(1);

/// How long the waiter of a handoff has been waiting when the holder releases; also the idle
/// pause before each sample of the parked floors ([`two_pings_after_pause`],
/// [`NotifyThenAct`]).
pub const WAITER_HEAD_START: Duration = Duration::from_millis(5);

/// How long [`blocking_acquire_problem`] lets a blocking acquire wait on a held lock.
const PROBE_WAIT: Duration = Duration::from_millis(300);

/// How a client waits for a held lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// The library's own blocking acquire.
    Blocking,
    /// One-shot tries with [`TRY_LOOP_PAUSE`] between them, for a library whose blocking
    /// acquire does not wait.
    TryLoop,
}

/// `n` samples of two `PING`s in a row on a plain redis-rs connection: the floor that any
/// client pays for two round trips, whatever its library.
pub async fn two_pings(connection: &mut MultiplexedConnection, n: usize) -> Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        ping(connection).await?;
        ping(connection).await?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

/// `n` samples of two `PING`s in a row, each after an idle pause of [`WAITER_HEAD_START`] (as
/// a handoff's release comes after one): the client's tasks and the runtime's threads are
/// parked when the first `PING` is sent, and its reply has a parked task to wake.
pub async fn two_pings_after_pause(
    connection: &mut MultiplexedConnection,
    n: usize,
) -> Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        tokio::time::sleep(WAITER_HEAD_START).await;
        let started = Instant::now();
        ping(connection).await?;
        ping(connection).await?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

/// The least a handoff through Redis and redis-rs can cost: a `PUBLISH` on one connection
/// reaches a subscriber parked on another (redis-rs async pub/sub, as distlock's waiters use
/// it: the stream read by a task of its own that forwards each message to the waiting task),
/// and the woken waiter makes one round trip (`PING`) on a multiplexed connection of its own,
/// where a lock's waiter would make its acquisition.
#[derive(Debug)]
pub struct NotifyThenAct {
    publisher: MultiplexedConnection,
    channel: String,
    /// When the waiter had the reply to its `PING`, once per message.
    acted: mpsc::UnboundedReceiver<Result<Instant>>,
    /// Kept open: the subscription lives as long as its sink.
    _sink: PubSubSink,
    tasks: [JoinHandle<()>; 2],
}

impl NotifyThenAct {
    /// Subscribes a waiter to `channel` on its own pub/sub connection and opens the publisher's
    /// and the waiter's multiplexed connections.
    pub async fn connect(url: &str, channel: &str) -> Result<Self> {
        let client = redis::Client::open(url)?;
        let publisher = client.get_multiplexed_async_connection().await?;
        let mut waiter_connection = client.get_multiplexed_async_connection().await?;
        let (mut sink, mut stream) = client.get_async_pubsub().await?.split();
        sink.subscribe(channel).await?;

        let (message_tx, mut message_rx) = mpsc::unbounded_channel();
        let forwarder = tokio::spawn(async move {
            while let Some(message) = stream.next().await {
                if message_tx.send(message).is_err() {
                    break;
                }
            }
        });
        let (acted_tx, acted) = mpsc::unbounded_channel();
        let waiter = tokio::spawn(async move {
            while let Some(_message) = message_rx.recv().await {
                let acted = ping(&mut waiter_connection).await.map(|()| Instant::now());
                if acted_tx.send(acted).is_err() {
                    break;
                }
            }
        });
        Ok(NotifyThenAct {
            publisher,
            channel: channel.to_owned(),
            acted,
            _sink: sink,
            tasks: [forwarder, waiter],
        })
    }

    /// `n` samples, each after an idle pause of [`WAITER_HEAD_START`]: the time from just
    /// before the `PUBLISH` to the waiter having the reply to its `PING`.
    pub async fn measure(&mut self, n: usize) -> Result<Vec<Duration>> {
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            tokio::time::sleep(WAITER_HEAD_START).await;
            let published = Instant::now();
            let receivers: i64 = redis::cmd("PUBLISH")
                .arg(&self.channel)
                .arg("released")
                .query_async(&mut self.publisher)
                .await?;
            if receivers != 1 {
                return Err(format!(
                    "PUBLISH to {} reached {receivers} subscribers, not the waiter alone",
                    self.channel
                )
                .into());
            }
            let acted = tokio::time::timeout(WAIT, self.acted.recv())
                .await
                .map_err(|_| format!("the waiter did not act within {WAIT:?} of the PUBLISH"))?
                .ok_or("the waiter's pub/sub connection ended")??;
            samples.push(acted.saturating_duration_since(published));
        }
        Ok(samples)
    }
}

impl Drop for NotifyThenAct {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// One `PING`, which must answer `PONG`.
pub async fn ping(connection: &mut MultiplexedConnection) -> Result<()> {
    let pong: String = redis::cmd("PING").query_async(connection).await?;
    if pong == "PONG" {
        Ok(())
    } else {
        Err(format!("PING answered {pong:?}").into())
    }
}

/// `n` samples of an uncontended one-shot acquire followed by its release.
pub async fn acquire_release<L: Library>(client: &L::Client, name: &str, n: usize) -> Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let guard = L::try_acquire(client, name)
            .await?
            .ok_or_else(|| format!("{}: the benchmark lock {name} is held by someone else", L::LABEL))?;
        L::release(guard).await?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

/// Acquires `name` for `client`, waiting as `waiting` says (at most [`WAIT`]).
pub async fn wait_and_acquire<L: Library>(
    client: &L::Client,
    name: &str,
    waiting: Waiting,
) -> Result<L::Guard> {
    match waiting {
        Waiting::Blocking => L::acquire(client, name).await,
        Waiting::TryLoop => {
            let started = Instant::now();
            loop {
                if let Some(guard) = L::try_acquire(client, name).await? {
                    return Ok(guard);
                }
                if started.elapsed() > WAIT {
                    return Err(format!("{}: {name} still held after {WAIT:?}", L::LABEL).into());
                }
                tokio::time::sleep(TRY_LOOP_PAUSE).await;
            }
        }
    }
}

/// Whether the library's blocking acquire waits while another client holds the lock: `None`
/// if it is still waiting after 300 ms, or what it did instead.
pub async fn blocking_acquire_problem<L: Library>(
    holder: &L::Client,
    waiter: &L::Client,
    name: &str,
) -> Result<Option<String>> {
    let held = L::try_acquire(holder, name)
        .await?
        .ok_or_else(|| format!("{}: the probe lock {name} is held by someone else", L::LABEL))?;
    let started = Instant::now();
    let problem = match tokio::time::timeout(PROBE_WAIT, L::acquire(waiter, name)).await {
        Err(_still_waiting) => None,
        Ok(Err(e)) => Some(format!(
            "its blocking acquire (limit {} s) returned the error \"{e}\" after {:.1} ms while the \
             lock was held",
            WAIT.as_secs(),
            started.elapsed().as_secs_f64() * 1e3
        )),
        Ok(Ok(guard)) => {
            L::release(guard).await?;
            Some("its blocking acquire took a lock that another client held".to_owned())
        }
    };
    L::release(held).await?;
    Ok(problem)
}

/// One handoff: the holder acquires, a waiter starts waiting, and 5 ms later the holder
/// releases. Returns the time from just before the release call to the waiter holding.
pub async fn handoff_once<L: Library>(
    holder: &L::Client,
    waiter: &L::Client,
    name: &str,
    waiting: Waiting,
) -> Result<Duration> {
    let guard = wait_and_acquire::<L>(holder, name, waiting).await?;
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let waiting_task = {
        let (waiter, name) = (waiter.clone(), name.to_owned());
        tokio::spawn(async move {
            let _ = started_tx.send(());
            let guard = wait_and_acquire::<L>(&waiter, &name, waiting).await?;
            let holding = Instant::now();
            L::release(guard).await?;
            Ok::<_, crate::libraries::BoxError>(holding)
        })
    };
    let _ = started_rx.await;
    tokio::time::sleep(WAITER_HEAD_START).await;
    let released = Instant::now();
    L::release(guard).await?;
    let holding = waiting_task.await??;
    Ok(holding.saturating_duration_since(released))
}

/// `total` acquisitions of one lock shared out evenly over the contenders, each looping
/// acquire (waiting as `waiting` says) + release. Returns acquisitions per second.
pub async fn hot_lock<L: Library>(
    contenders: &[L::Client],
    name: &str,
    total: usize,
    waiting: Waiting,
) -> Result<f64> {
    let per = total.div_ceil(contenders.len()).max(1);
    let started = Instant::now();
    let tasks: Vec<_> = contenders
        .iter()
        .map(|client| {
            let (client, name) = (client.clone(), name.to_owned());
            tokio::spawn(async move {
                for _ in 0..per {
                    let guard = wait_and_acquire::<L>(&client, &name, waiting).await?;
                    L::release(guard).await?;
                }
                Ok::<_, crate::libraries::BoxError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok((per * contenders.len()) as f64 / started.elapsed().as_secs_f64().max(1e-9))
}

/// The `p` quantile (0..=1) of `samples`, nearest rank; zero for no samples.
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let index = ((samples.len() - 1) as f64 * p).round() as usize;
    samples[index.min(samples.len() - 1)]
}

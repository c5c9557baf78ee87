//! The subscriber's one background task: it owns the pub/sub connection (one server's, or a
//! cluster connection), sends each round of `SUBSCRIBE`s and `UNSUBSCRIBE`s the table asks
//! for, keeps the connection alive and reconnects, and dispatches the messages that arrive to
//! the channels' watches. What it does is described in the parent module.

use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;

use crate::node::bounded;

use super::*;

/// A live connection: the sink we subscribe through and the task dispatching its messages.
pub(super) struct Live {
    sink: Sink,
    generation: u64,
    dispatcher: JoinHandle<()>,
    /// When the connection last answered: a round or a keepalive.
    checked: Instant,
}

/// What subscribes: one server's pub/sub connection, or a cluster connection (`SSUBSCRIBE`,
/// routed by the channel's slot).
#[derive(Clone)]
pub(super) enum Sink {
    Server(PubSubSink),
    Cluster(ClusterConnection),
}

impl Sink {
    async fn subscribe(mut self, channel: &[u8]) -> redis::RedisResult<()> {
        match &mut self {
            Sink::Server(sink) => sink.subscribe(channel).await,
            Sink::Cluster(conn) => conn.ssubscribe(channel).await,
        }
    }

    async fn unsubscribe(mut self, channel: &[u8]) -> redis::RedisResult<()> {
        match &mut self {
            Sink::Server(sink) => sink.unsubscribe(channel).await,
            Sink::Cluster(conn) => conn.sunsubscribe(channel).await,
        }
    }

    /// `PING`; on a cluster, to the master of each slot in `watched` (one channel per slot
    /// with a watch), in parallel: those masters carry the subscriptions, and a master that
    /// carries none, unreachable, must not take the others' for broken.
    async fn ping(mut self, watched: &[Vec<u8>]) -> redis::RedisResult<()> {
        match &mut self {
            Sink::Server(sink) => sink.ping::<Value>().await.map(drop),
            Sink::Cluster(conn) => {
                let pings = watched.iter().map(|channel| {
                    let mut conn = conn.clone();
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                        Route::with_key(channel, SlotAddr::Master),
                    ));
                    async move { conn.route_command(redis::cmd("PING"), route).await.map(drop) }
                });
                join_all(pings).await.into_iter().collect()
            }
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // Dropping the stream inside the task closes the connection.
        self.dispatcher.abort();
    }
}

/// Clears the `running` flag however the task ends (also when its runtime shuts down).
pub(super) struct Running(pub(super) Arc<Shared>);

impl Drop for Running {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.running = false;
        // The connection dies with the task.
        state.generation += 1;
        state.channels.values_mut().for_each(Channel::unconfirm);
    }
}

/// What one round sends.
#[derive(Default)]
pub(super) struct Round {
    subscribe: Vec<(Vec<u8>, u64)>,
    unsubscribe: Vec<Vec<u8>>,
}

/// The task: keeps the connection and the server's subscriptions in line with the table.
pub(super) async fn run(
    running: Running,
    target: Target,
    url: String,
    timeout: Duration,
    connect_timeout: Duration,
) {
    let shared = running.0.clone();
    let mut live: Option<Live> = None;
    let mut backoff = Duration::ZERO;
    // The pause before subscribing again channels whose master could not be reached.
    let mut retry = Duration::ZERO;
    // When the next unwatched channel has lingered for `LINGER`.
    let mut lingers_until: Option<Instant>;
    loop {
        let round = {
            let mut state = shared.state();
            if state.closed {
                return;
            }
            if live.as_ref().is_some_and(|l| l.generation != state.generation) {
                live = None;
            }
            let mut round = Round::default();
            // Without a connection nothing is subscribed: the lingered channels just go.
            let (gone, next) = state.drop_lingered(Instant::now());
            lingers_until = next;
            if live.is_some() {
                round.unsubscribe = gone;
            }
            let channels = &mut state.channels;
            let wanted = channels.values().any(|c| c.status == Status::Unsent);
            if wanted && live.is_some() {
                for (name, entry) in channels.iter_mut() {
                    if entry.status == Status::Unsent {
                        entry.status = Status::InFlight;
                        round.subscribe.push((name.clone(), entry.id));
                    }
                }
            }
            if !wanted && round.unsubscribe.is_empty() {
                None
            } else {
                Some(round)
            }
        };
        let Some(round) = round else {
            let Some(conn) = live.as_ref() else {
                shared.wake.notified().await;
                continue;
            };
            let keepalive = conn.checked + KEEPALIVE;
            tokio::select! {
                () = shared.wake.notified() => continue,
                () = tokio::time::sleep_until(lingers_until.unwrap_or(keepalive)), if lingers_until.is_some_and(|at| at < keepalive) => continue,
                () = tokio::time::sleep_until(keepalive) => {}
            }
            let generation = conn.generation;
            let watched = shared.state().one_channel_per_slot();
            match tokio::time::timeout(timeout, conn.sink.clone().ping(&watched)).await {
                Ok(Ok(())) => {
                    if let Some(conn) = live.as_mut() {
                        conn.checked = Instant::now();
                    }
                }
                outcome => {
                    let error = match outcome {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no reply within {timeout:?}"),
                    };
                    tracing::debug!(%error, "distlock-redis: the pub/sub connection did not answer its keepalive; reconnecting");
                    live = None;
                    shared.connection_lost(generation);
                }
            }
            continue;
        };
        let Some(conn) = live.as_ref() else {
            if !backoff.is_zero() {
                tokio::time::sleep(backoff).await;
            }
            match connect(&shared, &target, &url, timeout, connect_timeout).await {
                Ok(conn) => {
                    live = Some(conn);
                    backoff = Duration::ZERO;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "distlock-redis: pub/sub connection failed; retrying");
                    backoff = (backoff * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
                }
            }
            continue;
        };
        let generation = conn.generation;
        // Pipelined: each future sends its command on its first poll, and `join_all` polls
        // them in order, so the server sees subscriptions first, in this order.
        let sends = round
            .subscribe
            .iter()
            .map(|(channel, _)| conn.sink.clone().subscribe(channel))
            .collect::<Vec<_>>();
        let unsends = round
            .unsubscribe
            .iter()
            .map(|channel| conn.sink.clone().unsubscribe(channel))
            .collect::<Vec<_>>();
        let all = async { futures::join!(join_all(sends), join_all(unsends)) };
        let outcome = match tokio::time::timeout(timeout, all).await {
            // One server: any failure is the connection's. A cluster: a master that cannot be
            // reached fails only its own channels, which are tried again after a pause; the
            // other masters' subscriptions stay.
            Ok((subs, unsubs)) => match (
                &conn.sink,
                subs.iter().chain(&unsubs).find_map(|r| r.as_ref().err()),
            ) {
                (Sink::Server(_), Some(e)) => Err(e.to_string()),
                _ => Ok(subs),
            },
            Err(_) => Err(format!("{url}: no reply within {timeout:?}")),
        };
        match outcome {
            Ok(subs) => {
                if let Some(conn) = live.as_mut() {
                    conn.checked = Instant::now();
                }
                let failed = {
                    let mut state = shared.state();
                    let mut failed = false;
                    if state.generation == generation {
                        for ((channel, id), sub) in round.subscribe.iter().zip(&subs) {
                            if let Some(entry) = state.channels.get_mut(channel) {
                                if entry.id != *id || entry.status != Status::InFlight {
                                    continue;
                                }
                                if let Err(e) = sub {
                                    tracing::debug!(error = %e, "distlock-redis: a sharded subscription failed; trying again");
                                    entry.status = Status::Unsent;
                                    failed = true;
                                } else {
                                    entry.status = Status::Confirmed;
                                    entry.confirmed.send_replace(true);
                                    if entry.was_confirmed {
                                        // A release may have been announced while we were away.
                                        entry.wake_all();
                                    }
                                    entry.was_confirmed = true;
                                }
                            }
                        }
                    }
                    failed
                };
                if failed {
                    retry = (retry * 2).clamp(MIN_BACKOFF, MAX_RETRY_PAUSE);
                    tokio::time::sleep(retry).await;
                } else {
                    retry = Duration::ZERO;
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "distlock-redis: pub/sub round failed; reconnecting");
                live = None;
                shared.connection_lost(generation);
            }
        }
    }
}

/// Opens a pub/sub connection and starts dispatching its messages.
pub(super) async fn connect(
    shared: &Arc<Shared>,
    target: &Target,
    url: &str,
    timeout: Duration,
    limit: Duration,
) -> Result<Live> {
    let (sink, messages) = match target {
        Target::Server(client) => {
            let (sink, stream) = bounded(limit, url, client.get_async_pubsub()).await?.split();
            (Sink::Server(sink), Messages::Server(stream))
        }
        Target::Sentinel(sentinels) => {
            // The primary the Sentinels name now (a release's PUBLISH also reaches its
            // replicas, so a connection left on a demoted primary still hears it).
            let pubsub = async { sentinels.primary().await?.get_async_pubsub().await };
            let (sink, stream) = bounded(limit, url, pubsub)
                .await
                .inspect_err(|_| sentinels.forget())?
                .split();
            (Sink::Server(sink), Messages::Server(stream))
        }
        Target::Cluster(seeds) => {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let client = seeds
                .client(timeout, limit, Some(tx))
                .map_err(|e| Error::invalid_config(format!("{url}: {e}")))?;
            let conn = bounded(limit, url, client.get_async_connection()).await?;
            (Sink::Cluster(conn), Messages::Cluster(rx))
        }
    };
    let generation = {
        let mut state = shared.state();
        state.generation += 1;
        state.channels.values_mut().for_each(Channel::unconfirm);
        state.generation
    };
    let dispatcher = tokio::spawn(dispatch(shared.clone(), messages, generation));
    Ok(Live {
        sink,
        generation,
        dispatcher,
        checked: Instant::now(),
    })
}

/// Where a connection's messages arrive: one server's pub/sub stream, or a cluster
/// connection's pushes.
pub(super) enum Messages {
    Server(PubSubStream),
    Cluster(UnboundedReceiver<PushInfo>),
}

/// Wakes the watches a message is for, until the connection ends.
pub(super) async fn dispatch(shared: Arc<Shared>, messages: Messages, generation: u64) {
    match messages {
        Messages::Server(mut stream) => {
            while let Some(msg) = stream.next().await {
                let Ok(channel) = msg.get_channel::<Vec<u8>>() else {
                    continue;
                };
                shared.deliver(&channel, msg.get_payload_bytes());
            }
        }
        Messages::Cluster(mut pushes) => {
            while let Some(push) = pushes.recv().await {
                match (push.kind, push.data.as_slice()) {
                    (PushKind::SMessage, [Value::BulkString(channel), Value::BulkString(payload), ..]) => {
                        shared.deliver(channel, payload);
                    }
                    (PushKind::SUnsubscribe, [Value::BulkString(channel), ..]) => {
                        shared.unsubscribed(channel, generation);
                    }
                    (PushKind::Disconnection, _) => break,
                    _ => {}
                }
            }
        }
    }
    tracing::debug!("distlock-redis: the pub/sub connection ended; resubscribing");
    shared.connection_lost(generation);
}

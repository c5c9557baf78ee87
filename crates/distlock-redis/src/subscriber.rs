//! [`Subscriber`]: one pub/sub connection per [`RedisLock`](crate::RedisLock), shared by all
//! its waiting locks.
//!
//! It owns the connection (opened on the first [`watch`](Subscriber::watch)), which channels
//! are subscribed, and one `tokio::sync::watch` sender per channel, reference-counted by the
//! `keep` values handed to [`ReleaseWatch`]es. It may not touch lock keys.
//!
//! - `watch` returns only after the server confirmed the `SUBSCRIBE`, so a release published
//!   after `watch` returns is always heard (the caller retries *after* subscribing).
//! - When the last watch of a channel is dropped, its entry goes at once and the `UNSUBSCRIBE`
//!   is sent with the next `watch` call (dropping cannot await).
//! - If the connection breaks or stops answering, every sender is dropped (the watches fall
//!   back to polling) and the next `watch` reconnects.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use distlock_core::{ReleaseWatch, Result};
use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::node::bounded;

/// The pub/sub side of one client.
pub(crate) struct Subscriber {
    client: redis::Client,
    url: String,
    timeout: Duration,
    connect_timeout: Duration,
    /// Serialises (re)connecting, subscribing and unsubscribing.
    control: tokio::sync::Mutex<Option<Live>>,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The generation of the live connection; bumped when it dies.
    generation: u64,
    next_id: u64,
    channels: HashMap<Vec<u8>, Channel>,
    /// Channels nobody watches any more, unsubscribed by the next `watch`.
    unsubscribe: Vec<Vec<u8>>,
}

struct Channel {
    id: u64,
    refs: usize,
    tx: watch::Sender<u64>,
}

/// A live connection: the sink we subscribe through and the task dispatching its messages.
struct Live {
    sink: PubSubSink,
    generation: u64,
    dispatcher: JoinHandle<()>,
}

impl Drop for Live {
    fn drop(&mut self) {
        // Dropping the stream inside the task closes the connection.
        self.dispatcher.abort();
    }
}

/// Kept alive by a [`ReleaseWatch`]; dropping it releases the channel's reference.
pub(crate) struct Keep {
    shared: Arc<Shared>,
    channel: Vec<u8>,
    id: u64,
}

impl Drop for Keep {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        let last = match state.channels.get_mut(&self.channel) {
            Some(entry) if entry.id == self.id => {
                entry.refs -= 1;
                entry.refs == 0
            }
            _ => false,
        };
        if last {
            state.channels.remove(&self.channel);
            state.unsubscribe.push(std::mem::take(&mut self.channel));
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets every channel of `generation` (its connection is gone): watches fall back to
    /// polling.
    fn connection_lost(&self, generation: u64) {
        let mut state = self.state();
        if state.generation == generation {
            state.generation += 1;
            state.channels.clear();
            state.unsubscribe.clear();
        }
    }
}

impl Subscriber {
    pub(crate) fn new(
        client: redis::Client,
        url: String,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            client,
            url,
            timeout,
            connect_timeout,
            control: tokio::sync::Mutex::new(None),
            shared: Arc::default(),
        }
    }

    /// Subscribes to `channel` and returns once the server confirmed it. Costs one round trip
    /// for the first watch of a channel (plus connecting, the first time), none for more.
    pub(crate) async fn watch(&self, channel: &[u8]) -> Result<ReleaseWatch> {
        let (rx, keep) = self.subscribe(channel).await?;
        Ok(ReleaseWatch::notified(rx, keep))
    }

    /// As [`watch`](Self::watch), returning the raw receiver and the value that holds the
    /// subscription.
    pub(crate) async fn subscribe(&self, channel: &[u8]) -> Result<(watch::Receiver<u64>, Keep)> {
        let limit = self.timeout;
        let mut control = tokio::time::timeout(limit, self.control.lock())
            .await
            .map_err(|_| {
                distlock_core::Error::unavailable(crate::node::BACKEND, "pub/sub subscription is stuck")
            })?;
        let alive = control
            .as_ref()
            .is_some_and(|live| live.generation == self.shared.state().generation);
        if !alive {
            *control = None;
            *control = Some(self.connect().await?);
        }
        let Some(live) = control.as_mut() else {
            unreachable!("connected just above");
        };
        let generation = live.generation;

        let stale = std::mem::take(&mut self.shared.state().unsubscribe);
        if !stale.is_empty() {
            if let Err(e) = bounded(limit, &self.url, live.sink.unsubscribe(&stale)).await {
                self.shared.connection_lost(generation);
                *control = None;
                return Err(e);
            }
        }

        let (rx, keep, new) = {
            let mut state = self.shared.state();
            let next_id = state.next_id;
            let entry = state.channels.entry(channel.to_vec()).or_insert_with(|| Channel {
                id: next_id,
                refs: 0,
                tx: watch::channel(0).0,
            });
            entry.refs += 1;
            let new = entry.id == next_id;
            let (rx, id) = (entry.tx.subscribe(), entry.id);
            if new {
                state.next_id += 1;
            }
            let keep = Keep {
                shared: self.shared.clone(),
                channel: channel.to_vec(),
                id,
            };
            (rx, keep, new)
        };
        if new {
            // The entry exists before the server confirms, so nothing published after the
            // confirmation can be missed.
            if let Err(e) = bounded(limit, &self.url, live.sink.subscribe(channel)).await {
                self.shared.connection_lost(generation);
                *control = None;
                return Err(e);
            }
        }
        Ok((rx, keep))
    }

    async fn connect(&self) -> Result<Live> {
        let pubsub = bounded(self.connect_timeout, &self.url, self.client.get_async_pubsub()).await?;
        let (sink, stream) = pubsub.split();
        let generation = {
            let mut state = self.shared.state();
            state.generation += 1;
            state.channels.clear();
            state.unsubscribe.clear();
            state.generation
        };
        let dispatcher = tokio::spawn(dispatch(self.shared.clone(), stream, generation));
        Ok(Live {
            sink,
            generation,
            dispatcher,
        })
    }
}

/// Bumps the watch of every channel a message arrives on, until the connection ends.
async fn dispatch(shared: Arc<Shared>, mut stream: PubSubStream, generation: u64) {
    while let Some(msg) = stream.next().await {
        let Ok(channel) = msg.get_channel::<Vec<u8>>() else {
            continue;
        };
        if let Some(entry) = shared.state().channels.get(&channel) {
            entry.tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
    tracing::debug!("distlock-redis: the pub/sub connection ended; waiters poll until the next watch");
    shared.connection_lost(generation);
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

//! [`PgReleases`]: PostgreSQL's release notifications for one [`SqlLock`](crate::SqlLock).
//!
//! Every release of a permit or a side of a read-write lock, and every withdrawal of a
//! waiting writer, runs `pg_notify('<table>', '<primitive>:<key>')` in the statement that
//! releases (`holds_sql.rs`), so the notification is sent if and only if the release commits,
//! and it wakes every waiter of that object. A release of a mutex wakes one waiter only: it
//! takes the first waiter out of the lock's queue and runs `pg_notify('<table>',
//! 'wake:<waiter>')` (`waiters_sql.rs`), which wakes that waiter's watch alone. One channel per
//! table; the payload names the object or the waiter, and every listener of the table
//! receives every notification of it, routing it by payload to its own watches (a channel per
//! waiter would cost a `LISTEN` and an `UNLISTEN` per wait on the listening connection, and
//! make a waiter's first attempt wait for them).
//!
//! One listening connection per client, shared by all its waiters, kept by one background
//! task (started by the first [`watch`](PgReleases::watch), again if its runtime went away):
//!
//! - `watch` returns only once the connection's `LISTEN` was answered by the server, so a
//!   release committed after `watch` returns is always heard (the waiter retries after
//!   watching). A watch made while the connection listens costs no round trip.
//! - If the connection breaks (a restart, a reset), the task connects again, backing off up
//!   to a second, and listens again; once it listens again it wakes every watch, because a
//!   release in the gap was not heard. Watches stay open meanwhile, and waiters keep their
//!   safety-net poll.
//! - A connection can also go silent without breaking (a stateful firewall that forgot it,
//!   a frozen server process): no notification, no reply, no error, and waiters would be left
//!   to their safety net for as long as it lasts. So after [`KEEPALIVE`] without a
//!   notification the task asks the connection `SELECT 1`; without an answer within the
//!   operation timeout it abandons the connection and starts over as after a break. Each
//!   connection has a pool of its own: sqlx gives a dropped listener's connection back to its
//!   pool only after an `UNLISTEN` the silent server never answers, so a shared pool would
//!   stay taken.
//! - A watch's value changes on every notification for its object; dropping the watch
//!   forgets the object once no other watch of it is left.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use distlock_core::{Error, Primitive, ReleaseWatch, Result};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::{watch, Notify};

use crate::waiters_sql::WAKE_PREFIX;

/// The first pause after a failed connection attempt, and the longest.
const MIN_BACKOFF: Duration = Duration::from_millis(20);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How long the listening connection may stay silent before it is asked whether it is still
/// there (a `SELECT 1`, answered within the operation timeout or abandoned).
const KEEPALIVE: Duration = Duration::from_secs(5);

/// The notification side of one client.
pub(crate) struct PgReleases {
    /// Where to connect; each listening connection gets a one-connection pool of its own.
    options: PgConnectOptions,
    channel: String,
    timeout: Duration,
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// `true` while the live connection listens.
    listening: watch::Sender<bool>,
    /// Tells the task to end.
    closing: Notify,
}

#[derive(Default)]
struct State {
    /// Whether the task runs.
    running: bool,
    /// Set by [`PgReleases::close`] and on drop: the task ends.
    closed: bool,
    /// The watched objects (`<primitive>:<key>`) and waiters (`wake:<waiter>`), by payload.
    objects: HashMap<String, Object>,
}

struct Object {
    refs: usize,
    /// Bumped on every notification of the object or the waiter.
    tx: watch::Sender<u64>,
}

impl Object {
    fn wake(&self) {
        self.tx.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake_all(&self) {
        self.state().objects.values().for_each(Object::wake);
    }
}

/// Kept alive by a [`ReleaseWatch`]; dropping it forgets the object (or the waiter) once no
/// watch of it is left.
pub(crate) struct Keep {
    shared: Arc<Shared>,
    payload: String,
}

impl Drop for Keep {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        if let Some(object) = state.objects.get_mut(&self.payload) {
            object.refs -= 1;
            if object.refs == 0 {
                state.objects.remove(&self.payload);
            }
        }
    }
}

/// Clears `running` and `listening` however the task ends (also when its runtime shuts down).
struct Running(Arc<Shared>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.state().running = false;
        self.0.listening.send_replace(false);
    }
}

impl PgReleases {
    /// The releases announced on the channel `channel` (the lock table's name) of the server
    /// `options` points at; nothing connects before the first [`watch`](Self::watch). `timeout`
    /// bounds connecting and listening, and a `watch`'s wait for it.
    pub(crate) fn new(options: PgConnectOptions, channel: String, timeout: Duration) -> Self {
        Self {
            options,
            channel,
            timeout,
            shared: Arc::new(Shared {
                state: Mutex::default(),
                listening: watch::channel(false).0,
                closing: Notify::new(),
            }),
        }
    }

    /// A watch of the releases of the `primitive` object `key` (semaphores and read-write
    /// locks), once the connection listens (within the operation timeout).
    ///
    /// # Errors
    /// [`Error::Unavailable`] if the connection does not listen within the timeout (the
    /// waiter then polls).
    pub(crate) async fn watch(&self, primitive: Primitive, key: &str) -> Result<ReleaseWatch> {
        let (rx, keep) = self.subscribe(format!("{}:{key}", primitive.as_str())).await?;
        Ok(ReleaseWatch::notified(rx, keep))
    }

    /// The wakes of one waiter of a mutex, `waiter` (its `waiter` column in the queue, see
    /// `waiters_sql.rs`): the receiver changes when a release or a leaving waiter wakes it,
    /// and when the connection listens again after a break. Once the connection listens; the
    /// [`Keep`] lives as long as the watch.
    ///
    /// # Errors
    /// As [`watch`](Self::watch).
    pub(crate) async fn watch_waiter(&self, waiter: &str) -> Result<(watch::Receiver<u64>, Keep)> {
        self.subscribe(format!("{WAKE_PREFIX}{waiter}")).await
    }

    /// Registers `payload`, starting the task if needed, and waits until the connection
    /// listens.
    async fn subscribe(&self, payload: String) -> Result<(watch::Receiver<u64>, Keep)> {
        let (rx, keep) = {
            let mut state = self.shared.state();
            if state.closed {
                return Err(Error::unavailable("postgres", "the lock was closed"));
            }
            if !state.running {
                state.running = true;
                tokio::spawn(listen(
                    Running(self.shared.clone()),
                    self.options.clone(),
                    self.channel.clone(),
                    self.timeout,
                ));
            }
            let object = state.objects.entry(payload.clone()).or_insert_with(|| Object {
                refs: 0,
                tx: watch::channel(0).0,
            });
            object.refs += 1;
            let rx = object.tx.subscribe();
            (
                rx,
                Keep {
                    shared: self.shared.clone(),
                    payload,
                },
            )
        };
        let mut listening = self.shared.listening.subscribe();
        let listens = tokio::time::timeout(self.timeout, listening.wait_for(|on| *on))
            .await
            .is_ok_and(|outcome| outcome.is_ok());
        match listens {
            true => Ok((rx, keep)),
            false => Err(Error::unavailable(
                "postgres",
                format!(
                    "the release notifications' connection did not listen within {:?}",
                    self.timeout
                ),
            )),
        }
    }

    /// Stops the task and its connection; later watches fail.
    pub(crate) fn close(&self) {
        self.shared.state().closed = true;
        self.shared.closing.notify_one();
    }
}

impl Drop for PgReleases {
    fn drop(&mut self) {
        self.close();
    }
}

/// The task: connects, listens, delivers notifications, and starts over when the connection
/// breaks, until closed.
async fn listen(running: Running, options: PgConnectOptions, channel: String, timeout: Duration) {
    let shared = running.0.clone();
    let mut backoff = Duration::ZERO;
    let mut listened_before = false;
    loop {
        if shared.state().closed {
            return;
        }
        if !backoff.is_zero() {
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = shared.closing.notified() => return,
            }
        }
        let mut listener = match tokio::time::timeout(timeout, connect(&options, &channel, timeout)).await {
            Ok(Ok(listener)) => listener,
            outcome => {
                let error = match outcome {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no answer within {timeout:?}"),
                };
                tracing::debug!(%error, "distlock-sql: the PostgreSQL release listener could not listen");
                backoff = (backoff * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
                continue;
            }
        };
        backoff = Duration::ZERO;
        shared.listening.send_replace(true);
        if listened_before {
            // Releases while the connection was down were not heard.
            shared.wake_all();
        }
        listened_before = true;
        loop {
            let received = tokio::select! {
                // Cancel safe: sqlx keeps a partly read message for the next call.
                received = listener.try_recv() => received,
                () = tokio::time::sleep(KEEPALIVE) => {
                    let ping = sqlx::query("SELECT 1").execute(&mut listener);
                    match tokio::time::timeout(timeout, ping).await {
                        Ok(Ok(_)) => continue,
                        _ => {
                            tracing::debug!("distlock-sql: the PostgreSQL release listener's connection went silent");
                            break;
                        }
                    }
                }
                () = shared.closing.notified() => return,
            };
            match received {
                Ok(Some(notification)) => {
                    let state = shared.state();
                    if let Some(object) = state.objects.get(notification.payload()) {
                        object.wake();
                    }
                }
                Ok(None) | Err(_) => {
                    tracing::debug!("distlock-sql: the PostgreSQL release listener lost its connection");
                    break;
                }
            }
        }
        // Not woken now: an attempt while the server is away would fail the wait. Woken once
        // listening again, above.
        shared.listening.send_replace(false);
    }
}

/// A new listening connection, in a pool of its own, once the server answered its `LISTEN`.
async fn connect(
    options: &PgConnectOptions,
    channel: &str,
    timeout: Duration,
) -> Result<PgListener, sqlx::Error> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(timeout)
        .connect_lazy_with(options.clone());
    let mut listener = PgListener::connect_with(&pool).await?;
    // Reconnecting is done here, explicitly, so `listening` is true only while it listens.
    listener.eager_reconnect(false);
    listener.listen(channel).await?;
    Ok(listener)
}

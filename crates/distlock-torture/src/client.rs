//! One client process of the workload: one `LockClient` shared by `--tasks` tasks, each
//! looping acquire (with a wait), write, hold, write, release, and recording each step with the
//! harness as it happens, on a connection of its own. What is acquired is the `--primitive` of
//! the chosen name: its mutex, a permit of its semaphore, or its read lock (a share of
//! `--read-share` of acquisitions) or write lock; a reader's writes are reads of the resource. Tasks of one process contend with each
//! other as with the other processes, so a release can wake, or hand the lock straight to, a
//! waiter of its own process. Stops after each task's current iteration on SIGTERM.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{AcquireOptions, LockClient, LockGuard};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::broken::{Breakage, Broken};
use crate::history::{now, ClientEvent, HoldKind};
use crate::primitive::{take, Primitive};
use crate::wire::{task_client, Message, WriteReply};

/// What a client process is told on its command line.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// The store's URL (through this client's fault proxy).
    #[arg(long)]
    pub url: String,
    /// The harness's address.
    #[arg(long)]
    pub control: String,
    /// This client's slot.
    #[arg(long)]
    pub client: u32,
    /// This process's incarnation of the slot (a restarted client gets the next).
    #[arg(long, default_value_t = 0)]
    pub incarnation: u32,
    /// The lock TTL.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub ttl: Duration,
    /// The hot lock's name; the cold ones are `<hot>-cold-<i>`.
    #[arg(long)]
    pub hot: String,
    /// How many cold names.
    #[arg(long)]
    pub cold: u32,
    /// The seed of this client's own choices.
    #[arg(long)]
    pub seed: u64,
    /// The share of acquisitions that go to the hot lock.
    #[arg(long, default_value_t = 0.7)]
    pub hot_share: f64,
    /// The longest short hold (short holds are uniform from zero to this).
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    pub short_hold: Duration,
    /// The share of holds that outlast a third of the TTL (so renewals happen).
    #[arg(long, default_value_t = 0.2)]
    pub long_holds: f64,
    /// The longest of those holds, in TTLs (above 0.34).
    #[arg(long, default_value_t = 0.9)]
    pub long_hold_max: f64,
    /// Break the backend on purpose (to prove the checker).
    #[arg(long, value_enum)]
    pub broken: Option<Breakage>,
    /// Tasks in this process, each its own client in the history (see `wire::task_client`).
    #[arg(long, default_value_t = 1)]
    pub tasks: u32,
    /// What each name is: a mutex, a semaphore, a read-write lock.
    #[arg(long, value_enum, default_value_t = Primitive::Mutex)]
    pub primitive: Primitive,
    /// A semaphore's permits.
    #[arg(long, default_value_t = 2)]
    pub permits: u32,
    /// The share of a read-write lock's acquisitions that take the read lock.
    #[arg(long, default_value_t = 0.7)]
    pub read_share: f64,
}

/// The connection to the harness.
struct Harness {
    writer: Mutex<OwnedWriteHalf>,
    reader: Mutex<BufReader<OwnedReadHalf>>,
}

impl Harness {
    async fn send(&self, message: &Message) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.writer.lock().await.write_all(&line).await
    }

    async fn event(&self, at: u64, event: ClientEvent) -> std::io::Result<()> {
        self.send(&Message::Event { at, event }).await
    }

    /// A write to the fenced resource, answered by the harness. One at a time.
    async fn write(
        &self,
        name: &str,
        grant: &str,
        token: Option<u64>,
        kind: HoldKind,
    ) -> std::io::Result<bool> {
        let mut reader = self.reader.lock().await;
        self.send(&Message::Write {
            name: name.to_owned(),
            grant: grant.to_owned(),
            token,
            kind,
        })
        .await?;
        let mut line = String::new();
        reader.read_line(&mut line).await?;
        let reply: WriteReply = serde_json::from_str(&line).map_err(std::io::Error::other)?;
        Ok(reply.accepted)
    }
}

/// Runs the client until SIGTERM (or the harness goes away).
pub async fn run(args: ClientArgs) -> std::io::Result<()> {
    let client = loop {
        let opened = match args.broken {
            None => crate::open::connect(&args.url).await,
            Some(breakage) => crate::open::open(&args.url)
                .await
                .map(|lock| LockClient::new(Broken::new(lock, breakage))),
        };
        match opened {
            Ok(client) => break client,
            Err(error) => {
                tracing::warn!(%error, "cannot open the store yet; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };

    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::spawn(async move {
            term.recv().await;
            stop.store(true, Ordering::SeqCst);
        });
    }

    let args = Arc::new(args);
    let tasks: Vec<_> = (0..args.tasks.max(1))
        .map(|task| {
            let (args, client, stop) = (args.clone(), client.clone(), stop.clone());
            tokio::spawn(async move { run_task(&args, task_client(args.client, task), &client, &stop).await })
        })
        .collect();
    for task in tasks {
        task.await.map_err(std::io::Error::other)??;
    }
    Ok(())
}

/// One task's loop, recorded in the history as client `id`.
async fn run_task(args: &ClientArgs, id: u32, client: &LockClient, stop: &AtomicBool) -> std::io::Result<()> {
    let stream = TcpStream::connect(&args.control).await?;
    stream.set_nodelay(true)?;
    let (read, write) = stream.into_split();
    let harness = Arc::new(Harness {
        writer: Mutex::new(write),
        reader: Mutex::new(BufReader::new(read)),
    });
    harness.send(&Message::Hello { client: id }).await?;

    let mut rng = StdRng::seed_from_u64(args.seed ^ (u64::from(id) << 32) ^ u64::from(args.incarnation));
    let mut sequence = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let name = if args.cold == 0 || rng.random_bool(args.hot_share.clamp(0.0, 1.0)) {
            args.hot.clone()
        } else {
            format!("{}-cold-{}", args.hot, rng.random_range(0..args.cold))
        };
        let kind = match args.primitive {
            Primitive::Mutex => HoldKind::Exclusive,
            Primitive::Semaphore => HoldKind::Permit,
            Primitive::Rw if rng.random_bool(args.read_share.clamp(0.0, 1.0)) => HoldKind::Read,
            Primitive::Rw => HoldKind::Write,
        };
        let wait = args.ttl.mul_f64(rng.random_range(0.5..3.0));
        let opts = AcquireOptions::new().ttl(args.ttl).wait_for(wait);
        harness
            .event(now(), ClientEvent::AcquireInvoked { name: name.clone() })
            .await?;
        let acquired = tokio::select! {
            acquired = take(client, &name, kind, args.permits, &opts) => acquired,
            () = stopped(stop) => break,
        };
        let guard = match acquired {
            Ok(guard) => guard,
            Err(error) => {
                let ambiguous = error.is_ambiguous();
                harness
                    .event(
                        now(),
                        ClientEvent::AcquireFailed {
                            name: name.clone(),
                            error: error.to_string(),
                            ambiguous,
                        },
                    )
                    .await?;
                if !matches!(error, distlock::Error::Timeout { .. }) {
                    tokio::time::sleep(Duration::from_millis(rng.random_range(10..100))).await;
                }
                continue;
            }
        };
        sequence += 1;
        let grant = format!("{id}.{}.{sequence}", args.incarnation);
        let token = guard.fencing_token().map(distlock::FencingToken::get);
        // The guard's own word for what it holds.
        let kind = HoldKind::of(guard.kind());
        harness
            .event(
                now(),
                ClientEvent::Granted {
                    name: name.clone(),
                    grant: grant.clone(),
                    token,
                    kind,
                },
            )
            .await?;
        let watcher = {
            let harness = harness.clone();
            let grant = grant.clone();
            let signal = guard.lost_signal();
            tokio::spawn(async move {
                let reason = signal.lost().await;
                let _ = harness
                    .event(
                        now(),
                        ClientEvent::Lost {
                            grant,
                            reason: reason.to_string(),
                        },
                    )
                    .await;
            })
        };

        affirm_and_write(&harness, &guard, &name, &grant, token, kind).await?;
        // Most holds are short; some (one in five by default) outlast a third of the TTL, so
        // renewals happen.
        // A long hold works in steps of at most a tenth of the TTL, checking its guard and
        // writing after each, as a careful critical section would.
        let hold = if rng.random_bool(args.long_holds.clamp(0.0, 1.0)) {
            args.ttl
                .mul_f64(rng.random_range(0.34..args.long_hold_max.max(0.35)))
        } else {
            args.short_hold.mul_f64(rng.random_range(0.0..1.0))
        };
        let step = args.ttl / 10;
        let mut left = hold;
        loop {
            let now_step = left.min(step);
            tokio::time::sleep(now_step).await;
            left -= now_step;
            if !affirm_and_write(&harness, &guard, &name, &grant, token, kind).await? || left.is_zero() {
                break;
            }
        }

        let at = now();
        let believed = !guard.is_lost();
        harness
            .event(
                at,
                ClientEvent::ReleaseInvoked {
                    grant: grant.clone(),
                    believed,
                },
            )
            .await?;
        let released = guard.release().await;
        watcher.abort();
        let (owned, error) = match released {
            Ok(owned) => (Some(owned), None),
            Err(error) => (None, Some(error.to_string())),
        };
        harness
            .event(now(), ClientEvent::ReleaseReturned { grant, owned, error })
            .await?;
    }
    Ok(())
}

/// Checks the guard (the clock read first, so a pass means it held at least until then) and,
/// if it still holds, records that and writes to the fenced resource. `false` if it was lost.
async fn affirm_and_write(
    harness: &Harness,
    guard: &LockGuard,
    name: &str,
    grant: &str,
    token: Option<u64>,
    kind: HoldKind,
) -> std::io::Result<bool> {
    let at = now();
    if guard.is_lost() {
        return Ok(false);
    }
    harness
        .event(
            at,
            ClientEvent::Affirmed {
                grant: grant.to_owned(),
            },
        )
        .await?;
    harness.write(name, grant, token, kind).await?;
    Ok(true)
}

async fn stopped(stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

//! One torture run of one backend: start the store, the resource and the client processes,
//! inject the scheduled faults, stop, look for locks left held, and check the history.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use distlock_testkit::{Direction, FaultProxies};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::broken::Breakage;
use crate::checker::{Judgement, Verdict};
use crate::faults::{schedule, FaultKind, Planned};
use crate::history::{now, FaultRecord, History};
use crate::picture;
use crate::primitive::{is_free, Primitive};
use crate::resource::Resource;
use crate::saved::Saved;
use crate::store::{Backend, Store};
use crate::wire::slot_of;

/// The extra time allowed on top of TTL (or session timeout) plus operation timeout for the
/// hot lock to be granted again after a fault.
pub const RECOVERY_SLACK: Duration = Duration::from_secs(2);

/// How long after a server's kill a grant it gave before may still be recorded (the reply
/// read, the event stamped): a grant recorded later came from the state after the loss.
pub const IN_FLIGHT: Duration = Duration::from_millis(500);

/// How a run is set up.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The backend.
    pub backend: Backend,
    /// A store the harness did not start (client-side faults only).
    pub url: Option<String>,
    /// Client processes.
    pub clients: u32,
    /// How long the workload runs at least.
    pub duration: Duration,
    /// Go on past `duration` (faults included) until this many acquisitions were made, for at
    /// most three times `duration`.
    pub min_acquisitions: usize,
    /// The lock TTL (and ZooKeeper's session timeout).
    pub ttl: Duration,
    /// The schedule's seed.
    pub seed: u64,
    /// The workload's shape.
    pub workload: Workload,
    /// Break the backend on purpose.
    pub broken: Option<Breakage>,
    /// Only these fault kinds (all that apply if empty); `none` disables faults.
    pub only: Vec<String>,
    /// Extra quiet time after each fault's recovery (fewer faults, more acquisitions).
    pub quiet: Duration,
    /// Where client processes write their logs.
    pub log_dir: PathBuf,
    /// Where to save the run (JSON: the recorded history and what the checker was told), to
    /// read it or check it again with `--check`.
    pub history: Option<PathBuf>,
    /// Where to draw the run's timeline and recovery times (SVG).
    pub picture: Option<PathBuf>,
    /// Print a progress line.
    pub progress: bool,
}

/// The shape of the clients' loop.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Cold lock names beside the hot one.
    pub cold: u32,
    /// The share of acquisitions on the hot lock.
    pub hot_share: f64,
    /// The longest short hold.
    pub short_hold: Duration,
    /// The share of holds that outlast a third of the TTL.
    pub long_holds: f64,
    /// The longest of those holds, in TTLs.
    pub long_hold_max: f64,
    /// Tasks per client process, sharing its `LockClient`.
    pub tasks: u32,
    /// What every name is: a mutex, a semaphore, a read-write lock.
    pub primitive: Primitive,
    /// A semaphore's permits.
    pub permits: u32,
    /// The share of a read-write lock's acquisitions that take the read lock.
    pub read_share: f64,
}

/// What a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The backend's name.
    pub backend: String,
    /// The seed.
    pub seed: u64,
    /// How long the workload ran, seconds.
    pub seconds: f64,
    /// The TTL, milliseconds.
    pub ttl_ms: u128,
    /// The declared fencing (`Monotonic`, `BestEffort`, `None`).
    pub fencing: String,
    /// What every name was (`mutex`, `semaphore`, `rw`).
    pub primitive: Primitive,
    /// A semaphore's permits (with `primitive` `semaphore`).
    pub permits: Option<u32>,
    /// The breakage, if any.
    pub broken: Option<String>,
    /// The clients and their loop, for people.
    pub workload: String,
    /// The checker's verdict.
    pub verdict: Verdict,
}

/// A client slot: its process and its fault proxies.
struct Slot {
    child: Option<Child>,
    incarnation: u32,
    proxies: Option<FaultProxies>,
    url: String,
}

/// Why a run did not give an outcome.
#[derive(Debug)]
pub enum RunError {
    /// The backend does not offer the run's primitive: nothing was run.
    NotOffered(String),
    /// The harness failed.
    Failed(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::NotOffered(why) | RunError::Failed(why) => f.write_str(why),
        }
    }
}

impl From<String> for RunError {
    fn from(why: String) -> Self {
        RunError::Failed(why)
    }
}

/// Runs `setup` to the end.
///
/// # Errors
/// [`RunError::NotOffered`] before any client starts if the backend does not offer
/// `setup.workload.primitive` (its `Capabilities::offers`); [`RunError::Failed`] if the store,
/// the resource or a client cannot be started.
pub async fn run(setup: Setup) -> Result<Outcome, RunError> {
    let backend = setup.backend;
    // A clock the harness steps slows every time call of the server: only when asked for. Its
    // steps: three TTLs and a second, in whole seconds (libfaketime's offsets).
    let clock_step = setup
        .only
        .iter()
        .any(|o| o.starts_with("clock-jump"))
        .then(|| setup.ttl * 3 + Duration::from_secs(1));
    let store = match &setup.url {
        Some(url) => Store::Url(url.clone()),
        None => tokio::task::spawn_blocking(move || Store::start_on(backend, clock_step))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot start {}: {e}", backend.name()))?,
    };
    let session = setup.ttl.max(backend.min_session());
    let quarantine = backend.restart_quarantine(setup.ttl);
    let store_url = store.url(session, quarantine);
    let has_server = store.has_server();
    let has_clock = store.has_clock();
    let store = Arc::new(Mutex::new(store));
    let proxied = backend != Backend::Sqlite;
    let client_proxies = |url: &str| {
        store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .client_proxies(url)
    };

    let capabilities = distlock::open(&store_url)
        .await
        .map_err(|e| format!("cannot open {store_url}: {e}"))?
        .capabilities();
    let primitive = setup.workload.primitive;
    if !capabilities.offers(primitive.core()) {
        return Err(RunError::NotOffered(format!(
            "{} does not offer {} (Capabilities::offers says no): nothing was run; use another --primitive or backend",
            backend.name(),
            match primitive {
                Primitive::Mutex => "locks",
                Primitive::Semaphore => "semaphores",
                Primitive::Rw => "read-write locks",
            }
        )));
    }
    if primitive == Primitive::Semaphore && setup.workload.permits == 0 {
        return Err(RunError::Failed("--permits must be at least 1".into()));
    }
    let hot = format!("torture-{}", uuid::Uuid::new_v4().simple());
    let cold = setup.workload.cold;
    let names: Vec<String> = std::iter::once(hot.clone())
        .chain((0..cold).map(|i| format!("{hot}-cold-{i}")))
        .collect();

    let resource = Resource::start().await.map_err(|e| e.to_string())?;
    let permits = setup.workload.permits;
    let mut slots = Vec::new();
    for index in 0..setup.clients {
        let client_url = store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .client_url(usize::try_from(index).unwrap_or(usize::MAX), &store_url);
        let (url, proxies) = if proxied {
            let (url, proxies) = client_proxies(&client_url).map_err(|e| e.to_string())?;
            (url, Some(proxies))
        } else {
            (client_url, None)
        };
        slots.push(Slot {
            child: None,
            incarnation: 0,
            proxies,
            url,
        });
    }
    let spawn = |slot: &mut Slot, index: usize| -> Result<(), String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let log = std::fs::File::create(
            setup
                .log_dir
                .join(format!("client-{index}.{}.log", slot.incarnation)),
        )
        .map_err(|e| e.to_string())?;
        let mut command = Command::new(exe);
        command
            .arg("client")
            .args(["--url", &slot.url])
            .args(["--control", &resource.addr().to_string()])
            .args(["--client", &index.to_string()])
            .args(["--incarnation", &slot.incarnation.to_string()])
            .args(["--ttl", &format!("{}ms", setup.ttl.as_millis())])
            .args(["--hot", &hot])
            .args(["--cold", &cold.to_string()])
            .args(["--seed", &setup.seed.to_string()])
            .args(["--long-holds", &setup.workload.long_holds.to_string()])
            .args(["--long-hold-max", &setup.workload.long_hold_max.to_string()])
            .args(["--hot-share", &setup.workload.hot_share.to_string()])
            .args(["--tasks", &setup.workload.tasks.to_string()])
            .args(["--primitive", primitive.name()])
            .args(["--permits", &setup.workload.permits.to_string()])
            .args(["--read-share", &setup.workload.read_share.to_string()])
            .args([
                "--short-hold",
                &format!("{}us", setup.workload.short_hold.as_micros()),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        if let Some(breakage) = setup.broken {
            command.args([
                "--broken",
                clap::ValueEnum::to_possible_value(&breakage)
                    .map(|v| v.get_name().to_owned())
                    .unwrap_or_default()
                    .as_str(),
            ]);
        }
        slot.child = Some(
            command
                .spawn()
                .map_err(|e| format!("cannot start a client: {e}"))?,
        );
        Ok(())
    };
    for (index, slot) in slots.iter_mut().enumerate() {
        spawn(slot, index)?;
    }

    let started = Instant::now();
    resource.with_history(|h| h.started = now());
    // Warm up: the first grant.
    let warm_until = Instant::now() + Duration::from_secs(30);
    while resource.acquisitions() == 0 && Instant::now() < warm_until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let progress = setup.progress.then(|| {
        let resource = resource.clone();
        let name = backend.name();
        let total = setup.duration;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let faults = resource.with_history(|h| h.faults.len());
                eprintln!(
                    "[{name}] {:>5.1}s / {:.0}s: {} acquisitions, {faults} faults",
                    started.elapsed().as_secs_f64(),
                    total.as_secs_f64(),
                    resource.acquisitions()
                );
            }
        })
    });

    let recovery_bound = setup.ttl.max(session) + backend.operation_timeout() + quarantine + RECOVERY_SLACK;
    let mut kinds = FaultKind::applicable(backend, has_server, proxied);
    if !setup.only.is_empty() {
        kinds.retain(|k| setup.only.iter().any(|o| o == k.name()));
    }
    kinds.retain(|k| has_clock || !k.is_clock_jump());
    let mut plan = schedule(setup.seed, &kinds, setup.ttl);
    let end_at = started + setup.duration;
    let hard_end = started + setup.duration * 3;
    // The run ends once it has lasted `duration` and made `min_acquisitions`, or at the cap.
    let ends_by =
        |at: Instant| at >= hard_end || (at >= end_at && resource.acquisitions() >= setup.min_acquisitions);
    while !kinds.is_empty() {
        let Some(planned) = plan.next() else { break };
        if ends_by(Instant::now() + planned.duration + setup.ttl) {
            break;
        }
        let record = inject(
            planned,
            backend.restart_delay(setup.ttl),
            &hot,
            &resource,
            &store,
            &mut slots,
            &spawn,
        )
        .await?;
        let fault_end = record.end;
        resource.with_history(|h| h.faults.push(record));
        // Wait for the hot lock to be granted again (or the bound to pass), then a quiet gap.
        let waited_until = Instant::now() + recovery_bound + Duration::from_secs(1);
        while resource.last_grant(&hot).is_none_or(|at| at < fault_end) && Instant::now() < waited_until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(planned.gap + setup.quiet).await;
    }
    while !ends_by(Instant::now()) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Stop every client after its current iteration (SIGKILL if it takes too long). A client
    // that already exited by itself crashed (a panic, an error): the run reports it.
    resource.with_history(|h| h.stopped = now());
    let mut crashed = Vec::new();
    for (index, slot) in slots.iter_mut().enumerate() {
        if let Some(Ok(Some(status))) = slot.child.as_mut().map(Child::try_wait) {
            crashed.push(format!(
                "client {index} (incarnation {}) exited by itself with {status}; its log is in {}",
                slot.incarnation,
                setup.log_dir.display()
            ));
        }
    }
    for slot in &slots {
        if let Some(pid) = slot.child.as_ref().and_then(Child::id) {
            let _ = kill(
                Pid::from_raw(i32::try_from(pid).unwrap_or_default()),
                Signal::SIGTERM,
            );
        }
    }
    let stop_bound = recovery_bound * 2;
    for slot in &mut slots {
        if let Some(child) = slot.child.as_mut() {
            if tokio::time::timeout(stop_bound, child.wait()).await.is_err() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
    }
    if let Some(progress) = progress {
        progress.abort();
    }
    let seconds = started.elapsed().as_secs_f64();

    // Nothing may be left held: each name must be free within the recovery bound.
    let checker = distlock::connect(&store_url)
        .await
        .map_err(|e| format!("cannot open {store_url}: {e}"))?;
    let mut left_held = Vec::new();
    for name in &names {
        let until = Instant::now() + recovery_bound;
        loop {
            match is_free(&checker, primitive, name, permits).await {
                Ok(true) => break,
                Ok(false) | Err(_) if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => {
                    left_held.push(name.clone());
                    break;
                }
            }
        }
    }

    let history: History = resource.with_history(|h| h.clone());
    let judgement = Judgement {
        monotonic_fencing: capabilities.fencing == distlock::Fencing::Monotonic,
        documented_losses: backend.documented_losses(),
        hot: hot.clone(),
        recovery_bound: u64::try_from(recovery_bound.as_nanos()).unwrap_or(u64::MAX),
        kinds: kinds.iter().map(|k| k.name().to_owned()).collect(),
        permits,
        in_flight: u64::try_from(IN_FLIGHT.as_nanos()).unwrap_or(u64::MAX),
    };
    drop(store);
    let saved = Saved {
        backend: backend.name().to_owned(),
        seed: setup.seed,
        ttl_ms: setup.ttl.as_millis(),
        fencing: format!("{:?}", capabilities.fencing),
        primitive,
        permits: (primitive == Primitive::Semaphore).then_some(permits),
        broken: setup.broken.map(|b| format!("{b:?}")),
        workload: format!(
            "{} clients; {}; {:.0}% of acquisitions on the hot lock, the rest on {} cold ones; holds up to {:?}, {:.1}% of them 0.34 to {} TTL",
            setup.clients,
            primitive.describe(permits, setup.workload.read_share),
            setup.workload.hot_share * 100.0,
            setup.workload.cold,
            setup.workload.short_hold,
            setup.workload.long_holds * 100.0,
            setup.workload.long_hold_max
        ),
        judgement,
        left_held,
        crashed,
        history,
    };
    if let Some(path) = &setup.history {
        saved.write(path)?;
    }
    if let Some(path) = &setup.picture {
        picture::write(&saved, path)?;
    }
    let mut outcome = saved.outcome();
    outcome.seconds = seconds;
    Ok(outcome)
}

/// Injects one fault and returns its record.
async fn inject(
    planned: Planned,
    restart_delay: Duration,
    hot: &str,
    resource: &Resource,
    store: &Arc<Mutex<Store>>,
    slots: &mut [Slot],
    spawn: &impl Fn(&mut Slot, usize) -> Result<(), String>,
) -> Result<FaultRecord, String> {
    let holder = resource
        .holder(hot)
        .and_then(|c| usize::try_from(slot_of(c)).ok())
        .filter(|&c| c < slots.len())
        .unwrap_or(0);
    let pid = |slot: &Slot| {
        slot.child
            .as_ref()
            .and_then(Child::id)
            .and_then(|p| i32::try_from(p).ok())
            .map(Pid::from_raw)
    };
    let start = now();
    let target;
    // Server faults fail the run if they fail; the others say whether they took effect.
    let mut injected = true;
    // When a kill loses the store's state: at once, or after a lagged failover's lag.
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let mut lost_at = match planned.kind {
        FaultKind::ServerKill | FaultKind::MajorityKill | FaultKind::Failover => Some(start),
        FaultKind::LaggedFailover => Some(start + nanos(planned.duration)),
        _ => None,
    };
    match planned.kind {
        FaultKind::HolderKill => {
            let slot = &mut slots[holder];
            injected = false;
            if let Some(child) = slot.child.as_mut() {
                injected = child.start_kill().is_ok();
                let _ = child.wait().await;
            }
            let killed_at = now();
            resource.forget_slot(u32::try_from(holder).unwrap_or_default());
            resource.with_history(|h| {
                h.kills
                    .push((u32::try_from(holder).unwrap_or_default(), killed_at))
            });
            slot.incarnation += 1;
            spawn(slot, holder)?;
            target = format!("client {holder}");
        }
        FaultKind::HolderPause => {
            injected = false;
            if let Some(pid) = pid(&slots[holder]) {
                injected = kill(pid, Signal::SIGSTOP).is_ok();
                tokio::time::sleep(planned.duration).await;
                let _ = kill(pid, Signal::SIGCONT);
            }
            target = format!("client {holder}");
        }
        FaultKind::ServerKill | FaultKind::MajorityKill => {
            let store = store.clone();
            // Under the delayed-restart rule a killed server stays down at least that long.
            let (kind, pause) = (planned.kind, planned.duration.max(restart_delay));
            target = tokio::task::spawn_blocking(move || {
                store
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .kill_and_restart(kind, pause)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot restart the server: {e}"))?;
        }
        FaultKind::Failover | FaultKind::LaggedFailover => {
            let store = store.clone();
            let lag = (planned.kind == FaultKind::LaggedFailover).then_some(planned.duration);
            let hot = hot.to_owned();
            target = tokio::task::spawn_blocking(move || {
                store
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .fail_over(&hot, lag)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot fail the cluster over: {e}"))?;
        }
        FaultKind::ServerPause => {
            let store = store.clone();
            let pause = planned.duration;
            let hot = hot.to_owned();
            target = tokio::task::spawn_blocking(move || {
                store
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .pause_for(pause, &hot)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot pause the server: {e}"))?;
        }
        FaultKind::PartitionFollower | FaultKind::PartitionLeader => {
            let store = store.clone();
            let (kind, duration) = (planned.kind, planned.duration);
            target = tokio::task::spawn_blocking(move || {
                let mut store = store.lock().unwrap_or_else(PoisonError::into_inner);
                let prefer = store.pinned_member(holder);
                store.partition(kind, duration, prefer)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot partition the ensemble: {e}"))?;
        }
        FaultKind::ClockJumpForward | FaultKind::ClockJumpBack => {
            let store = store.clone();
            let (back, duration) = (planned.kind == FaultKind::ClockJumpBack, planned.duration);
            let steps;
            (target, steps) = tokio::task::spawn_blocking(move || {
                store
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .jump_clock(back, duration)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot step the server's clock: {e}"))?;
            // A step forward frees what the store expires by its clock; a step back frees what
            // it granted meanwhile at the restore. Both when the step really began: on a loaded
            // machine it lands well after the planned instant.
            lost_at = steps.map(|[jumped, restored]| if back { restored } else { jumped });
        }
        FaultKind::BlackholeHolder
        | FaultKind::DropRepliesHolder
        | FaultKind::LatencyHolder
        | FaultKind::ResetHolder
        | FaultKind::BlackholeAll
        | FaultKind::DropRepliesAll
        | FaultKind::LatencyAll
        | FaultKind::ResetAll => {
            let on_all = matches!(
                planned.kind,
                FaultKind::BlackholeAll
                    | FaultKind::DropRepliesAll
                    | FaultKind::LatencyAll
                    | FaultKind::ResetAll
            );
            let list: Vec<&distlock_testkit::FaultProxy> = match on_all {
                true => slots.iter().flat_map(proxies_of).collect(),
                false => proxies_of(&slots[holder]),
            };
            injected = !list.is_empty();
            for proxy in &list {
                match planned.kind {
                    FaultKind::BlackholeHolder | FaultKind::BlackholeAll => proxy.blackhole(),
                    FaultKind::DropRepliesHolder | FaultKind::DropRepliesAll => proxy.drop_replies(),
                    FaultKind::LatencyHolder | FaultKind::LatencyAll => proxy.set_latency(
                        Direction::Both,
                        Duration::from_millis(100),
                        Duration::from_millis(200),
                    ),
                    _ => proxy.reset(),
                }
            }
            if !matches!(planned.kind, FaultKind::ResetHolder | FaultKind::ResetAll) {
                tokio::time::sleep(planned.duration).await;
                for proxy in &list {
                    proxy.heal();
                }
            }
            target = match on_all {
                true => "all clients".into(),
                false => format!("client {holder}"),
            };
        }
    }
    Ok(FaultRecord {
        kind: planned.kind.name().to_owned(),
        target,
        start,
        end: now(),
        injected,
        lost_at,
    })
}

/// A slot's fault proxies (none for a store without a network).
fn proxies_of(slot: &Slot) -> Vec<&distlock_testkit::FaultProxy> {
    slot.proxies
        .as_ref()
        .map(|p| p.0.iter().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod clock_steps;

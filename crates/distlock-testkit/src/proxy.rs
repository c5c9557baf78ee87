//! [`FaultProxy`]: a TCP proxy on loopback that a test puts between a lock client and its
//! server to make network faults for real: added latency, a silent partition (black hole),
//! connections forgotten by the network while new ones work, replies lost after the command
//! ran, connection resets and refusals.
//!
//! The client's real driver is under test (its timeouts, reconnects, pipelining), so nothing
//! is mocked: the proxy only forwards, delays or withholds bytes. Every control takes effect
//! on live connections at once and is undone by [`FaultProxy::heal`].
//!
//! It is written on tokio here, in one small module, rather than taken from a crate:
//! the fault proxies published as crates are either whole services driven over HTTP (toxiproxy
//! ports) or lack a black hole that keeps connections open, and a test needs exactly these
//! controls, synchronously, from any thread. The proxy runs its own single-threaded runtime on
//! a thread of its own, so it works from sync and async tests alike and outlives the test's
//! runtime; dropping it closes its listener and every connection.
//!
//! ```no_run
//! use distlock_testkit::{FaultProxy, RedisServer};
//!
//! let redis = RedisServer::start().expect("start redis");
//! let proxy = FaultProxy::start(redis.addr()).expect("proxy");
//! let url = format!("redis://{}", proxy.addr()); // the client connects here
//! proxy.blackhole(); // packets vanish: no RST, no FIN, only the client's timeouts notice
//! proxy.heal();
//! # drop(url);
//! ```

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::HarnessError;

/// Which way bytes flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the server (requests).
    ToServer,
    /// From the server to the client (replies).
    ToClient,
    /// Both ways.
    Both,
}

/// Bytes forwarded so far, per direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes delivered to the server.
    pub to_server: u64,
    /// Bytes delivered to the client.
    pub to_client: u64,
}

/// What the proxy does with bytes right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Forward,
    /// Nothing moves either way; nothing is closed.
    Blackhole,
    /// Requests go through; replies are read and discarded.
    DropReplies,
    /// Connections accepted before the `n`th are black-holed; later ones forward.
    SilenceBefore(u64),
}

impl Mode {
    /// Whether connection number `index` moves no byte.
    fn silences(self, index: u64) -> bool {
        match self {
            Mode::Blackhole => true,
            Mode::SilenceBefore(n) => index < n,
            Mode::Forward | Mode::DropReplies => false,
        }
    }
}

/// Latency added to one direction: `base` plus a uniform random part up to `jitter`.
#[derive(Debug, Clone, Copy, Default)]
struct Latency {
    base: Duration,
    jitter: Duration,
}

impl Latency {
    fn sample(self) -> Duration {
        if self.jitter.is_zero() {
            return self.base;
        }
        self.base + rand::rng().random_range(Duration::ZERO..=self.jitter)
    }
}

struct Control {
    /// Where new connections go; [`FaultProxy::set_upstream`] moves it.
    upstream: Mutex<SocketAddr>,
    mode: watch::Sender<Mode>,
    /// Bumped by [`FaultProxy::reset`]: every connection alive then closes with RST.
    resets: watch::Sender<u64>,
    refuse: AtomicBool,
    /// Connections accepted so far; each is numbered by it.
    accepted: AtomicU64,
    latency: Mutex<[Latency; 2]>,
    to_server: AtomicU64,
    to_client: AtomicU64,
    live: AtomicUsize,
}

impl Control {
    fn latency(&self, toward_server: bool) -> Latency {
        self.latency.lock().unwrap_or_else(PoisonError::into_inner)[usize::from(!toward_server)]
    }
}

/// A TCP proxy on `127.0.0.1` in front of one server. See the [module docs](self).
pub struct FaultProxy {
    addr: SocketAddr,
    control: Arc<Control>,
    shutdown: Option<watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port that forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<Self, HarnessError> {
        Self::start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), upstream)
    }

    /// Starts a proxy listening on `listen` (port 0: a free one) that forwards every
    /// connection to `upstream`; for example on `127.0.0.2` and the server's own port, for
    /// clients that derive other servers' addresses from the one they reached (see
    /// [`RedisCluster::proxies`](crate::RedisCluster::proxies)).
    pub fn start_on(listen: SocketAddr, upstream: SocketAddr) -> Result<Self, HarnessError> {
        let listener = std::net::TcpListener::bind(listen)
            .map_err(|e| HarnessError::io(format!("binding the fault proxy on {listen}"), e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| HarnessError::io("configuring the fault proxy", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::io("reading the fault proxy's address", e))?;
        let control = Arc::new(Control {
            upstream: Mutex::new(upstream),
            mode: watch::channel(Mode::Forward).0,
            resets: watch::channel(0).0,
            refuse: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            latency: Mutex::default(),
            to_server: AtomicU64::new(0),
            to_client: AtomicU64::new(0),
            live: AtomicUsize::new(0),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| HarnessError::io("starting the fault proxy's runtime", e))?;
        let (shutdown, stop) = watch::channel(false);
        let accepting = control.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    accept_loop(listener, accepting, stop).await;
                });
                // Dropping the runtime here drops every connection task and its sockets.
            })
            .map_err(|e| HarnessError::io("spawning the fault proxy's thread", e))?;
        Ok(Self {
            addr,
            control,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The address clients connect to instead of the server's.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `127.0.0.1:PORT`, for URLs.
    pub fn host_port(&self) -> String {
        self.addr.to_string()
    }

    /// The server this proxy forwards new connections to.
    pub fn upstream(&self) -> SocketAddr {
        *self
            .control
            .upstream
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends connections opened from now on to `upstream` instead: the virtual IP or DNS name
    /// that a failover moves to the new server. Connections open now stay with the old server;
    /// a [`reset`](Self::reset) after the move ends them as the new server would (it knows
    /// nothing of them and answers their next packet with RST).
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *self
            .control
            .upstream
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = upstream;
    }

    /// Adds `base` plus up to `jitter` (uniform) of latency to every chunk of bytes going
    /// `direction`. Order is kept. Zero both to remove it.
    pub fn set_latency(&self, direction: Direction, base: Duration, jitter: Duration) {
        let mut latency = self
            .control
            .latency
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let value = Latency { base, jitter };
        if direction != Direction::ToClient {
            latency[0] = value;
        }
        if direction != Direction::ToServer {
            latency[1] = value;
        }
    }

    /// A silent partition: no byte moves either way and nothing is closed, so the client's
    /// kernel sees no RST or FIN and only the client's own timeouts can notice. New
    /// connections are accepted and stay silent too. Bytes already read are held and
    /// delivered after [`heal`](Self::heal), as TCP retransmission would.
    pub fn blackhole(&self) {
        self.control.mode.send_replace(Mode::Blackhole);
    }

    /// Lost replies: requests reach the server (the command runs), replies are discarded.
    pub fn drop_replies(&self) {
        self.control.mode.send_replace(Mode::DropReplies);
    }

    /// The network forgets the connections open now (a stateful firewall or NAT that lost
    /// its table): they fall silent as in [`blackhole`](Self::blackhole), while connections
    /// opened from now on forward normally. A client notices only by its own timeouts, and
    /// recovers by opening a new connection.
    pub fn silence_open(&self) {
        let accepted = self.control.accepted.load(Ordering::SeqCst);
        self.control.mode.send_replace(Mode::SilenceBefore(accepted));
    }

    /// Closes every live connection with RST (both sides). New connections are accepted.
    pub fn reset(&self) {
        self.control.resets.send_modify(|n| *n += 1);
    }

    /// While `on`, new connections are closed with RST as soon as they are accepted.
    pub fn refuse(&self, on: bool) {
        self.control.refuse.store(on, Ordering::SeqCst);
    }

    /// Undoes every fault: no latency, forwarding both ways, new connections accepted.
    pub fn heal(&self) {
        self.set_latency(Direction::Both, Duration::ZERO, Duration::ZERO);
        self.refuse(false);
        self.control.mode.send_replace(Mode::Forward);
    }

    /// Bytes forwarded so far.
    pub fn traffic(&self) -> Traffic {
        Traffic {
            to_server: self.control.to_server.load(Ordering::SeqCst),
            to_client: self.control.to_client.load(Ordering::SeqCst),
        }
    }

    /// Connections open through the proxy right now.
    pub fn connections(&self) -> usize {
        self.control.live.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            shutdown.send_replace(true);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.upstream())
            .field("mode", &*self.control.mode.borrow())
            .finish()
    }
}

/// Proxies in front of every server of one store (a ZooKeeper ensemble's members, Redlock's
/// masters); each control applies to all of them.
#[derive(Debug, Default)]
pub struct FaultProxies(pub Vec<FaultProxy>);

impl FaultProxies {
    /// Adds the proxies of `other` to these.
    pub fn extend(&mut self, other: FaultProxies) {
        self.0.extend(other.0);
    }

    /// One proxy in front of each of `upstreams`.
    pub fn start(upstreams: impl IntoIterator<Item = SocketAddr>) -> Result<Self, HarnessError> {
        upstreams
            .into_iter()
            .map(FaultProxy::start)
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// The proxies' `host:port`s, joined with commas (for multi-host URLs).
    pub fn host_ports(&self) -> String {
        self.0
            .iter()
            .map(FaultProxy::host_port)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// [`FaultProxy::set_latency`] on every proxy.
    pub fn set_latency(&self, direction: Direction, base: Duration, jitter: Duration) {
        self.0.iter().for_each(|p| p.set_latency(direction, base, jitter));
    }

    /// [`FaultProxy::blackhole`] on every proxy.
    pub fn blackhole(&self) {
        self.0.iter().for_each(FaultProxy::blackhole);
    }

    /// [`FaultProxy::drop_replies`] on every proxy.
    pub fn drop_replies(&self) {
        self.0.iter().for_each(FaultProxy::drop_replies);
    }

    /// [`FaultProxy::silence_open`] on every proxy.
    pub fn silence_open(&self) {
        self.0.iter().for_each(FaultProxy::silence_open);
    }

    /// [`FaultProxy::reset`] on every proxy.
    pub fn reset(&self) {
        self.0.iter().for_each(FaultProxy::reset);
    }

    /// [`FaultProxy::refuse`] on every proxy.
    pub fn refuse(&self, on: bool) {
        self.0.iter().for_each(|p| p.refuse(on));
    }

    /// [`FaultProxy::heal`] on every proxy.
    pub fn heal(&self) {
        self.0.iter().for_each(FaultProxy::heal);
    }

    /// The traffic of all proxies, added up.
    pub fn traffic(&self) -> Traffic {
        self.0
            .iter()
            .map(FaultProxy::traffic)
            .fold(Traffic::default(), |a, b| Traffic {
                to_server: a.to_server + b.to_server,
                to_client: a.to_client + b.to_client,
            })
    }

    /// Connections open through all proxies.
    pub fn connections(&self) -> usize {
        self.0.iter().map(FaultProxy::connections).sum()
    }
}

/// Rewrites a store URL (`scheme://[user@]host:port[,host:port...][/path][?query]`) so that
/// every server it names is reached through a fresh [`FaultProxy`]; returns the new URL and the
/// proxies.
///
/// ```
/// # fn main() -> Result<(), distlock_testkit::HarnessError> {
/// let (url, proxies) = distlock_testkit::proxy::through_proxies("zk://127.0.0.1:2181,127.0.0.1:2182/locks")?;
/// assert_eq!(proxies.0.len(), 2);
/// assert!(url.starts_with("zk://127.0.0.1:") && url.ends_with("/locks"));
/// # Ok(()) }
/// ```
pub fn through_proxies(url: &str) -> Result<(String, FaultProxies), HarnessError> {
    let bad = || HarnessError::Other(format!("cannot put a proxy in front of {url:?}"));
    let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
        None => (String::new(), authority),
    };
    let upstreams = hosts
        .split(',')
        .map(|host| {
            std::net::ToSocketAddrs::to_socket_addrs(host)
                .ok()
                .and_then(|mut addrs| addrs.next())
                .ok_or_else(bad)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let proxies = FaultProxies::start(upstreams)?;
    Ok((
        format!("{scheme}://{userinfo}{}{tail}", proxies.host_ports()),
        proxies,
    ))
}

async fn accept_loop(listener: TcpListener, control: Arc<Control>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                if control.refuse.load(Ordering::SeqCst) {
                    rst_on_close(&client);
                    continue; // dropped: RST
                }
                let index = control.accepted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(connection(client, index, control.clone()));
            }
        }
    }
}

/// Makes closing `stream` send RST instead of FIN (SO_LINGER 0). tokio deprecates
/// `set_linger` because a positive linger blocks the dropping thread; a zero linger never
/// blocks: the kernel discards the buffers and resets at once.
#[allow(deprecated)]
fn rst_on_close(stream: &TcpStream) {
    let _ = stream.set_linger(Some(Duration::ZERO));
}

/// Counts a live connection while it lives.
struct Live(Arc<Control>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn connection(mut client: TcpStream, index: u64, control: Arc<Control>) {
    control.live.fetch_add(1, Ordering::SeqCst);
    let _live = Live(control.clone());
    let mut resets = control.resets.subscribe();
    resets.mark_unchanged();
    let upstream = *control.upstream.lock().unwrap_or_else(PoisonError::into_inner);
    let server = tokio::select! {
        server = TcpStream::connect(upstream) => server,
        _ = resets.changed() => Err(std::io::Error::other("reset")),
    };
    let Ok(mut server) = server else {
        rst_on_close(&client);
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    rst_on_close(&client);
    rst_on_close(&server);
    // Borrowed halves: unlike owned ones, dropping a write half sends no FIN, so a reset is
    // an RST alone.
    let (client_read, client_write) = client.split();
    let (server_read, server_write) = server.split();
    // Either direction ending (EOF, error) or a reset ends both: the sockets drop with
    // SO_LINGER 0, so a reset is an RST to both sides.
    tokio::select! {
        _ = pump(client_read, server_write, index, control.clone(), true) => {}
        _ = pump(server_read, client_write, index, control.clone(), false) => {}
        _ = resets.changed() => {}
    }
}

/// Moves bytes one way on connection number `index`, obeying the mode and the latency of
/// that direction.
async fn pump(
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    index: u64,
    control: Arc<Control>,
    toward_server: bool,
) {
    // Reads are timestamped and delivered in order by a writer task, so latency delays
    // without reordering.
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer_control = control.clone();
    let writer = async move {
        while let Some((deliver_at, bytes)) = rx.recv().await {
            tokio::time::sleep_until(deliver_at).await;
            // Held while black-holed, delivered after heal (as TCP retransmission would).
            let mut mode = writer_control.mode.subscribe();
            if mode.wait_for(|m| !m.silences(index)).await.is_err() {
                return;
            }
            if to.write_all(&bytes).await.is_err() {
                return;
            }
            let counter = match toward_server {
                true => &writer_control.to_server,
                false => &writer_control.to_client,
            };
            counter.fetch_add(bytes.len() as u64, Ordering::SeqCst);
        }
    };
    let reader = async move {
        let mut mode = control.mode.subscribe();
        let mut buf = vec![0u8; 64 * 1024];
        let mut last = Instant::now();
        loop {
            // Nothing is read while black-holed: the bytes wait in the kernel's buffers.
            if mode.wait_for(|m| !m.silences(index)).await.is_err() {
                return;
            }
            let n = tokio::select! {
                n = from.read(&mut buf) => n,
                _ = mode.changed() => continue,
            };
            let n = match n {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if !toward_server && *mode.borrow() == Mode::DropReplies {
                continue; // the reply is lost
            }
            let deliver_at = (Instant::now() + control.latency(toward_server).sample()).max(last);
            last = deliver_at;
            if tx.send((deliver_at, buf[..n].to_vec())).is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = reader => {}
        _ = writer => {}
    }
}

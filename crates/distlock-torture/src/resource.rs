//! The harness's side of the wire: the fenced resource (Kleppmann's storage service: per
//! name, a write is accepted only if its token is at least the highest accepted so far) and
//! the recorder of every client's history. It also knows who holds what right now, so that
//! faults can aim at a holder.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::history::{now, ClientEvent, History, Nanos, Stamped, Write};
use crate::wire::{slot_of, Message, WriteReply};

/// The shared record.
#[derive(Default)]
struct State {
    history: History,
    /// Per name, the highest token accepted.
    highest: HashMap<String, u64>,
    /// Per name, the client that last said it was granted it (and has not released or lost
    /// it since).
    holders: HashMap<String, u32>,
    /// Per name, when it was last granted.
    last_grants: HashMap<String, Nanos>,
    /// Acquisitions so far.
    granted: usize,
}

/// The resource and recorder, listening on loopback.
#[derive(Clone)]
pub struct Resource {
    state: Arc<Mutex<State>>,
    addr: SocketAddr,
}

impl Resource {
    /// Starts listening on a free loopback port.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let resource = Self {
            state: Arc::new(Mutex::new(State::default())),
            addr,
        };
        let serving = resource.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let resource = serving.clone();
                tokio::spawn(async move {
                    if let Err(error) = resource.serve(stream).await {
                        tracing::debug!(%error, "a client connection ended");
                    }
                });
            }
        });
        Ok(resource)
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn serve(&self, stream: TcpStream) -> std::io::Result<()> {
        stream.set_nodelay(true)?;
        let (read, mut write) = stream.into_split();
        let mut lines = BufReader::new(read).lines();
        let mut client = None;
        while let Some(line) = lines.next_line().await? {
            let message: Message = serde_json::from_str(&line).map_err(std::io::Error::other)?;
            match message {
                Message::Hello { client: id } => client = Some(id),
                Message::Event { at, event } => {
                    let Some(client) = client else { continue };
                    self.record(client, at, event);
                }
                Message::Write { name, grant, token } => {
                    let accepted = self.decide(name, grant, token);
                    let mut reply =
                        serde_json::to_vec(&WriteReply { accepted }).map_err(std::io::Error::other)?;
                    reply.push(b'\n');
                    write.write_all(&reply).await?;
                }
            }
        }
        Ok(())
    }

    fn record(&self, client: u32, at: Nanos, event: ClientEvent) {
        let mut state = self.state();
        match &event {
            ClientEvent::Granted { name, .. } => {
                state.holders.insert(name.clone(), client);
                let last = state.last_grants.entry(name.clone()).or_default();
                *last = (*last).max(at);
                state.granted += 1;
            }
            ClientEvent::Lost { .. } | ClientEvent::ReleaseInvoked { .. } => {
                state.holders.retain(|_, holder| *holder != client);
            }
            _ => {}
        }
        state.history.events.push(Stamped { at, client, event });
    }

    fn decide(&self, name: String, grant: String, token: Option<u64>) -> bool {
        let mut state = self.state();
        let accepted = match token {
            None => true,
            Some(token) => match state.highest.get(&name) {
                Some(&highest) if token < highest => false,
                _ => {
                    state.highest.insert(name.clone(), token);
                    true
                }
            },
        };
        state.history.writes.push(Write {
            at: now(),
            name,
            grant,
            token,
            accepted,
        });
        accepted
    }

    /// The client that holds `name` as far as the history shows.
    pub fn holder(&self, name: &str) -> Option<u32> {
        self.state().holders.get(name).copied()
    }

    /// The time of the latest grant of `name` (the harness waits for one after each fault).
    pub fn last_grant(&self, name: &str) -> Option<Nanos> {
        self.state().last_grants.get(name).copied()
    }

    /// How many acquisitions so far.
    pub fn acquisitions(&self) -> usize {
        self.state().granted
    }

    /// Forgets who holds what for the tasks of a client process that was killed.
    pub fn forget_slot(&self, slot: u32) {
        self.state().holders.retain(|_, holder| slot_of(*holder) != slot);
    }

    /// Runs `f` on the history being recorded.
    pub fn with_history<T>(&self, f: impl FnOnce(&mut History) -> T) -> T {
        f(&mut self.state().history)
    }
}

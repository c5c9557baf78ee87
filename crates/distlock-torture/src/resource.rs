//! The harness's side of the wire: the fenced resource (Kleppmann's storage service, one
//! register per name) and the recorder of every client's history. It also knows who holds
//! what right now, so that faults can aim at a holder.
//!
//! What the resource accepts, per kind of hold (a write without a token is always accepted):
//! - **The lock of a name, the write lock** (one holder at a time): a write whose token is at
//!   least the highest token of any write or read the register accepted so far.
//! - **A read lock**: its holder only reads; a read is accepted if its token is at least that
//!   of the last accepted write (a writer whose lock was granted after the reader's only gets
//!   in once the reader is out, so a reader behind it is stale). An accepted read raises the
//!   bar for writes: a writer whose token is below it was superseded by the reader's grant.
//! - **A permit of a semaphore**: accepted, into a slot of the holder's own. Permits are not
//!   ordered by their tokens (an earlier permit may rightly outlive a later one), so no order
//!   of tokens fences them; the checker flags a token that reaches the resource from two
//!   holds, and counts the holders at once from their beliefs.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::history::{now, ClientEvent, History, HoldKind, Nanos, Stamped, Write};
use crate::wire::{slot_of, Message, WriteReply};

/// The shared record.
#[derive(Default)]
struct State {
    history: History,
    /// Per name, the register's fence.
    registers: HashMap<String, Register>,
    /// Per name, the clients that said they were granted it (and have not released or lost it
    /// since), in the order of their grants.
    holders: HashMap<String, Vec<u32>>,
    /// Per name, when it was last granted.
    last_grants: HashMap<String, Nanos>,
    /// Acquisitions so far.
    granted: usize,
}

/// One name's register: the highest tokens it accepted.
#[derive(Default)]
struct Register {
    /// Of any write or read.
    highest: Option<u64>,
    /// Of a write.
    highest_write: Option<u64>,
}

impl Register {
    /// Decides an operation with `token` by a holder of `kind` (see the module's docs).
    fn decide(&mut self, token: u64, kind: HoldKind) -> bool {
        match kind {
            HoldKind::Permit => true,
            HoldKind::Read => {
                let accepted = self.highest_write.is_none_or(|w| token >= w);
                if accepted {
                    self.highest = self.highest.max(Some(token));
                }
                accepted
            }
            HoldKind::Exclusive | HoldKind::Write => {
                let accepted = self.highest.is_none_or(|h| token >= h);
                if accepted {
                    self.highest = Some(token);
                    self.highest_write = Some(token);
                }
                accepted
            }
        }
    }
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
                Message::Write {
                    name,
                    grant,
                    token,
                    kind,
                } => {
                    let accepted = self.decide(name, grant, token, kind);
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
                state.holders.entry(name.clone()).or_default().push(client);
                let last = state.last_grants.entry(name.clone()).or_default();
                *last = (*last).max(at);
                state.granted += 1;
            }
            ClientEvent::Lost { .. } | ClientEvent::ReleaseInvoked { .. } => {
                for list in state.holders.values_mut() {
                    list.retain(|holder| *holder != client);
                }
            }
            _ => {}
        }
        state.history.events.push(Stamped { at, client, event });
    }

    fn decide(&self, name: String, grant: String, token: Option<u64>, kind: HoldKind) -> bool {
        let mut state = self.state();
        let accepted = match token {
            None => true,
            Some(token) => state
                .registers
                .entry(name.clone())
                .or_default()
                .decide(token, kind),
        };
        state.history.writes.push(Write {
            at: now(),
            name,
            grant,
            token,
            kind,
            accepted,
        });
        accepted
    }

    /// The client that holds `name` as far as the history shows (of several holders of a
    /// semaphore or readers, the one granted last).
    pub fn holder(&self, name: &str) -> Option<u32> {
        self.state()
            .holders
            .get(name)
            .and_then(|list| list.last().copied())
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
        for list in self.state().holders.values_mut() {
            list.retain(|holder| slot_of(*holder) != slot);
        }
    }

    /// Runs `f` on the history being recorded.
    pub fn with_history<T>(&self, f: impl FnOnce(&mut History) -> T) -> T {
        f(&mut self.state().history)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_and_the_write_lock_are_fenced_by_the_highest_token() {
        for kind in [HoldKind::Exclusive, HoldKind::Write] {
            let mut register = Register::default();
            assert!(register.decide(3, kind));
            assert!(register.decide(3, kind), "the same holder again");
            assert!(register.decide(5, kind));
            assert!(!register.decide(4, kind), "a superseded holder");
        }
    }

    #[test]
    fn a_read_is_fenced_by_the_last_write_and_raises_the_bar_for_writes() {
        let mut register = Register::default();
        assert!(register.decide(2, HoldKind::Read));
        assert!(
            register.decide(1, HoldKind::Read),
            "readers do not fence each other"
        );
        assert!(register.decide(4, HoldKind::Write));
        assert!(
            !register.decide(3, HoldKind::Read),
            "a reader granted before that writer"
        );
        assert!(register.decide(6, HoldKind::Read));
        assert!(
            register.decide(5, HoldKind::Read),
            "a reader granted after the writer"
        );
        assert!(
            !register.decide(4, HoldKind::Write),
            "a writer superseded by a reader"
        );
        assert!(register.decide(7, HoldKind::Write));
    }

    #[test]
    fn permits_are_not_ordered_by_token() {
        let mut register = Register::default();
        assert!(register.decide(9, HoldKind::Permit));
        assert!(
            register.decide(8, HoldKind::Permit),
            "an earlier permit outliving a later one"
        );
    }
}

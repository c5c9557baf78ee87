//! The subset of memcached's protocol this backend speaks, over one TCP connection.
//!
//! This module owns framing only: encoding `add` / `cas` / `md` / `mg` / `ma` / `mn` requests, reading
//! their replies, and learning which server *process* a connection talks to (its
//! [`Epoch`]). It may not decide ownership; `mutex.rs`, `renewal.rs` and `holders.rs` do.
//!
//! Why our own few hundred lines instead of the `memcache` crate's async meta client: a CAS
//! value only identifies an item within one server process. memcached restarts its CAS
//! counter at 1, and the installed 1.6.18 has no `E` flag to choose CAS values, so after a
//! restart a new holder's item can carry exactly the CAS an old lease remembers. Every
//! CAS-guarded command must therefore run on a connection known to reach the same process
//! that issued the CAS. Each new connection learns the process's identity (an [`Epoch`]: a
//! random nonce stored in the server, see [`Conn::open`]) before sending anything, and
//! compares it with the lease's; a restart kills every old connection, so a command can never
//! silently land on a new process. The crate's
//! `AsyncMetaClient` hides its connections (and transparently redials them), so it cannot
//! give that guarantee. Its wire layer also only speaks meta commands, and the item-creating
//! writes must be the classic `add` / `cas` (see [`Batch::add`]). Its default routing hash
//! (`DefaultHasher`) is not stable across Rust releases either, which would let two builds
//! disagree on where a lock lives (ours is in `keys.rs`).

use std::io;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The longest data block we accept in a reply: owner tokens and counters are tiny, and a
/// semaphore's or read-write lock's item is bounded below it (`holders_item.rs`).
pub(crate) const MAX_VALUE: usize = 64 * 1024;
/// The longest reply line we accept.
const MAX_LINE: usize = 4096;

/// The key of the server identity item (outside every namespace: namespaces only make
/// keys with `:l:`, `:f:`, `:n:`, `:s:` and `:w:`).
pub(crate) const IDENTITY_KEY: &str = "distlock:server-identity";

/// One memcached process, as identified by the random nonce in its identity item.
///
/// The first client to connect to a fresh process adds the item (`add`, no expiry) with a
/// random 128-bit nonce; every later connection reads the same nonce. A restarted process
/// starts empty, so it gets a new nonce, even when it has the same pid and start second as
/// the old one (pid 1 in a container restarted within a second). If the item is evicted or
/// deleted, the next connection stores a new nonce: leases of the old one are then treated
/// as lost (a spurious lost signal, never a double grant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Epoch {
    pub(crate) nonce: u128,
}

/// A reply's return code (meta codes; the classic storage replies map onto them:
/// `STORED` = `HD`, `NOT_STORED` = `NS`, `EXISTS` = `EX`, `NOT_FOUND` = `NF`). `Refused` is
/// `ERROR` / `CLIENT_ERROR` / `SERVER_ERROR` with the server's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Code {
    /// `HD`: done, no value.
    Hd,
    /// `VA`: done, with a value.
    Va,
    /// `EN`: miss.
    En,
    /// `NS`: not stored (an `add` found the item).
    Ns,
    /// `EX`: the CAS did not match.
    Ex,
    /// `NF`: not found.
    Nf,
    /// `MN`: the no-op's answer.
    Mn,
    /// `VERSION <text>`: the answer to `version`, with its text.
    Version(String),
    /// The server refused the command.
    Refused(String),
}

/// One reply: its code, its flags (`c123`, `t5`, ...) and its data block.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) code: Code,
    flags: Vec<String>,
    pub(crate) value: Option<Vec<u8>>,
}

impl Reply {
    /// The value of the return flag `name` (`c` -> the CAS), if present.
    pub(crate) fn flag(&self, name: char) -> Option<&str> {
        self.flags.iter().find_map(|f| f.strip_prefix(name))
    }

    /// The return flag `name` as a number.
    pub(crate) fn flag_num<T: std::str::FromStr>(&self, name: char) -> Option<T> {
        self.flag(name).and_then(|v| v.parse().ok())
    }

    /// The data block as a UTF-8 string.
    pub(crate) fn text(&self) -> Option<&str> {
        self.value.as_deref().and_then(|v| std::str::from_utf8(v).ok())
    }
}

/// What can go wrong on the wire.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    /// The connection failed or closed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    /// The server said something we cannot parse.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server is configured in a way locks cannot work with (CAS disabled by `-C`).
    #[error("unusable server: {0}")]
    Unusable(String),
}

/// Requests pipelined in one write; the replies come back in the same order.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    buf: Vec<u8>,
    count: usize,
}

impl Batch {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn line(&mut self, line: &str, value: Option<&[u8]>) {
        self.buf.extend_from_slice(line.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
        if let Some(value) = value {
            self.buf.extend_from_slice(value);
            self.buf.extend_from_slice(b"\r\n");
        }
        self.count += 1;
    }

    /// `add <key> 0 <ttl> <len>`: store only if absent; `STORED` or `NOT_STORED`.
    ///
    /// The classic command, not `ms ... ME`: when memcached cannot allocate the new item
    /// (a full server started with `-M`), 1.6's `ms` unlinks the *existing* item in every
    /// mode, so a contender's failed add would delete the holder's lock. The classic `add`
    /// and `cas` leave it alone.
    pub(crate) fn add(&mut self, key: &str, value: &[u8], ttl_secs: u32) {
        self.line(&format!("add {key} 0 {ttl_secs} {}", value.len()), Some(value));
    }

    /// `cas <key> 0 <ttl> <len> <cas>`: replace only if the CAS matches; `STORED`, `EXISTS`
    /// or `NOT_FOUND`. Classic for the same reason as [`Batch::add`].
    pub(crate) fn replace_if_cas(&mut self, key: &str, value: &[u8], ttl_secs: u32, cas: u64) {
        self.line(
            &format!("cas {key} 0 {ttl_secs} {} {cas}", value.len()),
            Some(value),
        );
    }

    /// `md <key> C<cas>`: delete only if the CAS matches.
    pub(crate) fn delete_if_cas(&mut self, key: &str, cas: u64) {
        self.line(&format!("md {key} C{cas}"), None);
    }

    /// `mg <key> <flags>`.
    pub(crate) fn get(&mut self, key: &str, flags: &str) {
        self.line(&format!("mg {key} {flags}"), None);
    }

    /// `ma <key> N<ttl> J<seed> T<ttl> v`: increment, creating the counter at `seed` if it
    /// is missing; returns the new value.
    pub(crate) fn incr_or_seed(&mut self, key: &str, seed: u64, ttl_secs: u32) {
        self.line(&format!("ma {key} N{ttl_secs} J{seed} T{ttl_secs} v"), None);
    }

    /// `mn`: the no-op.
    pub(crate) fn noop(&mut self) {
        self.line("mn", None);
    }

    /// `version`.
    pub(crate) fn version(&mut self) {
        self.line("version", None);
    }
}

/// One connection to one server process.
#[derive(Debug)]
pub(crate) struct Conn {
    stream: BufReader<TcpStream>,
    epoch: Epoch,
}

impl Conn {
    /// Connects, checks the server's `version` ([`crate::server_version`]) and learns the
    /// server process's identity: `add` of the identity item with a fresh nonce (no expiry;
    /// `NOT_STORED` when another client was first) and `mg <identity> c v`, which returns the
    /// nonce in force, all three pipelined. **One round trip** (a second only if the item
    /// vanished between the two commands).
    ///
    /// A server older than memcached 1.6.13, or one that is not memcached, is refused
    /// ([`WireError::Unusable`]). The same read shows whether the server hands out CAS
    /// values: a server started with `-C` answers `c0`, and every CAS-guarded command would
    /// fail, so it is refused too.
    pub(crate) async fn open(addr: &str) -> Result<Self, WireError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let mut conn = Self {
            stream: BufReader::new(stream),
            epoch: Epoch { nonce: 0 },
        };
        for _ in 0..3 {
            let nonce = format!("{:032x}", distlock_core::OwnerToken::new().as_uuid().as_u128());
            let mut batch = Batch::new();
            batch.version();
            batch.add(IDENTITY_KEY, nonce.as_bytes(), 0);
            batch.get(IDENTITY_KEY, "c v");
            let replies = conn.exchange(&batch).await?;
            let [version, added, item] = replies.as_slice() else {
                return Err(WireError::Protocol(
                    "the identity exchange got no replies".to_owned(),
                ));
            };
            match &version.code {
                Code::Version(text) => crate::server_version::check(text).map_err(WireError::Unusable)?,
                other => {
                    return Err(WireError::Unusable(format!(
                        "the server answers `version` with {other:?}: not memcached"
                    )))
                }
            }
            // A full server started with `-M` refuses the `add` (it allocates before it
            // looks for the key); the item stored by an earlier client still identifies it.
            match (&item.code, &added.code) {
                (Code::Va, _) => {}
                (Code::En, Code::Refused(message)) => {
                    return Err(WireError::Protocol(format!(
                        "the server refused to store its identity item: {message}"
                    )))
                }
                (Code::En, _) => continue, // evicted or deleted in between: store a new one
                (other, _) => {
                    return Err(WireError::Protocol(format!(
                        "unexpected reply {other:?} reading the identity item"
                    )))
                }
            }
            if item.flag_num::<u64>('c') == Some(0) {
                return Err(WireError::Unusable(
                    "the server reports CAS 0: it was started with -C (CAS disabled), \
                     and locks cannot be released or renewed safely without CAS"
                        .to_owned(),
                ));
            }
            conn.epoch = Epoch {
                nonce: nonce_of(item)?,
            };
            return Ok(conn);
        }
        Err(WireError::Protocol(
            "the identity item vanished three times in a row".to_owned(),
        ))
    }

    /// The nonce the server process's identity item holds now (`None` if it has none), read
    /// on this connection. **1 round trip.**
    pub(crate) async fn read_identity(&mut self) -> Result<Option<u128>, WireError> {
        let mut batch = Batch::new();
        batch.get(IDENTITY_KEY, "v");
        let replies = self.exchange(&batch).await?;
        match replies.first() {
            Some(item) if item.code == Code::Va => nonce_of(item).map(Some),
            Some(item) if item.code == Code::En => Ok(None),
            other => Err(WireError::Protocol(format!(
                "unexpected reply {other:?} reading the identity item"
            ))),
        }
    }

    /// The server process this connection reaches.
    pub(crate) fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// Whether an idle connection can be reused: nothing buffered, and the peer has not
    /// closed it (a non-blocking read would block). No round trip.
    pub(crate) fn is_reusable(&self) -> bool {
        if !self.stream.buffer().is_empty() {
            return false;
        }
        let mut probe = [0u8; 1];
        matches!(self.stream.get_ref().try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Writes the batch in one go and reads one reply per request.
    ///
    /// Cancel safety: not cancel safe; a connection whose exchange was dropped midway must
    /// be discarded (the pool does so).
    pub(crate) async fn exchange(&mut self, batch: &Batch) -> Result<Vec<Reply>, WireError> {
        self.stream.get_mut().write_all(&batch.buf).await?;
        let mut replies = Vec::with_capacity(batch.count);
        for _ in 0..batch.count {
            replies.push(read_reply(&mut self.stream).await?);
        }
        Ok(replies)
    }
}

/// The nonce in an identity item's value.
fn nonce_of(item: &Reply) -> Result<u128, WireError> {
    item.text()
        .filter(|t| t.len() == 32)
        .and_then(|t| u128::from_str_radix(t, 16).ok())
        .ok_or_else(|| {
            WireError::Protocol(format!(
                "the identity item {IDENTITY_KEY} holds {:?}, not a nonce",
                item.text()
            ))
        })
}

async fn read_line(stream: &mut BufReader<TcpStream>) -> Result<String, WireError> {
    let mut line = Vec::new();
    let read = (&mut *stream)
        .take(MAX_LINE as u64)
        .read_until(b'\n', &mut line)
        .await?;
    if read == 0 {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
    }
    if !line.ends_with(b"\r\n") {
        return Err(WireError::Protocol("reply line too long or cut short".to_owned()));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|_| WireError::Protocol("reply line is not UTF-8".to_owned()))
}

async fn read_reply(stream: &mut BufReader<TcpStream>) -> Result<Reply, WireError> {
    let line = read_line(stream).await?;
    let mut tokens = line.split(' ').filter(|t| !t.is_empty());
    let first = tokens.next().unwrap_or_default();
    let code = match first {
        "HD" | "STORED" => Code::Hd,
        "VA" => Code::Va,
        "EN" => Code::En,
        "NS" | "NOT_STORED" => Code::Ns,
        "EX" | "EXISTS" => Code::Ex,
        "NF" | "NOT_FOUND" => Code::Nf,
        "MN" => Code::Mn,
        "VERSION" => {
            let text = line.strip_prefix("VERSION").unwrap_or_default().trim();
            return Ok(Reply {
                code: Code::Version(text.to_owned()),
                flags: Vec::new(),
                value: None,
            });
        }
        "ERROR" | "CLIENT_ERROR" | "SERVER_ERROR" => {
            return Ok(Reply {
                code: Code::Refused(line.clone()),
                flags: Vec::new(),
                value: None,
            })
        }
        _ => return Err(WireError::Protocol(format!("unexpected reply {line:?}"))),
    };
    let mut value = None;
    if code == Code::Va {
        let len: usize = tokens
            .next()
            .and_then(|t| t.parse().ok())
            .filter(|len| *len <= MAX_VALUE)
            .ok_or_else(|| WireError::Protocol(format!("bad value length in {line:?}")))?;
        let mut data = vec![0u8; len + 2];
        stream.read_exact(&mut data).await?;
        if !data.ends_with(b"\r\n") {
            return Err(WireError::Protocol("value block without CRLF".to_owned()));
        }
        data.truncate(len);
        value = Some(data);
    }
    Ok(Reply {
        code,
        flags: tokens.map(str::to_owned).collect(),
        value,
    })
}

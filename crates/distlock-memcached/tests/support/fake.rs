//! A tiny stand-in memcached on loopback: the few commands the backend sends, over a map of
//! items with CAS values, answering `version` with a version string of the test's choosing.
//! It lets a test be a server that real memcached cannot be on demand: an old release, or one
//! whose items change between two of the client's round trips.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// How the stand-in behaves.
#[derive(Debug, Clone)]
pub struct Behaviour {
    /// What `version` answers (`VERSION <this>`).
    pub version: String,
    /// Before each `cas` of a key other than the identity item, another write changes the
    /// item's CAS (its value unchanged): the `cas` then fails with `EXISTS`.
    pub bump_cas_before_cas: bool,
}

#[derive(Debug, Default)]
struct Items {
    next_cas: u64,
    map: HashMap<String, (Vec<u8>, u64)>,
}

impl Items {
    fn cas(&mut self) -> u64 {
        self.next_cas += 1;
        self.next_cas
    }
}

/// A running stand-in; it stops with the test's runtime.
#[derive(Clone)]
pub struct FakeMemcached {
    pub addr: String,
    items: Arc<Mutex<Items>>,
}

impl FakeMemcached {
    pub async fn start(behaviour: Behaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("bound").to_string();
        let items = Arc::new(Mutex::new(Items::default()));
        let shared = items.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, behaviour.clone(), shared.clone()));
            }
        });
        Self { addr, items }
    }

    /// Whether an item is stored under `key`.
    pub fn has(&self, key: &str) -> bool {
        self.items
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map
            .contains_key(key)
    }
}

async fn serve(stream: TcpStream, behaviour: Behaviour, items: Arc<Mutex<Items>>) {
    let mut stream = BufReader::new(stream);
    loop {
        let mut line = String::new();
        match stream.read_line(&mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let data = match words.as_slice() {
            ["add" | "cas", _, _, _, len, ..] => {
                let len: usize = len.parse().unwrap_or(0);
                let mut data = vec![0_u8; len + 2];
                if stream.read_exact(&mut data).await.is_err() {
                    return;
                }
                data.truncate(len);
                data
            }
            _ => Vec::new(),
        };
        let reply = answer(
            &words,
            data,
            &behaviour,
            &mut items.lock().unwrap_or_else(PoisonError::into_inner),
        );
        if stream.get_mut().write_all(&reply).await.is_err() {
            return;
        }
    }
}

fn answer(words: &[&str], data: Vec<u8>, behaviour: &Behaviour, items: &mut Items) -> Vec<u8> {
    let text = |s: &str| format!("{s}\r\n").into_bytes();
    match words {
        ["version"] => text(&format!("VERSION {}", behaviour.version)),
        ["mn"] => text("MN"),
        ["add", key, ..] => {
            if items.map.contains_key(*key) {
                return text("NOT_STORED");
            }
            let cas = items.cas();
            items.map.insert((*key).to_owned(), (data, cas));
            text("STORED")
        }
        ["cas", key, _, _, _, want] => {
            if behaviour.bump_cas_before_cas && !key.contains("server-identity") {
                let cas = items.cas();
                if let Some(item) = items.map.get_mut(*key) {
                    item.1 = cas;
                }
            }
            let cas = items.cas();
            match items.map.get_mut(*key) {
                None => text("NOT_FOUND"),
                Some(item) if want.parse() == Ok(item.1) => {
                    *item = (data, cas);
                    text("STORED")
                }
                Some(_) => text("EXISTS"),
            }
        }
        ["md", key, flags @ ..] => {
            let want = flags
                .iter()
                .find_map(|f| f.strip_prefix('C'))
                .and_then(|c| c.parse::<u64>().ok());
            match items.map.get(*key) {
                None => text("NF"),
                Some(item) if want.is_none_or(|want| want == item.1) => {
                    items.map.remove(*key);
                    text("HD")
                }
                Some(_) => text("EX"),
            }
        }
        ["mg", key, flags @ ..] => match items.map.get(*key) {
            None => text("EN"),
            Some((value, cas)) => {
                let mut out: Vec<String> = Vec::new();
                for flag in flags {
                    match *flag {
                        "c" => out.push(format!("c{cas}")),
                        "t" => out.push("t-1".to_owned()),
                        _ => {}
                    }
                }
                if flags.contains(&"v") {
                    let mut reply = text(&format!("VA {} {}", value.len(), out.join(" ")));
                    reply.extend_from_slice(value);
                    reply.extend_from_slice(b"\r\n");
                    reply
                } else {
                    text(&format!("HD {}", out.join(" ")))
                }
            }
        },
        ["ma", key, flags @ ..] => {
            let seed: u64 = flags
                .iter()
                .find_map(|f| f.strip_prefix('J'))
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let cas = items.cas();
            let next = match items.map.get(*key) {
                Some((value, _)) => {
                    std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0)
                        + 1
                }
                None => seed,
            };
            let value = next.to_string().into_bytes();
            items.map.insert((*key).to_owned(), (value.clone(), cas));
            let mut reply = text(&format!("VA {}", value.len()));
            reply.extend_from_slice(&value);
            reply.extend_from_slice(b"\r\n");
            reply
        }
        _ => text("ERROR"),
    }
}

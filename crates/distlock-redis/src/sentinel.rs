//! Redis with Sentinel (`redis+sentinel://`): the parsing of its URL and the discovery of the
//! current primary through the Sentinels.
//!
//! Discovery is the `redis` crate's Sentinel client: it asks the Sentinels in turn for the
//! masters they monitor (`SENTINEL MASTERS`), takes the named one unless it is marked down,
//! connects to it and checks that it says it is a master (`ROLE`). Its answer is kept: new
//! connections to the data (the shared one, the pub/sub one, those that `WAIT` for replicas)
//! go to it until a connection breaks, times out, is refused or meets a replica (`READONLY`):
//! then it is forgotten ([`SentinelTarget::forget`]) and the next connection asks the
//! Sentinels again, so that after a failover the client reaches the promoted primary. It also
//! listens to the Sentinels' `+switch-master` announcements (one pub/sub connection to one
//! Sentinel at a time, per client): a switch of this primary forgets it and counts a switch
//! ([`SentinelTarget::switches`]), so that connections opened before it are dropped even if
//! the old primary still answers (it does until the Sentinels demote it). It owns no
//! connection to the data itself.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use distlock_core::{Error, Result};
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};

use crate::config::{redact, tcp_settings, ReplicaAck};

/// How long `WAIT` waits for the replicas by default when a `redis+sentinel://` URL asks for
/// them (`wait_for_replicas=N`, no `replica_timeout`).
pub const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_secs(1);

/// The Sentinels of one primary, and how to reach the data servers they name.
#[derive(Clone)]
pub(crate) struct SentinelTarget {
    /// The Sentinel client (its connections to the Sentinels are cached), shared by clones.
    sentinels: Arc<tokio::sync::Mutex<Sentinel>>,
    /// The name the Sentinels monitor the primary under.
    master: String,
    /// Credentials, database and TLS of the data servers.
    node: Arc<SentinelNodeConnectionInfo>,
    /// The primary last discovered, until forgotten.
    current: Arc<std::sync::Mutex<Option<redis::Client>>>,
    /// How many switches of this primary the Sentinels announced.
    switches: Arc<AtomicU64>,
    /// The Sentinels' addresses, for the announcements.
    addresses: Arc<Vec<redis::ConnectionInfo>>,
    /// Whether the announcements are listened to.
    listening: Arc<AtomicBool>,
}

impl SentinelTarget {
    /// A client of the current primary: the one last discovered, else the one the Sentinels
    /// name now and that confirms it (`ROLE`), one discovery at a time for every caller.
    /// Unbounded in time: the callers bound it.
    pub(crate) async fn primary(&self) -> redis::RedisResult<redis::Client> {
        if let Some(client) = self.cached() {
            return Ok(client);
        }
        let mut sentinels = self.sentinels.lock().await;
        if let Some(client) = self.cached() {
            return Ok(client); // another caller discovered it meanwhile
        }
        // Boxed: the redis crate's discovery is a deep future, and nested in every caller's
        // (`distlock::open`'s, an application's `main`) it overflowed the compiler's query depth.
        let client = Box::pin(sentinels.async_master_for(&self.master, Some(&self.node))).await?;
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(client.clone());
        Ok(client)
    }

    /// Forgets the primary discovered: a connection to it broke, timed out, was refused or
    /// met a replica, so the next connection asks the Sentinels again.
    pub(crate) fn forget(&self) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// How many switches of this primary the Sentinels announced since this client started
    /// listening: a connection opened before the last one goes to a replaced primary.
    pub(crate) fn switches(&self) -> u64 {
        self.switches.load(Ordering::SeqCst)
    }

    /// Starts listening to the Sentinels' `+switch-master` announcements, once per client
    /// (call it within a Tokio runtime). The listener ends when the client is dropped.
    pub(crate) fn listen(&self) {
        if self.listening.swap(true, Ordering::SeqCst) {
            return;
        }
        tokio::spawn(listen(
            Arc::downgrade(&self.switches),
            Arc::downgrade(&self.current),
            self.addresses.clone(),
            self.master.clone(),
        ));
    }

    /// The name the Sentinels monitor the primary under.
    pub(crate) fn master(&self) -> &str {
        &self.master
    }

    /// The Sentinels' addresses, as the URL lists them.
    pub(crate) fn sentinel_addresses(&self) -> &[redis::ConnectionInfo] {
        &self.addresses
    }

    fn cached(&self) -> Option<redis::Client> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Listens to `+switch-master` on one Sentinel after another: a switch of `master` forgets the
/// primary discovered and counts a switch. Ends once the client is gone.
async fn listen(
    switches: Weak<AtomicU64>,
    current: Weak<std::sync::Mutex<Option<redis::Client>>>,
    addresses: Arc<Vec<redis::ConnectionInfo>>,
    master: String,
) {
    use futures::StreamExt;
    let mut next = 0;
    loop {
        if switches.strong_count() == 0 {
            return;
        }
        let address = addresses[next % addresses.len()].clone();
        next += 1;
        let subscribed = async {
            let mut pubsub = redis::Client::open(address)?.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            redis::RedisResult::Ok(pubsub.into_on_message())
        };
        if let Ok(Ok(mut messages)) = tokio::time::timeout(Duration::from_secs(2), subscribed).await {
            loop {
                // Wakes now and then to end once the client is gone.
                let message = match tokio::time::timeout(Duration::from_secs(5), messages.next()).await {
                    Ok(Some(message)) => message,
                    Ok(None) => break, // the connection ended: the next Sentinel
                    Err(_) if switches.strong_count() == 0 => return,
                    Err(_) => continue,
                };
                // `<master name> <old ip> <old port> <new ip> <new port>`
                let payload: String = message.get_payload().unwrap_or_default();
                if payload.split(' ').next() != Some(master.as_str()) {
                    continue;
                }
                let (Some(switches), Some(current)) = (switches.upgrade(), current.upgrade()) else {
                    return;
                };
                tracing::debug!(switch = %payload, "distlock-redis: the Sentinels switched the primary");
                *current.lock().unwrap_or_else(PoisonError::into_inner) = None;
                switches.fetch_add(1, Ordering::SeqCst);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Parses `redis+sentinel://[user:pass@]s1:p1[,s2:p2...]/<master>[?db=N&wait_for_replicas=N&replica_timeout=1s]`
/// (`rediss+sentinel://` for TLS to the Sentinels and the data servers): the credentials and
/// the database are the data servers'; the Sentinels are asked without credentials.
pub(crate) fn parse_url(url: &str) -> Result<(SentinelTarget, Option<ReplicaAck>)> {
    let bad = |why: &str| {
        Error::invalid_config(format!(
            "not a Redis Sentinel URL (redis+sentinel://host1:port1[,host2:port2...]/master-name): {why}: {}",
            redact(url)
        ))
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
    let (node_scheme, tls) = match scheme {
        "redis+sentinel" => ("redis", false),
        "rediss+sentinel" => ("rediss", true),
        _ => return Err(bad("another scheme")),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    if hosts.is_empty() || hosts.split(',').any(str::is_empty) {
        return Err(bad("an empty host"));
    }
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let master = path.strip_prefix('/').unwrap_or(path);
    if master.is_empty() || master.contains('/') {
        return Err(bad("the path must be the master's name"));
    }
    let mut db = 0;
    let mut count = 0;
    let mut timeout = DEFAULT_REPLICA_TIMEOUT;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "db" => {
                db = value
                    .parse()
                    .map_err(|_| bad(&format!("db={value:?} is not a number")))?
            }
            "wait_for_replicas" => {
                count = value
                    .parse()
                    .map_err(|_| bad(&format!("wait_for_replicas={value:?} is not a count")))?
            }
            "replica_timeout" => {
                timeout = humantime::parse_duration(value)
                    .map_err(|e| bad(&format!("replica_timeout={value:?} is not a duration: {e}")))?
            }
            other => return Err(bad(&format!("unknown parameter {other:?}"))),
        }
    }
    let sentinels = hosts
        .split(',')
        .map(|host| {
            let client = crate::config::parse_url(&format!("{node_scheme}://{host}"))?;
            Ok(client.get_connection_info().clone())
        })
        .collect::<Result<Vec<_>>>()?;
    let mut redis_info = redis::RedisConnectionInfo::default().set_db(db);
    if let Some(userinfo) = userinfo {
        let (user, pass) = userinfo.split_once(':').unwrap_or((userinfo, ""));
        if !user.is_empty() {
            redis_info = redis_info.set_username(decode(user).map_err(|why| bad(&why))?);
        }
        if !pass.is_empty() {
            redis_info = redis_info.set_password(decode(pass).map_err(|why| bad(&why))?);
        }
    }
    let mut node = SentinelNodeConnectionInfo::default()
        .set_redis_connection_info(redis_info)
        .set_tcp_settings(tcp_settings());
    if tls {
        node = node.set_tls_mode(redis::TlsMode::Secure);
    }
    let addresses = Arc::new(sentinels.clone());
    let sentinel = Sentinel::build(sentinels).map_err(|e| bad(&e.to_string()))?;
    let replicas = (count > 0).then_some(ReplicaAck { count, timeout });
    Ok((
        SentinelTarget {
            sentinels: Arc::new(tokio::sync::Mutex::new(sentinel)),
            master: master.to_owned(),
            node: Arc::new(node),
            current: Arc::default(),
            switches: Arc::default(),
            addresses,
            listening: Arc::default(),
        },
        replicas,
    ))
}

/// A URL's user or password, percent-decoded.
fn decode(part: &str) -> std::result::Result<String, String> {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = part
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "a malformed percent escape in the user info".to_owned())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the user info is not UTF-8".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls() {
        let (target, replicas) =
            parse_url("redis+sentinel://u:p%40ss@a:1,b:2,c:3/mymaster?db=2&wait_for_replicas=1")
                .expect("valid");
        assert_eq!(target.master, "mymaster");
        assert_eq!(
            replicas,
            Some(ReplicaAck {
                count: 1,
                timeout: DEFAULT_REPLICA_TIMEOUT
            })
        );
        let (_, replicas) =
            parse_url("redis+sentinel://a:1/m?wait_for_replicas=2&replica_timeout=250ms").expect("valid");
        assert_eq!(replicas.map(|r| r.timeout), Some(Duration::from_millis(250)));
        assert_eq!(parse_url("redis+sentinel://a:1/m").expect("valid").1, None);
        for bad in [
            "redis+sentinel://",
            "redis+sentinel://a:1",
            "redis+sentinel://a:1/",
            "redis+sentinel://a:1,,b:2/m",
            "redis+sentinel://a:port/m",
            "redis+sentinel://a:1/m/0",
            "redis+sentinel://a:1/m?db=x",
            "redis+sentinel://a:1/m?wait_for_replicas=-1",
            "redis+sentinel://a:1/m?replica_timeout=soon",
            "redis+sentinel://a:1/m?nosuch=1",
            "redis+sentinel://u:%zz@a:1/m",
            "sentinel://a:1/m",
        ] {
            assert!(
                matches!(parse_url(bad), Err(Error::InvalidConfig { .. })),
                "{bad}"
            );
        }
        let err = parse_url("redis+sentinel://u:hunter2@a:1/m?nosuch=1")
            .err()
            .expect("refused");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}

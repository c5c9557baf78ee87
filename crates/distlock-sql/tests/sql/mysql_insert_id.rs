//! MySQL's acquire learns whether it won from the `last_insert_id` of its OK packet. A server
//! or proxy that reports 0 there (MySQL-compatible services and proxies do not all pass
//! `LAST_INSERT_ID(expr)` on) must not turn a won lock into a phantom hold that nobody knows
//! is held: the acquire reads the row by its owner instead. The test puts a proxy between
//! client and MariaDB that reports 0 in every OK packet that carried a version.
#![cfg(feature = "mysql")]

use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, LockName, OwnerToken, TryAcquire};
use distlock_sql::SqlConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Versions are the clock in µs (about 2^50.6 now); "held" answers are 2^62 and above.
const VERSIONS: std::ops::Range<u64> = (1 << 50)..(1 << 62);

/// A length-encoded integer at the start of `bytes`: its value and length.
fn lenenc(bytes: &[u8]) -> Option<(u64, usize)> {
    match *bytes.first()? {
        n @ 0..=0xfa => Some((u64::from(n), 1)),
        0xfc => Some((
            u64::from(u16::from_le_bytes(bytes.get(1..3)?.try_into().ok()?)),
            3,
        )),
        0xfd => {
            let b = bytes.get(1..4)?;
            Some((u64::from(b[0]) | u64::from(b[1]) << 8 | u64::from(b[2]) << 16, 4))
        }
        0xfe => Some((u64::from_le_bytes(bytes.get(1..9)?.try_into().ok()?), 9)),
        _ => None,
    }
}

/// An OK packet's payload with a version as its `last_insert_id`, rewritten to report 0.
fn zero_insert_id(payload: &[u8]) -> Option<Vec<u8>> {
    if payload.first() != Some(&0) {
        return None;
    }
    let (_, affected) = lenenc(&payload[1..])?;
    let at = 1 + affected;
    let (id, id_len) = lenenc(&payload[at..])?;
    if !VERSIONS.contains(&id) || payload.len() < at + id_len + 4 {
        return None;
    }
    let mut out = payload[..at].to_vec();
    out.push(0);
    out.extend_from_slice(&payload[at + id_len..]);
    Some(out)
}

/// Copies the server's packets to the client, rewriting OK packets as [`zero_insert_id`].
async fn server_to_client(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf) {
    let mut header = [0u8; 4];
    while from.read_exact(&mut header).await.is_ok() {
        let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
        let mut payload = vec![0u8; len];
        if from.read_exact(&mut payload).await.is_err() {
            return;
        }
        if let Some(rewritten) = zero_insert_id(&payload) {
            payload = rewritten;
        }
        let len = payload.len().to_le_bytes();
        let out = [&[len[0], len[1], len[2], header[3]][..], &payload].concat();
        if to.write_all(&out).await.is_err() {
            return;
        }
    }
}

async fn proxy(upstream: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(&upstream).await.expect("reaches mariadb");
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::spawn(async move {
                let (mut r, mut w) = (client_read, server_write);
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
            tokio::spawn(server_to_client(server_read, client_write));
        }
    });
    addr.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_won_acquire_reported_without_its_version_is_not_a_phantom_hold() {
    let url = tokio::task::spawn_blocking(distlock_testkit::shared::mysql_url)
        .await
        .expect("the starter thread")
        .expect("the shared mariadbd starts (run scripts/install-test-deps to install mariadb-server)");
    // Create the tables directly, then go through the proxy.
    SqlConfig::from_url(&url)
        .expect("a URL")
        .build()
        .await
        .expect("connects")
        .close()
        .await;
    let (head, rest) = url.split_once('@').expect("user@host");
    let (host, db) = rest.split_once('/').expect("host/db");
    let proxied = format!("{head}@{}/{db}", proxy(host.to_owned()).await);
    let lock = SqlConfig::from_url(&proxied)
        .expect("a URL")
        .with_purge_after(None)
        .expect("valid")
        .build()
        .await
        .expect("connects through the proxy");

    let name = LockName::new(format!("insert-id-{}", uuid::Uuid::new_v4())).expect("a name");
    let ttl = Duration::from_secs(30);
    let lease = match lock.try_acquire(&name, OwnerToken::new(), ttl).await {
        Ok(TryAcquire::Acquired(lease)) => lease,
        other => panic!(
            "a free lock, its version unreported: {other:?} (the lock is ours, held by nobody who knows)"
        ),
    };
    assert!(lease.fencing_token().is_some(), "the token is read from the row");
    match lock.try_acquire(&name, OwnerToken::new(), ttl).await {
        Ok(TryAcquire::Held(_)) => {}
        other => panic!("another owner: {other:?}"),
    }
    assert!(lock.release(&lease).await.expect("releases"));
    lock.close().await;
}

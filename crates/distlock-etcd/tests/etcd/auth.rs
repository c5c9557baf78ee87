//! A cluster with authentication on: credentials in the URL, a wrong password refused with a
//! clear error, and a token that expires renewed without the caller seeing it.

use std::time::Duration;

use distlock_core::{Error, LockClient};
use distlock_etcd::EtcdLock;
use distlock_testkit::{etcdctl, EtcdOptions, EtcdServer};

/// A member with auth enabled (user `root`, password `s3cret`, role root) whose tokens live
/// `token_ttl_secs`.
async fn server_with_auth(token_ttl_secs: u32) -> EtcdServer {
    tokio::task::spawn_blocking(move || {
        let server = EtcdServer::start_with(EtcdOptions {
            extra_args: vec![format!("--auth-token-ttl={token_ttl_secs}")],
            ..EtcdOptions::default()
        })?;
        let endpoint = server.endpoint();
        etcdctl(&endpoint, &["user", "add", "root:s3cret"])?;
        etcdctl(&endpoint, &["auth", "enable"])?;
        Ok::<_, distlock_testkit::HarnessError>(server)
    })
    .await
    .expect("joined")
    .expect("etcd starts with auth enabled (run scripts/install-test-deps)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_the_url_lock_and_a_wrong_password_is_refused() {
    let server = server_with_auth(300).await;
    let url = format!("etcd://root:s3cret@127.0.0.1:{}", server.port());
    let client = LockClient::new(EtcdLock::connect_url(&url).await.expect("authenticates"));
    let guard = client.try_acquire("auth").await.expect("try").expect("free");
    guard.release().await.expect("released");

    let wrong = format!("etcd://root:nope@127.0.0.1:{}", server.port());
    let outcome = EtcdLock::connect_url(&wrong).await;
    match outcome {
        Err(error @ Error::Backend { .. }) => {
            let text = error.to_string();
            assert!(text.contains("authentication failed"), "{text}");
            assert!(!text.contains("nope"), "the password is not shown: {text}");
        }
        other => panic!("a wrong password is a backend error, not a retry: {other:?}"),
    }
    let anonymous = EtcdLock::connect_url(&server.url()).await;
    assert!(
        matches!(anonymous, Err(Error::Backend { .. })),
        "no credentials on a cluster that asks for them: {anonymous:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_renewed_and_the_lock_kept() {
    let server = server_with_auth(1).await;
    let url = format!("etcd://root:s3cret@127.0.0.1:{}?lease_ttl=3s", server.port());
    let client = LockClient::new(EtcdLock::connect_url(&url).await.expect("authenticates"));
    let guard = client.try_acquire("auth-ttl").await.expect("try").expect("free");
    // Past two token lifetimes and a lease TTL: the keeper's keep-alives and this release
    // need new tokens.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!guard.is_lost(), "the lock outlived its tokens");
    assert!(guard.release().await.expect("released with a new token"));
    let log = std::fs::read_to_string(server.dir().join("server.log")).expect("the server's log");
    assert!(
        log.contains("invalid auth token"),
        "the server refused an expired token at least once (else this test proves nothing)"
    );
}

/// The keep-alive stream opened again after the token expired (its connection reset) gets a
/// new token: the lock is kept, not lost for an expired token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_stream_opened_again_after_the_token_expired_keeps_the_lock() {
    let server = server_with_auth(1).await;
    let proxy = distlock_testkit::FaultProxy::start(server.addr()).expect("the proxy starts");
    let url = format!("etcd://root:s3cret@{}?lease_ttl=3s", proxy.host_port());
    let client = LockClient::new(EtcdLock::connect_url(&url).await.expect("authenticates"));
    let guard = client
        .try_acquire("auth-reset")
        .await
        .expect("try")
        .expect("free");
    // The token expires (nothing used it for more than its second), then the connection
    // resets: the keep-alive stream must be opened again, with a token.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    proxy.reset();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        !guard.is_lost(),
        "the lock outlived the reset, two lease TTLs later"
    );
    assert!(guard.release().await.expect("released"));
}

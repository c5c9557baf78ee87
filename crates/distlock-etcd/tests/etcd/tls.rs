//! `etcds://`: the client talks to etcd over TLS, trusting the CA named by `ca=` (and no
//! other: a server whose certificate another CA signed is refused).
#![cfg(feature = "tls")]

use std::path::Path;

use distlock_core::{Error, LockClient};
use distlock_etcd::EtcdLock;
use distlock_testkit::{EtcdOptions, EtcdServer, EtcdTls};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

/// A CA and a server certificate for 127.0.0.1 that it signed, written to `dir`: the CA's PEM
/// file and the server's options.
fn certificates(dir: &Path) -> (std::path::PathBuf, EtcdTls) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().expect("CA key");
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let server_key = KeyPair::generate().expect("server key");
    let server = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .expect("server params")
        .signed_by(&server_key, &issuer)
        .expect("server certificate");
    let write = |name: &str, pem: String| {
        let path = dir.join(name);
        std::fs::write(&path, pem).expect("written");
        path
    };
    let ca_file = write("ca.pem", ca.pem());
    let tls = EtcdTls {
        cert_file: write("server.pem", server.pem()),
        key_file: write("server-key.pem", server_key.serialize_pem()),
    };
    (ca_file, tls)
}

async fn server_with(tls: EtcdTls) -> EtcdServer {
    tokio::task::spawn_blocking(move || {
        EtcdServer::start_with(EtcdOptions {
            client_tls: Some(tls),
            ..EtcdOptions::default()
        })
    })
    .await
    .expect("joined")
    .expect("etcd starts with TLS (run scripts/install-test-deps)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_over_tls_with_the_ca_named_in_the_url() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ca, tls) = certificates(dir.path());
    let server = server_with(tls).await;
    let port = server.tls_port().expect("a TLS port");
    let url = format!("etcds://127.0.0.1:{port}?ca={}", ca.display());
    let client = LockClient::new(EtcdLock::connect_url(&url).await.expect("connects over TLS"));
    let guard = client.try_acquire("tls").await.expect("try").expect("free");
    assert!(guard.fencing_token().is_some());
    guard.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_another_ca_signed_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, tls) = certificates(dir.path());
    let other = tempfile::tempdir().expect("temp dir");
    let (other_ca, _) = certificates(other.path());
    let server = server_with(tls).await;
    let port = server.tls_port().expect("a TLS port");
    let url = format!(
        "etcds://127.0.0.1:{port}?ca={}&operation_timeout=2s",
        other_ca.display()
    );
    let outcome = EtcdLock::connect_url(&url).await;
    assert!(
        matches!(outcome, Err(Error::Unavailable { .. })),
        "an untrusted server is never talked to: {outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_ca_file_is_a_config_error() {
    let outcome = EtcdLock::connect_url("etcds://127.0.0.1:1?ca=/nonexistent/ca.pem").await;
    assert!(matches!(outcome, Err(Error::InvalidConfig { .. })), "{outcome:?}");
}

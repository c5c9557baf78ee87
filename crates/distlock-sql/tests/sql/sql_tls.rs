//! MySQL/MariaDB and PostgreSQL over TLS, asked for in the URL with sqlx's parameters
//! (`ssl-mode`, `ssl-ca` for MySQL; `sslmode`, `sslrootcert` for PostgreSQL): a lock is taken
//! and released over a connection the server reports as encrypted, and the server's
//! certificate is verified. The servers get a certificate for 127.0.0.1 signed by a test CA,
//! made with the `openssl` command.
#![cfg(all(unix, any(feature = "mysql", feature = "postgres")))]

use std::path::{Path, PathBuf};
use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, LockName, OwnerToken, TryAcquire};
use distlock_sql::{SqlConfig, SqlLock};

/// A certificate authority, and a certificate it signed for `127.0.0.1` with its key, in a
/// directory that `user` (the server's, when the tests run as root) can read.
struct Certificate {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn openssl(args: &[&str], dir: &Path) {
    let made = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("runs openssl (install the openssl package)");
    assert!(
        made.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&made.stderr)
    );
}

fn certificate(user: Option<&str>) -> Certificate {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().expect("a temporary directory");
    let at = dir.path();
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    openssl(
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=distlock test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ],
        at,
    );
    openssl(
        &[
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
        at,
    );
    std::fs::write(
        at.join("server.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
    )
    .expect("writes the extensions");
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ],
        at,
    );
    let (ca, cert, key) = (at.join("ca.crt"), at.join("server.crt"), at.join("server.key"));
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    if let Some(user) = user.filter(|_| is_root()) {
        let ids = |flag: &str| -> u32 {
            let out = std::process::Command::new("id")
                .args([flag, user])
                .output()
                .expect("runs id");
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("an id")
        };
        for file in [&cert, &key] {
            std::os::unix::fs::chown(file, Some(ids("-u")), Some(ids("-g"))).expect("chown");
        }
    }
    Certificate {
        _dir: dir,
        ca,
        cert,
        key,
    }
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

async fn take_and_release(lock: &SqlLock) {
    let name = LockName::new("over-tls").expect("a name");
    let owner = OwnerToken::new();
    let lease = match lock.try_acquire(&name, owner, Duration::from_secs(30)).await {
        Ok(TryAcquire::Acquired(lease)) => lease,
        other => panic!("acquiring over TLS: {other:?}"),
    };
    assert!(lock.release(&lease).await.expect("releases"));
}

fn url_path(path: &Path) -> String {
    path.display().to_string()
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls_from_the_url() {
    use distlock_testkit::{PostgresOptions, PostgresServer};

    let certificate = certificate(Some("postgres"));
    let options = PostgresOptions {
        extra_args: vec![
            "-c".into(),
            "ssl=on".into(),
            "-c".into(),
            format!("ssl_cert_file={}", certificate.cert.display()),
            "-c".into(),
            format!("ssl_key_file={}", certificate.key.display()),
        ],
        ..PostgresOptions::default()
    };
    let server = tokio::task::spawn_blocking(move || PostgresServer::start_with(options))
        .await
        .expect("the starter thread")
        .expect("postgres starts (run scripts/install-test-deps to install postgresql)");
    let url = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        server.url(),
        url_path(&certificate.ca)
    );
    let lock = SqlConfig::from_url(&url)
        .expect("a valid URL")
        .build()
        .await
        .expect("connects over TLS");
    take_and_release(&lock).await;
    let plain = server
        .sql(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.client_addr IS NOT NULL AND NOT s.ssl",
        )
        .expect("psql");
    let encrypted = server
        .sql(
            "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.client_addr IS NOT NULL AND s.ssl",
        )
        .expect("psql");
    assert_eq!(plain.trim(), "0", "no connection of the client is unencrypted");
    assert_ne!(encrypted.trim(), "0", "the client's connections are encrypted");
    lock.close().await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_over_tls_from_the_url() {
    use distlock_testkit::{MariaDbOptions, MariaDbServer};

    let certificate = certificate(None);
    let options = MariaDbOptions {
        extra_args: vec![
            format!("--ssl-cert={}", certificate.cert.display()),
            format!("--ssl-key={}", certificate.key.display()),
            // Unencrypted logins are refused: the client must use TLS.
            "--require-secure-transport=ON".into(),
        ],
        ..MariaDbOptions::default()
    };
    let server = tokio::task::spawn_blocking(move || MariaDbServer::start_with(options))
        .await
        .expect("the starter thread")
        .expect("mariadb starts (run scripts/install-test-deps to install mariadb-server)");
    let url = format!(
        "{}?ssl-mode=verify_identity&ssl-ca={}",
        server.url(),
        url_path(&certificate.ca)
    );
    let lock = SqlConfig::from_url(&url)
        .expect("a valid URL")
        .build()
        .await
        .expect("connects over TLS");
    take_and_release(&lock).await;
    lock.close().await;
}

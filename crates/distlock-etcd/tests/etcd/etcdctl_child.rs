//! A running `etcdctl` child process of the interop tests (`etcdctl lock`, `etcdctl elect`):
//! the lines it prints, and its interruption (SIGINT: it unlocks or resigns, then exits); and
//! the helpers both tests share.

use crate::support;

use std::process::Stdio;
use std::time::Duration;

use distlock_core::{LockClient, LockName, OwnerToken};
use distlock_etcd::EtcdLock;
use distlock_testkit::shared;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::timeout;

/// How long anything that should happen may take on a loaded machine.
pub(crate) const SOON: Duration = Duration::from_secs(15);

/// `etcdctl <args>` against an etcd, its printed lines read as they come.
pub(crate) struct EtcdctlChild {
    child: Child,
    printed: mpsc::UnboundedReceiver<String>,
}

impl EtcdctlChild {
    /// Starts `etcdctl <args>` against `url`.
    pub(crate) fn start(url: &str, args: &[&str]) -> Self {
        let mut child = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", support::endpoints(url)))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("etcdctl runs (run scripts/install-test-deps to install etcd-client)");
        let stdout = child.stdout.take().expect("piped");
        let (tx, printed) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self { child, printed }
    }

    /// The next line it prints, within [`SOON`].
    pub(crate) async fn line(&mut self, what: &str) -> String {
        timeout(SOON, self.printed.recv())
            .await
            .unwrap_or_else(|_| panic!("etcdctl prints in time: {what}"))
            .unwrap_or_else(|| panic!("etcdctl prints a line: {what}"))
    }

    /// The next line it prints within `within`, if any.
    pub(crate) async fn line_within(&mut self, within: Duration) -> Option<String> {
        timeout(within, self.printed.recv()).await.ok().flatten()
    }

    /// Whether it still runs.
    pub(crate) fn runs(&mut self) -> bool {
        self.child.try_wait().expect("etcdctl's status").is_none()
    }

    /// Interrupts it and waits for it to exit.
    pub(crate) async fn interrupt(mut self) {
        let pid = self.child.id().expect("etcdctl runs");
        let status = Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .await
            .expect("kill runs");
        assert!(status.success(), "kill -INT {pid}");
        timeout(SOON, self.child.wait())
            .await
            .expect("etcdctl exits once interrupted")
            .expect("etcdctl's status");
    }
}

/// The shared etcd's URL.
pub(crate) async fn url() -> String {
    tokio::task::spawn_blocking(shared::etcd_url)
        .await
        .expect("joined")
        .expect("the shared etcd starts (run scripts/install-test-deps)")
}

/// A distlock client of `url`, and its backend.
pub(crate) async fn client(url: &str) -> (LockClient, EtcdLock) {
    let backend = support::connect(url).await;
    (LockClient::new(backend.clone()), backend)
}

/// A fresh name.
pub(crate) fn fresh(what: &str) -> LockName {
    LockName::new(format!("{what}-{}", OwnerToken::new())).expect("a name")
}

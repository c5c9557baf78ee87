//! etcd's own election (`etcdctl elect`, its Go client's `concurrency.Election`) and a
//! distlock election on one name, given [`EtcdLock::lock_prefix`]: each sees the other's
//! leader and value, and they take office in one queue, on a real etcd.

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
const SOON: Duration = Duration::from_secs(15);

/// A running `etcdctl elect`: campaigning (it prints the leader's key and value once elected
/// and leads until interrupted, when it resigns) or observing with `-l` (it prints the key
/// and value of each leader).
struct Etcdctl {
    child: Child,
    printed: mpsc::UnboundedReceiver<String>,
}

impl Etcdctl {
    /// `etcdctl elect <args>` against `url`.
    fn start(url: &str, args: &[&str]) -> Self {
        let mut child = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", support::endpoints(url)))
            .arg("elect")
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

    /// The next leader it prints: its key and value.
    async fn leader(&mut self) -> (String, String) {
        let key = self.line().await;
        let value = self.line().await;
        (key, value)
    }

    async fn line(&mut self) -> String {
        timeout(SOON, self.printed.recv())
            .await
            .expect("etcdctl prints in time")
            .expect("etcdctl prints a line")
    }

    /// Interrupts it (a campaigner resigns) and waits for it to exit.
    async fn stop(mut self) {
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

async fn url() -> String {
    tokio::task::spawn_blocking(shared::etcd_url)
        .await
        .expect("joined")
        .expect("the shared etcd starts (run scripts/install-test-deps)")
}

async fn client(url: &str) -> (LockClient, EtcdLock) {
    let backend = support::connect(url).await;
    (LockClient::new(backend.clone()), backend)
}

fn fresh(what: &str) -> LockName {
    LockName::new(format!("{what}-{}", OwnerToken::new())).expect("a name")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_observes_our_leader_and_its_value() {
    let url = url().await;
    let (client, backend) = client(&url).await;
    let name = fresh("observed");
    let prefix = backend.lock_prefix(&name);
    let election = client.election(name).expect("elections on etcd");
    let leadership = election.campaign("ours:8080").await.expect("campaign");
    let mut observer = Etcdctl::start(&url, &["-l", prefix.trim_end_matches('/')]);
    let (key, value) = observer.leader().await;
    assert!(
        key.starts_with(&prefix),
        "etcdctl's leader key {key:?} is under {prefix:?}"
    );
    assert_eq!(value, "ours:8080", "etcdctl reads our leader's value");
    observer.stop().await;
    assert!(leadership.resign().await.expect("resigned"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_election_sees_etcdctls_leader_and_follows_it() {
    let url = url().await;
    let (client, backend) = client(&url).await;
    let name = fresh("theirs");
    let prefix = backend.lock_prefix(&name);
    let mut theirs = Etcdctl::start(&url, &[prefix.trim_end_matches('/'), "theirs:9090"]);
    let (key, value) = theirs.leader().await;
    assert!(
        key.starts_with(&prefix),
        "etcdctl's key {key:?} is under {prefix:?}"
    );
    assert_eq!(value, "theirs:9090");

    let election = client.election(name).expect("elections on etcd");
    let leader = election.leader().await.expect("leader").expect("etcdctl leads");
    assert_eq!(leader.value, "theirs:9090", "we read etcdctl's leader's value");
    assert!(leader.term.is_some(), "its term is its key's create revision");
    assert!(
        election.try_campaign("ours").await.expect("try").is_none(),
        "etcdctl leads: we do not"
    );
    let waiting = {
        let election = election.clone();
        tokio::spawn(async move { election.campaign("ours:8080").await.expect("campaign") })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "we wait while etcdctl leads");
    theirs.stop().await;
    let ours = timeout(SOON, waiting)
        .await
        .expect("we lead once etcdctl resigns")
        .expect("joined");
    assert!(ours.term() > leader.term, "our term is above etcdctl's");
    let now = election.leader().await.expect("leader").expect("a leader");
    assert_eq!(now.value, "ours:8080");
    assert!(ours.resign().await.expect("resigned"));
}

//! etcd's own election (`etcdctl elect`, its Go client's `concurrency.Election`) and a
//! distlock election on one name, given [`EtcdLock::lock_prefix`]: each sees the other's
//! leader and value, and they take office in one queue, on a real etcd.

use crate::etcdctl_child::{client, fresh, url, EtcdctlChild, SOON};

use std::time::Duration;

use tokio::time::timeout;

/// A running `etcdctl elect`: campaigning (it prints the leader's key and value once elected
/// and leads until interrupted, when it resigns) or observing with `-l` (it prints the key
/// and value of each leader).
struct Etcdctl(EtcdctlChild);

impl Etcdctl {
    /// `etcdctl elect <args>` against `url`.
    fn start(url: &str, args: &[&str]) -> Self {
        Self(EtcdctlChild::start(url, &[&["elect"], args].concat()))
    }

    /// The next leader it prints: its key and value.
    async fn leader(&mut self) -> (String, String) {
        let key = self.0.line("a leader's key").await;
        let value = self.0.line("a leader's value").await;
        (key, value)
    }

    /// Interrupts it (a campaigner resigns) and waits for it to exit.
    async fn stop(self) {
        self.0.interrupt().await;
    }
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

//! On standalone servers of their own: a holder process killed with kill -9 (its lock frees at
//! session expiry, within the session timeout plus a small margin), the guard's states on a
//! short and a long disconnection, the session timeout the server negotiates, and the cleanup
//! of empty lock parents.

use crate::support;

use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, LockClient, LockName, LossReason};
use distlock_testkit::{ZooKeeperOptions, ZooKeeperServer};
use distlock_zookeeper::ZooKeeperLock;
use support::ZkFixture;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// `<url>|<name>`: turns `holder_process` into a lock holder.
const HOLDER_ENV: &str = "DISTLOCK_ZK_TEST_HOLDER";
const HELD: &str = "DISTLOCK-ZK-HELD";

/// How much later than the session timeout the server may expire a session: its expiry runs
/// once per tick (500 ms in the harness), plus scheduling on a small machine.
const EXPIRY_MARGIN: Duration = Duration::from_millis(2000);

/// The child side: holds the lock until killed.
#[test]
#[ignore = "runs only as the child of kill9_holder_frees_at_session_expiry"]
fn holder_process() {
    let Ok(spec) = std::env::var(HOLDER_ENV) else {
        return;
    };
    let (url, name) = spec.split_once('|').expect("url|name");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let client = LockClient::new(support::connect(url).await);
        let guard = client.acquire(name).await.expect("the child acquires");
        println!("\n{HELD} {:?}", guard.fencing_token());
        std::future::pending::<()>().await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_holder_frees_at_session_expiry() {
    let fixture = ZkFixture::shared().await;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let name = LockName::new(format!("zk-kill9-{}", &run[..12])).expect("valid");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            &crate::test_name(module_path!(), "holder_process"),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOLDER_ENV, format!("{}|{name}", fixture.url()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the child starts");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.expect("reads") {
            if line.starts_with(HELD) {
                return;
            }
        }
        panic!("the child exited before holding the lock");
    })
    .await
    .expect("the child holds the lock");

    let client = LockClient::new(support::connect(fixture.url()).await);
    let waiter = tokio::spawn({
        let (client, name) = (client.clone(), name.clone());
        async move {
            let opts = AcquireOptions::new().wait_for(Duration::from_secs(60));
            let guard = client
                .acquire_with(&name, &opts)
                .await
                .expect("the waiter acquires");
            (Instant::now(), guard)
        }
    });
    tokio::time::timeout(Duration::from_secs(10), async {
        while fixture.contenders(&name).await.expect("listed").len() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the waiter queues behind the child");

    let killed_at = Instant::now();
    child.start_kill().expect("kill -9");
    child.wait().await.expect("reaped");
    let (acquired_at, guard) = waiter.await.expect("joined");
    let took = acquired_at - killed_at;
    println!(
        "acquired {took:?} after kill -9 (session timeout {:?})",
        support::SESSION_TIMEOUT
    );
    assert!(
        took >= support::SESSION_TIMEOUT / 2,
        "freed after {took:?}: kill -9 must not end the session before its timeout"
    );
    assert!(
        took <= support::SESSION_TIMEOUT + EXPIRY_MARGIN,
        "freed after {took:?}, past the session timeout plus {EXPIRY_MARGIN:?}"
    );
    assert!(guard.release().await.expect("released"));
}

/// A short outage suspends the guard and resuming the same session keeps the lock; an outage
/// longer than the session timeout loses it (Curator's rule), not before the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspended_on_disconnection_lost_after_the_session_timeout() {
    let session_timeout = Duration::from_secs(8);
    let server = tokio::task::spawn_blocking(ZooKeeperServer::start)
        .await
        .expect("joined")
        .expect("a server starts");
    let url = server.url();
    let server = Arc::new(Mutex::new(server));
    let config = support::config(&url)
        .with_session_timeout(session_timeout)
        .expect("valid");
    let backend = ZooKeeperLock::connect(config).await.expect("connects");
    let client = LockClient::new(backend.clone());
    let session = backend.session_id();

    // Short outage: suspended, then the same session is resumed and the lock kept.
    let guard = client.acquire("suspend").await.expect("acquired");
    kill(&server).await;
    wait_until(Duration::from_secs(5), || guard.is_suspended()).await;
    assert!(!guard.is_lost(), "a disconnection is not yet a loss");
    let restarted_at = Instant::now();
    restart(&server).await;
    println!("server back after {:?}", restarted_at.elapsed());
    wait_until(session_timeout, || !guard.is_suspended()).await;
    assert!(!guard.is_lost(), "the session survived, so did the lock");
    assert_eq!(backend.session_id(), session, "the same session");
    assert!(guard.release().await.expect("released"), "still ours");

    // Long outage: lost once the session timeout has passed without reconnecting.
    let guard = client.acquire("suspend").await.expect("acquired");
    let killed_at = Instant::now();
    kill(&server).await;
    let reason = tokio::time::timeout(session_timeout * 2, guard.lost())
        .await
        .expect("the loss is reported");
    let after = killed_at.elapsed();
    println!("lost {after:?} after the server died: {reason}");
    assert_eq!(reason, LossReason::SessionExpired);
    // Lost a safety margin (a tenth) before the server can expire the session, counted from
    // the last contact, which is at most one heartbeat (a twelfth) before the kill; never
    // earlier than that.
    assert!(
        after >= session_timeout - session_timeout / 10 - session_timeout / 12 - Duration::from_millis(300),
        "declared lost early: {after:?}"
    );
    assert!(
        after <= session_timeout + Duration::from_secs(2),
        "declared lost late: {after:?}"
    );
    drop(guard);
}

async fn kill(server: &Arc<Mutex<ZooKeeperServer>>) {
    let server = server.clone();
    tokio::task::spawn_blocking(move || server.lock().unwrap_or_else(PoisonError::into_inner).kill())
        .await
        .expect("joined")
        .expect("killed");
}

async fn restart(server: &Arc<Mutex<ZooKeeperServer>>) {
    let server = server.clone();
    tokio::task::spawn_blocking(move || server.lock().unwrap_or_else(PoisonError::into_inner).restart())
        .await
        .expect("joined")
        .expect("restarted");
}

async fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) {
    tokio::time::timeout(limit, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the condition holds in time");
}

/// A session timeout asked far above the server's `maxSessionTimeout` is negotiated down to
/// it. Everything that keeps the session known must follow the negotiated timeout: a healthy
/// holder, on a healthy server, keeps its lock for several negotiated timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_timeout_above_the_servers_cap_keeps_healthy_guards() {
    const CAP: Duration = Duration::from_secs(4);
    const ASKED: Duration = Duration::from_secs(120);
    let options = ZooKeeperOptions {
        max_session_timeout_ms: u32::try_from(CAP.as_millis()).expect("fits"),
        ..ZooKeeperOptions::default()
    };
    let server = tokio::task::spawn_blocking(move || ZooKeeperServer::start_with(options))
        .await
        .expect("joined")
        .expect("a server starts");
    let config = support::config(&server.url())
        .with_session_timeout(ASKED)
        .expect("valid");
    let backend = ZooKeeperLock::connect(config).await.expect("connects");
    assert_eq!(backend.negotiated_session_timeout(), Some(CAP));
    let session = backend.session_id();
    let client = LockClient::new(backend.clone());
    let guard = client.acquire("negotiated").await.expect("acquired");
    let started = Instant::now();
    while started.elapsed() < CAP * 3 {
        assert!(
            !guard.is_lost(),
            "a healthy guard declared lost {:?} into its hold (asked {ASKED:?}, the server's cap {CAP:?})",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(backend.session_id(), session, "the same session throughout");
    assert!(guard.release().await.expect("released"), "still ours");
    drop(server);
}

/// One-off names leave nothing behind: their parents are container nodes, which the server
/// deletes once empty (its check interval shortened here from the default minute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_lock_parents_are_deleted() {
    let options = ZooKeeperOptions {
        jvm_args: vec!["-Dznode.container.checkIntervalMs=200".to_owned()],
        ..ZooKeeperOptions::default()
    };
    let server = tokio::task::spawn_blocking(move || ZooKeeperServer::start_with(options))
        .await
        .expect("joined")
        .expect("a server starts");
    let url = server.url();
    let client = LockClient::new(support::connect(&url).await);
    for i in 0..50 {
        let guard = client.acquire(format!("one-off-{i}")).await.expect("acquired");
        assert!(guard.release().await.expect("released"));
    }
    let raw = support::raw(&url).await;
    let parents = raw.list_children("/distlock").await.expect("listed");
    assert!(!parents.is_empty(), "the parents exist right after the releases");
    wait_until_async(Duration::from_secs(20), || async {
        raw.list_children("/distlock").await.expect("listed").is_empty()
    })
    .await;
    println!("{} empty parents deleted by the server", parents.len());
    drop(server);
}

async fn wait_until_async<F: std::future::Future<Output = bool>>(
    limit: Duration,
    mut condition: impl FnMut() -> F,
) {
    tokio::time::timeout(limit, async {
        while !condition().await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the condition holds in time");
}

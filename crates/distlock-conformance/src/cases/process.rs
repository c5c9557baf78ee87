//! Another process holds the lock: it excludes us, its death (kill -9) frees the lock, and
//! when it is frozen past its lease it knows it lost the lock the moment it runs again.

use std::process::Stdio;
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, LockName};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::{child, Ctx};

/// Case 17: Cross-process: a child process holds the lock; we cannot take it; after it releases on
/// command we get it promptly; a second child is killed with kill -9 and we get the lock once
/// its TTL (or session) runs out.
pub async fn c17_cross_process_holder(ctx: Ctx) -> Outcome {
    let (env, test) = match child_setup(&ctx) {
        Ok(setup) => setup,
        Err(skipped) => return skipped,
    };
    let ttl = ctx.short_ttl().max(Duration::from_secs(1));
    let client = ctx.client().await;
    let name = ctx.name("child");

    // A child that releases when told to.
    let mut holder = ChildHolder::spawn(&test, &env, &name, ttl).await;
    assert!(
        client.try_acquire(&name).await.expect("works").is_none(),
        "the child's lock must exclude us"
    );
    holder.send("release").await;
    holder.expect_line(child::RELEASED).await;
    let guard = client
        .acquire_with(
            &name,
            &AcquireOptions::new()
                .ttl(LONG_TTL)
                .wait_for(Duration::from_secs(10)),
        )
        .await
        .expect("acquired after the child released");
    assert!(guard.release().await.expect("works"));
    holder.wait_exit().await;

    // A child killed with kill -9 while holding.
    let mut holder = ChildHolder::spawn(&test, &env, &name, ttl).await;
    assert!(
        client.try_acquire(&name).await.expect("works").is_none(),
        "the child's lock must exclude us"
    );
    let killed_at = Instant::now();
    holder.kill().await;
    let limit = ttl * 4 + Duration::from_secs(40);
    let guard = client
        .acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL).wait_for(limit))
        .await
        .expect("the killed child's lock frees itself");
    ctx.note(format!(
        "acquired {:?} after kill -9 (TTL {ttl:?})",
        killed_at.elapsed()
    ));
    assert!(guard.release().await.expect("works"));
    Outcome::Passed
}

/// Case 35: A child process holding a permit of a 2-permit semaphore counts: with ours, the
/// semaphore is full; killed with kill -9, its permit frees itself once its TTL (or session)
/// runs out, not before the kill.
pub async fn c35_killed_permit_holder_frees_its_permit(ctx: Ctx) -> Outcome {
    if let Some(skip) = super::semaphore::without_semaphores(&ctx) {
        return skip;
    }
    let (env, test) = match child_setup(&ctx) {
        Ok(setup) => setup,
        Err(skipped) => return skipped,
    };
    let ttl = ctx.short_ttl().max(Duration::from_secs(1));
    let name = ctx.name("child-permit");
    let semaphore = ctx.client().await.semaphore(&name, 2).expect("semaphores");
    let ours = semaphore
        .try_acquire()
        .await
        .expect("works")
        .expect("a free permit");
    let mut holder = ChildHolder::spawn_spec(&test, &env, child::encode_permit_spec(&name, ttl, 2)).await;
    assert!(
        semaphore.try_acquire().await.expect("works").is_none(),
        "the child's permit and ours fill the semaphore"
    );
    let killed_at = Instant::now();
    holder.kill().await;
    let limit = ttl * 4 + Duration::from_secs(40);
    let freed = semaphore
        .acquire_with(&AcquireOptions::new().ttl(LONG_TTL).wait_for(limit))
        .await
        .expect("the killed child's permit frees itself");
    ctx.note(format!(
        "a permit came free {:?} after kill -9 (TTL {ttl:?})",
        killed_at.elapsed()
    ));
    assert!(freed.release().await.expect("works"));
    assert!(ours.release().await.expect("works"));
    Outcome::Passed
}

/// Case 26: A holder frozen past its lease (SIGSTOP: the long GC pause of Kleppmann's
/// example) knows the lock is lost the moment it runs again. The child reports its guard's
/// state every 2 ms with the monotonic clock read before each check; we freeze it, wait until
/// its lock frees itself (TTL or session end) and acquire it, then let the child run: every
/// "held" it reports must have been checked before our acquisition returned, and it must
/// report "lost" promptly. (The torture harness found a ZooKeeper holder that said "held" for
/// a moment after it ran again, while another client held the lock.)
pub async fn c26_paused_holder_knows_it_lost(ctx: Ctx) -> Outcome {
    let (env, test) = match child_setup(&ctx) {
        Ok(setup) => setup,
        Err(skipped) => return skipped,
    };
    let ttl = ctx.short_ttl().max(Duration::from_secs(1));
    let client = ctx.client().await;
    let name = ctx.name("paused");

    let mut holder = ChildHolder::spawn(&test, &env, &name, ttl).await;
    holder.send("watch").await;
    let (_, first) = holder.next_state().await;
    assert!(first, "the child's guard must say held before it is frozen");
    holder.signal(Signal::SIGSTOP);
    let frozen_at = Instant::now();
    let limit = ttl * 4 + Duration::from_secs(40);
    let guard = client
        .acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL).wait_for(limit))
        .await
        .expect("the frozen holder's lock frees itself");
    let acquired_at = child::monotonic_ns();
    let waited = frozen_at.elapsed();
    holder.signal(Signal::SIGCONT);

    let mut held_reports = 0;
    let lost_at = within(
        Duration::from_secs(30),
        "the resumed holder reports its loss",
        async {
            loop {
                match holder.next_state().await {
                    (at, false) => return at,
                    (at, true) => {
                        held_reports += 1;
                        assert!(
                            at < acquired_at,
                            "the frozen holder said held {:?} after another client had acquired the lock",
                            Duration::from_nanos(u64::try_from(at - acquired_at).unwrap_or(u64::MAX))
                        );
                    }
                }
            }
        },
    )
    .await;
    ctx.note(format!(
        "acquired {waited:?} after the holder froze; the resumed holder said lost {:?} after that, with {held_reports} held report(s) from before the freeze",
        Duration::from_nanos(u64::try_from(lost_at.saturating_sub(acquired_at)).unwrap_or(u64::MAX))
    ));
    assert!(guard.release().await.expect("works"));
    holder.wait_exit().await;
    Outcome::Passed
}

/// What a case with a child holder needs: the environment that lets the child reach the
/// fixture's store, and the test name of the child's entry point; or why the case is skipped.
pub(super) fn child_setup(ctx: &Ctx) -> Result<(Vec<(String, String)>, String), Outcome> {
    if !ctx.caps().cross_process {
        return Err(ctx.skip(Reason::CrossProcess, "the backend is in-process only"));
    }
    let Some(env) = ctx.fixture().child_env() else {
        return Err(ctx.skip(
            Reason::ChildEnv,
            "the fixture cannot be reached from a child process",
        ));
    };
    let Some(test) = ctx.child_test().map(str::to_owned) else {
        return Err(ctx.skip(Reason::ChildEntry, "no child entry point outside a test binary"));
    };
    Ok((env, test))
}

pub(super) struct ChildHolder {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl ChildHolder {
    async fn spawn(test: &str, env: &[(String, String)], name: &LockName, ttl: Duration) -> Self {
        Self::spawn_spec(test, env, child::encode_spec(name, ttl)).await
    }

    /// A child that takes what `spec` ([`child::encode_spec`] and the like) names.
    async fn spawn_spec(test: &str, env: &[(String, String)], spec: String) -> Self {
        let mut holder = Self::start(test, env, spec);
        holder.expect_line(child::ACQUIRED).await;
        holder
    }

    /// A child that has started to acquire `name` (held by another: it waits, for up to 30 s).
    pub(super) async fn spawn_waiting(
        test: &str,
        env: &[(String, String)],
        name: &LockName,
        ttl: Duration,
    ) -> Self {
        let mut waiter = Self::start(test, env, child::encode_spec(name, ttl));
        waiter.expect_line(child::STARTED).await;
        waiter
    }

    fn start(test: &str, env: &[(String, String)], spec: String) -> Self {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut child = Command::new(exe)
            .args([test, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env(child::CHILD_ENV, spec)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the test binary starts as a child");
        let stdout = child.stdout.take().expect("piped stdout");
        Self {
            child,
            lines: BufReader::new(stdout).lines(),
        }
    }

    async fn expect_line(&mut self, marker: &str) {
        within(
            Duration::from_secs(60),
            &format!("the child prints {marker}"),
            async {
                loop {
                    match self.lines.next_line().await.expect("reading the child's output") {
                        Some(line) if line.contains(marker) => return,
                        Some(_) => {}
                        None => panic!("the child exited before printing {marker}"),
                    }
                }
            },
        )
        .await;
    }

    /// The child's next `watch` report: when it checked (monotonic ns) and whether it held.
    async fn next_state(&mut self) -> (u128, bool) {
        loop {
            let line = self
                .lines
                .next_line()
                .await
                .expect("reading the child's output")
                .expect("the child reports until its guard says lost");
            let Some((_, report)) = line.split_once(child::STATE) else {
                continue;
            };
            let (at, state) = report
                .trim()
                .split_once(' ')
                .unwrap_or_else(|| panic!("a malformed report: {line}"));
            let at = at
                .parse()
                .unwrap_or_else(|_| panic!("a malformed report: {line}"));
            return (at, state == "held");
        }
    }

    fn signal(&self, signal: Signal) {
        let pid = self.child.id().expect("the child runs");
        kill(Pid::from_raw(i32::try_from(pid).expect("a pid")), signal).expect("the child takes the signal");
    }

    async fn send(&mut self, command: &str) {
        let stdin = self.child.stdin.as_mut().expect("piped stdin");
        stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .expect("the child reads commands");
        stdin.flush().await.expect("flushed");
    }

    pub(super) async fn kill(&mut self) {
        self.child.start_kill().expect("SIGKILL the child");
        self.wait_exit().await;
    }

    async fn wait_exit(&mut self) {
        within(Duration::from_secs(30), "the child exits", self.child.wait())
            .await
            .expect("waited");
    }
}

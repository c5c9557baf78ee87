//! `distlock doctor` for Redis, Redis Cluster and Redlock: reads the settings that decide
//! whether locks are safe (`maxmemory-policy`, persistence, the server's role, its replicas
//! and `min-replicas-to-write`) and judges each. Reads only; it may not touch a lock.
//!
//! The rules follow the guarantees [`RedisLock`](crate::RedisLock) and
//! [`Redlock`](crate::Redlock) document: an evicting policy frees held locks (unsafe);
//! without AOF `appendfsync always` a crash loses locks and fencing tokens go back, which
//! `Fencing::BestEffort` allows (warn), except for Redlock with its restart quarantine turned
//! off, where a restarted master votes for a second holder (unsafe); a replica refuses or
//! loses lock writes (unsafe). No clock is compared: every TTL is relative (`PX`) and
//! expires by the server's own clock. Behind Sentinels, the primary they name is judged, and
//! whether they can fail it over (`doctor/sentinels.rs`).

use distlock_core::{Error, Finding, Result, Verdict};

mod sentinels;

use crate::config::{RedisConfig, RedlockConfig, Target};
use crate::node::{self, Node};
use crate::slots::SlotMap;

/// Judges the server (every master of a cluster) `config` names, as its
/// [`build`](RedisConfig::build) would use it: per server seven round trips (`INFO
/// replication` and six `CONFIG GET`s); behind Sentinels, also a `SENTINEL CKQUORUM` to each
/// Sentinel.
///
/// # Errors
/// [`Error::InvalidConfig`] for bad settings; [`Error::Unavailable`] if the server cannot
/// be reached. A setting the server will not show (`CONFIG` renamed) is a
/// [`Verdict::Warn`] finding, not an error.
pub async fn doctor(config: &RedisConfig) -> Result<Vec<Finding>> {
    config.validate()?;
    let node = connect(config).await?;
    let wanted = config.replicas.map_or(0, |ack| ack.count);
    let Target::Cluster(seeds) = node.target() else {
        let server = Server {
            node: &node,
            at: None,
            label: node.url().to_owned(),
        };
        let facts = server.read().await?;
        let mut findings = facts.judge(&server.label, Some(wanted));
        if let Target::Sentinel(target) = node.target() {
            findings.push(sentinels::sentinels(target, config.operation_timeout, &server.label).await);
        }
        return Ok(findings);
    };
    let mut findings = Vec::new();
    for master in SlotMap::default().masters(&node, &seeds.first_host()).await? {
        let server = Server {
            node: &node,
            at: Some((master.0.clone(), master.1)),
            label: format!("{}:{}", master.0, master.1),
        };
        findings.extend(server.read().await?.judge(&server.label, None));
    }
    Ok(findings)
}

/// Judges every master of a Redlock: each as [`doctor`] does, their persistence against the
/// restart quarantine, and how many answer against the quorum. A master that does not answer
/// is a finding ([`Verdict::Warn`] while a quorum answers), not an error.
///
/// # Errors
/// [`Error::InvalidConfig`] for bad settings; [`Error::Unavailable`] if fewer masters than a
/// quorum answer.
pub async fn doctor_redlock(config: &RedlockConfig) -> Result<Vec<Finding>> {
    config.validate()?;
    let mut findings = Vec::new();
    let mut answered = 0;
    let quarantine_off = config.restart_quarantine.is_some_and(|q| q.is_zero());
    for master in &config.nodes {
        let label = master.url.clone();
        let facts = match connect(master).await {
            Ok(node) => {
                Server {
                    node: &node,
                    at: None,
                    label: label.clone(),
                }
                .read()
                .await
            }
            Err(e) => Err(e),
        };
        let facts = match facts {
            Ok(facts) => facts,
            Err(e) => {
                findings.push(
                    Finding::new("reachable", Verdict::Warn, node::detail(&e))
                        .at(&label)
                        .because("this master did not answer: one fewer vote toward every majority")
                        .fix("bring the master back (or check its address)"),
                );
                continue;
            }
        };
        answered += 1;
        findings.extend(facts.judge_redlock(&label, quarantine_off));
    }
    if answered < config.quorum() {
        return Err(Error::unavailable(
            node::BACKEND,
            format!(
                "only {answered} of {} Redlock masters answered, fewer than the quorum of {}",
                config.nodes.len(),
                config.quorum()
            ),
        ));
    }
    Ok(findings)
}

async fn connect(config: &RedisConfig) -> Result<Node> {
    Node::connect(
        config.target.clone(),
        config.url.clone(),
        config.operation_timeout,
        config.connect_timeout,
    )
    .await
}

/// One server: the single one, or a cluster's master at `at`.
struct Server<'a> {
    node: &'a Node,
    at: Option<(String, u16)>,
    label: String,
}

/// What one server reports; `None` where it would not say (`CONFIG` renamed or refused).
struct Facts {
    role: Option<String>,
    replicas: Option<u32>,
    policy: Option<String>,
    maxmemory: Option<u64>,
    appendonly: Option<String>,
    appendfsync: Option<String>,
    min_replicas: Option<u32>,
}

impl Server<'_> {
    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        match &self.at {
            Some((host, port)) => self.node.query_at(host, *port, cmd).await,
            None => self.node.query(cmd).await,
        }
    }

    /// `CONFIG GET name`; `None` if refused. An outage is an error.
    async fn config(&self, name: &str) -> Result<Option<String>> {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg(name);
        match self.query::<Vec<String>>(&cmd).await {
            Ok(reply) => Ok(reply.get(1).cloned()),
            Err(e @ Error::Unavailable { .. }) => Err(e),
            Err(_) => Ok(None),
        }
    }

    async fn read(&self) -> Result<Facts> {
        let mut info = redis::cmd("INFO");
        info.arg("replication");
        let info = match self.query::<String>(&info).await {
            Ok(text) => Some(text),
            Err(e @ Error::Unavailable { .. }) => return Err(e),
            Err(_) => None,
        };
        let field = |name: &str| {
            info.as_deref().and_then(|text| {
                text.lines()
                    .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
                    .map(str::to_owned)
            })
        };
        Ok(Facts {
            role: field("role"),
            replicas: field("connected_slaves").and_then(|n| n.parse().ok()),
            policy: self.config("maxmemory-policy").await?,
            maxmemory: self.config("maxmemory").await?.and_then(|n| n.parse().ok()),
            appendonly: self.config("appendonly").await?,
            appendfsync: self.config("appendfsync").await?,
            min_replicas: self
                .config("min-replicas-to-write")
                .await?
                .and_then(|n| n.parse().ok()),
        })
    }
}

const UNREADABLE: &str = "not shown (CONFIG or INFO refused)";

impl Facts {
    /// The findings of a single server or cluster master; `wanted` is the configured
    /// `with_wait_for_replicas` count (0 if none; `None` where it is not offered: a cluster).
    fn judge(&self, at: &str, wanted: Option<u32>) -> Vec<Finding> {
        vec![
            self.role(at),
            self.eviction(at),
            self.persistence(at),
            self.replication(at, wanted),
        ]
    }

    /// A Redlock master's findings: role, eviction, persistence against restarts, replicas.
    fn judge_redlock(&self, at: &str, quarantine_off: bool) -> Vec<Finding> {
        let mut persistence = self.persistence(at);
        if persistence.verdict == Verdict::Warn {
            persistence = if quarantine_off && self.appendonly.is_some() {
                persistence
                    .with_verdict(Verdict::Unsafe)
                    .because(
                        "a master restarted without its last writes forgets the locks it granted and, with the restart quarantine off (restart_quarantine=0s), votes at once for a second holder while the first is valid",
                    )
                    .fix("CONFIG SET appendonly yes and appendfsync always, or remove restart_quarantine=0s and delay every restart by the longest TTL")
            } else {
                persistence
                    .because(
                        "a master restarted without its last writes forgets the locks it granted; this client keeps a master it saw restart out of majorities for the restart quarantine, but a client that first meets it after the restart cannot tell",
                    )
                    .fix("delay every restart of a master by the longest TTL any client uses, or CONFIG SET appendonly yes and appendfsync always")
            };
        }
        let mut replication = self.replication(at, None);
        if self.replicas.is_some_and(|n| n > 0) {
            replication = replication.because(
                "Redlock assumes independent masters: a failover to a replica that missed the last writes is a restart without data, which the quarantine cannot see (a new run id is read as a restart only by clients that saw the old one)",
            ).fix("run Redlock masters without automatic failover, or delay promotions by the longest TTL");
        }
        vec![self.role(at), self.eviction(at), persistence, replication]
    }

    fn role(&self, at: &str) -> Finding {
        match self.role.as_deref() {
            Some("master") => Finding::new("role", Verdict::Ok, "master")
                .at(at)
                .because("locks are written on the master"),
            Some(role) => Finding::new("role", Verdict::Unsafe, role)
                .at(at)
                .because("a replica refuses lock writes (read-only) or, if writable, keeps them to itself: its master and other clients never see them")
                .fix("point the URL at the master"),
            None => unreadable("role", at, "INFO replication"),
        }
    }

    fn eviction(&self, at: &str) -> Finding {
        let Some(policy) = self.policy.as_deref() else {
            return unreadable("maxmemory-policy", at, "CONFIG GET maxmemory-policy");
        };
        let found = match self.maxmemory {
            Some(0) => format!("{policy} (maxmemory 0: no limit)"),
            Some(bytes) => format!("{policy} (maxmemory {bytes} bytes)"),
            None => policy.to_owned(),
        };
        let finding = Finding::new("maxmemory-policy", Verdict::Ok, found).at(at);
        if policy == "noeviction" {
            return finding.because("Redis never evicts a key: at the memory limit writes fail instead");
        }
        let fix = "CONFIG SET maxmemory-policy noeviction (and in redis.conf)";
        if self.maxmemory == Some(0) {
            return finding
                .with_verdict(Verdict::Warn)
                .because("no memory limit is set, so nothing is evicted today; once one is, this policy evicts lock keys (they have a TTL, so volatile-* policies evict them too)")
                .fix(fix);
        }
        finding
            .with_verdict(Verdict::Unsafe)
            .because("when memory runs out Redis evicts lock keys (they have a TTL, so volatile-* policies evict them too), freeing held locks: another client acquires while the holder works on until its next renewal")
            .fix(fix)
    }

    fn persistence(&self, at: &str) -> Finding {
        let (Some(aof), Some(fsync)) = (self.appendonly.as_deref(), self.appendfsync.as_deref()) else {
            return unreadable("persistence", at, "CONFIG GET appendonly, appendfsync");
        };
        let found = format!("appendonly {aof}, appendfsync {fsync}");
        let finding = Finding::new("persistence", Verdict::Ok, found).at(at);
        if aof == "yes" && fsync == "always" {
            return finding.because("every write is on disk before it is answered: a crash loses no lock and fencing tokens never go back");
        }
        let loses = if aof == "yes" {
            "a crash loses up to about a second of writes"
        } else {
            "a restart loses every write since the last RDB snapshot (or all, without one)"
        };
        finding
            .with_verdict(Verdict::Warn)
            .because(format!(
                "{loses}: held locks are freed and fencing tokens go back (on Redis they are best effort)"
            ))
            .fix("CONFIG SET appendonly yes and appendfsync always, if fencing tokens must never repeat")
    }

    fn replication(&self, at: &str, offered: Option<u32>) -> Finding {
        let Some(replicas) = self.replicas else {
            return unreadable("replicas", at, "INFO replication");
        };
        let min = self.min_replicas.unwrap_or(0);
        let wanted = offered.unwrap_or(0);
        let mut found = format!("{replicas} connected, min-replicas-to-write {min}");
        if offered.is_some() {
            found.push_str(&format!(", wait_for_replicas {wanted}"));
        }
        let finding = Finding::new("replicas", Verdict::Ok, found).at(at);
        if replicas < wanted {
            return finding
                .with_verdict(Verdict::Warn)
                .because(format!(
                    "the client waits for {wanted} replica(s) to acknowledge each lock but {replicas} are connected: every acquisition fails (safely) until enough replicas connect"
                ))
                .fix("connect the replicas, or lower with_wait_for_replicas");
        }
        if min > replicas {
            return finding
                .with_verdict(Verdict::Warn)
                .because(format!(
                    "min-replicas-to-write {min} but {replicas} replicas connected: the master refuses every write, so no lock can be acquired"
                ))
                .fix("connect the replicas, or lower min-replicas-to-write");
        }
        if replicas == 0 {
            return finding
                .because("no replica: nothing to fail over to (persistence decides what a restart keeps)");
        }
        if wanted == 0 {
            let fix = if offered.is_some() {
                "wait_for_replicas (RedisConfig::with_wait_for_replicas) narrows that window, and min-replicas-to-write stops a master cut off from its replicas granting locks; fence the protected resource"
            } else {
                "min-replicas-to-write stops a master cut off from its replicas granting locks (a cluster offers no wait_for_replicas); fence the protected resource"
            };
            return finding
                .with_verdict(Verdict::Warn)
                .because("replication is asynchronous: a failover to a replica that missed a lock frees it while its holder works on")
                .fix(fix);
        }
        finding.because(
            "each lock waits for replica acknowledgements (a failover can still lose one: fence the protected resource)",
        )
    }
}

fn unreadable(item: &str, at: &str, command: &str) -> Finding {
    Finding::new(item, Verdict::Warn, UNREADABLE)
        .at(at)
        .because(format!(
            "the server refused {command}, so this could not be checked"
        ))
        .fix("allow the client CONFIG GET and INFO (or check the setting by hand)")
}

//! [`MariaDbReplicated`]: a MariaDB primary and a replica on loopback, for failover tests.
//!
//! Both servers write a row-based binary log with GTIDs (`--log-slave-updates`, so a promoted
//! replica's log goes on with the transactions it applied, under their GTIDs). A fresh replica
//! starts from a snapshot of the primary's data and replicates from the snapshot's GTID on (see
//! [`add_replica`](MariaDbReplicated::add_replica)). The replica
//! replicates through a [`FaultProxy`] of its own ([`link`](MariaDbReplicated::link)), so a
//! test can hold it behind; clients reach the primary through another
//! ([`front`](MariaDbReplicated::front)), the virtual address that a failover moves.
//! Replication is asynchronous or semi-synchronous (built into MariaDB since 10.3, waiting
//! `AFTER_SYNC`: a commit is acknowledged, and visible to other sessions, only once the replica
//! has it in its relay log).
//!
//! This module owns the pair's topology; each server is a [`MariaDbServer`] as `mariadb.rs`
//! starts it.

use std::time::{Duration, Instant};

use crate::{FaultProxy, HarnessError, MariaDbOptions, MariaDbServer, MARIADB_PASSWORD, MARIADB_USER};

/// How long a semi-synchronous primary waits for the replica's acknowledgement before it
/// falls back to asynchronous replication (`rpl_semi_sync_master_timeout`): longer than any
/// fault a test holds, so a cut link stalls commits instead of losing them.
pub const SEMI_SYNC_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `start`, `promote_replica` and `add_replica` wait for replication to settle.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Poll interval while waiting for replication.
const POLL: Duration = Duration::from_millis(25);

/// How the replica's copy relates to the primary's commits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MariaDbReplication {
    /// A commit returns once the primary has it; the replica follows when it can.
    #[default]
    Asynchronous,
    /// A commit returns once the replica has it too (`AFTER_SYNC`), or after
    /// [`SEMI_SYNC_TIMEOUT`] without an acknowledgement (then the primary goes asynchronous
    /// until the replica catches up).
    SemiSynchronous,
}

/// Options for [`MariaDbReplicated::start_with`].
#[derive(Debug, Clone, Default)]
pub struct MariaDbReplicatedOptions {
    /// Asynchronous (default) or semi-synchronous.
    pub replication: MariaDbReplication,
    /// Options for each server; replication's arguments are added to its `extra_args`.
    pub server: MariaDbOptions,
}

/// A primary, its replica and the two proxies. See [`MariaDbReplicated::start_with`]. Dropping it kills
/// both servers and removes their directories.
#[derive(Debug)]
pub struct MariaDbReplicated {
    options: MariaDbReplicatedOptions,
    // Proxies first: they close their connections before the servers go.
    front: FaultProxy,
    link: Option<FaultProxy>,
    primary: MariaDbServer,
    replica: Option<MariaDbServer>,
    /// The last `server_id` given out.
    server_id: u32,
}

impl MariaDbReplicated {
    /// An asynchronous pair, see [`start_with`](Self::start_with).
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(MariaDbReplicatedOptions::default())
    }

    /// Starts the primary, then a replica replicating from it through the link proxy; returns
    /// once the replica streams (semi-synchronous: once the primary counts it as a
    /// semi-synchronous client).
    pub fn start_with(options: MariaDbReplicatedOptions) -> Result<Self, HarnessError> {
        let primary = MariaDbServer::start_with(server_options(&options, 1))?;
        let front = FaultProxy::start(primary.addr())?;
        let mut pair = Self {
            options,
            front,
            link: None,
            primary,
            replica: None,
            server_id: 1,
        };
        pair.add_replica()?;
        Ok(pair)
    }

    /// `mysql://distlock:distlock@FRONT/distlock_test`: the primary, through the front proxy.
    pub fn url(&self) -> String {
        format!(
            "mysql://{MARIADB_USER}:{MARIADB_PASSWORD}@{}/{}",
            self.front.addr(),
            crate::MARIADB_DATABASE
        )
    }

    /// The proxy clients connect through; a failover moves it to the promoted replica.
    pub fn front(&self) -> &FaultProxy {
        &self.front
    }

    /// The proxy the replica's replication goes through (black-hole it to hold the replica
    /// behind). An error if there is no replica (after a promotion, before `add_replica`).
    pub fn link(&self) -> Result<&FaultProxy, HarnessError> {
        self.link.as_ref().ok_or_else(|| {
            HarnessError::Other("there is no replica, so no link (add_replica makes one)".into())
        })
    }

    /// The primary (after [`kill_primary`](Self::kill_primary), the dead one until the
    /// promotion).
    pub fn primary(&self) -> &MariaDbServer {
        &self.primary
    }

    /// The primary, mutably (to pause or kill it).
    pub fn primary_mut(&mut self) -> &mut MariaDbServer {
        &mut self.primary
    }

    /// The replica, if there is one.
    pub fn replica(&self) -> Option<&MariaDbServer> {
        self.replica.as_ref()
    }

    /// `kill -9` of the primary, its host gone: the front falls silent (no RST, no FIN: a
    /// client notices only by its own timeouts) until [`promote_replica`](Self::promote_replica)
    /// moves it.
    pub fn kill_primary(&mut self) -> Result<(), HarnessError> {
        self.front.blackhole();
        self.primary.kill()
    }

    /// A failover: [`kill_primary`](Self::kill_primary), then
    /// [`promote_replica`](Self::promote_replica).
    pub fn failover(&mut self) -> Result<(), HarnessError> {
        self.kill_primary()?;
        self.promote_replica()
    }

    /// Waits up to `timeout` until the replica has applied every transaction the primary has
    /// logged (`MASTER_GTID_WAIT`); `Ok(false)` on timeout.
    pub fn wait_caught_up(&self, timeout: Duration) -> Result<bool, HarnessError> {
        let position = self.primary.sql("SELECT @@GLOBAL.gtid_binlog_pos")?;
        wait_for_gtid(self.replica_server()?, position.trim(), timeout)
    }

    /// Promotes the replica: stops its receiving, lets it apply what it has received
    /// (`MASTER_GTID_WAIT` on its `Gtid_IO_Pos`), `STOP SLAVE`, `RESET SLAVE ALL`,
    /// `read_only = OFF`; then moves the front to it, resets the front's connections (the new
    /// server knows nothing of them) and lets the front forward again. The old primary is dropped (killed if it still ran,
    /// its directory removed); there is no replica until [`add_replica`](Self::add_replica).
    pub fn promote_replica(&mut self) -> Result<(), HarnessError> {
        let replica = self.replica_server()?;
        // The link's held bytes are lost with the old primary's host.
        if let Some(link) = &self.link {
            link.reset();
        }
        replica.sql("STOP SLAVE IO_THREAD")?;
        let received = slave_status(replica, "Gtid_IO_Pos")?;
        if !wait_for_gtid(replica, &received, SETTLE_TIMEOUT)? {
            return Err(HarnessError::Other(format!(
                "the replica did not apply its relay log up to {received} within {SETTLE_TIMEOUT:?}"
            )));
        }
        replica.sql("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF")?;
        let Some(promoted) = self.replica.take() else {
            return Err(HarnessError::Other("there is no replica to promote".into()));
        };
        self.link = None;
        self.front.set_upstream(promoted.addr());
        self.front.reset();
        self.front.heal();
        self.primary = promoted;
        Ok(())
    }

    /// Starts a fresh replica of the current primary through a new link proxy; returns once it
    /// has caught up (semi-synchronous: once the primary counts it as a client). Replaces a
    /// replica there was.
    ///
    /// Its data is a consistent snapshot of the primary's database ([`MARIADB_DATABASE`],
    /// `mariadb-dump --single-transaction`), loaded outside its binary log; it replicates from
    /// the snapshot's GTID on. So it costs what the data holds, not what the primary ever
    /// logged: replaying the binary log from the start took longer with every failover of a
    /// long run.
    pub fn add_replica(&mut self) -> Result<(), HarnessError> {
        self.server_id += 1;
        let replica = MariaDbServer::start_with(server_options(&self.options, self.server_id))?;
        let link = FaultProxy::start(self.primary.addr())?;
        let seed = replica.dir().join("seed.sql");
        self.primary.dump(crate::MARIADB_DATABASE, &seed)?;
        let position = dumped_gtid(&seed)?;
        // `source` is a client command: on a line of its own.
        replica.sql(&format!(
            "SET SESSION sql_log_bin = 0;\nsource {};\nSET SESSION sql_log_bin = 1;\n\
             SET GLOBAL gtid_slave_pos = '{position}';\n\
             CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
             MASTER_USER = '{MARIADB_USER}', MASTER_PASSWORD = '{MARIADB_PASSWORD}', \
             MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1, MASTER_HEARTBEAT_PERIOD = 0.5; \
             SET GLOBAL read_only = ON; START SLAVE",
            seed.display(),
            link.addr().port()
        ))?;
        self.replica = Some(replica);
        self.link = Some(link);
        if !self.wait_caught_up(SETTLE_TIMEOUT)? {
            return Err(HarnessError::Other(format!(
                "the new replica did not catch up within {SETTLE_TIMEOUT:?}"
            )));
        }
        if self.options.replication == MariaDbReplication::SemiSynchronous {
            let deadline = Instant::now() + SETTLE_TIMEOUT;
            while status(&self.primary, "Rpl_semi_sync_master_clients")? != "1"
                || status(&self.primary, "Rpl_semi_sync_master_status")? != "ON"
            {
                if Instant::now() > deadline {
                    return Err(HarnessError::Other(format!(
                        "the primary counted no semi-synchronous replica within {SETTLE_TIMEOUT:?}"
                    )));
                }
                std::thread::sleep(POLL);
            }
        }
        Ok(())
    }

    /// GTIDs the primary has logged and the replica has not applied: the primary's
    /// `gtid_binlog_pos` and the replica's `gtid_slave_pos`, equal when caught up.
    pub fn positions(&self) -> Result<(String, String), HarnessError> {
        let logged = self.primary.sql("SELECT @@GLOBAL.gtid_binlog_pos")?;
        let applied = self.replica_server()?.sql("SELECT @@GLOBAL.gtid_slave_pos")?;
        Ok((logged.trim().to_owned(), applied.trim().to_owned()))
    }

    fn replica_server(&self) -> Result<&MariaDbServer, HarnessError> {
        self.replica.as_ref().ok_or_else(|| {
            HarnessError::Other("there is no replica (promoted; add_replica makes one)".into())
        })
    }
}

/// A server's options: the caller's, plus a binary log with GTIDs and the replication mode.
fn server_options(options: &MariaDbReplicatedOptions, server_id: u32) -> MariaDbOptions {
    let mut server = options.server.clone();
    server.extra_args.extend(
        [
            format!("--server-id={server_id}"),
            // After mariadb.rs's --skip-log-bin, which this overrides.
            "--log-bin=mariadb-bin".into(),
            "--binlog-format=ROW".into(),
            "--log-slave-updates".into(),
            "--skip-slave-start".into(),
        ]
        .into_iter()
        .chain(semi_sync_args(options.replication)),
    );
    server
}

/// Every server may act as either end: the primary waits only while a semi-synchronous
/// replica is connected (`wait_no_slave = OFF`), so a promoted replica does not stall before
/// its own replica arrives.
fn semi_sync_args(replication: MariaDbReplication) -> Vec<String> {
    match replication {
        MariaDbReplication::Asynchronous => Vec::new(),
        MariaDbReplication::SemiSynchronous => vec![
            "--rpl-semi-sync-master-enabled=ON".into(),
            "--rpl-semi-sync-slave-enabled=ON".into(),
            "--rpl-semi-sync-master-wait-point=AFTER_SYNC".into(),
            "--rpl-semi-sync-master-wait-no-slave=OFF".into(),
            format!("--rpl-semi-sync-master-timeout={}", SEMI_SYNC_TIMEOUT.as_millis()),
        ],
    }
}

/// The longest single `MASTER_GTID_WAIT`: well inside the `mariadb` client's 10 s limit.
const WAIT_SLICE: Duration = Duration::from_secs(4);

/// Waits up to `timeout` until `server` has applied `position` (`MASTER_GTID_WAIT`, in slices
/// of at most [`WAIT_SLICE`]); `Ok(false)` on timeout.
fn wait_for_gtid(server: &MariaDbServer, position: &str, timeout: Duration) -> Result<bool, HarnessError> {
    let deadline = Instant::now() + timeout;
    loop {
        let slice = deadline.saturating_duration_since(Instant::now()).min(WAIT_SLICE);
        let waited = server.sql(&format!(
            "SELECT MASTER_GTID_WAIT('{position}', {})",
            slice.as_secs_f64()
        ))?;
        if waited.trim() == "0" {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
    }
}

/// The GTID position a `mariadb-dump --master-data=2 --gtid` snapshot stands at (its
/// commented `SET GLOBAL gtid_slave_pos='...'`).
fn dumped_gtid(file: &std::path::Path) -> Result<String, HarnessError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| HarnessError::io(format!("reading {}", file.display()), e))?;
    text.lines()
        .find_map(|line| line.split_once("gtid_slave_pos='"))
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(position, _)| position.to_owned())
        .ok_or_else(|| HarnessError::Other(format!("{} names no GTID position", file.display())))
}

/// A global status variable's value.
fn status(server: &MariaDbServer, name: &str) -> Result<String, HarnessError> {
    let row = server.sql(&format!("SHOW GLOBAL STATUS LIKE '{name}'"))?;
    Ok(row.split('\t').nth(1).unwrap_or_default().trim().to_owned())
}

/// One field of `SHOW SLAVE STATUS`.
fn slave_status(server: &MariaDbServer, field: &str) -> Result<String, HarnessError> {
    let out = server.sql_vertical("SHOW SLAVE STATUS")?;
    out.lines()
        .filter_map(|line| line.trim().split_once(':'))
        .find(|(name, _)| *name == field)
        .map(|(_, value)| value.trim().to_owned())
        .ok_or_else(|| HarnessError::Other(format!("SHOW SLAVE STATUS has no {field}: {out}")))
}

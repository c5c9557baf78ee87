//! [`PostgresReplicated`]: a PostgreSQL primary with one streaming standby, behind a front
//! [`FaultProxy`] that a failover moves (the virtual IP or DNS name clients know the database
//! by), the standby's replication connection through a proxy of its own (to hold the standby
//! behind or cut it off).
//!
//! This module owns the pair's topology and its failover; starting one server (and its
//! settings) is `postgres.rs`'s.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::port::{free_port, retry_if_port_taken};
use crate::postgres::Programs;
use crate::process::run_setup_command_as;
use crate::proxy::FaultProxy;
use crate::{HarnessError, PostgresServer, POSTGRES_DATABASE, POSTGRES_PASSWORD, POSTGRES_USER};

/// The `application_name` the standby streams under, and so the name a synchronous primary's
/// `synchronous_standby_names` gives.
pub const STANDBY_NAME: &str = "standby";
/// Bound on a base backup of the (small) test database.
const BASE_BACKUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on waiting for a standby to stream, or a promoted one to accept writes.
const ROLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Every server of the pair keeps this much WAL, so that a standby held behind for a while
/// catches up from the primary's WAL when its link heals (there is no replication slot).
const WAL_KEEP: &str = "wal_keep_size=256MB";

/// When the primary acknowledges a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replication {
    /// `synchronous_standby_names` names the standby and `synchronous_commit = on`: a commit
    /// is acknowledged once the standby has flushed its WAL. A promoted standby replays all the
    /// WAL it flushed before it takes writes, so it keeps every acknowledged commit;
    /// `remote_apply` (also applied before the acknowledgement) would matter only to reads
    /// from the standby, which no lock client makes. While the standby is cut off, commits
    /// wait (for ever, as PostgreSQL's do).
    Synchronous,
    /// The primary acknowledges a commit once its own WAL has it; the standby follows when it
    /// can, and a failover loses what it had not received.
    #[default]
    Asynchronous,
}

/// Options for [`PostgresReplicated::start_with`].
#[derive(Debug, Clone, Default)]
pub struct PostgresReplicatedOptions {
    /// Synchronous or asynchronous replication.
    pub replication: Replication,
    /// The directory of the server programs, as [`PostgresOptions::bin_dir`](crate::PostgresOptions::bin_dir).
    pub bin_dir: Option<PathBuf>,
}

/// A PostgreSQL primary and a streaming standby, owned by one test.
///
/// Clients connect to [`url`](Self::url), the front proxy, which forwards to the primary.
/// The standby streams from the primary through [`link`](Self::link). A failover is
/// [`kill_primary`](Self::kill_primary) (the host is gone: `kill -9` of the postmaster, and
/// the front answers nothing, neither reply nor refusal) then
/// [`promote_standby`](Self::promote_standby) (`pg_promote`, wait until it takes writes, move
/// the front: connections still open there are reset, new ones reach the new primary). After
/// it the pair has no standby until [`add_standby`](Self::add_standby) builds a fresh one from
/// the new primary (a base backup; the old primary's data directory is discarded, not
/// rewound).
///
/// ```no_run
/// use distlock_testkit::{PostgresReplicated, PostgresReplicatedOptions, Replication};
///
/// let mut pair = PostgresReplicated::start_with(PostgresReplicatedOptions {
///     replication: Replication::Synchronous,
///     ..Default::default()
/// })
/// .expect("start the pair");
/// let url = pair.url(); // the front: postgres://distlock:distlock@127.0.0.1:PORT/distlock_test
/// pair.kill_primary().expect("kill -9");
/// pair.promote_standby().expect("promoted, front moved");
/// pair.add_standby().expect("a fresh standby streams again");
/// # drop(url);
/// ```
#[derive(Debug)]
pub struct PostgresReplicated {
    front: FaultProxy,
    link: FaultProxy,
    primary: PostgresServer,
    standby: Option<PostgresServer>,
    /// The primary killed by the last failover, kept (stopped) for its log until the next
    /// standby is built.
    old_primary: Option<PostgresServer>,
    programs: Programs,
    replication: Replication,
}

impl PostgresReplicated {
    /// Starts an asynchronous pair; see [`start_with`](Self::start_with).
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(PostgresReplicatedOptions::default())
    }

    /// Starts the primary (as [`PostgresServer::start`] does), then a standby from a base
    /// backup of it; returns once the standby streams (and, when synchronous, the primary
    /// waits for it).
    pub fn start_with(options: PostgresReplicatedOptions) -> Result<Self, HarnessError> {
        let programs = Programs::find(options.bin_dir.as_deref())?;
        let primary = PostgresServer::start_with(crate::PostgresOptions {
            extra_args: vec!["-c".into(), WAL_KEEP.into()],
            bin_dir: Some(programs.bin.clone()),
            ..crate::PostgresOptions::default()
        })?;
        let front = FaultProxy::start(primary.addr())?;
        let link = FaultProxy::start(primary.addr())?;
        let mut pair = Self {
            front,
            link,
            primary,
            standby: None,
            old_primary: None,
            programs,
            replication: options.replication,
        };
        pair.add_standby()?;
        Ok(pair)
    }

    /// `postgres://distlock:distlock@127.0.0.1:PORT/distlock_test` through the front proxy.
    pub fn url(&self) -> String {
        format!(
            "postgres://{POSTGRES_USER}:{POSTGRES_PASSWORD}@{}/{POSTGRES_DATABASE}",
            self.front.host_port()
        )
    }

    /// The front proxy: where clients connect, moved by a failover.
    pub fn front(&self) -> &FaultProxy {
        &self.front
    }

    /// The proxy of the standby's replication connection: [`blackhole`](FaultProxy::blackhole)
    /// cuts the standby off (a synchronous primary's commits then wait), latency holds it
    /// behind.
    pub fn link(&self) -> &FaultProxy {
        &self.link
    }

    /// The current primary.
    pub fn primary(&self) -> &PostgresServer {
        &self.primary
    }

    /// The current primary, mutably (to pause or stop it).
    pub fn primary_mut(&mut self) -> &mut PostgresServer {
        &mut self.primary
    }

    /// The current standby, if there is one.
    pub fn standby(&self) -> Option<&PostgresServer> {
        self.standby.as_ref()
    }

    /// Synchronous or asynchronous.
    pub fn replication(&self) -> Replication {
        self.replication
    }

    /// The primary's host is gone: the front answers nothing from now on (connections open
    /// through it hang, new ones are accepted and hear nothing) and the postmaster is killed
    /// (`kill -9`).
    pub fn kill_primary(&mut self) -> Result<(), HarnessError> {
        self.front.blackhole();
        self.primary.kill()
    }

    /// Promotes the standby (`SELECT pg_promote()`, the SQL form of `pg_ctl promote`), waits
    /// until it takes writes, and makes it the primary: the front and the link move to it, and
    /// the connections open through the front are reset (their next packet would reach a
    /// server that never saw them). The old primary is kept, stopped or not as it was; kill it
    /// first for a failover. The new primary waits for no standby (whatever the replication)
    /// until [`add_standby`](Self::add_standby).
    pub fn promote_standby(&mut self) -> Result<(), HarnessError> {
        let standby = self
            .standby
            .take()
            .ok_or_else(|| HarnessError::Other("there is no standby to promote".into()))?;
        standby.sql("SELECT pg_promote(true, 30)")?;
        // Set by add_standby on the old primary's own configuration only; reset here too so a
        // promoted server never waits for a standby it does not have.
        standby.sql("ALTER SYSTEM RESET synchronous_standby_names")?;
        standby.sql("SELECT pg_reload_conf()")?;
        wait_until(
            &standby,
            "SELECT NOT pg_is_in_recovery() AND txid_current() > 0",
            "accepts writes",
        )?;
        let old = std::mem::replace(&mut self.primary, standby);
        self.old_primary = Some(old);
        for proxy in [&self.front, &self.link] {
            proxy.set_upstream(self.primary.addr());
            proxy.reset();
            proxy.heal();
        }
        Ok(())
    }

    /// [`kill_primary`](Self::kill_primary), then [`promote_standby`](Self::promote_standby).
    pub fn failover(&mut self) -> Result<(), HarnessError> {
        self.kill_primary()?;
        self.promote_standby()
    }

    /// Builds a fresh standby from a base backup of the primary (through the link, which is
    /// healed first), starts it, waits until it streams, and, when synchronous, makes the
    /// primary wait for it. Replaces (and removes) the standby and the old primary there were.
    pub fn add_standby(&mut self) -> Result<(), HarnessError> {
        self.link.heal();
        self.standby = None;
        self.old_primary = None;
        let standby = retry_if_port_taken(|| self.start_standby())?;
        wait_until(
            &self.primary,
            &format!(
                "SELECT count(*) = 1 FROM pg_stat_replication \
                 WHERE application_name = '{STANDBY_NAME}' AND state = 'streaming'"
            ),
            "streams to its standby",
        )?;
        if self.replication == Replication::Synchronous {
            self.primary.sql(&format!(
                "ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'"
            ))?;
            self.primary.sql("ALTER SYSTEM SET synchronous_commit = 'on'")?;
            self.primary.sql("SELECT pg_reload_conf()")?;
            wait_until(
                &self.primary,
                &format!(
                    "SELECT count(*) = 1 FROM pg_stat_replication \
                     WHERE application_name = '{STANDBY_NAME}' AND sync_state = 'sync'"
                ),
                "waits for its standby",
            )?;
        }
        self.standby = Some(standby);
        Ok(())
    }

    /// How many bytes of WAL the standby has yet to replay (the primary's view, from
    /// `pg_stat_replication`); `None` while no standby streams.
    pub fn standby_lag(&self) -> Result<Option<u64>, HarnessError> {
        let out = self.primary.sql(&format!(
            "SELECT pg_current_wal_lsn() - replay_lsn FROM pg_stat_replication \
             WHERE application_name = '{STANDBY_NAME}'"
        ))?;
        Ok(out.trim().parse::<f64>().ok().map(|bytes| bytes.max(0.0) as u64))
    }

    fn start_standby(&self) -> Result<PostgresServer, HarnessError> {
        let dir = self.programs.owned_temp_dir("postgres-standby")?;
        let data = dir.path().join("data");
        let conninfo = format!(
            "host=127.0.0.1 port={} user={POSTGRES_USER} password={POSTGRES_PASSWORD} \
             application_name={STANDBY_NAME}",
            self.link.addr().port()
        );
        let args: Vec<OsString> = [
            "-D".to_owned(),
            data.display().to_string(),
            "-d".into(),
            conninfo.clone(),
            "-X".into(),
            "stream".into(),
            "--checkpoint=fast".into(),
            "--no-sync".into(),
        ]
        .map(OsString::from)
        .into();
        run_setup_command_as(
            &self.programs.bin.join("pg_basebackup"),
            &args,
            dir.path(),
            &dir.path().join("basebackup.log"),
            BASE_BACKUP_TIMEOUT,
            self.programs.run_as,
        )?;
        let signal = data.join("standby.signal");
        std::fs::write(&signal, "")
            .map_err(|e| HarnessError::io(format!("writing {}", signal.display()), e))?;
        self.programs.give(&signal)?;
        let auto = data.join("postgresql.auto.conf");
        let mut conf = std::fs::read_to_string(&auto).unwrap_or_default();
        conf.push_str(&format!("primary_conninfo = '{conninfo}'\n"));
        std::fs::write(&auto, conf)
            .map_err(|e| HarnessError::io(format!("writing {}", auto.display()), e))?;
        self.programs.give(&auto)?;
        PostgresServer::launch(
            &self.programs,
            dir,
            free_port()?,
            &["-c".into(), WAL_KEEP.into()],
            None,
        )
    }
}

/// Polls `query` (one boolean) on `server` over its Unix socket until it answers `t`.
fn wait_until(server: &PostgresServer, query: &str, what: &str) -> Result<(), HarnessError> {
    let deadline = Instant::now() + ROLE_TIMEOUT;
    loop {
        let last = match server.sql(query) {
            Ok(out) if out.trim() == "t" => return Ok(()),
            Ok(out) => format!("answered {:?}", out.trim()),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(HarnessError::Other(format!(
                "postgres on port {} never {what} within {ROLE_TIMEOUT:?}; last: {last}; log:\n{}",
                server.port(),
                server.process().log_tail()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

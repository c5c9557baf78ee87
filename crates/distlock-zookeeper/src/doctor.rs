//! `distlock doctor` for ZooKeeper: the session timeout the ensemble grants against its
//! `tickTime` and `syncLimit` (read with the `conf` four-letter word), and the ensemble's
//! size. Opens one session (and closes it) and one plain connection per member asked; creates
//! no znode.
//!
//! The rules are those the crate docs state: the lost signal fires before the ensemble can
//! hand a lock on only for session timeouts of at least 5 ticks (below: unsafe); a holder
//! keeps its locks through its member being cut off from the leader only if 90% of the
//! session timeout exceeds `syncLimit × tickTime` plus a reconnection (the client's
//! connection timeout, a quarter of the session timeout), else its locks are lost, safely, at
//! every such partition (warn). A single member tolerates no failure (warn), nor does an even
//! count tolerate more than one fewer would. No clock is compared: sessions expire by the
//! leader's ticks.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use distlock_core::{Error, Finding, Result, Verdict};

use crate::config::ZooKeeperConfig;
use crate::lock::ZooKeeperLock;

const BACKEND: &str = "zookeeper";
/// Session timeouts below this many ticks outrun the margin the lost signal keeps.
const MIN_TICKS: u32 = 5;

/// Judges the ensemble `config` names: the session timeout it grants to `config`'s, and its
/// size.
///
/// # Errors
/// [`Error::Unavailable`] if no session can be opened within the operation timeout.
/// Members that refuse `conf` (not in `4lw.commands.whitelist`) make a [`Verdict::Warn`]
/// finding, not an error.
pub async fn doctor(config: &ZooKeeperConfig) -> Result<Vec<Finding>> {
    let lock = ZooKeeperLock::connect(config.clone()).await?;
    let granted = lock
        .negotiated_session_timeout()
        .ok_or_else(|| Error::unavailable(BACKEND, "doctor: the session ended at once"))?;
    drop(lock);
    let hosts = hosts(config.connect_string());
    let limit = config.operation_timeout();
    let members = tokio::task::spawn_blocking(move || read_members(&hosts, limit))
        .await
        .map_err(|e| Error::backend(BACKEND, format!("doctor: {e}")))?;
    Ok(vec![
        session(config.session_timeout(), granted, &members),
        ensemble(&members),
    ])
}

/// What the first member that answered `conf` (or, failing that, `srvr`) said.
#[derive(Debug, Default)]
struct Members {
    at: String,
    tick: Option<Duration>,
    sync_limit: Option<u32>,
    /// Voting members listed by `conf` (0 for a standalone server, which lists none).
    voters: usize,
    /// `srvr`'s mode, where `conf` was refused.
    mode: Option<String>,
    /// Why `conf` could not be read.
    refused: Option<String>,
}

fn hosts(connect_string: &str) -> Vec<String> {
    let hosts = connect_string.split('/').next().unwrap_or_default();
    hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| {
            if h.contains(':') {
                h.to_owned()
            } else {
                format!("{h}:2181")
            }
        })
        .collect()
}

fn read_members(hosts: &[String], limit: Duration) -> Members {
    let mut found = Members::default();
    for host in hosts {
        match four_letter(host, "conf", limit) {
            Ok(text) if text.contains("tickTime=") => return parse_conf(host, &text),
            Ok(text) => found.refused = Some(text.trim().to_owned()),
            Err(e) => found.refused = Some(format!("{host}: {e}")),
        }
        if found.mode.is_none() {
            if let Ok(text) = four_letter(host, "srvr", limit) {
                found.at = host.clone();
                found.mode = text
                    .lines()
                    .find_map(|l| l.strip_prefix("Mode: "))
                    .map(|m| m.trim().to_owned());
            }
        }
    }
    found
}

fn four_letter(host: &str, word: &str, limit: Duration) -> std::io::Result<String> {
    let addr = host
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("no address"))?;
    let mut stream = TcpStream::connect_timeout(&addr, limit)?;
    stream.set_read_timeout(Some(limit))?;
    stream.set_write_timeout(Some(limit))?;
    stream.write_all(word.as_bytes())?;
    let mut text = String::new();
    stream.take(1 << 20).read_to_string(&mut text)?;
    Ok(text)
}

fn parse_conf(at: &str, text: &str) -> Members {
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Members {
        at: at.to_owned(),
        tick: value("tickTime").map(Duration::from_millis),
        sync_limit: value("syncLimit").and_then(|v| u32::try_from(v).ok()),
        voters: text
            .lines()
            .filter(|l| l.trim_start().starts_with("server.") && !l.contains("observer"))
            .count(),
        mode: None,
        refused: None,
    }
}

fn session(asked: Duration, granted: Duration, members: &Members) -> Finding {
    let mut found = format!("asked {asked:?}, granted {granted:?}");
    let Some(tick) = members.tick else {
        return Finding::new("session timeout", Verdict::Warn, found)
            .at(&members.at)
            .because(format!(
                "tickTime and syncLimit could not be read ({}), so the timeout could not be judged",
                members.refused.as_deref().unwrap_or("no member answered conf")
            ))
            .fix("add conf to 4lw.commands.whitelist (or check tickTime × syncLimit by hand)");
    };
    found.push_str(&format!(", tickTime {tick:?}"));
    if let Some(limit) = members.sync_limit {
        found.push_str(&format!(", syncLimit {limit}"));
    }
    let finding = Finding::new("session timeout", Verdict::Ok, found).at(&members.at);
    if granted < tick * MIN_TICKS {
        return finding
            .with_verdict(Verdict::Unsafe)
            .because(format!(
                "below {MIN_TICKS} ticks the leader's view of a session lags by more than the margin the lost signal keeps: the ensemble can expire the session and grant its locks before the holder is told"
            ))
            .fix(format!(
                "ask for at least {:?} (session_timeout= in the URL), within the server's minSessionTimeout..maxSessionTimeout",
                tick * MIN_TICKS
            ));
    }
    let Some(limit) = members.sync_limit else {
        return finding.because("a standalone server: no follower can lag a leader");
    };
    let lag = tick * limit;
    // The client's connection timeout (a quarter of the session) is the reconnection.
    if granted.mul_f64(0.9) <= lag + granted / 4 {
        return finding
            .with_verdict(Verdict::Warn)
            .because(format!(
                "a member cut off from its leader keeps serving for syncLimit × tickTime ({lag:?}): 90% of the session does not outlast that plus a reconnection, so every such partition loses the holder's locks (safely)"
            ))
            .fix(format!(
                "ask for a session timeout above {:?}, or lower syncLimit",
                (lag * 20).div_f64(13.0)
            ));
    }
    finding.because("the lost signal fires before the ensemble can grant a lock on, and a holder rides out its member being cut off from the leader")
}

fn ensemble(members: &Members) -> Finding {
    let size = match (members.tick, members.voters, members.mode.as_deref()) {
        (Some(_), 0, _) | (None, _, Some("standalone")) => Some(1),
        (Some(_), voters, _) => Some(voters),
        _ => None,
    };
    match size {
        Some(1) => Finding::new("ensemble", Verdict::Warn, "1 member (standalone)")
            .at(&members.at)
            .because("no tolerance: when the server stops, every lock operation fails, and a restart ends every session")
            .fix("run 3 or 5 members"),
        Some(n) if n % 2 == 0 => Finding::new("ensemble", Verdict::Warn, format!("{n} voting members"))
            .at(&members.at)
            .because(format!("an even ensemble tolerates no more failures than {} members would", n - 1))
            .fix("run an odd number of voting members (3 or 5)"),
        Some(n) => Finding::new("ensemble", Verdict::Ok, format!("{n} voting members"))
            .at(&members.at)
            .because(format!("a quorum survives {} failed member(s)", n / 2)),
        None => Finding::new("ensemble", Verdict::Warn, "not shown")
            .at(&members.at)
            .because("no member answered conf or srvr")
            .fix("add conf and srvr to 4lw.commands.whitelist"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(tick_ms: u64, sync_limit: Option<u32>, voters: usize) -> Members {
        Members {
            at: "h:1".into(),
            tick: Some(Duration::from_millis(tick_ms)),
            sync_limit,
            voters,
            ..Members::default()
        }
    }

    #[test]
    fn the_session_is_judged_against_ticks_and_follower_lag() {
        let s = Duration::from_secs;
        let ensemble = members(2000, Some(5), 3);
        assert_eq!(session(s(8), s(8), &ensemble).verdict, Verdict::Unsafe);
        assert_eq!(session(s(10), s(10), &ensemble).verdict, Verdict::Warn);
        assert_eq!(session(s(16), s(16), &ensemble).verdict, Verdict::Ok);
        assert_eq!(
            session(s(10), s(10), &members(2000, None, 0)).verdict,
            Verdict::Ok
        );
    }

    #[test]
    fn conf_is_read_with_its_voting_members() {
        let conf = "clientPort=2181\ntickTime=500\nsyncLimit=5\nmembership: \n\
                    server.1=127.0.0.1:1:2:participant;0.0.0.0:3\n\
                    server.2=127.0.0.1:4:5:participant;0.0.0.0:6\n\
                    server.3=127.0.0.1:7:8:observer;0.0.0.0:9\nversion=0\n";
        let parsed = parse_conf("h:1", conf);
        assert_eq!(parsed.tick, Some(Duration::from_millis(500)));
        assert_eq!(parsed.sync_limit, Some(5));
        assert_eq!(parsed.voters, 2);
        assert_eq!(ensemble(&parsed).verdict, Verdict::Warn);
    }
}

//! `distlock doctor` for memcached: per server, the version (the meta commands releases rely
//! on), CAS (`-C` turns it off), eviction (`-M`, and the slab rebalancer that evicts even
//! under it) and what a restart does. One connection per server and one round trip (`version`
//! and `stats settings` pipelined); reads only.
//!
//! The rules are those [`MemcachedLock`](crate::MemcachedLock) documents: a server it refuses
//! (too old, `-C`, not memcached) is unsafe here too; an eviction frees a held lock (unsafe);
//! memcached keeps nothing across a restart, which frees every lock (warn: the documented
//! remedy is to delay restarts by the longest TTL). No clock is compared: expiries are
//! relative and run on the server's clock.

use std::collections::HashMap;

use distlock_core::{Error, Finding, Result, Verdict};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::config::MemcachedConfig;
use crate::lock::BACKEND;
use crate::server_version;

/// Judges every server of `config`: one connection and one round trip each.
///
/// # Errors
/// [`Error::Unavailable`] if a server cannot be reached or does not answer within the connect
/// and operation timeouts (every lock name that hashes to it would fail).
pub async fn doctor(config: &MemcachedConfig) -> Result<Vec<Finding>> {
    let mut findings = Vec::new();
    for server in config.servers() {
        let limit = config.connect_timeout() + config.operation_timeout();
        let answer = tokio::time::timeout(limit, ask(server))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {limit:?}")))
            .map_err(|e| Error::unavailable(BACKEND, format!("{server}: {e}")))?;
        findings.extend(judge(&answer, server));
    }
    Ok(findings)
}

/// What a server answered: its version and its settings.
struct Answer {
    version: String,
    settings: HashMap<String, String>,
}

async fn ask(server: &str) -> std::result::Result<Answer, String> {
    let mut stream = TcpStream::connect(server).await.map_err(|e| e.to_string())?;
    stream
        .write_all(b"version\r\nstats settings\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    while !text.ends_with(b"END\r\n") {
        let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the server closed the connection".to_owned());
        }
        text.extend_from_slice(&buf[..n]);
        if text.len() > 1 << 20 {
            return Err("not a memcached answer".to_owned());
        }
    }
    let text = String::from_utf8_lossy(&text);
    let mut version = String::new();
    let mut settings = HashMap::new();
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("VERSION ") {
            version = v.trim().to_owned();
        } else if let Some(stat) = line.strip_prefix("STAT ") {
            if let Some((name, value)) = stat.split_once(' ') {
                settings.insert(name.to_owned(), value.trim().to_owned());
            }
        }
    }
    Ok(Answer { version, settings })
}

fn judge(answer: &Answer, at: &str) -> Vec<Finding> {
    let setting = |name: &str| answer.settings.get(name).map(String::as_str);
    let version = match server_version::check(&answer.version) {
        Ok(()) => Finding::new("version", Verdict::Ok, &answer.version)
            .at(at)
            .because("its meta commands honour the CAS every release and renewal sends"),
        Err(why) => Finding::new("version", Verdict::Unsafe, &answer.version)
            .at(at)
            .because(format!("{why} (the backend refuses this server)"))
            .fix("run memcached 1.6.13 or later"),
    };
    let cas = match setting("cas_enabled") {
        Some("yes") => Finding::new("cas_enabled", Verdict::Ok, "yes")
            .at(at)
            .because("releases and renewals are guarded by the item's CAS"),
        other => Finding::new("cas_enabled", Verdict::Unsafe, other.unwrap_or("not shown"))
            .at(at)
            .because("without CAS (-C) a stale holder's release or renewal could act on a newer holder's lock (the backend refuses this server)")
            .fix("start memcached without -C"),
    };
    let eviction = match (setting("evictions"), setting("slab_reassign")) {
        (Some("off"), Some("no")) => Finding::new("evictions", Verdict::Ok, "off, slab_reassign no")
            .at(at)
            .because("a full server refuses new items instead of evicting held locks: the loss is loud and never early"),
        (Some("off"), reassign) => Finding::new(
            "evictions",
            Verdict::Unsafe,
            format!("off, slab_reassign {}", reassign.unwrap_or("?")),
        )
        .at(at)
        .because("the slab rebalancer evicts an item it cannot move to a new page, held locks included, even under -M")
        .fix("start memcached with -M -o no_slab_reassign"),
        (evictions, _) => Finding::new("evictions", Verdict::Unsafe, evictions.unwrap_or("not shown"))
            .at(at)
            .because("when memory runs out memcached evicts items, held locks included: another client acquires while the holder works on until its next renewal")
            .fix("start a dedicated memcached with -M -o no_slab_reassign and memory to spare"),
    };
    let restart = Finding::new("restart", Verdict::Warn, "no persistence")
        .at(at)
        .because("a restart forgets every lock: another client can acquire while an old holder works on until its next renewal fails, and fencing tokens start again")
        .fix("after a crash, delay the restart by the longest TTL in use; for locks that must survive a restart, use a store with monotonic fencing");
    vec![version, cas, eviction, restart]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(version: &str, settings: &[(&str, &str)]) -> Answer {
        Answer {
            version: version.to_owned(),
            settings: settings
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn an_old_or_foreign_server_is_unsafe() {
        let settings = [
            ("cas_enabled", "yes"),
            ("evictions", "off"),
            ("slab_reassign", "no"),
        ];
        for version in ["1.6.12", "1.4.15", "twemproxy"] {
            let findings = judge(&answer(version, &settings), "h:1");
            assert_eq!(findings[0].item, "version");
            assert_eq!(findings[0].verdict, Verdict::Unsafe, "{version}: {findings:?}");
        }
        let findings = judge(&answer("1.6.13", &settings), "h:1");
        assert_eq!(Verdict::worst(&findings), Verdict::Warn, "{findings:?}");
    }
}

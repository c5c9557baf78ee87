//! Administration of a [`RedisLock`]'s server: how many lock keys exist (`SCAN`, of every
//! master on a cluster) and whether the server may evict them (`maxmemory-policy`). Reads
//! only; it may not touch a lock.

use distlock_core::{Error, Result};

use super::RedisLock;
use crate::config::Target;
use crate::node::{self, Node, BACKEND};
use crate::slots::{Master, SlotMap};

impl RedisLock {
    /// How many lock keys whose names start with `name_prefix` exist now (a `SCAN`, for tests
    /// and status pages; fencing counters are not counted). On a cluster, every master that
    /// `CLUSTER SLOTS` lists is scanned: a node that has not yet heard which slots a new
    /// master serves leaves that master out.
    ///
    /// # Errors
    /// Store errors.
    pub async fn count_held(&self, name_prefix: &str) -> Result<usize> {
        let pattern = self.inner.keys.scan_pattern(name_prefix);
        let node = &self.inner.node;
        let Target::Cluster(seeds) = node.target() else {
            return scan_count(node, &pattern, None).await;
        };
        let masters = self.inner.slots.masters(node, &seeds.first_host()).await?;
        let mut held = 0;
        for master in &masters {
            held += scan_count(node, &pattern, Some(master)).await?;
        }
        Ok(held)
    }
}

/// Reads `maxmemory-policy` and warns (or, with `refuse`, fails) unless it is `noeviction`:
/// an evicted lock key is a freed lock. One round trip; on a cluster, one to each master (and
/// one for `CLUSTER SLOTS`), since a lock on any master's slots could be evicted there.
pub(crate) async fn check_eviction_policy(node: &Node, refuse: bool) -> Result<()> {
    let Target::Cluster(seeds) = node.target() else {
        return check_policy_at(node, None, refuse).await;
    };
    for master in SlotMap::default().masters(node, &seeds.first_host()).await? {
        check_policy_at(node, Some(&master), refuse).await?;
    }
    Ok(())
}

/// [`check_eviction_policy`] of one server, or on a cluster of the master `at`.
async fn check_policy_at(node: &Node, at: Option<&Master>, refuse: bool) -> Result<()> {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    let (reply, server) = match at {
        Some(master) => (
            node.query_at::<Vec<String>>(&master.0, master.1, &cmd).await,
            format!("{} (master {}:{})", node.url(), master.0, master.1),
        ),
        None => (node.query::<Vec<String>>(&cmd).await, node.url().to_owned()),
    };
    let policy = match reply {
        Ok(reply) => reply.get(1).cloned(),
        Err(Error::Unavailable { source, .. }) => return Err(Error::unavailable(BACKEND, source)),
        Err(e) => {
            let reason = node::detail(&e);
            if refuse {
                return Err(Error::invalid_config(format!(
                    "{server}: cannot read maxmemory-policy ({reason}); refusing, as configured, since it may evict lock keys"
                )));
            }
            tracing::warn!(
                url = %server,
                error = %reason,
                "distlock-redis: cannot read maxmemory-policy: if it is not noeviction, Redis may evict lock keys and free held locks"
            );
            return Ok(());
        }
    };
    match policy.as_deref() {
        Some("noeviction") => Ok(()),
        Some(policy) if refuse => Err(Error::invalid_config(format!(
            "{server}: maxmemory-policy is {policy}: Redis may evict lock keys and free held locks; set it to noeviction"
        ))),
        policy => {
            tracing::warn!(
                url = %server,
                policy = policy.unwrap_or("unknown"),
                "distlock-redis: maxmemory-policy is not noeviction: when memory runs out Redis EVICTS LOCK KEYS, freeing held locks (another client can acquire while the holder still works); set maxmemory-policy noeviction"
            );
            Ok(())
        }
    }
}

/// `SCAN`s `node` for keys matching `pattern`, counting only lock keys (UTF-8).
pub(crate) async fn scan_keys(node: &Node, pattern: &[u8]) -> Result<Vec<Vec<u8>>> {
    scan_keys_at(node, pattern, None).await
}

/// As [`scan_keys`]; on a cluster, of the master `at`.
async fn scan_keys_at(node: &Node, pattern: &[u8], at: Option<&Master>) -> Result<Vec<Vec<u8>>> {
    let mut cursor: u64 = 0;
    let mut found = Vec::new();
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(1000);
        let (next, keys): (u64, Vec<Vec<u8>>) = match at {
            Some(master) => node.query_at(&master.0, master.1, &cmd).await?,
            None => node.query(&cmd).await?,
        };
        found.extend(keys.into_iter().filter(|k| std::str::from_utf8(k).is_ok()));
        if next == 0 {
            return Ok(found);
        }
        cursor = next;
    }
}

/// `SCAN`s one server, or on a cluster the master `at`, counting lock keys once each.
async fn scan_count(node: &Node, pattern: &[u8], at: Option<&Master>) -> Result<usize> {
    let mut keys = scan_keys_at(node, pattern, at).await?;
    keys.sort();
    keys.dedup(); // SCAN may return a key twice
    Ok(keys.len())
}

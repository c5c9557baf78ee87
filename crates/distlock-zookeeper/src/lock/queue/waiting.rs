//! Taking a place in one queue, once or by waiting in line, under a [`Line`]'s rules: the
//! mutex, both sides of the read-write lock and a semaphore's `locks` mutex all go through
//! these two. They return the node that holds; building the lease is the caller's.

use std::sync::atomic::Ordering;

use distlock_core::{Error, Result};
use tokio::time::Instant;
use zookeeper_client as zk;

use super::entry::{Node, QueueEntry};
use super::order::{queue, Line, Verdict};
use crate::lock::{map_err, Conn, Inner, BACKEND};

/// The error for our node missing from its queue's listing.
pub(in crate::lock) fn vanished() -> Error {
    Error::backend(
        BACKEND,
        "our queue node vanished (deleted behind our back, or the session ended)",
    )
}

impl Inner {
    /// One attempt at a place that holds at once: list the queue first, after a `sync` (or use
    /// `listed`, a synced listing just made), and only if a newcomer would hold, create our node with `data`,
    /// list again and keep the node if it holds (else delete it). A node of ours already in
    /// the queue (left by an earlier attempt of the same owner whose reply was lost) is
    /// adopted, never duplicated.
    ///
    /// Returns our node if it holds, with `entry` still armed (the caller disarms it once the
    /// hold is recorded), or `None` with nothing of ours left in the queue. Round trips: 1
    /// (`sync` and `getChildren` sent together) when
    /// a newcomer would not hold (0 with `listed`): no node is created, no sequence number
    /// burned; 3 when it would (`getChildren`, `create2`, `getChildren`), +1 `delete` if
    /// another contender got in first.
    pub(in crate::lock) async fn take_once(
        &self,
        conn: &Conn,
        entry: &mut QueueEntry,
        line: Line,
        data: &[u8],
        listed: Option<Option<Vec<String>>>,
    ) -> Result<Option<Node>> {
        let listed = match listed {
            Some(listed) => listed,
            None => self.list_children_synced(conn, &entry.parent).await?,
        };
        if let Some(children) = listed {
            let (ours, queue) = self
                .settle(conn, &entry.parent, &entry.prefix, queue(children), None)
                .await?;
            if let Some(node) = ours {
                // Our earlier node: if it holds, it is ours again; else leave the queue.
                entry.created = Some(node.path.clone());
                entry.sent = true;
                if holds(line, &queue, &node)? {
                    return Ok(Some(node));
                }
                entry.leave().await?;
                return Ok(None);
            }
            if !line.admits_newcomer(&queue) {
                entry.disarm();
                return Ok(None);
            }
        }
        let created = entry.create(data).await?;
        let (children, mzxid) = self
            .list_children_stat(conn, &entry.parent)
            .await?
            .unwrap_or_default();
        entry.parent_mzxid = Some(mzxid);
        let (ours, queue) = self
            .settle(
                conn,
                &entry.parent,
                &entry.prefix,
                queue(children),
                Some(&created),
            )
            .await?;
        let node = ours.ok_or_else(vanished)?;
        entry.created = Some(node.path.clone());
        if holds(line, &queue, &node)? {
            return Ok(Some(node));
        }
        entry.leave().await?;
        Ok(None)
    }

    /// Waits in line with our node `created` (just created in `entry`'s queue) until it holds
    /// (`Some`, `entry` still armed) or `deadline` passes (`None`, our node deleted). Each
    /// listing shows whom to watch (`exists` with a watch on that one node only), and the
    /// next listing follows its deletion. Round trips: 1 (`getChildren`) when it holds at
    /// once; else 2 to get in line (`getChildren`, `exists`) and 1 `getChildren` per wake-up
    /// (+1 `exists` when the wake-up was not the last one it needed). Each step is bounded by
    /// the operation timeout; the wait itself by `deadline` alone.
    ///
    /// # Cancel safety
    /// Cancel safe: `entry` stays armed until the caller disarms it, so a drop at any await
    /// deletes our node in the background.
    pub(in crate::lock) async fn wait_in_line(
        &self,
        conn: &Conn,
        entry: &mut QueueEntry,
        created: &Node,
        line: Line,
        deadline: Option<Instant>,
    ) -> Result<Option<Node>> {
        let mut session = self.session.subscribe();
        loop {
            let (ours, queue) = self
                .bounded(async {
                    let (children, mzxid) = self
                        .list_children_stat(conn, &entry.parent)
                        .await?
                        .unwrap_or_default();
                    entry.parent_mzxid = Some(mzxid);
                    self.settle(conn, &entry.parent, &entry.prefix, queue(children), Some(created))
                        .await
                })
                .await?;
            let node = ours.ok_or_else(vanished)?;
            entry.created = Some(node.path.clone());
            let position = position_of(&queue, &node)?;
            let watched = match line.verdict(&queue, position) {
                Verdict::Holds => return Ok(Some(node)),
                Verdict::Watch(child) => format!("{}/{child}", entry.parent),
            };
            if deadline.is_some_and(|d| d <= Instant::now()) {
                self.bounded(entry.leave()).await?;
                return Ok(None);
            }
            let (stat, watcher) = self
                .bounded(async { conn.client.check_and_watch_stat(&watched).await.map_err(map_err) })
                .await?;
            if stat.is_none() {
                continue; // gone between the listing and the watch: look again
            }
            if !self.await_change(watcher, &mut session, conn, deadline).await? {
                self.bounded(entry.leave()).await?;
                return Ok(None);
            }
        }
    }
}

/// Where `node` stands in `queue`.
fn position_of(queue: &[String], node: &Node) -> Result<usize> {
    queue
        .iter()
        .position(|c| *c == node.child)
        .ok_or_else(|| Error::backend(BACKEND, "our queue node is not in the queue"))
}

/// Whether `node` holds in `queue` under `line`.
fn holds(line: Line, queue: &[String], node: &Node) -> Result<bool> {
    let position = position_of(queue, node)?;
    Ok(line.verdict(queue, position) == Verdict::Holds)
}

impl Inner {
    /// Waits for `watcher`'s event: `true` when it comes, `false` when `deadline` passes first.
    ///
    /// # Errors
    /// [`Error::Unavailable`] if the session ends meanwhile (it no longer keeps `conn`'s epoch).
    pub(in crate::lock) async fn await_change(
        &self,
        watcher: zk::OneshotWatcher,
        session: &mut tokio::sync::watch::Receiver<distlock_core::Session>,
        conn: &Conn,
        deadline: Option<Instant>,
    ) -> Result<bool> {
        let expired = async {
            // Ends when the session no longer keeps our epoch (or the backend is gone).
            let _ = session.wait_for(|s| !s.keeps(conn.epoch)).await;
        };
        let sleep = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            event = watcher.changed() => {
                self.watch_events.fetch_add(1, Ordering::Relaxed);
                if event.event_type == zk::EventType::Session {
                    return Err(Error::unavailable(BACKEND, format!("the session ended while waiting ({})", event.session_state)));
                }
                Ok(true)
            }
            () = sleep => Ok(false),
            () = expired => Err(Error::unavailable(BACKEND, "the session ended while waiting")),
        }
    }
}

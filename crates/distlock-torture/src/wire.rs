//! The line protocol between a client process and the harness: one JSON object per line.
//! Events need no answer; a write is answered with one line saying whether it was accepted.

use serde::{Deserialize, Serialize};

use crate::history::{ClientEvent, GrantId, HoldKind, Nanos};

/// A line from a client.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Message {
    /// The first line: which client this connection records for (a task of a client
    /// process, see [`task_client`]).
    Hello { client: u32 },
    /// Something that happened, stamped by the client.
    Event { at: Nanos, event: ClientEvent },
    /// A write to the fenced resource (a reader's: a read): answered with a [`WriteReply`].
    Write {
        name: String,
        grant: GrantId,
        token: Option<u64>,
        #[serde(default)]
        kind: HoldKind,
    },
}

/// The resource's answer to a write.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct WriteReply {
    /// Whether the write was accepted.
    pub accepted: bool,
}

/// How far apart the history's client ids of one slot's tasks are: task `t` of slot `s` is
/// client `s + t * TASK_STRIDE` (task 0 is the slot itself).
pub const TASK_STRIDE: u32 = 1000;

/// The history's client id of task `task` of slot `slot`.
pub fn task_client(slot: u32, task: u32) -> u32 {
    slot + task * TASK_STRIDE
}

/// The slot (client process) of a history client id.
pub fn slot_of(client: u32) -> u32 {
    client % TASK_STRIDE
}

//! The line protocol between a client process and the harness: one JSON object per line.
//! Events need no answer; a write is answered with one line saying whether it was accepted.

use serde::{Deserialize, Serialize};

use crate::history::{ClientEvent, GrantId, Nanos};

/// A line from a client.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Message {
    /// The first line: which client slot this process fills.
    Hello { client: u32 },
    /// Something that happened, stamped by the client.
    Event { at: Nanos, event: ClientEvent },
    /// A write to the fenced resource: answered with a [`WriteReply`].
    Write {
        name: String,
        grant: GrantId,
        token: Option<u64>,
    },
}

/// The resource's answer to a write.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct WriteReply {
    /// Whether the write was accepted.
    pub accepted: bool,
}

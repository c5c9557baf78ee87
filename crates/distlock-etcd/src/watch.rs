//! Waiting for one key's deletion through etcd's watch: the only wake-up a waiter needs, as it
//! watches just the contender before it.

use distlock_core::Result;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::client::{bounded, map_status, Rpc};
use crate::proto::event::EventType;
use crate::proto::watch_create_request::FilterType;
use crate::proto::watch_request::RequestUnion;
use crate::proto::{WatchCreateRequest, WatchRequest};

/// Returns once `key` is deleted at a revision after `after`, or once the watch can tell no
/// more (cancelled, its revision compacted, the stream closed): the caller then looks again.
/// A delete between `after` and the watch's creation is delivered too (the watch starts at
/// `after + 1`). Opening the watch is bounded by the operation timeout; the wait itself is
/// not (the caller bounds it).
pub(crate) async fn deletion(rpc: &Rpc, key: &[u8], after: i64) -> Result<()> {
    deletion_in(rpc, key, Vec::new(), after).await
}

/// As [`deletion`], for any key under `prefix`: returns once one of them is deleted.
pub(crate) async fn deletion_under(rpc: &Rpc, prefix: &str, after: i64) -> Result<()> {
    let end = crate::keys::prefix_end(prefix.as_bytes());
    deletion_in(rpc, prefix.as_bytes(), end, after).await
}

async fn deletion_in(rpc: &Rpc, key: &[u8], range_end: Vec<u8>, after: i64) -> Result<()> {
    let (requests, receiver) = mpsc::channel(1);
    let create = WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key: key.to_vec(),
            range_end,
            start_revision: after + 1,
            filters: vec![FilterType::Noput as i32],
            ..WatchCreateRequest::default()
        })),
    };
    // The channel has room for it: this does not wait.
    let _ = requests.send(create).await;
    let mut client = rpc.watch();
    let mut stream = bounded(rpc.timeout(), "watch", async {
        client
            .watch(ReceiverStream::new(receiver))
            .await
            .map_err(map_status)
    })
    .await?
    .into_inner();
    loop {
        match stream.message().await {
            Ok(Some(reply)) => {
                let deleted = reply
                    .events
                    .iter()
                    .any(|event| event.r#type == EventType::Delete as i32);
                if deleted || reply.canceled || reply.compact_revision > 0 {
                    // Keeping `requests` open until here keeps the stream open.
                    drop(requests);
                    return Ok(());
                }
            }
            Ok(None) => return Ok(()),
            Err(status) => return Err(map_status(status)),
        }
    }
}

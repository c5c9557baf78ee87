//! The requests this crate puts in etcd transactions, built by name: comparisons, puts,
//! deletes and the ranges that find a queue's first or previous contender; and reading their
//! replies. Pure functions; no requests are sent here.

use crate::keys::{prefix_end, KeyRange};
use crate::proto::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::proto::range_request::{SortOrder, SortTarget};
use crate::proto::request_op::Request;
use crate::proto::response_op::Response;
use crate::proto::{
    Compare, DeleteRangeRequest, KeyValue, PutRequest, RangeRequest, RequestOp, ResponseOp, TxnRequest,
    TxnResponse,
};

/// A transaction: `compare`, then `success` if every comparison holds, else `failure`.
pub(crate) fn txn(compare: Vec<Compare>, success: Vec<RequestOp>, failure: Vec<RequestOp>) -> TxnRequest {
    TxnRequest {
        compare,
        success,
        failure,
    }
}

/// `key` was never created (or was deleted since): its create revision is 0.
pub(crate) fn absent(key: &str) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Create as i32,
        key: key.as_bytes().to_vec(),
        target_union: Some(TargetUnion::CreateRevision(0)),
        range_end: Vec::new(),
    }
}

/// `key` exists and was created at `revision`.
pub(crate) fn created_at(key: &str, revision: i64) -> Compare {
    Compare {
        target_union: Some(TargetUnion::CreateRevision(revision)),
        ..absent(key)
    }
}

/// No key starts with `prefix` (an empty range compares as one key of create revision 0).
pub(crate) fn none_under(prefix: &str) -> Compare {
    Compare {
        range_end: prefix_end(prefix.as_bytes()),
        ..absent(prefix)
    }
}

/// No key in `range` exists.
pub(crate) fn none_in(range: &KeyRange) -> Compare {
    Compare {
        range_end: range.end.clone(),
        ..absent(&range.start)
    }
}

/// `key` was written only once, at its creation (version 1: it exists and was never put
/// again).
pub(crate) fn never_rewritten(key: &str) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Version as i32,
        key: key.as_bytes().to_vec(),
        target_union: Some(TargetUnion::Version(1)),
        range_end: Vec::new(),
    }
}

/// No key under `prefix` was written again after its creation (every version below 2; an
/// empty range holds).
pub(crate) fn none_rewritten_under(prefix: &str) -> Compare {
    Compare {
        result: CompareResult::Less as i32,
        target: CompareTarget::Version as i32,
        key: prefix.as_bytes().to_vec(),
        target_union: Some(TargetUnion::Version(2)),
        range_end: prefix_end(prefix.as_bytes()),
    }
}

/// No key under `prefix` was created or changed after `revision` (every key in the range has
/// a mod revision at most `revision`; an empty range holds).
pub(crate) fn unchanged_since(prefix: &str, revision: i64) -> Compare {
    Compare {
        result: CompareResult::Less as i32,
        target: CompareTarget::Mod as i32,
        key: prefix.as_bytes().to_vec(),
        target_union: Some(TargetUnion::ModRevision(revision + 1)),
        range_end: prefix_end(prefix.as_bytes()),
    }
}

/// Puts `value` at `key`, attached to `lease`.
pub(crate) fn put(key: &str, value: &str, lease: i64) -> RequestOp {
    op(Request::RequestPut(PutRequest {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        lease,
        ..PutRequest::default()
    }))
}

/// Puts `value` at `key`, which keeps the lease it has.
pub(crate) fn put_keeping_lease(key: &str, value: &str) -> RequestOp {
    op(Request::RequestPut(PutRequest {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        ignore_lease: true,
        ..PutRequest::default()
    }))
}

/// Deletes `key`.
pub(crate) fn delete(key: &str) -> RequestOp {
    op(Request::RequestDeleteRange(DeleteRangeRequest {
        key: key.as_bytes().to_vec(),
        ..DeleteRangeRequest::default()
    }))
}

/// Reads `key`.
pub(crate) fn get(key: &str) -> RequestOp {
    op(Request::RequestRange(RangeRequest {
        key: key.as_bytes().to_vec(),
        ..RangeRequest::default()
    }))
}

/// Reads the first contender under `prefix`: the key of the lowest create revision.
pub(crate) fn first_under(prefix: &str) -> RequestOp {
    op(Request::RequestRange(first_under_request(prefix)))
}

/// Reads the first key in `range`: the one of the lowest create revision.
pub(crate) fn first_in(range: &KeyRange) -> RequestOp {
    op(Request::RequestRange(RangeRequest {
        key: range.start.as_bytes().to_vec(),
        range_end: range.end.clone(),
        ..first_under_request(&range.start)
    }))
}

/// As [`first_under`], as a request of its own.
pub(crate) fn first_under_request(prefix: &str) -> RangeRequest {
    RangeRequest {
        key: prefix.as_bytes().to_vec(),
        range_end: prefix_end(prefix.as_bytes()),
        limit: 1,
        sort_order: SortOrder::Ascend as i32,
        sort_target: SortTarget::Create as i32,
        ..RangeRequest::default()
    }
}

/// Reads every key under `prefix`, oldest first (by create revision), at most `limit`
/// (0: all).
pub(crate) fn all_under(prefix: &str, limit: i64) -> RangeRequest {
    RangeRequest {
        limit,
        ..first_under_request(prefix)
    }
}

/// `request` as a transaction's operation.
pub(crate) fn range(request: RangeRequest) -> RequestOp {
    op(Request::RequestRange(request))
}

/// Reads the contender just before the one created at `revision` in `range`: the key of
/// the highest create revision below it.
pub(crate) fn just_before(range: &KeyRange, revision: i64) -> RequestOp {
    op(Request::RequestRange(RangeRequest {
        key: range.start.as_bytes().to_vec(),
        range_end: range.end.clone(),
        limit: 1,
        sort_order: SortOrder::Descend as i32,
        sort_target: SortTarget::Create as i32,
        max_create_revision: revision - 1,
        ..RangeRequest::default()
    }))
}

fn op(request: Request) -> RequestOp {
    RequestOp {
        request: Some(request),
    }
}

/// The keys the `index`th reply of `reply` read (none if it was not a range).
pub(crate) fn kvs(reply: &TxnResponse, index: usize) -> &[KeyValue] {
    match reply
        .responses
        .get(index)
        .and_then(|r: &ResponseOp| r.response.as_ref())
    {
        Some(Response::ResponseRange(range)) => &range.kvs,
        _ => &[],
    }
}

/// The create revision of the key the `index`th reply of `reply` read (0: none).
pub(crate) fn created(reply: &TxnResponse, index: usize) -> i64 {
    kvs(reply, index).first().map_or(0, |kv| kv.create_revision)
}

/// How many keys the `index`th reply of `reply` deleted (0 if it was not a delete).
pub(crate) fn deleted(reply: &TxnResponse, index: usize) -> i64 {
    match reply.responses.get(index).and_then(|r| r.response.as_ref()) {
        Some(Response::ResponseDeleteRange(delete)) => delete.deleted,
        _ => 0,
    }
}

/// The revision `reply` was applied at (a put in it created its key there).
pub(crate) fn revision(reply: &TxnResponse) -> i64 {
    reply.header.as_ref().map_or(0, |h| h.revision)
}

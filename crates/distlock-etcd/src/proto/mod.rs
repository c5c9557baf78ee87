//! etcd's v3 gRPC API, as far as this crate uses it: generated from `proto/etcd.proto` by
//! `scripts/regen-etcd-proto` (committed, so that building needs no `protoc`).
#![allow(missing_docs, clippy::all, clippy::pedantic, unreachable_pub)]

include!("etcdserverpb.rs");

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    /// The generated code records the SHA-256 of the proto it came from: an edit of
    /// `proto/etcd.proto` without `scripts/regen-etcd-proto` fails here.
    #[test]
    fn the_generated_code_is_that_of_the_proto() {
        let proto = include_bytes!("../../proto/etcd.proto");
        let digest: String = Sha256::digest(proto).iter().map(|b| format!("{b:02x}")).collect();
        let recorded = include_str!("etcdserverpb.rs")
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("// proto sha256: "))
            .expect("the first line records the proto's digest");
        assert_eq!(
            recorded, digest,
            "proto/etcd.proto changed since the code was generated: run scripts/regen-etcd-proto"
        );
    }
}

//! Generates `src/proto/etcdserverpb.rs` of distlock-etcd from `proto/etcd.proto`: the
//! messages (prost) and the client side of the services (tonic), no server side. The file's
//! first line records the SHA-256 of the proto it came from; a test of distlock-etcd checks
//! that it still matches, so an edit of the proto without regenerating fails the tests.
//!
//! Run through `scripts/regen-etcd-proto` (it installs `protoc` if missing).

use std::path::{Path, PathBuf};
use std::{env, fs};

use sha2::{Digest, Sha256};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let crate_dir: PathBuf = match env::args().nth(1) {
        Some(dir) => dir.into(),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    };
    let proto = crate_dir.join("proto/etcd.proto");
    let out = crate_dir.join("src/proto");
    let scratch = tempdir()?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .out_dir(&scratch)
        .compile_protos(&[&proto], &[&crate_dir.join("proto")])?;
    let generated = fs::read_to_string(scratch.join("etcdserverpb.rs"))?;
    let digest = hex(&Sha256::digest(fs::read(&proto)?));
    let header = format!(
        "// proto sha256: {digest}\n\
         // Generated from proto/etcd.proto by scripts/regen-etcd-proto: do not edit.\n"
    );
    fs::write(out.join("etcdserverpb.rs"), header + &generated)?;
    fs::remove_dir_all(&scratch)?;
    println!("wrote {}", out.join("etcdserverpb.rs").display());
    Ok(())
}

fn tempdir() -> std::io::Result<PathBuf> {
    let dir = env::temp_dir().join(format!("distlock-etcd-codegen-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

//! SQLite: the file's journal mode (read from its header, nothing opened) and the file system
//! it lives on (a network file system: SQLite's locks exclude processes of one host only).

use std::io::Read;
use std::path::Path;

use distlock_core::{Finding, Result, Verdict};

pub(super) fn doctor(path: &Path) -> Result<Vec<Finding>> {
    let at = path.display().to_string();
    Ok(vec![journal(path, &at), file_system(path, &at)])
}

/// Bytes 18 and 19 of the header are the write and read format versions: 2 in WAL mode, 1 with
/// a rollback journal.
fn journal(path: &Path, at: &str) -> Finding {
    let mut header = [0u8; 100];
    let read = std::fs::File::open(path).and_then(|mut file| file.read(&mut header));
    match read {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Finding::new("journal mode", Verdict::Ok, "the file does not exist yet")
                .at(at)
                .because("the first client creates it in WAL mode")
        }
        Err(e) => Finding::new("journal mode", Verdict::Warn, format!("unreadable: {e}"))
            .at(at)
            .because("the file could not be read, so neither could its journal mode")
            .fix("check the file's permissions: every client's user must read and write it and its directory"),
        Ok(0) => Finding::new("journal mode", Verdict::Ok, "empty file")
            .at(at)
            .because("the first client sets WAL mode"),
        Ok(n) if n < 20 || !header.starts_with(b"SQLite format 3\0") => {
            Finding::new("journal mode", Verdict::Unsafe, "not a SQLite database")
                .at(at)
                .because("the file is not a SQLite database: the backend refuses to use it")
                .fix("name another file in the URL (the library never overwrites one)")
        }
        Ok(_) if header[18] == 2 && header[19] == 2 => Finding::new("journal mode", Verdict::Ok, "wal")
            .at(at)
            .because("readers and the writer do not block each other; the backend sets it when it opens the file"),
        Ok(_) => Finding::new("journal mode", Verdict::Warn, "rollback journal (not WAL)")
            .at(at)
            .because("the backend switches the file to WAL when it opens it, which needs a moment with no other connection: a program holding it open in another mode makes lock operations wait on each other")
            .fix("let the backend open it alone once (or run PRAGMA journal_mode=WAL on it)"),
    }
}

fn file_system(path: &Path, at: &str) -> Finding {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let dir = existing_ancestor(dir);
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Finding::new("file system", Verdict::Warn, "unknown (no /proc/self/mountinfo)")
            .at(at)
            .because("the file system could not be read on this platform")
            .fix("keep the file on a local disk: SQLite's locks exclude processes of one host only");
    };
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    judge_fs(crate::fs::fs_type_in(&mountinfo, &dir), at)
}

fn judge_fs(fs_type: Option<String>, at: &str) -> Finding {
    match fs_type {
        Some(fs_type) if crate::fs::is_network_fs(&fs_type) => {
            Finding::new("file system", Verdict::Unsafe, fs_type)
                .at(at)
                .because("a network file system: SQLite's locks and WAL's shared memory exclude processes of one host only, so clients on two hosts could both hold a lock (the backend refuses it)")
                .fix("put the file on a local disk, or use a database server (postgres://, mysql://)")
        }
        Some(fs_type) => Finding::new("file system", Verdict::Ok, fs_type)
            .at(at)
            .because("a local file system: SQLite's locks exclude every process of this host"),
        None => Finding::new("file system", Verdict::Warn, "unknown")
            .at(at)
            .because("no mount in the mount table holds the file's directory")
            .fix("keep the file on a local disk: SQLite's locks exclude processes of one host only"),
    }
}

/// The nearest ancestor of `dir` that exists (the file's directory is created on first use).
fn existing_ancestor(dir: &Path) -> std::path::PathBuf {
    dir.ancestors()
        .find(|d| d.exists())
        .unwrap_or(Path::new("/"))
        .to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_file_system_is_unsafe() {
        assert_eq!(judge_fs(Some("nfs4".into()), "f").verdict, Verdict::Unsafe);
        assert_eq!(judge_fs(Some("cifs".into()), "f").verdict, Verdict::Unsafe);
        assert_eq!(judge_fs(Some("ext4".into()), "f").verdict, Verdict::Ok);
        assert_eq!(judge_fs(None, "f").verdict, Verdict::Warn);
    }
}

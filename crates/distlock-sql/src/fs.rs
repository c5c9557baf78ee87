//! Checks on where a SQLite lock file lives: not on a network file system (WAL's shared
//! memory and POSIX locks only exclude processes of one host), and, for the embedded default's
//! per-user directory in the temp dir, owned by this user and closed to everyone else. This
//! module owns those checks only; it opens no database.

use std::path::{Path, PathBuf};

use distlock_core::{Error, Result};

/// File systems on which SQLite's locking does not exclude processes of different hosts (or
/// is known to be unreliable even on one): network and cluster file systems, by the type
/// name Linux reports in `/proc/self/mountinfo`.
const NETWORK_FS: &[&str] = &[
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "ncpfs",
    "afs",
    "coda",
    "9p",
    "ceph",
    "glusterfs",
    "lustre",
    "gfs2",
    "ocfs2",
    "fuse.sshfs",
    "fuse.glusterfs",
    "fuse.cephfs",
    "fuse.s3fs",
    "fuse.rclone",
];

/// Whether `fs_type` (as in `/proc/self/mountinfo`) is a network or cluster file system.
pub(crate) fn is_network_fs(fs_type: &str) -> bool {
    NETWORK_FS.contains(&fs_type)
}

/// The file system type of the mount holding `path` (absolute, symlinks resolved), from the
/// text of `/proc/self/mountinfo`: the longest mount point that contains `path`, the last one
/// listed when mounts are stacked.
pub(crate) fn fs_type_in(mountinfo: &str, path: &Path) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let (Some(mount_point), Some(fs_type)) = (left.split(' ').nth(4), right.split(' ').next()) else {
            continue;
        };
        let mount_point = unescape(mount_point);
        if !path.starts_with(&mount_point) {
            continue;
        }
        let depth = Path::new(&mount_point).components().count();
        if best.as_ref().is_none_or(|(d, _)| depth >= *d) {
            best = Some((depth, fs_type.to_owned()));
        }
    }
    best.map(|(_, fs_type)| fs_type)
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Refuses a lock file whose directory `dir` is on a network file system. Where the mount
/// table cannot be read (not Linux), nothing is checked.
pub(crate) fn refuse_network_fs(dir: &Path) -> Result<()> {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Ok(());
    };
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    match fs_type_in(&mountinfo, &dir) {
        Some(fs_type) if is_network_fs(&fs_type) => Err(Error::invalid_config(format!(
            "the SQLite lock file's directory {} is on a network file system ({fs_type}): \
             SQLite's locks and WAL's shared memory only exclude processes of one host, so \
             clients on two hosts could both hold a lock. Put the file on a local disk, or use \
             a database server (mysql://...)",
            dir.display()
        ))),
        _ => Ok(()),
    }
}

/// The embedded default's directory when there is no `XDG_STATE_HOME` or `HOME`:
/// `distlock-<uid>` in the temp dir, private to this user (see [`ensure_private_dir`]).
#[cfg(unix)]
pub(crate) fn private_temp_dir() -> PathBuf {
    let uid = current_uid().map_or_else(|| "unknown".to_owned(), |uid| uid.to_string());
    std::env::temp_dir().join(format!("distlock-{uid}"))
}

/// The embedded default's directory when there is no `XDG_STATE_HOME` or `HOME`.
#[cfg(not(unix))]
pub(crate) fn private_temp_dir() -> PathBuf {
    std::env::temp_dir().join("distlock")
}

/// This process's user id: the owner of `/proc/self`, else of a file it creates.
#[cfg(unix)]
fn current_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;

    if let Ok(meta) = std::fs::metadata("/proc/self") {
        return Some(meta.uid());
    }
    let probe = tempfile_in_temp_dir()?;
    let uid = std::fs::metadata(&probe).ok().map(|m| m.uid());
    let _ = std::fs::remove_file(&probe);
    uid
}

#[cfg(unix)]
fn tempfile_in_temp_dir() -> Option<PathBuf> {
    let path = std::env::temp_dir().join(format!(".distlock-uid-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .ok()?;
    Some(path)
}

/// Creates `dir` with mode 0700 if missing, then refuses it unless it is a real directory
/// (not a symlink) owned by this user and closed to group and others: in a shared temp dir,
/// another local user could have created it first and would then control the lock file.
#[cfg(unix)]
pub(crate) fn ensure_private_dir(dir: &Path) -> Result<()> {
    create_private_dir(dir).map(drop).map_err(|why| {
        Error::invalid_config(format!(
            "the lock directory {} {why}; remove it, or set XDG_STATE_HOME or HOME, or name a \
             lock file explicitly",
            dir.display()
        ))
    })
}

/// Creates `dir` (its parent must exist) with mode 0700 if missing, then checks it as
/// [`check_private_dir`] does; the error says what is wrong with it.
#[cfg(unix)]
pub(crate) fn create_private_dir(dir: &Path) -> std::result::Result<std::fs::Metadata, String> {
    use std::os::unix::fs::DirBuilderExt;

    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot be created: {e}")),
    }
    check_private_dir(dir)
}

/// `dir`'s own metadata if it is a private directory of this user; else what makes it not
/// one: missing, not a real directory (a symlink or a file, which is not followed), owned by
/// another user, or open to group or others.
#[cfg(unix)]
pub(crate) fn check_private_dir(dir: &Path) -> std::result::Result<std::fs::Metadata, String> {
    use std::os::unix::fs::MetadataExt;

    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("cannot be read: {e}"))?;
    if !meta.file_type().is_dir() {
        return Err("is not a directory (a symlink or a file)".to_owned());
    }
    let uid = current_uid();
    if uid != Some(meta.uid()) {
        return Err(format!(
            "is owned by uid {}, not by this user ({})",
            meta.uid(),
            uid.map_or_else(|| "unknown".to_owned(), |u| u.to_string())
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "is open to other users (mode {:o}; it must be 0700)",
            meta.mode() & 0o7777
        ));
    }
    Ok(meta)
}

/// Without Unix permissions there is nothing to check beyond creating the directory.
#[cfg(not(unix))]
pub(crate) fn ensure_private_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::invalid_config(format!("creating the lock directory {}: {e}", dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
40 27 0:40 / /mnt/shared rw,relatime - nfs4 server:/export rw,vers=4.2
41 40 0:41 / /mnt/shared/local rw - tmpfs tmpfs rw
42 27 0:42 / /mnt/my\\040files rw - cifs //srv/share rw
43 27 0:43 / /mnt/stacked rw - ext4 /dev/sdb1 rw
44 27 0:44 / /mnt/stacked rw - fuse.sshfs host:/ rw
";

    fn fs(path: &str) -> Option<String> {
        fs_type_in(MOUNTINFO, Path::new(path))
    }

    #[test]
    fn finds_the_longest_mount_point() {
        assert_eq!(fs("/home/me/locks").as_deref(), Some("ext4"));
        assert_eq!(fs("/mnt/shared/locks.db").as_deref(), Some("nfs4"));
        assert_eq!(fs("/mnt/shared/local/x").as_deref(), Some("tmpfs"));
        // Component-wise: /mnt/sharedX is not under /mnt/shared.
        assert_eq!(fs("/mnt/sharedX/a").as_deref(), Some("ext4"));
        assert_eq!(fs("/mnt/my files/a").as_deref(), Some("cifs"));
        assert_eq!(fs("/mnt/stacked/a").as_deref(), Some("fuse.sshfs"));
        assert_eq!(fs_type_in("garbage\n", Path::new("/x")), None);
    }

    #[test]
    fn network_file_systems() {
        for fs_type in [
            "nfs",
            "nfs4",
            "cifs",
            "smb3",
            "9p",
            "ceph",
            "fuse.sshfs",
            "lustre",
        ] {
            assert!(is_network_fs(fs_type), "{fs_type}");
        }
        for fs_type in ["ext4", "xfs", "btrfs", "tmpfs", "zfs", "overlay", "fuse.portal"] {
            assert!(!is_network_fs(fs_type), "{fs_type}");
        }
    }

    #[test]
    fn a_local_directory_is_accepted() {
        let dir = std::env::temp_dir();
        assert!(refuse_network_fs(&dir).is_ok());
    }

    #[test]
    fn unescapes_octal() {
        assert_eq!(unescape("/a\\040b\\134c\\011"), "/a b\\c\t");
        assert_eq!(unescape("/trailing\\04"), "/trailing\\04");
    }
}

//! Unix socket addresses for files in a directory whose path may be too long for one: a
//! socket's address holds at most 107 bytes on Linux (103 on the BSDs and macOS), and a
//! database's waiters directory can be deeper than that. On Linux such a directory is reached
//! through an open handle of it instead (`/proc/self/fd/<n>/<name>`), whose length does not
//! depend on the directory's; elsewhere the error says the path is too long. This module
//! opens no socket.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Error, ErrorKind};
use std::path::{Path, PathBuf};

/// The longest socket path used directly, bytes: the smallest limit of the Unix systems
/// (macOS and the BSDs: 104 with the terminating NUL).
const DIRECT_MAX: usize = 103;

/// How files of one directory are addressed in socket calls; the directory's handle, if one
/// is used, stays open as long as this value.
pub(crate) struct SocketDir {
    prefix: PathBuf,
    _handle: Option<File>,
}

impl SocketDir {
    /// Addresses for names of up to `longest_name` bytes in `dir`, which is `checked`: the
    /// metadata of the directory the caller checked (a handle opened for a long path must be
    /// that very directory, not one put in its place meanwhile).
    pub(crate) fn new(dir: &Path, longest_name: usize, checked: &std::fs::Metadata) -> std::io::Result<Self> {
        if dir.as_os_str().len() + 1 + longest_name <= DIRECT_MAX {
            return Ok(Self {
                prefix: dir.to_path_buf(),
                _handle: None,
            });
        }
        Self::through_handle(dir, checked)
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn through_handle(dir: &Path, checked: &std::fs::Metadata) -> std::io::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::io::AsRawFd;

        let handle = File::open(dir)?;
        let opened = handle.metadata()?;
        if !opened.is_dir() || (opened.dev(), opened.ino()) != (checked.dev(), checked.ino()) {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!("{} was replaced while it was opened", dir.display()),
            ));
        }
        Ok(Self {
            prefix: PathBuf::from(format!("/proc/self/fd/{}", handle.as_raw_fd())),
            _handle: Some(handle),
        })
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn through_handle(dir: &Path, _checked: &std::fs::Metadata) -> std::io::Result<Self> {
        Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{} is too long for a Unix socket's address ({DIRECT_MAX} bytes with the socket's name)",
                dir.display()
            ),
        ))
    }

    /// The address of the file `name` in the directory.
    pub(crate) fn addr(&self, name: impl AsRef<OsStr>) -> PathBuf {
        self.prefix.join(name.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_path_is_used_directly_and_a_long_one_through_a_handle() {
        let tmp = tempfile::tempdir().expect("dir");
        let meta = std::fs::symlink_metadata(tmp.path()).expect("meta");
        let short = SocketDir::new(tmp.path(), 40, &meta).expect("fits");
        assert_eq!(short.addr("x"), tmp.path().join("x"));

        let deep = tmp.path().join("d".repeat(100));
        std::fs::create_dir(&deep).expect("mkdir");
        let meta = std::fs::symlink_metadata(&deep).expect("meta");
        let long = SocketDir::new(&deep, 40, &meta);
        if cfg!(any(target_os = "linux", target_os = "android")) {
            let long = long.expect("through a handle");
            let addr = long.addr("x");
            assert!(addr.starts_with("/proc/self/fd/"), "{}", addr.display());
            std::fs::write(&addr, "").expect("writes through the handle");
            assert!(deep.join("x").exists());
        } else {
            assert!(long.is_err());
        }

        // Another directory put in its place is refused.
        let other = std::fs::symlink_metadata(tmp.path()).expect("meta");
        if cfg!(any(target_os = "linux", target_os = "android")) {
            assert!(SocketDir::new(&deep, 40, &other).is_err());
        }
    }
}

//! [`StoreClock`]: a wall clock a test server runs on, which a test moves while the server
//! runs (an NTP step, an operator's `date -s`), through libfaketime.
//!
//! The server is started with libfaketime preloaded in its file-based mode: every time call
//! of the process re-reads (`FAKETIME_NO_CACHE=1`) an offset such as `+30s` from a file this
//! module owns, so [`StoreClock::jump`] moves the running server's clock at once. The library
//! is libfaketime's multithreaded build, whose time calls take turns, so that every thread
//! of a server reads the one clock. As a real
//! clock step does, a jump moves `CLOCK_REALTIME` only: the monotonic clock stays true
//! (`DONT_FAKE_MONOTONIC=1`), so what a server times with it (Redis' and memcached's own
//! timers, the JVM's `nanoTime`) does not move.
//!
//! glibc's `libc_malloc_debug.so.0` is preloaded first when present: a server linked with
//! jemalloc (Debian's `redis-server`) otherwise hangs in libfaketime's start-up (jemalloc
//! reads the clock while libfaketime is still looking up the functions it wraps).

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tempfile::TempDir;

use crate::{temp_dir, HarnessError};

/// The Debian package with libfaketime.
const PACKAGE: &str = "faketime";
/// libfaketime's multithreaded build, under `/usr/lib/<multiarch>/faketime/` (or
/// `/usr/lib/faketime/`). Its time calls take turns: the single-threaded `libfaketime.so.1`,
/// re-reading the offset file at every call, sometimes answers one thread with the true time
/// while another parses the file (a server stepped back read the true time for one
/// statement).
const LIBRARY: &str = "libfaketimeMT.so.1";
/// glibc's malloc wrapper, next to the multiarch `faketime` directory.
const MALLOC_SHIM: &str = "libc_malloc_debug.so.0";

/// A moveable wall clock for test servers: start a server with it (the `clock` field of
/// [`RedisOptions`](crate::RedisOptions), [`MemcachedOptions`](crate::MemcachedOptions),
/// [`MariaDbOptions`](crate::MariaDbOptions), [`PostgresOptions`](crate::PostgresOptions),
/// [`ZooKeeperOptions`](crate::ZooKeeperOptions)), then [`jump`](Self::jump) it.
///
/// Clones share one clock: every server started with it moves together. The clock starts at
/// the true time (offset `+0s`); its file lives as long as the last clone.
///
/// ```no_run
/// use distlock_testkit::{RedisOptions, RedisServer, StoreClock};
///
/// let clock = StoreClock::new().expect("libfaketime (scripts/install-test-deps)");
/// let redis = RedisServer::start_with(RedisOptions {
///     clock: Some(clock.clone()),
///     ..RedisOptions::default()
/// })
/// .expect("start redis");
/// clock.jump(3600).expect("an hour ahead"); // redis' TIME now answers an hour ahead
/// clock.jump(0).expect("back to the true time");
/// # drop(redis);
/// ```
#[derive(Clone)]
pub struct StoreClock {
    inner: Arc<ClockFile>,
}

struct ClockFile {
    /// The library list for `LD_PRELOAD`.
    preload: OsString,
    /// The offset file libfaketime reads.
    path: PathBuf,
    /// The offset in seconds last written.
    offset: Mutex<i64>,
    // Last: the file goes with its directory.
    dir: TempDir,
}

impl fmt::Debug for StoreClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreClock")
            .field("offset_secs", &self.offset())
            .field("file", &self.inner.path)
            .finish()
    }
}

impl StoreClock {
    /// A clock at the true time. Fails, naming `scripts/install-test-deps`, when libfaketime
    /// is not installed.
    pub fn new() -> Result<Self, HarnessError> {
        let library = find_library()?;
        let mut preload = OsString::new();
        if let Some(shim) = library
            .parent()
            .and_then(Path::parent)
            .map(|dir| dir.join(MALLOC_SHIM))
            .filter(|shim| shim.is_file())
        {
            preload.push(shim);
            preload.push(":");
        }
        preload.push(&library);
        let dir = temp_dir("clock")?;
        // A server may run as another user (PostgreSQL as `postgres`): it must read the file.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))
            .map_err(|e| HarnessError::io(format!("chmod {}", dir.path().display()), e))?;
        let clock = StoreClock {
            inner: Arc::new(ClockFile {
                preload,
                path: dir.path().join("offset"),
                offset: Mutex::new(0),
                dir,
            }),
        };
        clock.jump(0)?;
        Ok(clock)
    }

    /// Sets the servers' wall clock to the true time plus `offset_secs` (negative: behind),
    /// at once, while they run. Not cumulative: `jump(30)` then `jump(0)` is 30 s ahead, then
    /// true again.
    pub fn jump(&self, offset_secs: i64) -> Result<(), HarnessError> {
        let mut offset = self.inner.offset.lock().unwrap_or_else(PoisonError::into_inner);
        // Written aside and renamed over, so a server never reads half a line.
        let staged = self.inner.dir.path().join("offset.new");
        fs::write(&staged, format!("{offset_secs:+}s\n"))
            .and_then(|()| fs::set_permissions(&staged, fs::Permissions::from_mode(0o644)))
            .and_then(|()| fs::rename(&staged, &self.inner.path))
            .map_err(|e| HarnessError::io(format!("writing {}", self.inner.path.display()), e))?;
        *offset = offset_secs;
        Ok(())
    }

    /// The offset in seconds last set by [`jump`](Self::jump).
    pub fn offset(&self) -> i64 {
        *self.inner.offset.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The environment a server process runs under to follow this clock.
    pub(crate) fn env(&self) -> Vec<(OsString, OsString)> {
        let pairs: [(&str, OsString); 5] = [
            ("LD_PRELOAD", self.inner.preload.clone()),
            ("FAKETIME_TIMESTAMP_FILE", self.inner.path.clone().into()),
            ("FAKETIME_NO_CACHE", "1".into()),
            // Only the wall clock moves, as under a real step (both spellings: the older and
            // the newer libfaketime's).
            ("DONT_FAKE_MONOTONIC", "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
        ];
        pairs.into_iter().map(|(k, v)| (k.into(), v)).collect()
    }
}

/// The environment of a server started under `clock`, or none.
pub(crate) fn env_of(clock: Option<&StoreClock>) -> Vec<(OsString, OsString)> {
    clock.map(StoreClock::env).unwrap_or_default()
}

/// libfaketime's library, whatever the machine's multiarch directory.
fn find_library() -> Result<PathBuf, HarnessError> {
    let missing = || HarnessError::missing(format!("{LIBRARY} (libfaketime)"), PACKAGE);
    let mut dirs = vec![PathBuf::from("/usr/lib/faketime")];
    if let Ok(entries) = fs::read_dir("/usr/lib") {
        dirs.extend(entries.filter_map(|e| Some(e.ok()?.path().join("faketime"))));
    }
    dirs.sort();
    dirs.into_iter()
        .map(|dir| dir.join(LIBRARY))
        .find(|lib| lib.is_file())
        .ok_or_else(missing)
}

#[cfg(test)]
mod threads;

//! The one error type of the testkit.

use std::fmt;
use std::io;
use std::sync::Arc;

/// What went wrong while starting or controlling a test server.
///
/// `Display` gives a complete, human-readable message (including the tail of
/// the server's log where there is one), so tests can simply `.expect()` it.
/// The type is `Clone` so a failed shared server can report its error to
/// every test that asks for it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum HarnessError {
    /// A program (or jar) the server needs is not installed.
    MissingBinary {
        /// What was looked for, e.g. `redis-server` or a jar path.
        program: String,
        /// The Debian package that provides it.
        package: String,
    },
    /// An I/O operation of the harness itself failed.
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        source: Arc<io::Error>,
    },
    /// The server did not become ready in time, or exited while starting.
    NotReady {
        /// Which server, e.g. `redis-server on 127.0.0.1:40001`.
        server: String,
        /// Why: the last probe failure or the exit status.
        reason: String,
        /// The last lines of the server's log file.
        log_tail: String,
    },
    /// Any other failure (a setup command failed, a bad state, ...).
    Other(String),
}

impl HarnessError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        HarnessError::Io {
            context: context.into(),
            source: Arc::new(source),
        }
    }

    pub(crate) fn missing(program: impl Into<String>, package: impl Into<String>) -> Self {
        HarnessError::MissingBinary {
            program: program.into(),
            package: package.into(),
        }
    }

    /// True when the server failed because its port was taken (the harness
    /// then retries with fresh ports).
    pub fn is_address_in_use(&self) -> bool {
        match self {
            HarnessError::NotReady { reason, log_tail, .. } => [reason, log_tail].iter().any(|text| {
                let text = text.to_ascii_lowercase();
                text.contains("already in use") || text.contains("bindexception")
            }),
            HarnessError::Io { source, .. } => source.kind() == io::ErrorKind::AddrInUse,
            _ => false,
        }
    }
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HarnessError::MissingBinary { program, package } => write!(
                f,
                "{program} not found: run scripts/install-test-deps \
                 (or: apt-get install -y {package})"
            ),
            HarnessError::Io { context, source } => write!(f, "{context}: {source}"),
            HarnessError::NotReady {
                server,
                reason,
                log_tail,
            } => {
                write!(f, "{server} did not become ready: {reason}")?;
                if log_tail.trim().is_empty() {
                    write!(f, " (its log is empty)")
                } else {
                    write!(f, "\n--- last lines of its log ---\n{log_tail}")
                }
            }
            HarnessError::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for HarnessError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HarnessError::Io { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

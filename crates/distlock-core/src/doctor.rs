//! What `distlock doctor` reports about a store: one [`Finding`] per setting that decides
//! lock safety, with a [`Verdict`], what was found, why it matters and how to fix it.
//!
//! This module owns the report's shape only; each backend crate reads its own store's
//! settings (its `doctor` function) and the command line prints them.

use std::fmt;

/// How a setting bears on the locks a store gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// The setting keeps the guarantees the docs state.
    Ok,
    /// The guarantees hold, but something weaker than a user may expect (a restart that loses
    /// locks, no tolerance of a failed member) or a setting that could not be read.
    Warn,
    /// Locks can be granted to two holders at once, or freed while held.
    Unsafe,
}

impl Verdict {
    /// `ok`, `warn` or `unsafe`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Unsafe => "unsafe",
        }
    }

    /// The worst verdict of `findings` ([`Verdict::Ok`] if there are none).
    pub fn worst<'a>(findings: impl IntoIterator<Item = &'a Finding>) -> Verdict {
        findings
            .into_iter()
            .map(|f| f.verdict)
            .max()
            .unwrap_or(Verdict::Ok)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One setting of a store, judged: `item` (`maxmemory-policy`, `session timeout`) on which
/// server, what was `found`, the [`Verdict`], the `reason` for it and the `fix` (empty when
/// the verdict is [`Verdict::Ok`]).
///
/// ```
/// use distlock_core::{Finding, Verdict};
///
/// let finding = Finding::new("maxmemory-policy", Verdict::Unsafe, "allkeys-lru")
///     .at("127.0.0.1:6379")
///     .because("Redis evicts lock keys when memory runs out, freeing held locks")
///     .fix("CONFIG SET maxmemory-policy noeviction");
/// assert_eq!(finding.verdict, Verdict::Unsafe);
/// assert_eq!(Verdict::worst([&finding]), Verdict::Unsafe);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The setting judged, for example `maxmemory-policy`.
    pub item: String,
    /// Which server (`host:port`) or member it was read from; empty for the whole store.
    pub server: String,
    /// The verdict.
    pub verdict: Verdict,
    /// The value found, as the store reports it.
    pub found: String,
    /// Why the verdict, in one sentence.
    pub reason: String,
    /// What to change; empty for [`Verdict::Ok`].
    pub fix: String,
}

impl Finding {
    /// A finding of `item` with the value `found`.
    pub fn new(item: impl Into<String>, verdict: Verdict, found: impl Into<String>) -> Self {
        Self {
            item: item.into(),
            server: String::new(),
            verdict,
            found: found.into(),
            reason: String::new(),
            fix: String::new(),
        }
    }

    /// The same finding with another verdict (a rule that refines another's).
    pub fn with_verdict(mut self, verdict: Verdict) -> Self {
        self.verdict = verdict;
        self
    }

    /// The server it was read from.
    pub fn at(mut self, server: impl Into<String>) -> Self {
        self.server = server.into();
        self
    }

    /// Why the verdict.
    pub fn because(mut self, reason: impl Into<String>) -> Self {
        self.reason = reason.into();
        self
    }

    /// What to change.
    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = fix.into();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_verdict_wins() {
        let ok = Finding::new("a", Verdict::Ok, "x");
        let warn = Finding::new("b", Verdict::Warn, "y");
        let bad = Finding::new("c", Verdict::Unsafe, "z");
        assert_eq!(Verdict::worst([&ok, &warn]), Verdict::Warn);
        assert_eq!(Verdict::worst([&warn, &bad, &ok]), Verdict::Unsafe);
        assert_eq!(Verdict::worst([]), Verdict::Ok);
    }
}

//! The recording points of the lock metrics ([`crate::metrics`] lists them): what the client
//! reports about acquisitions and what a hold reports about its renewals and its end.
//!
//! Callers use the same types and methods with and without the `metrics` feature; without it
//! every type here is empty and every method does nothing, so the compiler removes them. This
//! module only records; it decides nothing about locks.

#[cfg(feature = "metrics")]
pub(crate) use on::{AcquireMeter, HoldMeter, Meter};

#[cfg(not(feature = "metrics"))]
pub(crate) use off::{AcquireMeter, HoldMeter, Meter};

/// What a renewal's answer is labelled with.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RenewalOutcome {
    Ok,
    Failed,
    Lost,
}

#[cfg(feature = "metrics")]
mod on {
    use std::sync::Arc;

    use metrics::Label;
    use tokio::time::Instant;

    use super::RenewalOutcome;
    use crate::metrics as name;
    use crate::{Error, LockKind, LockName, LossReason, Result, TryAcquire};

    /// A client's labels: its backend's name, and whether lock names are a label too.
    #[derive(Debug, Clone)]
    pub(crate) struct Meter {
        backend: &'static str,
        by_name: bool,
    }

    /// The labels of one lock's metrics.
    #[derive(Debug, Clone)]
    struct Labels {
        backend: &'static str,
        primitive: &'static str,
        name: Option<Arc<str>>,
    }

    impl Labels {
        /// The labels of a per-lock metric, with `extra` ones.
        fn with(&self, extra: &[(&'static str, &'static str)]) -> Vec<Label> {
            let mut labels = Vec::with_capacity(3 + extra.len());
            labels.push(Label::from_static_parts("backend", self.backend));
            labels.push(Label::from_static_parts("primitive", self.primitive));
            labels.extend(extra.iter().map(|&(k, v)| Label::from_static_parts(k, v)));
            if let Some(name) = &self.name {
                labels.push(Label::new("name", name.to_string()));
            }
            labels
        }

        /// The labels of a process-wide metric (never the name).
        fn bounded(&self) -> Vec<Label> {
            vec![
                Label::from_static_parts("backend", self.backend),
                Label::from_static_parts("primitive", self.primitive),
            ]
        }
    }

    impl Meter {
        pub(crate) fn new(backend: &'static str) -> Self {
            name::describe();
            Self {
                backend,
                by_name: false,
            }
        }

        pub(crate) fn by_name(mut self, on: bool) -> Self {
            self.by_name = on;
            self
        }

        fn labels(&self, lock: &LockName, kind: LockKind) -> Labels {
            Labels {
                backend: self.backend,
                primitive: kind.primitive().as_str(),
                name: self.by_name.then(|| Arc::from(lock.as_str())),
            }
        }

        /// Starts timing one acquisition call.
        pub(crate) fn acquire(&self, lock: &LockName, kind: LockKind, no_wait: bool) -> AcquireMeter {
            AcquireMeter {
                labels: self.labels(lock, kind),
                no_wait,
                started: Instant::now(),
                waiting_since: None,
                done: false,
            }
        }

        /// Times one acquisition round trip, from `sent_at` to now.
        pub(crate) fn attempt(
            &self,
            lock: &LockName,
            kind: LockKind,
            sent_at: Instant,
            outcome: &Result<TryAcquire>,
        ) {
            let result = match outcome {
                Ok(TryAcquire::Acquired(_)) => "acquired",
                Ok(TryAcquire::Held(_)) => "held",
                Err(error) => error_kind(error),
            };
            let labels = self.labels(lock, kind).with(&[("result", result)]);
            metrics::histogram!(name::ACQUIRE_ATTEMPT_DURATION, labels).record(sent_at.elapsed());
        }

        /// A hold granted now: counted as held until it ends.
        pub(crate) fn hold(&self, lock: &LockName, kind: LockKind) -> HoldMeter {
            let labels = self.labels(lock, kind);
            metrics::gauge!(name::LOCKS_HELD, labels.bounded()).increment(1.0);
            HoldMeter {
                labels,
                granted: Instant::now(),
            }
        }
    }

    /// One acquisition call being timed; a call dropped before its outcome counts as
    /// `cancelled`.
    pub(crate) struct AcquireMeter {
        labels: Labels,
        no_wait: bool,
        started: Instant,
        waiting_since: Option<Instant>,
        done: bool,
    }

    impl AcquireMeter {
        /// The call starts waiting for other holders now (kept if it already did).
        pub(crate) fn waiting(&mut self) {
            self.waiting_since.get_or_insert_with(Instant::now);
        }

        /// Records the call's outcome.
        pub(crate) fn finish<T>(mut self, outcome: &Result<T>) {
            let outcome = match outcome {
                Ok(_) => "acquired",
                Err(Error::Timeout { .. }) if self.no_wait => "busy",
                Err(Error::Timeout { .. }) => "timeout",
                Err(error) => error_kind(error),
            };
            self.record(outcome);
        }

        fn record(&mut self, outcome: &'static str) {
            self.done = true;
            let labels = self.labels.with(&[("outcome", outcome)]);
            let waited = self
                .waiting_since
                .map(|since| since.elapsed())
                .unwrap_or_default();
            metrics::counter!(name::ACQUIRES, labels.clone()).increment(1);
            metrics::histogram!(name::ACQUIRE_DURATION, labels.clone()).record(self.started.elapsed());
            metrics::histogram!(name::ACQUIRE_WAIT, labels).record(waited);
        }
    }

    impl Drop for AcquireMeter {
        fn drop(&mut self) {
            if !self.done {
                self.record("cancelled");
            }
        }
    }

    /// One hold's labels and grant time.
    #[derive(Debug)]
    pub(crate) struct HoldMeter {
        labels: Labels,
        granted: Instant,
    }

    impl HoldMeter {
        /// A renewal's answer.
        pub(crate) fn renewal(&self, outcome: RenewalOutcome) {
            let outcome = match outcome {
                RenewalOutcome::Ok => "ok",
                RenewalOutcome::Failed => "failed",
                RenewalOutcome::Lost => "lost",
            };
            metrics::counter!(name::RENEWALS, self.labels.with(&[("outcome", outcome)])).increment(1);
        }

        /// The hold ended on its owner's terms (`lost: None`) or lost; called once per hold.
        pub(crate) fn ended(&self, lost: Option<&LossReason>) {
            metrics::gauge!(name::LOCKS_HELD, self.labels.bounded()).decrement(1.0);
            let end = match lost {
                Some(reason) => {
                    let labels = self.labels.with(&[("reason", loss_reason(reason))]);
                    metrics::counter!(name::LOCKS_LOST, labels).increment(1);
                    "lost"
                }
                None => "released",
            };
            let labels = self.labels.with(&[("end", end)]);
            metrics::histogram!(name::HOLD_DURATION, labels).record(self.granted.elapsed());
        }
    }

    /// An error's kind, as a label value.
    fn error_kind(error: &Error) -> &'static str {
        match error {
            Error::Timeout { .. } => "timeout",
            Error::InvalidName { .. } => "invalid_name",
            Error::InvalidOptions { .. } => "invalid_options",
            Error::InvalidConfig { .. } => "invalid_config",
            Error::Unavailable { .. } => "unavailable",
            Error::NotSupported { .. } => "not_supported",
            Error::PermitsMismatch { .. } => "permits_mismatch",
            Error::LockLost { .. } => "lock_lost",
            Error::Backend { .. } => "backend",
            Error::InsideAsyncRuntime => "inside_async_runtime",
        }
    }

    fn loss_reason(reason: &LossReason) -> &'static str {
        match reason {
            LossReason::NotOwned => "not_owned",
            LossReason::Expired => "expired",
            LossReason::RenewalFailed(_) => "renewal_failed",
            LossReason::MaxHoldExceeded => "max_hold_exceeded",
            LossReason::SessionExpired => "session_expired",
            LossReason::SessionSuspended => "session_suspended",
        }
    }
}

/// Without the `metrics` feature: empty types whose methods do nothing.
#[cfg(not(feature = "metrics"))]
mod off {
    use tokio::time::Instant;

    use super::RenewalOutcome;
    use crate::{LockKind, LockName, LossReason, Result, TryAcquire};

    #[derive(Debug, Clone)]
    pub(crate) struct Meter;

    impl Meter {
        #[inline(always)]
        pub(crate) fn new(_backend: &'static str) -> Self {
            Self
        }

        #[inline(always)]
        pub(crate) fn acquire(&self, _lock: &LockName, _kind: LockKind, _no_wait: bool) -> AcquireMeter {
            AcquireMeter
        }

        #[inline(always)]
        pub(crate) fn attempt(
            &self,
            _lock: &LockName,
            _kind: LockKind,
            _sent_at: Instant,
            _outcome: &Result<TryAcquire>,
        ) {
        }

        #[inline(always)]
        pub(crate) fn hold(&self, _lock: &LockName, _kind: LockKind) -> HoldMeter {
            HoldMeter
        }
    }

    pub(crate) struct AcquireMeter;

    impl AcquireMeter {
        #[inline(always)]
        pub(crate) fn waiting(&mut self) {}

        #[inline(always)]
        pub(crate) fn finish<T>(self, _outcome: &Result<T>) {}
    }

    #[derive(Debug)]
    pub(crate) struct HoldMeter;

    impl HoldMeter {
        #[inline(always)]
        pub(crate) fn renewal(&self, _outcome: RenewalOutcome) {}

        #[inline(always)]
        pub(crate) fn ended(&self, _lost: Option<&LossReason>) {}
    }
}

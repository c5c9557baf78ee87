//! What a Redlock client knows of each master's restarts: a master whose run id changed may
//! have forgotten the locks it granted, so its votes do not count for a quarantine.

use std::time::Duration;

use tokio::time::Instant;

use super::Redlock;
use crate::config::DEFAULT_RESTART_QUARANTINE;

/// What this client knows of one master's restarts.
#[derive(Debug, Default)]
pub(super) struct Trust {
    run_id: Option<String>,
    untrusted_until: Option<Instant>,
}

impl Redlock {
    /// Whether master `i`'s vote counts, given the run id it answered with: a master whose
    /// run id changed since this client last saw it restarted (and, without persistence,
    /// forgot the locks it granted), so its votes do not count until the quarantine (see
    /// [`RedlockConfig::with_restart_quarantine`]) has passed since.
    pub(super) fn trusted(&self, i: usize, run_id: Option<&str>) -> bool {
        let (Some(run_id), Some(trust)) = (run_id, self.inner.trust.get(i)) else {
            return true;
        };
        let mut trust = trust.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        match trust.run_id.as_deref() {
            None => {
                trust.run_id = Some(run_id.to_owned());
                true
            }
            Some(known) if known == run_id => trust.untrusted_until.is_none_or(|until| now >= until),
            Some(_) => {
                let longest = Duration::from_millis(
                    self.inner
                        .longest_ttl_ms
                        .load(std::sync::atomic::Ordering::Relaxed),
                );
                let quarantine = self
                    .inner
                    .config
                    .restart_quarantine
                    .unwrap_or(DEFAULT_RESTART_QUARANTINE.max(longest));
                tracing::warn!(
                    master = %self.inner.nodes[i].url(),
                    ?quarantine,
                    "distlock-redis: a Redlock master restarted (its run id changed); its votes do not count until the quarantine has passed"
                );
                trust.run_id = Some(run_id.to_owned());
                trust.untrusted_until = Some(now + quarantine);
                quarantine.is_zero()
            }
        }
    }
}

//! [`Ctx`]: what every case gets: the fixture, a unique name prefix, and helpers.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use distlock_core::{Capabilities, DistributedLock, LockClient, LockName};

use crate::expect::{Reason, Skip};
use crate::{Case, Fixture, Needs};

/// What a case runs with.
#[derive(Clone)]
pub struct Ctx {
    fixture: Arc<dyn Fixture>,
    prefix: String,
    capabilities: Capabilities,
    child_test: Option<String>,
    needs: Needs,
    notes: Arc<Mutex<Vec<String>>>,
    quiet: bool,
}

impl Ctx {
    /// A context for one case run; the prefix is unique per run so runs never collide.
    pub async fn new(fixture: Arc<dyn Fixture>, case: &str, child_test: Option<String>) -> Self {
        let backend = fixture.backend().await.expect("the fixture opens a client");
        let run = uuid::Uuid::new_v4().simple().to_string();
        Self {
            capabilities: backend.capabilities(),
            prefix: format!("dl-{}-{case}-", &run[..12]),
            fixture,
            child_test,
            needs: Case::named(case).map_or(Needs::Store, |c| c.needs),
            notes: Arc::default(),
            quiet: false,
        }
    }

    /// The same context, collecting notes instead of printing them.
    pub(crate) fn quiet(mut self) -> Self {
        self.quiet = true;
        self
    }

    /// Records a measured figure or remark of the case (printed in test output).
    pub fn note(&self, note: impl Into<String>) {
        let note = note.into();
        if !self.quiet {
            println!("{note}");
        }
        self.notes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(note);
    }

    /// Ends the case as skipped because the backend (or fixture) lacks what it checks.
    pub fn skip(&self, reason: Reason, detail: impl Into<String>) -> crate::Outcome {
        let skip = Skip {
            reason,
            detail: detail.into(),
        };
        self.note(format!("skipped: {skip}"));
        crate::Outcome::Skipped(skip)
    }

    /// Ends the case having run only a part of it: the rest needs what the backend (or
    /// fixture) lacks.
    pub fn partial(&self, reason: Reason, detail: impl Into<String>) -> crate::Outcome {
        let skip = Skip {
            reason,
            detail: detail.into(),
        };
        self.note(format!("skipped a part: {skip}"));
        crate::Outcome::Partial(skip)
    }

    /// The notes so far.
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The fixture.
    pub fn fixture(&self) -> &dyn Fixture {
        &*self.fixture
    }

    /// The fixture, shared.
    pub fn fixture_arc(&self) -> Arc<dyn Fixture> {
        self.fixture.clone()
    }

    /// What the case declares it needs of the store.
    pub fn needs(&self) -> Needs {
        self.needs
    }

    /// The backend's capabilities.
    pub fn caps(&self) -> &Capabilities {
        &self.capabilities
    }

    /// This run's unique name prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A lock name unique to this run.
    pub fn name(&self, suffix: &str) -> LockName {
        LockName::new(format!("{}{suffix}", self.prefix)).expect("suite names are valid")
    }

    /// A new raw backend client.
    pub async fn backend(&self) -> Arc<dyn DistributedLock> {
        self.fixture.backend().await.expect("the fixture opens a client")
    }

    /// A new [`LockClient`] over a new backend client.
    pub async fn client(&self) -> LockClient {
        LockClient::from_arc(self.backend().await)
    }

    /// The fixture's short TTL, rounded up to the backend's granularity.
    pub fn short_ttl(&self) -> Duration {
        let ttl = self.fixture.short_ttl();
        self.capabilities.validate_ttl(ttl).unwrap_or(ttl)
    }

    /// The test name of the child-process entry point, if the suite runs as a test binary.
    pub fn child_test(&self) -> Option<&str> {
        self.child_test.as_deref()
    }
}

//! [`MemoryFixture`]: the suite's fixture for the in-process reference backend.

use std::sync::Arc;

use async_trait::async_trait;
use distlock_core::{DistributedLock, LockName, MemoryLock, Result};

use crate::{Fixture, Outage};

/// Runs the suite against [`MemoryLock`]: every client shares one in-process store.
#[derive(Debug, Clone, Default)]
pub struct MemoryFixture {
    store: MemoryLock,
}

impl MemoryFixture {
    /// A fixture over a fresh store.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Fixture for MemoryFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(self.store.clone()))
    }

    async fn steal(&self, name: &LockName) -> Result<()> {
        self.store.steal(name);
        Ok(())
    }

    async fn held_count(&self, prefix: &str) -> Result<usize> {
        Ok(self.store.held_count(prefix))
    }

    async fn outage(&self) -> Option<Box<dyn Outage>> {
        self.store.set_available(false);
        Some(Box::new(MemoryOutage(self.store.clone())))
    }
}

struct MemoryOutage(MemoryLock);

#[async_trait]
impl Outage for MemoryOutage {
    async fn restore(self: Box<Self>) {
        self.0.set_available(true);
    }
}

//! A saved run: the recorded history with what the checker was told about the backend, so
//! the run can be checked again offline (`--check FILE`) and drawn (`--picture FILE`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::checker::{check, Judgement};
use crate::history::History;
use crate::primitive::Primitive;
use crate::run::Outcome;

/// Everything the checker judged a run by.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Saved {
    /// The backend's name.
    pub backend: String,
    /// The schedule's seed.
    pub seed: u64,
    /// The TTL, milliseconds.
    pub ttl_ms: u128,
    /// The declared fencing (`Monotonic`, `BestEffort`, `None`).
    pub fencing: String,
    /// What every name was.
    pub primitive: Primitive,
    /// A semaphore's permits (with `primitive` `semaphore`).
    pub permits: Option<u32>,
    /// The breakage, if any.
    pub broken: Option<String>,
    /// The clients and their loop, for people.
    pub workload: String,
    /// What the backend declares, and the run's bounds.
    pub judgement: Judgement,
    /// The names found held after every client stopped.
    pub left_held: Vec<String>,
    /// The client processes that exited by themselves.
    pub crashed: Vec<String>,
    /// What was recorded.
    pub history: History,
}

impl Saved {
    /// Reads a saved run from `path`.
    ///
    /// # Errors
    /// A message naming the file if it cannot be read or is not a saved run (a history
    /// written before runs were saved whole lacks the judgement: run it again).
    pub fn read(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "{} is not a saved run (written by --history; one written before it saved the judgement cannot be checked again): {e}",
                path.display()
            )
        })
    }

    /// Writes it to `path` as JSON.
    ///
    /// # Errors
    /// A message naming the file if it cannot be written.
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let json = serde_json::to_vec(self).map_err(|e| e.to_string())?;
        std::fs::write(path, json).map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// Checks it (again) and gives the run's outcome.
    pub fn outcome(&self) -> Outcome {
        #[allow(clippy::cast_precision_loss)] // display only
        let seconds = self.history.stopped.saturating_sub(self.history.started) as f64 / 1e9;
        Outcome {
            backend: self.backend.clone(),
            seed: self.seed,
            seconds,
            ttl_ms: self.ttl_ms,
            fencing: self.fencing.clone(),
            primitive: self.primitive,
            permits: self.permits,
            broken: self.broken.clone(),
            workload: self.workload.clone(),
            verdict: check(&self.history, &self.judgement, &self.left_held, &self.crashed),
        }
    }
}

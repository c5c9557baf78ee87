//! [`RecentWaits`]: the locks a client had to wait for lately, so that its next waiting
//! acquisition of one of them queues with its first attempt (see `wait`).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::{LockName, Primitive};

/// How long a wait is remembered: about as long as a store that publishes releases keeps a
/// lock's channel subscribed after its last wait, so that the watch a queued first attempt
/// takes is most often there already.
const REMEMBERED_FOR: Duration = Duration::from_secs(2);

/// At most this many locks are remembered; a wait beyond them is not (its lock's next
/// acquisition makes a plain first attempt, as an unremembered one does).
const CAPACITY: usize = 1024;

/// The locks a client had to wait for within the last [`REMEMBERED_FOR`], bounded by
/// [`CAPACITY`].
#[derive(Default)]
pub(crate) struct RecentWaits {
    until: Mutex<HashMap<(LockName, Primitive), Instant>>,
}

impl RecentWaits {
    /// An acquisition of `name` found it held and waits.
    pub(crate) fn waited(&self, name: &LockName, primitive: Primitive) {
        let now = Instant::now();
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (name.clone(), primitive);
        if until.len() >= CAPACITY && !until.contains_key(&key) {
            until.retain(|_, expires| *expires > now);
            if until.len() >= CAPACITY {
                return;
            }
        }
        until.insert(key, now + REMEMBERED_FOR);
    }

    /// Whether an acquisition of `name` had to wait within the last [`REMEMBERED_FOR`].
    pub(crate) fn recently(&self, name: &LockName, primitive: Primitive) -> bool {
        let now = Instant::now();
        let mut until = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (name.clone(), primitive);
        match until.get(&key) {
            Some(expires) if *expires > now => true,
            Some(_) => {
                until.remove(&key);
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(i: usize) -> LockName {
        LockName::new(format!("lock-{i}")).expect("valid")
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_is_remembered_for_a_while() {
        let waits = RecentWaits::default();
        assert!(!waits.recently(&name(0), Primitive::Mutex));
        waits.waited(&name(0), Primitive::Mutex);
        assert!(waits.recently(&name(0), Primitive::Mutex));
        assert!(!waits.recently(&name(1), Primitive::Mutex));
        tokio::time::advance(REMEMBERED_FOR).await;
        assert!(!waits.recently(&name(0), Primitive::Mutex));
    }

    #[tokio::test(start_paused = true)]
    async fn many_locks_are_bounded() {
        let waits = RecentWaits::default();
        for i in 0..2 * CAPACITY {
            waits.waited(&name(i), Primitive::Mutex);
        }
        assert_eq!(waits.until.lock().expect("unpoisoned").len(), CAPACITY);
        assert!(!waits.recently(&name(CAPACITY), Primitive::Mutex));
        tokio::time::advance(REMEMBERED_FOR).await;
        waits.waited(&name(CAPACITY), Primitive::Mutex);
        assert_eq!(waits.until.lock().expect("unpoisoned").len(), 1);
        assert!(waits.recently(&name(CAPACITY), Primitive::Mutex));
    }
}

//! [`Detaching`]: an operation on the store that runs in the caller's task and is never cut
//! in the middle.
//!
//! Acquiring, releasing and extending must run to completion once they have started: a request
//! dropped half-way may still be applied by the store, and a backend connection left in the
//! middle of an exchange is not safe to reuse. Spawning each operation as a task guarantees
//! that, but costs a task and two cross-thread wake-ups per operation, more than the whole
//! operation on a fast store. [`Detaching`] runs the operation inline instead; only if the
//! caller drops it after it started does the rest run in a task on the same runtime, and its
//! output (a guard, say) is dropped there, which cleans up after it. A panic in the operation
//! is caught and returned, as a failed task's would be.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::FutureExt;
use tokio::runtime::Handle;

type Operation<T> = Pin<Box<dyn Future<Output = std::thread::Result<T>> + Send>>;

/// A future that finishes in a background task if it is dropped after it started.
pub(crate) struct Detaching<T: Send + 'static> {
    operation: Option<Operation<T>>,
    started: bool,
    runtime: Handle,
}

impl<T: Send + 'static> Detaching<T> {
    /// Wraps `operation`, to finish on the current runtime if dropped. Must run inside a
    /// tokio runtime.
    pub(crate) fn new(operation: impl Future<Output = T> + Send + 'static) -> Self {
        Self {
            operation: Some(Box::pin(AssertUnwindSafe(operation).catch_unwind())),
            started: false,
            runtime: Handle::current(),
        }
    }
}

impl<T: Send + 'static> Future for Detaching<T> {
    /// The operation's output, or the payload of its panic.
    type Output = Result<T, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let Some(operation) = this.operation.as_mut() else {
            return Poll::Pending; // polled after it completed: never resolves again
        };
        this.started = true;
        let output = std::task::ready!(operation.as_mut().poll(cx));
        this.operation = None;
        Poll::Ready(output)
    }
}

impl<T: Send + 'static> Drop for Detaching<T> {
    fn drop(&mut self) {
        if let Some(operation) = self.operation.take().filter(|_| self.started) {
            // Spawning onto a runtime that has shut down drops it: nothing more can run then.
            self.runtime.spawn(async move {
                drop(operation.await);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn an_operation_dropped_after_it_started_runs_to_completion() {
        let finished = Arc::new(AtomicBool::new(false));
        let operation = {
            let finished = finished.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                finished.store(true, Ordering::SeqCst);
            }
        };
        let cut = tokio::time::timeout(Duration::from_millis(5), Detaching::new(operation)).await;
        assert!(cut.is_err(), "the caller gave up first");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            finished.load(Ordering::SeqCst),
            "the operation finished in the background"
        );
    }

    #[tokio::test]
    async fn an_operation_dropped_before_it_started_never_runs() {
        let ran = Arc::new(AtomicBool::new(false));
        let operation = {
            let ran = ran.clone();
            async move { ran.store(true, Ordering::SeqCst) }
        };
        drop(Detaching::new(operation));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!ran.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_panic_is_returned() {
        let outcome = Detaching::new(async {
            if true {
                panic!("the backend broke");
            }
        })
        .await;
        assert!(outcome.is_err());
    }
}

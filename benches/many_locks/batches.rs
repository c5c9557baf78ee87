//! Counts the watchdog's renewal batches (one `DistributedLock::renew` call each) and the
//! leases in them, from its `distlock: renewing` debug event: a counting layer on the client
//! side, beside the store's own counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Renewal batches and the leases in them, so far.
#[derive(Debug, Default)]
pub struct Batches {
    calls: AtomicU64,
    leases: AtomicU64,
}

impl Batches {
    /// Installs the counting layer as the global subscriber; only the watchdog's debug events
    /// reach it (every other callsite is disabled, at no cost).
    pub fn install() -> Arc<Self> {
        let batches = Arc::new(Self::default());
        let layer = Counter(batches.clone()).with_filter(filter_fn(|meta| {
            meta.target() == "distlock_core::watchdog" && *meta.level() == Level::DEBUG
        }));
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .expect("no other subscriber");
        batches
    }

    /// `(batches, leases)` so far.
    pub fn read(&self) -> (u64, u64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.leases.load(Ordering::Relaxed),
        )
    }
}

struct Counter(Arc<Batches>);

impl<S: Subscriber> Layer<S> for Counter {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut count = CountField(None);
        event.record(&mut count);
        if let Some(n) = count.0 {
            self.0.calls.fetch_add(1, Ordering::Relaxed);
            self.0.leases.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// The event's `count` field.
struct CountField(Option<u64>);

impl Visit for CountField {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "count" {
            self.0 = Some(value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record_u64(field, u64::try_from(value).unwrap_or(0));
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

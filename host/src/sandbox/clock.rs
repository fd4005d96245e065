//! The workflow's clocks: the time of the journal entry being replayed or
//! appended, never the machine's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

/// Journal time, shared by a workflow's wall and monotonic clocks.
#[derive(Clone)]
pub struct JournalClock {
    now_ms: Arc<AtomicU64>,
    started_ms: u64,
}

impl JournalClock {
    /// A clock at the run's start.
    pub fn new(started_ms: u64) -> Self {
        JournalClock {
            now_ms: Arc::new(AtomicU64::new(started_ms)),
            started_ms,
        }
    }

    /// Moves the clock to an entry's time.
    pub fn set(&self, ms: u64) {
        self.now_ms.store(ms, Ordering::Relaxed);
    }

    /// The clock's current value, in milliseconds since the Unix epoch.
    pub fn ms(&self) -> u64 {
        self.now_ms.load(Ordering::Relaxed)
    }
}

impl HostWallClock for JournalClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        Duration::from_millis(self.ms())
    }
}

impl HostMonotonicClock for JournalClock {
    fn resolution(&self) -> u64 {
        1_000_000
    }

    fn now(&self) -> u64 {
        self.ms().saturating_sub(self.started_ms) * 1_000_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_clocks_read_journal_time() {
        let clock = JournalClock::new(1_000);
        clock.set(1_250);
        assert_eq!(HostWallClock::now(&clock), Duration::from_millis(1_250));
        assert_eq!(HostMonotonicClock::now(&clock), 250_000_000);
    }
}

//! The machine's clock, the default [`keel_core::Clock`].

use std::time::{SystemTime, UNIX_EPOCH};

use keel_core::Clock;

/// The machine's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

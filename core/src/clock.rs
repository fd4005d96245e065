//! The clock every time-dependent decision of the engine reads.

/// Where the engine reads the time (admission windows, journal timestamps,
/// timers, retention, records). Injectable, so tests can move time by hand.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

impl std::fmt::Debug for dyn Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clock({})", self.now_ms())
    }
}

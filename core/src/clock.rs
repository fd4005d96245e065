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

/// A clock moved by hand: tests, and `keel test` scenarios that skip time.
#[derive(Debug)]
pub struct ManualClock(pub std::sync::atomic::AtomicU64);

impl ManualClock {
    /// A clock showing `ms`.
    pub fn at(ms: u64) -> std::sync::Arc<ManualClock> {
        std::sync::Arc::new(ManualClock(std::sync::atomic::AtomicU64::new(ms)))
    }

    /// Moves the clock on by `ms`.
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// Moves the clock to `ms`, if that is later than it shows.
    pub fn advance_to(&self, ms: u64) {
        self.0.fetch_max(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// `ms` (since the Unix epoch) as people read a time in reports:
/// `2026-12-02T16:35:55.394Z`.
pub fn timestamp(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || format!("{ms} ms after the epoch"),
            |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        )
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_read_as_utc_times() {
        assert_eq!(
            super::timestamp(1_796_230_555_394),
            "2026-12-02T16:55:55.394Z"
        );
        assert_eq!(super::timestamp(0), "1970-01-01T00:00:00.000Z");
    }
}

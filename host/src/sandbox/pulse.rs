//! The workflow guest's pulse: whether it runs (its own code, a WASI call)
//! or is in a keel call, and since when. The wall-clock bound counts how
//! long a workflow runs without calling keel, and a cancel or that bound
//! stops a guest only while it runs, never halfway through a keel call
//! that writes the journal. It also tells the fuel refill when a keel call
//! answered from the journal has returned.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Marks `running_since_ms` during a keel call.
const IN_KEEL: u64 = u64::MAX;

/// When the guest last came back from a keel call.
#[derive(Debug)]
pub struct Pulse {
    epoch: Instant,
    running_since_ms: AtomicU64,
    /// A keel call returned since the fuel was last looked at.
    returned: AtomicBool,
}

impl Default for Pulse {
    fn default() -> Self {
        Pulse {
            epoch: Instant::now(),
            running_since_ms: AtomicU64::new(0),
            returned: AtomicBool::new(false),
        }
    }
}

/// A keel call in progress; the guest runs again when it is dropped.
pub struct KeelCall(Arc<Pulse>);

impl Drop for KeelCall {
    fn drop(&mut self) {
        let now = self.0.epoch.elapsed().as_millis() as u64;
        self.0.running_since_ms.store(now, Ordering::SeqCst);
        self.0.returned.store(true, Ordering::SeqCst);
    }
}

impl Pulse {
    /// The guest calls keel until the returned guard is dropped.
    pub fn keel_call(self: &Arc<Self>) -> KeelCall {
        self.running_since_ms.store(IN_KEEL, Ordering::SeqCst);
        KeelCall(self.clone())
    }

    /// Whether a keel call returned since this was last asked.
    pub fn take_returned(&self) -> bool {
        self.returned.swap(false, Ordering::SeqCst)
    }

    /// How long the guest has run since it last called keel (zero during
    /// a keel call).
    pub fn running_for(&self) -> Duration {
        match self.running_since_ms.load(Ordering::SeqCst) {
            IN_KEEL => Duration::ZERO,
            since => self
                .epoch
                .elapsed()
                .saturating_sub(Duration::from_millis(since)),
        }
    }

    /// Completes once the guest has run for longer than `bound` without
    /// calling keel; how long it had run.
    pub async fn overrun(&self, bound: Duration) -> Duration {
        loop {
            let ran = self.running_for();
            if ran > bound {
                return ran;
            }
            tokio::time::sleep(bound - ran + Duration::from_millis(1)).await;
        }
    }

    /// Completes once the guest runs (at once if it does).
    pub async fn outside_keel(&self) {
        while self.running_since_ms.load(Ordering::SeqCst) == IN_KEEL {
            // A keel call in progress ends by itself (a wait sees a cancel).
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_overrun_counts_only_while_the_guest_runs() {
        let pulse = Arc::new(Pulse::default());
        let call = pulse.keel_call();
        assert_eq!(pulse.running_for(), Duration::ZERO);
        assert!(!pulse.take_returned());
        drop(call);
        assert!(pulse.take_returned());
        assert!(!pulse.take_returned(), "taken once");
        let ran = pulse.overrun(Duration::from_millis(5)).await;
        assert!(ran > Duration::from_millis(5), "{ran:?}");
        let _call = pulse.keel_call();
        assert_eq!(pulse.running_for(), Duration::ZERO);
    }
}

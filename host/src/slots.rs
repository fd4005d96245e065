//! Instance slots: the pooling allocator's instances are a cache that
//! workflow activations and step attempts queue for, never a limit that
//! fails a run.
//!
//! Every guest instance takes a slot before it is instantiated and gives
//! it back when its store is dropped. Workflow activations may hold at
//! most half the slots, so steps (which wait on nothing but
//! themselves) always have slots to finish in, and a workflow waiting on
//! its steps can never starve them. When activations queue for a slot, an
//! activation that would park waiting on a timer, a payload or another run
//! suspends instead ([`Slots::contended`]): its state is in the journal,
//! and it resumes later by replay.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// The slots of one engine.
#[derive(Debug)]
pub(crate) struct Slots {
    /// Permits for workflow activations (a share of `all`).
    workflows: Arc<Semaphore>,
    /// Permits for every instance.
    all: Arc<Semaphore>,
    /// Activations waiting for a slot now.
    queued: AtomicUsize,
    /// Notified when an activation starts waiting for a slot.
    contention: Notify,
}

/// A held slot, given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    _workflow: Option<OwnedSemaphorePermit>,
    _instance: OwnedSemaphorePermit,
}

/// The fewest instances an engine can run with: one activation and one
/// step.
pub const MIN_INSTANCES: u32 = 2;

impl Slots {
    /// Slots for `instances` guest instances (at least [`MIN_INSTANCES`]).
    pub fn new(instances: u32) -> Self {
        let instances = instances.max(MIN_INSTANCES) as usize;
        let workflows = (instances / 2).clamp(1, instances - 1);
        Slots {
            workflows: Arc::new(Semaphore::new(workflows)),
            all: Arc::new(Semaphore::new(instances)),
            queued: AtomicUsize::new(0),
            contention: Notify::new(),
        }
    }

    /// A slot for a workflow activation, once one is free.
    pub async fn workflow(&self) -> Slot {
        let workflow = match self.workflows.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                self.queued.fetch_add(1, Ordering::SeqCst);
                self.contention.notify_waiters();
                let _queued = Queued(&self.queued);
                acquire(&self.workflows).await
            }
        };
        Slot {
            _workflow: Some(workflow),
            _instance: acquire(&self.all).await,
        }
    }

    /// A slot for a step attempt, once one is free.
    pub async fn step(&self) -> Slot {
        Slot {
            _workflow: None,
            _instance: acquire(&self.all).await,
        }
    }

    /// Activations are waiting for a slot: one that would park should
    /// suspend and give its slot up.
    pub fn contended(&self) -> bool {
        self.queued.load(Ordering::SeqCst) > 0
    }

    /// Completes when an activation starts waiting for a slot (register it
    /// before checking [`Slots::contended`]).
    pub fn contention(&self) -> tokio::sync::futures::Notified<'_> {
        self.contention.notified()
    }
}

/// Counts an activation out of the queue when its wait ends (or is
/// dropped).
struct Queued<'a>(&'a AtomicUsize);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn acquire(semaphore: &Arc<Semaphore>) -> OwnedSemaphorePermit {
    semaphore
        .clone()
        .acquire_owned()
        .await
        .expect("the slot semaphores are never closed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn activations_leave_steps_half_the_slots() {
        let slots = Slots::new(8);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(slots.workflow().await);
        }
        assert!(!slots.contended());
        // A fifth activation queues; steps still get the other four slots.
        let fifth = tokio::time::timeout(std::time::Duration::from_millis(20), slots.workflow());
        let contention = slots.contention();
        tokio::pin!(contention);
        contention.as_mut().enable();
        let (waited, ()) = tokio::join!(fifth, async {
            contention.await;
            assert!(slots.contended());
        });
        assert!(waited.is_err(), "an activation beyond its share waits");
        assert!(!slots.contended(), "a wait given up leaves the queue");
        let steps = [
            slots.step().await,
            slots.step().await,
            slots.step().await,
            slots.step().await,
        ];
        held.pop();
        drop(steps);
        let _fifth = slots.workflow().await;
    }

    #[test]
    fn the_smallest_pool_runs_one_activation_and_one_step() {
        let slots = Slots::new(0);
        assert_eq!(slots.workflows.available_permits(), 1);
        assert_eq!(slots.all.available_permits(), 2);
    }
}

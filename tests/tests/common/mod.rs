//! Helpers shared by the end-to-end tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use keel_host::idempotency::Clock;

use keel_host::journal::{Entry, Event};
use keel_host::{Config, Keel, Loaded};

/// A store in a fresh temporary directory; compiled components are cached
/// across tests so each guest compiles once.
pub struct TestStore {
    pub dir: tempfile::TempDir,
}

impl TestStore {
    pub fn new() -> Self {
        TestStore {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    pub fn config(&self) -> Config {
        let mut config = Config::new(self.dir.path());
        config.cache_dir = shared_cache();
        config.max_instances = 50;
        config
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

fn shared_cache() -> PathBuf {
    std::env::temp_dir().join("keel-test-compiled")
}

pub async fn open(config: Config) -> (Keel, Arc<Loaded>) {
    open_with(config, keel_tests::TESTBED).await
}

/// Opens the store and loads the guest at `component`.
pub async fn open_with(config: Config, component: &str) -> (Keel, Arc<Loaded>) {
    let keel = Keel::open(config).expect("opening the store");
    let loaded = keel
        .load(component)
        .await
        .unwrap_or_else(|e| panic!("loading {component}: {e}"));
    (keel, loaded)
}

/// A clock the test moves by hand.
pub struct ManualClock(pub AtomicU64);

impl ManualClock {
    pub fn at(ms: u64) -> Arc<ManualClock> {
        Arc::new(ManualClock(AtomicU64::new(ms)))
    }

    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The step IDs of a journal, in command order.
pub fn step_ids(journal: &[Entry]) -> Vec<String> {
    journal
        .iter()
        .filter_map(|e| match &e.event {
            Event::StepScheduled { step_id, .. } => Some(step_id.clone()),
            _ => None,
        })
        .collect()
}

/// The attempt numbers started, in journal order.
pub fn attempts(journal: &[Entry]) -> Vec<u32> {
    journal
        .iter()
        .filter_map(|e| match &e.event {
            Event::StepAttemptStarted { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect()
}

pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).expect("valid JSON")
}

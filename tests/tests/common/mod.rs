//! Helpers shared by the end-to-end tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_host::core::journal::{Entry, Fact};
use keel_host::store::faulty::FaultyStore;
use keel_host::store::sled::SledStore;
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

/// Compiled components, shared by the tests of this build in a private
/// folder of the target directory.
pub fn shared_cache() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("keel-compiled")
}

pub async fn open(config: Config) -> (Keel, Arc<Loaded>) {
    open_with(config, keel_tests::TESTBED).await
}

/// Opens the store and loads the guest at `component`.
pub async fn open_with(config: Config, component: &str) -> (Keel, Arc<Loaded>) {
    let (keel, loaded, _) = open_backend(config, component).await;
    (keel, loaded)
}

/// The store of the tests' engines: sled, behind a wrapper that injects
/// faults on demand.
pub type Backend = FaultyStore<SledStore>;

/// Opens the store (keeping a handle to it) and loads the guest at
/// `component`.
pub async fn open_backend(config: Config, component: &str) -> (Keel, Arc<Loaded>, Arc<Backend>) {
    let backend = Arc::new(FaultyStore::new(
        // Tests reopen a store they just dropped: wait for sled to let go.
        SledStore::reopen(&config.db).expect("opening the store"),
    ));
    let keel = Keel::open(config, backend.clone()).expect("opening the engine");
    let loaded = keel
        .load(component)
        .await
        .unwrap_or_else(|e| panic!("loading {component}: {e}"));
    (keel, loaded, backend)
}

#[allow(unused_imports)]
pub use keel_tests::ManualClock;

/// The step IDs of a journal, in command order.
pub fn step_ids(journal: &[Entry]) -> Vec<String> {
    journal
        .iter()
        .filter_map(|e| match &e.fact {
            Fact::StepScheduled { step_id, .. } => Some(step_id.clone()),
            _ => None,
        })
        .collect()
}

/// The attempt numbers started, in journal order.
pub fn attempts(journal: &[Entry]) -> Vec<u32> {
    journal
        .iter()
        .filter_map(|e| match &e.fact {
            Fact::StepAttemptStarted { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect()
}

pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).expect("valid JSON")
}

/// The `order` guest's input for order `id`, charged through `api`.
pub fn order_input(api: &keel_payment_api::PaymentApi, id: &str) -> String {
    serde_json::json!({
        "order_id": id, "user_id": "u-1", "amount": 1250, "payment_url": api.url("/charge"),
    })
    .to_string()
}

/// An engine over `store` whose steps may reach `api`.
pub async fn order_keel(store: &TestStore, api: &keel_payment_api::PaymentApi) -> Keel {
    let mut config = store.config();
    config.grants = keel_host::Grants {
        http: vec![api.addr.to_string()],
        ..keel_host::Grants::default()
    };
    Keel::open_sled(config).unwrap()
}

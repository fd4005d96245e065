//! Helpers shared by the end-to-end tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_host::core::journal::{Entry, Fact};
use keel_host::store::Store;
use keel_host::store::faulty::FaultyStore;
use keel_host::store::postgres::{PgOptions, PgStore};
use keel_host::store::sled::{SledOptions, SledStore};
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

    /// The engine's settings for this store (changed as a `Config`).
    pub fn config(&self) -> TestConfig {
        let mut engine = Config::caching_in(keel_tests::compiled_cache());
        engine.max_instances = 50;
        engine.default_durability = keel_tests::default_durability();
        TestConfig {
            engine,
            dir: self.dir.path().to_path_buf(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// An engine's settings and the test store they are for; it derefs to the
/// [`Config`], so a test changes the settings as it would a `Config`.
#[derive(Clone)]
pub struct TestConfig {
    pub engine: Config,
    pub dir: PathBuf,
}

impl std::ops::Deref for TestConfig {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.engine
    }
}

impl std::ops::DerefMut for TestConfig {
    fn deref_mut(&mut self) -> &mut Config {
        &mut self.engine
    }
}

impl TestConfig {
    /// An engine over the sled store itself (tests of sled's own
    /// behaviour: locking, reopening, free space).
    pub fn open_sled(self) -> keel_host::Result<Keel> {
        Keel::open_sled(self.engine, &SledOptions::new(&self.dir))
    }
}

pub async fn open(config: TestConfig) -> (Keel, Arc<Loaded>) {
    open_with(config, keel_tests::TESTBED).await
}

/// Opens the store and loads the guest at `component`.
pub async fn open_with(config: TestConfig, component: &str) -> (Keel, Arc<Loaded>) {
    let (keel, loaded, _) = open_backend(config, component).await;
    (keel, loaded)
}

/// The store of the tests' engines, behind a wrapper that injects faults
/// on demand: sled, or PostgreSQL when `KEEL_TEST_STORE=postgres` (a
/// schema per test store in `KEEL_TEST_POSTGRES`), so the same tests prove
/// the engine on both.
pub type Backend = FaultyStore<dyn Store>;

/// Whether the tests run on PostgreSQL (`KEEL_TEST_STORE=postgres`).
pub fn on_postgres() -> bool {
    match std::env::var("KEEL_TEST_STORE").as_deref() {
        Ok("postgres") => true,
        Ok("sled") | Err(_) => false,
        Ok(other) => panic!("KEEL_TEST_STORE is sled or postgres, not `{other}`"),
    }
}

/// The PostgreSQL store of the test store at `dir`: a schema named after
/// the directory, so reopening the same test store reopens the same schema.
async fn postgres_at(dir: &Path) -> PgStore {
    let url = std::env::var("KEEL_TEST_POSTGRES").unwrap_or_else(|_| {
        panic!("KEEL_TEST_STORE=postgres needs KEEL_TEST_POSTGRES: run scripts/test.sh")
    });
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in dir.as_os_str().as_encoded_bytes() {
        hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut options = PgOptions::new(&url);
    options.schema = format!("keel_e2e_{hash:016x}");
    options.pool_size = 8;
    PgStore::open(options)
        .await
        .expect("opening the PostgreSQL store")
}

/// The test store's store, as the engine takes it and as the fault
/// injector arms it.
pub async fn open_store(config: &TestConfig) -> (Arc<dyn Store>, Arc<Backend>) {
    if on_postgres() {
        let store = Arc::new(FaultyStore::new(postgres_at(&config.dir).await));
        (store.clone(), store)
    } else {
        // Tests reopen a store they just dropped: wait for sled to let go.
        let store = Arc::new(FaultyStore::new(
            SledStore::reopen(&config.dir).expect("opening the store"),
        ));
        (store.clone(), store)
    }
}

/// Opens the store (keeping a handle to it) and loads the guest at
/// `component`.
pub async fn open_backend(
    config: TestConfig,
    component: &str,
) -> (Keel, Arc<Loaded>, Arc<Backend>) {
    let (store, backend) = open_store(&config).await;
    let keel = Keel::open(config.engine, store).expect("opening the engine");
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

/// The names of the steps scheduled, in command order.
pub fn step_names(journal: &[Entry]) -> Vec<String> {
    journal
        .iter()
        .filter_map(|e| match &e.fact {
            Fact::StepScheduled { name, .. } => Some(name.clone()),
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
    config.open_sled().unwrap()
}

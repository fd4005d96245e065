//! The conformance suite on the sled store, and proof that the suite fails
//! a store that breaks its rules.

use std::sync::Arc;

use async_trait::async_trait;
use keel_store::Store;
use keel_store::conformance::{self, Harness};
use keel_store::faulty::FaultyStore;
use keel_store::sled::SledStore;

/// Sled stores in temporary directories, kept until the harness drops.
#[derive(Default)]
struct SledHarness {
    dirs: std::sync::Mutex<Vec<tempfile::TempDir>>,
}

impl SledHarness {
    fn open(&self) -> SledStore {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = SledStore::open(dir.path()).expect("opening a sled store");
        self.dirs.lock().unwrap().push(dir);
        store
    }
}

#[async_trait]
impl Harness for SledHarness {
    async fn fresh(&self) -> Arc<dyn Store> {
        Arc::new(self.open())
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Arc<dyn Store> {
        let path = store.location();
        drop(store);
        Arc::new(SledStore::reopen(path).expect("reopening the sled store"))
    }
}

keel_store::conformance_tests!(SledHarness::default());

/// Sled stores that lose their start hooks.
#[derive(Default)]
struct BrokenHarness(SledHarness);

#[async_trait]
impl Harness for BrokenHarness {
    async fn fresh(&self) -> Arc<dyn Store> {
        let store = FaultyStore::new(self.0.open());
        store.lose_start_hooks();
        Arc::new(store)
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Arc<dyn Store> {
        self.0.reopen(store).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_suite_fails_a_store_that_loses_start_hooks() {
    let outcomes = conformance::run_all(&BrokenHarness::default()).await;
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|(_, o)| o.is_err())
        .map(|(name, _)| *name)
        .collect();
    for expected in [
        "a_start_token_admits_one_of_many_racers",
        "a_refused_admission_writes_nothing",
        "payloads_are_delivered_in_order",
    ] {
        assert!(
            failed.contains(&expected),
            "{expected} passed on a broken store; failed: {failed:?}"
        );
    }
    // The cases that do not involve start hooks still pass.
    assert!(!failed.contains(&"journals_read_back_in_order_and_children_stay_apart"));
}

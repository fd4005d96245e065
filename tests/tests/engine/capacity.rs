//! Instances are a cache, not a limit: more runs, sleeps and steps than the
//! engine has instance slots for all complete, queued rather than failed.

use crate::common;

use crate::common::*;
use keel_host::Keel;
use keel_host::core::RunStatus;

/// Instance slots of the engines here: far fewer than the work given.
const SLOTS: u32 = 8;

/// Starts `count` runs of `workflow` and drives them all at once; their
/// records once each ended.
async fn all_at_once(
    keel: &Keel,
    workflow: &str,
    input: &str,
    count: usize,
) -> Vec<keel_host::core::RunRecord> {
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    let mut runs = Vec::new();
    for _ in 0..count {
        runs.push(keel.start(&testbed, workflow, input).await.unwrap());
    }
    let drives: Vec<_> = runs
        .iter()
        .map(|run| {
            let (keel, run_id) = (keel.clone(), run.run_id.clone());
            tokio::spawn(async move { keel.result(&run_id, true).await })
        })
        .collect();
    let mut ended = Vec::new();
    for drive in drives {
        ended.push(drive.await.unwrap().unwrap());
    }
    ended
}

fn pooled(store: &TestStore) -> common::TestConfig {
    let mut config = store.config();
    config.max_instances = SLOTS;
    config
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_with_slow_steps_beyond_the_pool_all_complete() {
    let store = TestStore::new();
    let (keel, _) = open(pooled(&store)).await;
    let runs = all_at_once(&keel, "concurrent", "[150]", 40).await;
    for run in &runs {
        assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    }
}

/// Counts the suspensions the engine reports.
#[derive(Default)]
struct Suspensions(std::sync::atomic::AtomicUsize);

impl keel_host::Observer for Suspensions {
    fn run_suspended(&self, _workflow: &str) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sleeping_runs_beyond_the_pool_give_their_slots_up_and_complete() {
    let store = TestStore::new();
    let suspensions = std::sync::Arc::new(Suspensions::default());
    let mut config = pooled(&store);
    config.observer = suspensions.clone();
    let (keel, _) = open(config).await;
    // Three seconds is far under the park limit: a sleeper suspends only
    // to give its slot to the runs queued behind it. It is long beside the
    // time the 30 drives take to ask for slots: with 300 ms, a loaded
    // machine on PostgreSQL once started them so slowly (over about a
    // second) that no more runs than the pool holds ever wanted a slot at
    // once, and no sleeper had a reason to give its slot up.
    let runs = all_at_once(&keel, "sleeper", "3000", 30).await;
    let suspended = suspensions.0.load(std::sync::atomic::Ordering::SeqCst);
    assert!(suspended > 0, "no sleeping run gave its slot up");
    for run in &runs {
        assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
        assert_eq!(run.output.as_deref(), Some("1"));
    }
    // Some gave their slot up while they slept and resumed by replay: the
    // journal shows no second timer and one completion per step.
    for run in &runs {
        let journal = keel.journal(&run.run_id).await.unwrap();
        let names: Vec<_> = journal.iter().map(|e| e.fact.name()).collect();
        assert_eq!(
            names.iter().filter(|n| **n == "timer_scheduled").count(),
            1,
            "{names:?}"
        );
        assert_eq!(
            names.iter().filter(|n| **n == "step_completed").count(),
            1,
            "{names:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_join_wider_than_the_pool_completes() {
    let store = TestStore::new();
    let (keel, testbed) = open(pooled(&store)).await;
    let delays = serde_json::to_string(&vec![20; 60]).unwrap();
    let run = keel.run(&testbed, "unordered", &delays).await.unwrap();
    let run = keel.result(&run.run_id, true).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let labels: Vec<String> = serde_json::from_str(run.output.as_deref().unwrap()).unwrap();
    let mut unique = labels.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 60, "{labels:?}");
}

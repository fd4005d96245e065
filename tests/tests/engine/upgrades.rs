//! Upgrades end to end: a deployment's waiting runs move to a new build
//! exactly where their journals replay there, the others stay pinned and
//! listed with their first divergence; a dry run moves none; a ramp moves
//! its share first and the rest later; every moved run completes on the
//! new build, every pinned one on the old, the move in its journal.

use std::path::Path;

use keel_host::core::bulk::JobState;
use keel_host::core::journal::Fact;
use keel_host::core::{RunId, RunStatus};
use keel_host::{DeploySpec, Keel, StartOptions};

use crate::common::{self, ManualClock, TestStore};

const T0: u64 = 1_800_000_000_000;
const HOUR: u64 = 3_600_000;

async fn deploy(keel: &Keel, path: &str) -> keel_host::core::Deployment {
    let spec = DeploySpec {
        name: Some("testbed".into()),
        ..DeploySpec::default()
    };
    let bytes = std::fs::read(path).unwrap();
    keel.deploy(Path::new(path), &bytes, spec).await.unwrap().0
}

/// Starts `count` runs of `workflow` on the deployment's current build and
/// drives each until it waits.
async fn waiting(keel: &Keel, workflow: &str, input: &str, count: usize) -> Vec<RunId> {
    let target = keel_host::core::deployment::Target::Name("testbed");
    let mut ids = Vec::new();
    for _ in 0..count {
        let run = keel
            .start_workflow(workflow, target, input, &StartOptions::default())
            .await
            .unwrap();
        ids.push(run.run_id);
    }
    let mut drives = tokio::task::JoinSet::new();
    for id in ids.clone() {
        let keel = keel.clone();
        drives.spawn(async move { keel.drive(&id).await.unwrap().status });
    }
    while let Some(status) = drives.join_next().await {
        assert_eq!(status.unwrap(), RunStatus::Waiting);
    }
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_moves_exactly_the_runs_that_replay_and_lists_the_rest() {
    let store = TestStore::new();
    let clock = ManualClock::at(T0);
    let mut config = store.config();
    config.clock = clock.clone();
    let (keel, _) = common::open(config).await;
    let old = deploy(&keel, keel_tests::TESTBED).await;
    // 900 runs that replay on the new build (it sleeps as the old one
    // does), 100 that do not (their first step is another there).
    let input = serde_json::json!(HOUR).to_string();
    let compatible = waiting(&keel, "sleeper", &input, 900).await;
    let incompatible = waiting(&keel, "step_then_sleep", &format!("[5, {HOUR}]"), 100).await;
    let new = deploy(&keel, keel_tests::TESTBED_REORDERED).await;
    assert_ne!(old.hash, new.hash);

    // A dry run judges every run and moves none.
    let dry = keel
        .submit_upgrade("testbed", "testbed", true, None)
        .await
        .unwrap();
    let dry = keel.run_job(&dry.job_id).await.unwrap();
    assert_eq!(dry.state, JobState::Completed);
    assert_eq!(
        (dry.counts.done, dry.counts.failed, dry.counts.skipped),
        (900, 100, 0),
        "{:?}",
        dry.counts
    );
    let pinned: std::collections::HashSet<&RunId> = dry.errors.iter().map(|e| &e.run_id).collect();
    assert_eq!(pinned.len(), 100);
    assert!(incompatible.iter().all(|id| pinned.contains(id)));
    let divergence = &dry.errors[0].error;
    assert!(
        divergence.contains("does not replay on build") && divergence.contains("add"),
        "{divergence}"
    );
    for id in compatible.iter().take(5) {
        assert_eq!(
            keel.get_run(id).await.unwrap().component_hash,
            old.hash,
            "not moved"
        );
    }

    // A ramp of 10% moves about a tenth, the same runs as any later ramp.
    let ramp = keel
        .submit_upgrade("testbed", "testbed", false, Some(10))
        .await
        .unwrap();
    let ramp = keel.run_job(&ramp.job_id).await.unwrap();
    let ramped = ramp.counts.done;
    assert!((40..=160).contains(&ramped), "{:?}", ramp.counts);

    // The rest.
    let all = keel
        .submit_upgrade("testbed", "testbed", false, None)
        .await
        .unwrap();
    let all = keel.run_job(&all.job_id).await.unwrap();
    assert_eq!(
        (all.counts.done, all.counts.skipped, all.counts.failed),
        (900 - ramped, ramped, 100),
        "the ramp's runs are there already: {:?}",
        all.counts
    );
    for id in &compatible {
        let run = keel.get_run(id).await.unwrap();
        assert_eq!(run.component_hash, new.hash, "{id} moved");
    }
    for id in &incompatible {
        assert_eq!(
            keel.get_run(id).await.unwrap().component_hash,
            old.hash,
            "{id} pinned"
        );
    }
    let journal = keel.journal(&compatible[0]).await.unwrap();
    let moves: Vec<_> = journal
        .iter()
        .filter_map(|e| match &e.fact {
            Fact::RunMoved { from, to, by } => Some((from.clone(), to.clone(), by.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(moves.len(), 1, "moved once: {moves:?}");
    assert_eq!(
        (&moves[0].0, &moves[0].1),
        (&old.hash.to_string(), &new.hash.to_string())
    );
    assert!(moves[0].2.starts_with("job "), "{moves:?}");

    // Their timers pass: each completes on the build it is pinned to.
    clock.advance(2 * HOUR);
    keel.work(true).await.unwrap();
    for id in compatible.iter().chain(&incompatible) {
        let run = keel.get_run(id).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    }
    let pinned_run = keel.get_run(&incompatible[0]).await.unwrap();
    assert_eq!(
        pinned_run.output.as_deref(),
        Some("6"),
        "add, on the old build"
    );
}

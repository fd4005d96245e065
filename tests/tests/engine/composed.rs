//! Operations on runs composed with each other and with new builds, each
//! test a row of docs/live-runs.md's pair table: a restart after an upgrade
//! to a build with a patch marker charges under the step ID it charged
//! under before; a retry or restart past a saga's compensation is refused
//! and a fork from before it gets its own IDs; judging or moving a paused
//! run leaves it paused and out of every worker pass.

use std::path::Path;

use keel_host::core::RunStatus;
use keel_host::core::journal::{Entry, Fact};
use keel_host::core::restart::RestartPoint;
use keel_host::{DeploySpec, Error, ForkOptions, Grants, Keel, StartOptions};
use keel_payment_api::PaymentApi;

use crate::common::{self, TestStore};

/// An engine with the testbed deployed as `testbed` (its first build),
/// whose steps may reach `api`.
async fn billing_keel(store: &TestStore, api: &PaymentApi) -> Keel {
    let mut config = store.config();
    config.grants = Grants {
        http: vec![api.addr.to_string()],
        ..Grants::default()
    };
    let grants = config.grants.spec();
    let (keel, _) = common::open(config).await;
    let bytes = std::fs::read(keel_tests::TESTBED).unwrap();
    let spec = DeploySpec {
        name: Some("testbed".into()),
        grants: Some(grants),
        ..DeploySpec::default()
    };
    let path = Path::new(keel_tests::TESTBED);
    keel.deploy(path, &bytes, spec).await.unwrap();
    keel
}

/// Deploys the guest at `path` as the next build of `testbed` (with the
/// grants of the name's first); returns its hash.
async fn deploy(keel: &Keel, path: &str) -> String {
    let bytes = std::fs::read(path).unwrap();
    let spec = DeploySpec {
        name: Some("testbed".into()),
        ..DeploySpec::default()
    };
    let (deployment, _) = keel.deploy(Path::new(path), &bytes, spec).await.unwrap();
    deployment.hash.to_string()
}

/// Starts `workflow` of the `testbed` deployment with `input`.
async fn start(keel: &Keel, workflow: &str, input: &str) -> String {
    let target = keel_host::core::deployment::Target::Name("testbed");
    let run = keel
        .start_workflow(workflow, target, input, &StartOptions::default())
        .await
        .unwrap();
    run.run_id.into_string()
}

/// The step IDs the journal scheduled step `name` under, voided
/// schedulings included.
fn ids_of(journal: &[Entry], name: &str) -> Vec<String> {
    journal
        .iter()
        .filter_map(|e| match &e.fact {
            Fact::StepScheduled {
                name: n, step_id, ..
            } if n == name => Some(step_id.clone()),
            _ => None,
        })
        .collect()
}

/// Drives `run` until it ends, resuming hook `token` with a note each time
/// it waits there.
async fn drive_to_end(keel: &Keel, run: &str, token: &str) -> keel_host::core::RunRecord {
    for _ in 0..5 {
        let driven = keel.drive(run).await.unwrap();
        if driven.status.is_final() {
            return driven;
        }
        assert_eq!(driven.status, RunStatus::Waiting, "{driven:?}");
        keel.resume_hook(token, r#""paid""#).await.unwrap();
    }
    panic!("run {run} did not end");
}

/// Row "upgrade (to a build with a patch marker), then restart": the run
/// charged before it moved; restarted from its charge, the new build runs
/// a step of its own before the charge, and the charge goes out again
/// under the step ID it went out under the first time, so the payment API,
/// which dedups by that ID, charges once. The same for a restart onto the
/// new build (`--on`) of a run that never moved.
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_after_an_upgrade_to_a_patched_build_charges_under_the_first_step_id() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let keel = billing_keel(&store, &api).await;
    let input = |token: &str| serde_json::json!([api.url("/charge"), token]).to_string();
    // One run waits after its charge; the other ends on the first build.
    let moved = start(&keel, "billing", &input("bill:1")).await;
    assert_eq!(keel.drive(&moved).await.unwrap().status, RunStatus::Waiting);
    let ended = start(&keel, "billing", &input("bill:2")).await;
    drive_to_end(&keel, &ended, "bill:2").await;
    assert_eq!(api.charges().len(), 2);

    let patched = deploy(&keel, keel_tests::TESTBED_REORDERED).await;
    let job = keel
        .submit_upgrade("testbed", "testbed", false, None)
        .await
        .unwrap();
    let job = keel.run_job(&job.job_id).await.unwrap();
    assert_eq!(job.counts.done, 1, "{job:?}");
    assert_eq!(keel.get_run(&moved).await.unwrap().component_hash, patched);
    let done = drive_to_end(&keel, &moved, "bill:1").await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");

    // Restarted in place from its charge, on the build it moved to; and
    // the other restarted from its charge onto that build.
    keel.restart_run(&moved, &RestartPoint::Step("charge".into()), None, "test")
        .await
        .unwrap();
    keel.restart_run(
        &ended,
        &RestartPoint::Step("charge".into()),
        Some("testbed"),
        "test",
    )
    .await
    .unwrap();
    for (run, token) in [(&moved, "bill:1"), (&ended, "bill:2")] {
        let done = drive_to_end(&keel, run, token).await;
        assert_eq!(done.status, RunStatus::Completed, "{done:?}");
        assert_eq!(done.component_hash, patched);
        let journal = keel.journal(run).await.unwrap();
        assert!(
            journal.iter().any(|e| matches!(
                &e.fact,
                Fact::PatchMarker { change_id, .. } if change_id == "verify-before-charge"
            )),
            "the restart ran the new build's path: {journal:?}"
        );
        let charged = ids_of(&journal, "charge");
        assert_eq!(charged.len(), 2, "issued twice: {charged:?}");
        assert_eq!(charged[0], format!("{run}-charge-0"));
        assert_eq!(charged[0], charged[1], "under one step ID");
        assert!(keel.replay(run, None).await.unwrap().is_ok());
    }
    assert_eq!(
        api.charges().len(),
        2,
        "no customer charged twice: {:?}",
        api.charges()
    );
}

/// Row "retry or restart after a saga compensated": the run reserved a
/// budget, its publish failed for good and the saga released the budget.
/// A retry (which would complete on the released budget) and a restart
/// from before the release are refused, naming the compensation and the
/// way out; a restart from after it and a fork from before the reserve
/// are not, and the fork's steps run under the fork's own IDs.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_or_restart_past_a_compensation_is_refused_and_a_fork_runs_anew() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let keel = billing_keel(&store, &api).await;
    api.set_refusing(true);
    let input = serde_json::json!(api.url("/charge")).to_string();
    let run = start(&keel, "publish_on_budget", &input).await;
    let failed = keel.drive(&run).await.unwrap();
    assert_eq!(failed.status, RunStatus::Failed, "{failed:?}");
    let journal = keel.journal(&run).await.unwrap();
    assert_eq!(ids_of(&journal, "release_budget").len(), 1, "compensated");
    api.set_refusing(false);

    let refused = keel.retry(&run).await.unwrap_err();
    assert!(
        matches!(&refused, Error::NotRetryable { reason, .. }
            if reason.contains("release_budget") && reason.contains("Fork the run")),
        "{refused}"
    );
    let refused = keel
        .restart_run(&run, &RestartPoint::Step("charge".into()), None, "test")
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, Error::NotRestartable { reason, .. } if reason.contains("release_budget")),
        "{refused}"
    );
    // Nothing was written: the run is as it failed.
    assert_eq!(keel.journal(&run).await.unwrap().len(), journal.len());
    assert_eq!(keel.get_run(&run).await.unwrap().status, RunStatus::Failed);

    let fork = keel
        .fork_run(
            &run,
            &RestartPoint::Step("reserve_budget".into()),
            &ForkOptions::default(),
            "test",
        )
        .await
        .unwrap();
    let fork_id = fork.run_id.as_str();
    let done = keel.drive(fork_id).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    let forked = keel.journal(fork_id).await.unwrap();
    assert_eq!(ids_of(&forked, "charge"), [format!("{fork_id}-charge-0")]);
    assert_eq!(
        ids_of(&forked, "reserve_budget"),
        [format!("{fork_id}-reserve_budget-0")]
    );
    assert_eq!(api.charges().len(), 1, "{:?}", api.charges());
}

/// Row "pause, then upgrade (dry or real)": judging or moving paused runs
/// leaves them paused, and no worker pass drives them again: the move's
/// release does not leave them due at once (they were driven about a
/// hundred times a second before).
#[tokio::test(flavor = "multi_thread")]
async fn judging_or_moving_paused_runs_leaves_them_paused_and_out_of_every_pass() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let keel = billing_keel(&store, &api).await;
    let mut runs = Vec::new();
    for n in 0..3 {
        let input = serde_json::json!([api.url("/charge"), format!("pause:{n}")]).to_string();
        let run = start(&keel, "billing", &input).await;
        assert_eq!(keel.drive(&run).await.unwrap().status, RunStatus::Waiting);
        keel.pause_run(&run, "test").await.unwrap();
        assert_eq!(keel.drive(&run).await.unwrap().status, RunStatus::Paused);
        runs.push(run);
    }
    assert_eq!(keel.work_once().await.unwrap(), 0, "paused: none due");
    deploy(&keel, keel_tests::TESTBED_REORDERED).await;
    for dry_run in [true, false] {
        let job = keel
            .submit_upgrade("testbed", "testbed", dry_run, None)
            .await
            .unwrap();
        let job = keel.run_job(&job.job_id).await.unwrap();
        assert_eq!(job.counts.done, 3, "dry run {dry_run}: {job:?}");
        // The judgement took each run's lease and gave it back: one pass
        // may find them due once; none after that.
        keel.work_once().await.unwrap();
        for pass in 0..3 {
            assert_eq!(
                keel.work_once().await.unwrap(),
                0,
                "pass {pass} after the {} drove paused runs",
                if dry_run { "dry run" } else { "upgrade" }
            );
        }
        for run in &runs {
            assert_eq!(keel.get_run(run).await.unwrap().status, RunStatus::Paused);
        }
    }
    // Resumed, each goes on where it stood, on the build it moved to.
    for (n, run) in runs.iter().enumerate() {
        keel.resume_run(run, "test").await.unwrap();
        let done = drive_to_end(&keel, run, &format!("pause:{n}")).await;
        assert_eq!(done.status, RunStatus::Completed, "{done:?}");
        let journal = keel.journal(run).await.unwrap();
        assert!(
            journal
                .iter()
                .any(|e| matches!(e.fact, Fact::RunMoved { .. })),
            "moved while paused: {journal:?}"
        );
    }
    assert_eq!(api.charges().len(), 3);
}

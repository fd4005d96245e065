//! Bulk operations end to end: a job retries, cancels or deletes exactly
//! the runs its filter selected when it was submitted, a worker that takes
//! a job over after a crash acts on no run twice, a cancelled job stops,
//! and a filter that selects every run is refused. On sled, or PostgreSQL
//! with `KEEL_TEST_STORE`.

use crate::common;

use crate::common::{ManualClock, TestStore, json, open, open_backend};
use keel_host::core::bulk::{BulkAction, BulkRequest, BulkRestart, JobState, fork_id};
use keel_host::core::journal::Fact;
use keel_host::core::restart::RestartPoint;
use keel_host::core::{RunFilter, RunId, RunStatus};
use keel_host::store::faulty::{Crash, CrashWhen};
use keel_host::{Error, Keel, StartOptions};
use keel_payment_api::PaymentApi;

fn tenant(name: &str) -> StartOptions {
    StartOptions {
        attributes: [("tenant".to_string(), name.to_string())].into(),
        ..StartOptions::default()
    }
}

fn failed_of(tenant: &str) -> RunFilter {
    RunFilter {
        statuses: vec![RunStatus::Failed],
        attributes: [("tenant".to_string(), tenant.to_string())].into(),
        ..RunFilter::default()
    }
}

fn request(action: BulkAction, filter: RunFilter) -> BulkRequest {
    BulkRequest {
        action,
        filter,
        reason: None,
        force: false,
        upgrade: None,
        restart: None,
    }
}

/// How many times `run_id`'s journal records a retry.
async fn retries(keel: &Keel, run_id: &RunId) -> usize {
    keel.journal(run_id)
        .await
        .unwrap()
        .iter()
        .filter(|e| matches!(e.fact, Fact::RunRetried { .. }))
        .count()
}

/// Starts `count` charges (`charge_once`, no compensation: a failed one
/// is retried from its charge) for `tenant` and drives them all at once.
async fn orders(
    keel: &Keel,
    testbed: &keel_host::Loaded,
    api: &PaymentApi,
    tenant_name: &str,
    count: usize,
) -> Vec<RunId> {
    let mut ids = Vec::new();
    for _ in 0..count {
        let input = serde_json::json!(api.url("/charge")).to_string();
        let run = keel
            .start_with(testbed, "charge_once", &input, &tenant(tenant_name))
            .await
            .unwrap();
        ids.push(run.run_id);
    }
    let mut drives = tokio::task::JoinSet::new();
    for id in ids.clone() {
        let keel = keel.clone();
        drives.spawn(async move { keel.drive(&id).await });
    }
    while let Some(run) = drives.join_next().await {
        run.unwrap().unwrap();
    }
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bulk_retry_after_a_crash_takes_each_filtered_failed_run_to_completion_once() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let mut config = store.config();
    config.grants = keel_host::Grants {
        http: vec![api.addr.to_string()],
        ..keel_host::Grants::default()
    };
    let (keel, order, backend) = open_backend(config.clone(), keel_tests::TESTBED).await;
    let paid = orders(&keel, &order, &api, "acme", 1).await;
    api.set_refusing(true);
    let acme = orders(&keel, &order, &api, "acme", 5).await;
    let other = orders(&keel, &order, &api, "other", 2).await;
    for id in acme.iter().chain(&other) {
        assert_eq!(keel.get_run(id).await.unwrap().status, RunStatus::Failed);
    }

    let retry = request(BulkAction::Retry, failed_of("acme"));
    let preview = keel.preview_bulk(&retry, 3).await.unwrap();
    assert_eq!((preview.acted_on, preview.passed_over), (5, 0));
    assert_eq!(preview.sample.len(), 3);
    assert!(preview.sample.iter().all(|r| acme.contains(&r.run_id)));

    // The payment service is back. The job's worker dies after its third
    // retry landed: the third is unconfirmed, the last two never happen,
    // and the page's end is never written.
    api.set_refusing(false);
    let job = keel.submit_bulk(retry).await.unwrap();
    backend.crash_at(Crash {
        at_write: backend.journal_writes() + 3,
        when: CrashWhen::After,
    });
    backend.die_at_job_update(3);
    assert!(keel.run_job(&job.job_id).await.is_err(), "the worker died");
    drop((keel, order, backend));

    // Another worker takes the job over once the claim has expired (its
    // clock is set past the claim).
    let mut config = config.clone();
    let expired = job.created_at_ms + config.lease_ttl.as_millis() as u64 + 60_000;
    config.clock = ManualClock::at(expired);
    config.worker_id = "second-worker".into();
    let (keel, _order, _backend) = open_backend(config, keel_tests::TESTBED).await;
    let stale = keel.job(&job.job_id).await.unwrap();
    assert_eq!(stale.in_flight.len(), 5, "the page the dead worker began");
    let mut landed = Vec::new();
    for id in &acme {
        landed.push(retries(&keel, id).await);
    }
    landed.sort();
    assert_eq!(
        landed,
        [0, 0, 1, 1, 1],
        "three retries landed before the crash"
    );
    let done = keel.run_job(&job.job_id).await.unwrap();
    assert_eq!(done.state, JobState::Completed, "{done:?}");
    let counts = done.counts;
    assert_eq!(
        (counts.matched, counts.done, counts.skipped, counts.failed),
        (5, 5, 0, 0),
        "{done:?}"
    );
    for id in &acme {
        assert_eq!(retries(&keel, id).await, 1, "{id} was retried once");
    }
    for id in &other {
        assert_eq!(retries(&keel, id).await, 0, "{id} is another tenant's");
    }

    // The retried runs go on to completion, each charged once under its
    // own step ID; the other tenant's stay failed.
    keel.work(true).await.unwrap();
    for id in &acme {
        let run = keel.get_run(id).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        assert!(json(run.output.as_deref().unwrap()).is_string());
    }
    for id in &other {
        assert_eq!(keel.get_run(id).await.unwrap().status, RunStatus::Failed);
    }
    assert_eq!(retries(&keel, &paid[0]).await, 0, "a completed run");
    assert_eq!(api.charges().len(), 6, "one charge per completed order");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bulk_cancel_and_delete_act_on_their_tenant_only() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let mut sleeping = Vec::new();
    for name in ["acme", "acme", "acme", "other"] {
        let run = keel
            .start_with(&testbed, "sleeper", "3600000", &tenant(name))
            .await
            .unwrap();
        let run = keel.drive(&run.run_id).await.unwrap();
        assert_eq!(run.status, RunStatus::Waiting);
        sleeping.push(run.run_id);
    }
    let acme = RunFilter {
        attributes: [("tenant".to_string(), "acme".to_string())].into(),
        ..RunFilter::default()
    };
    let mut cancel = request(BulkAction::Cancel, acme.clone());
    cancel.reason = Some("tenant offboarded".into());
    let job = keel.submit_bulk(cancel).await.unwrap();
    let done = keel.run_job(&job.job_id).await.unwrap();
    assert_eq!(done.state, JobState::Completed);
    assert_eq!((done.counts.done, done.counts.skipped), (3, 0), "{done:?}");
    keel.work(true).await.unwrap();
    for id in &sleeping[..3] {
        let run = keel.get_run(id).await.unwrap();
        assert_eq!(run.status, RunStatus::Cancelled, "{run:?}");
    }
    assert_eq!(
        keel.get_run(&sleeping[3]).await.unwrap().status,
        RunStatus::Waiting,
        "another tenant's run goes on"
    );

    // A bulk delete of the tenant's runs, the live one passed over.
    let late = keel
        .start_with(&testbed, "sleeper", "3600000", &tenant("acme"))
        .await
        .unwrap();
    let delete = request(BulkAction::Delete, acme);
    let preview = keel.preview_bulk(&delete, 10).await.unwrap();
    assert_eq!(
        (preview.acted_on, preview.passed_over),
        (3, 1),
        "{preview:?}"
    );
    let job = keel.submit_bulk(delete).await.unwrap();
    let done = keel.run_job(&job.job_id).await.unwrap();
    assert_eq!((done.counts.done, done.counts.skipped), (3, 1), "{done:?}");
    for id in &sleeping[..3] {
        assert!(matches!(
            keel.get_run(id).await,
            Err(Error::RunNotFound { .. })
        ));
    }
    assert!(!keel.get_run(&late.run_id).await.unwrap().status.is_final());
    let listed = keel.jobs(10).await.unwrap();
    assert_eq!(listed[0].job_id, job.job_id, "newest first");
    assert_eq!(listed.len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bulk_pause_holds_its_tenants_runs_and_a_bulk_resume_lets_them_finish() {
    let store = TestStore::new();
    let clock = ManualClock::at(1_800_000_000_000);
    let mut config = store.config();
    config.clock = clock.clone();
    let (keel, testbed) = open(config).await;
    let mut sleeping = Vec::new();
    for name in ["acme", "acme", "other"] {
        let run = keel
            .start_with(&testbed, "sleeper", "3600000", &tenant(name))
            .await
            .unwrap();
        let run = keel.drive(&run.run_id).await.unwrap();
        assert_eq!(run.status, RunStatus::Waiting);
        sleeping.push(run.run_id);
    }
    let acme = RunFilter {
        attributes: [("tenant".to_string(), "acme".to_string())].into(),
        ..RunFilter::default()
    };
    let job = keel
        .submit_bulk(request(BulkAction::Pause, acme.clone()))
        .await
        .unwrap();
    let done = keel.run_job(&job.job_id).await.unwrap();
    assert_eq!((done.counts.done, done.counts.skipped), (2, 0), "{done:?}");
    keel.work_once().await.unwrap();
    // Their timers pass while they are paused; the other tenant's fires.
    clock.advance(7_200_000);
    keel.work(true).await.unwrap();
    for id in &sleeping[..2] {
        let run = keel.get_run(id).await.unwrap();
        assert_eq!(run.status, RunStatus::Paused, "{run:?}");
    }
    let other = keel.get_run(&sleeping[2]).await.unwrap();
    assert_eq!(other.status, RunStatus::Completed, "{other:?}");

    // A resume passes over what is not paused.
    let resume = request(BulkAction::Resume, RunFilter::default());
    assert!(
        keel.submit_bulk(resume).await.is_err(),
        "a filter is needed"
    );
    let job = keel
        .submit_bulk(request(BulkAction::Resume, acme))
        .await
        .unwrap();
    let done = keel.run_job(&job.job_id).await.unwrap();
    assert_eq!((done.counts.done, done.counts.skipped), (2, 0), "{done:?}");
    keel.work(true).await.unwrap();
    for id in &sleeping[..2] {
        let run = keel.get_run(id).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_job_acts_on_nothing_more_and_an_unfiltered_one_is_refused() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let failed = keel.run(&testbed, "trap", "null").await.unwrap();
    assert_eq!(failed.status, RunStatus::Failed);

    let everything = request(BulkAction::Delete, RunFilter::default());
    let refused = keel.submit_bulk(everything).await.unwrap_err();
    assert_eq!(refused.kind().as_str(), "invalid_request");
    assert!(refused.to_string().contains("needs a filter"), "{refused}");

    let retry = RunFilter {
        statuses: vec![RunStatus::Failed],
        ..RunFilter::default()
    };
    let job = keel
        .submit_bulk(request(BulkAction::Retry, retry))
        .await
        .unwrap();
    let cancelled = keel.cancel_job(&job.job_id).await.unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    let after = keel.run_job(&job.job_id).await.unwrap();
    assert_eq!(after.state, JobState::Cancelled);
    assert_eq!(after.counts.done, 0);
    assert_eq!(retries(&keel, &failed.run_id).await, 0);
    let missing = keel.job("no-such-job").await.unwrap_err();
    assert_eq!(missing.kind().as_str(), "job_not_found");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_racing_for_a_job_retry_each_run_once() {
    let store = TestStore::new();
    let config = store.config();
    let (shared, _) = common::open_store(&config).await;
    let keel = Keel::open(config.engine.clone(), shared.clone()).unwrap();
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    let mut failed = Vec::new();
    for _ in 0..20 {
        let run = keel.run(&testbed, "trap", "null").await.unwrap();
        assert_eq!(run.status, RunStatus::Failed);
        failed.push(run.run_id);
    }
    let mut other_config = config.engine.clone();
    other_config.worker_id = "racing-worker".into();
    let other = Keel::open(other_config, shared).unwrap();
    let retry = RunFilter {
        statuses: vec![RunStatus::Failed],
        ..RunFilter::default()
    };
    let job = keel
        .submit_bulk(request(BulkAction::Retry, retry))
        .await
        .unwrap();
    let (a, b) = tokio::join!(keel.run_job(&job.job_id), other.run_job(&job.job_id));
    let (a, b) = (a.unwrap(), b.unwrap());
    let done = keel.job(&job.job_id).await.unwrap();
    assert_eq!(done.state, JobState::Completed, "{a:?} {b:?}");
    assert_eq!(done.counts.done, 20, "{done:?}");
    for id in &failed {
        assert_eq!(retries(&keel, id).await, 1, "{id} was retried once");
    }
}

/// How many times `run_id`'s journal records a restart.
async fn restarts(keel: &Keel, run_id: &RunId) -> usize {
    keel.journal(run_id)
        .await
        .unwrap()
        .iter()
        .filter(|e| matches!(e.fact, Fact::RunRestarted { .. }))
        .count()
}

fn from_mul(action: BulkAction, filter: RunFilter, on: Option<String>) -> BulkRequest {
    BulkRequest {
        restart: Some(BulkRestart {
            from: RestartPoint::Step("mul".into()),
            on,
        }),
        ..request(action, filter)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bulk_restart_and_fork_act_on_each_selected_run_once_across_a_takeover() {
    let store = TestStore::new();
    let config = store.config();
    let (keel, testbed, backend) = open_backend(config.clone(), keel_tests::TESTBED).await;
    let mut acme = Vec::new();
    for (name, x) in [("acme", 1), ("acme", 2), ("acme", 3), ("other", 4)] {
        let run = keel
            .start_with(&testbed, "two_steps", &x.to_string(), &tenant(name))
            .await
            .unwrap();
        assert_eq!(
            keel.drive(&run.run_id).await.unwrap().status,
            RunStatus::Completed
        );
        if name == "acme" {
            acme.push(run.run_id);
        }
    }
    let completed = RunFilter {
        statuses: vec![RunStatus::Completed],
        attributes: [("tenant".to_string(), "acme".to_string())].into(),
        ..RunFilter::default()
    };
    let refused = keel
        .submit_bulk(request(BulkAction::Restart, completed.clone()))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("`from_step`"), "{refused}");

    // The restart's worker dies after two restarts landed (the second
    // unconfirmed); another takes the job over and restarts the rest.
    let job = keel
        .submit_bulk(from_mul(BulkAction::Restart, completed.clone(), None))
        .await
        .unwrap();
    backend.crash_at(Crash {
        at_write: backend.journal_writes() + 2,
        when: CrashWhen::After,
    });
    backend.die_at_job_update(3);
    assert!(keel.run_job(&job.job_id).await.is_err(), "the worker died");
    drop((keel, testbed, backend));
    let mut second = config.clone();
    second.clock =
        ManualClock::at(job.created_at_ms + config.lease_ttl.as_millis() as u64 + 60_000);
    second.worker_id = "second-worker".into();
    let (keel, testbed, backend) = open_backend(second, keel_tests::TESTBED).await;
    let done = keel.run_job(&job.job_id).await.unwrap();
    assert_eq!(
        (
            done.state,
            done.counts.matched,
            done.counts.done,
            done.counts.failed
        ),
        (JobState::Completed, 3, 3, 0),
        "{done:?}"
    );
    keel.work(true).await.unwrap();
    for id in &acme {
        assert_eq!(restarts(&keel, id).await, 1, "{id} was restarted once");
        let run = keel.get_run(id).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    }

    // A fork of each: its job's progress is lost after the forks were
    // made, and the worker that takes it over finds them by their IDs.
    let fork = keel
        .submit_bulk(from_mul(BulkAction::Fork, completed.clone(), None))
        .await
        .unwrap();
    backend.die_at_job_update(3);
    assert!(keel.run_job(&fork.job_id).await.is_err(), "the worker died");
    backend.die_at_job_update(u64::MAX);
    drop((keel, testbed, backend));
    let mut third = config.clone();
    third.clock =
        ManualClock::at(fork.created_at_ms + 2 * config.lease_ttl.as_millis() as u64 + 120_000);
    third.worker_id = "third-worker".into();
    let (keel, testbed, _backend) = open_backend(third, keel_tests::TESTBED).await;
    let done = keel.run_job(&fork.job_id).await.unwrap();
    assert_eq!(
        (done.counts.matched, done.counts.done, done.counts.failed),
        (3, 3, 0),
        "{done:?}"
    );
    keel.work(true).await.unwrap();
    for id in &acme {
        let forked = keel.get_run(&fork_id(&fork.job_id, id)).await.unwrap();
        let source = keel.get_run(id).await.unwrap();
        assert_eq!(
            (forked.status, forked.output.clone()),
            (RunStatus::Completed, source.output.clone()),
            "{forked:?}"
        );
        assert_eq!(forked.attributes["tenant"], "acme");
        assert_eq!(forked.attributes["forked_from"], id.as_str());
    }
    let all = keel.list_runs().await.unwrap();
    assert_eq!(all.len(), 4 + 3, "one fork per source, none twice: {all:?}");

    // Onto a build whose code calls its steps the other way round, no
    // fork is made: each run is listed with the command that differs.
    let bytes = std::fs::read(keel_tests::TESTBED_REORDERED).unwrap();
    let spec = keel_host::DeploySpec {
        name: Some("reordered".into()),
        ..keel_host::DeploySpec::default()
    };
    let path = std::path::Path::new(keel_tests::TESTBED_REORDERED);
    keel.deploy(path, &bytes, spec).await.unwrap();
    let _ = testbed;
    let job = keel
        .submit_bulk(from_mul(
            BulkAction::Fork,
            RunFilter {
                // The sources, not their forks.
                until_ms: Some(fork.created_at_ms),
                ..completed
            },
            Some("reordered".into()),
        ))
        .await
        .unwrap();
    let done = keel.run_job(&job.job_id).await.unwrap();
    assert_eq!((done.counts.done, done.counts.failed), (0, 3), "{done:?}");
    assert!(
        done.errors.iter().all(|e| e.error.contains("add")),
        "{:?}",
        done.errors
    );
    assert_eq!(keel.list_runs().await.unwrap().len(), 7, "no fork made");
}

//! Pauses end to end: a paused run runs no code while its payloads queue,
//! whoever drives it, and its resume goes on where it stood with the
//! payloads in order; a step attempt running at the pause ends first; a
//! delayed start keeps its time across a pause; a pause moves between
//! workers sharing the store.

use std::time::Duration;

use keel_host::core::RunStatus;
use keel_host::core::journal::Fact;
use keel_host::{Grants, Keel, Until};
use keel_payment_api::PaymentApi;

use crate::common::{self, ManualClock, TestStore, json};

/// The testbed's `inbox` on hook `token`, its steps calling `path` of
/// `api`.
fn inbox_input(api: &PaymentApi, path: &str, token: &str) -> String {
    serde_json::json!([api.url(path), token]).to_string()
}

/// The numbers `api` received at `path`, in order.
fn calls(api: &PaymentApi, path: &str) -> Vec<String> {
    api.requests()
        .into_iter()
        .filter(|r| r.path == path)
        .map(|r| r.body)
        .collect()
}

/// The pauses and resumes `keel` journaled for `run_id`, in order.
async fn pauses(keel: &Keel, run_id: &str) -> Vec<String> {
    keel.journal(run_id)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.fact {
            Fact::RunPaused { status, .. } => Some(format!("paused from {status}")),
            Fact::RunResumed => Some("resumed".into()),
            _ => None,
        })
        .collect()
}

fn granted(store: &TestStore, api: &PaymentApi) -> common::TestConfig {
    let mut config = store.config();
    config.grants = Grants {
        http: vec![api.addr.to_string()],
        ..Grants::default()
    };
    config
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_run_runs_no_step_while_payloads_queue_and_resumes_with_them_in_order() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let (keel, testbed) = common::open(granted(&store, &api)).await;
    let input = inbox_input(&api, "/held", "inbox:1");
    let run = keel.start(&testbed, "inbox", &input).await.unwrap();
    let id = run.run_id.as_str();
    assert_eq!(keel.drive(id).await.unwrap().status, RunStatus::Waiting);

    // Paused while step 1's call is in flight: the attempt ends (its
    // result journaled), and the run stops before anything else.
    keel.resume_hook("inbox:1", "1").await.unwrap();
    keel.drive_in_background(id);
    api.wait_for(|r| r.path == "/held").await;
    let asked = keel.pause_run(id, "test").await.unwrap();
    assert_eq!(asked.status, RunStatus::Running, "the attempt still runs");
    assert_eq!(keel.pause_of(id).await.unwrap().unwrap().by, "test");
    api.release_held(1);
    let paused = keel
        .wait_for(id, Until::Settled, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(paused.status, RunStatus::Paused, "{paused:?}");
    let journal = keel.journal(id).await.unwrap();
    let completed = journal
        .iter()
        .position(|e| matches!(e.fact, Fact::StepCompleted { .. }));
    let held = journal
        .iter()
        .position(|e| matches!(e.fact, Fact::RunPaused { .. }));
    assert!(
        completed.is_some() && completed < held,
        "the attempt's result is journaled before the pause: {journal:?}"
    );

    // Payloads queue; however often it is driven, no code runs.
    keel.resume_hook("inbox:1", "2").await.unwrap();
    keel.resume_hook("inbox:1", "3").await.unwrap();
    api.release_held(2);
    for _ in 0..2 {
        assert_eq!(keel.drive(id).await.unwrap().status, RunStatus::Paused);
    }
    assert_eq!(
        keel.work_once().await.unwrap(),
        0,
        "a paused run is not due"
    );
    assert_eq!(calls(&api, "/held"), ["1"]);
    let again = keel.pause_run(id, "someone else").await.unwrap();
    assert_eq!(again.status, RunStatus::Paused);
    assert_eq!(
        keel.pause_of(id).await.unwrap().unwrap().by,
        "test",
        "the first pause holds"
    );

    // Resumed: it goes on where it stood, the payloads in order.
    keel.resume_run(id, "test").await.unwrap();
    assert!(keel.pause_of(id).await.unwrap().is_none());
    let waiting = keel.drive(id).await.unwrap();
    assert_eq!(waiting.status, RunStatus::Waiting, "{waiting:?}");
    assert_eq!(calls(&api, "/held"), ["1", "2", "3"]);
    keel.resume_hook("inbox:1", "0").await.unwrap();
    let done = keel.drive(id).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_eq!(json(done.output.as_deref().unwrap()), json("[1,2,3]"));
    assert_eq!(pauses(&keel, id).await, ["paused from running", "resumed"]);
    // A replay sees the same run: the pause is not the workflow's.
    assert!(keel.replay(id, None).await.unwrap().is_ok());

    // Nothing to pause or resume once ended.
    let e = keel.pause_run(id, "test").await.unwrap_err();
    assert_eq!(e.kind().as_str(), "run_ended", "{e}");
    assert!(e.to_string().contains("nothing was paused"), "{e}");
    assert!(keel.resume_run(id, "test").await.is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_delayed_start_keeps_its_time_and_a_resumed_one_starts_on_it() {
    use keel_host::StartOptions;
    const T0: u64 = 1_800_000_000_000;
    const HOUR: u64 = 3_600_000;
    let store = TestStore::new();
    let clock = ManualClock::at(T0);
    let mut config = store.config();
    config.clock = clock.clone();
    let (keel, testbed) = common::open(config).await;
    let options = StartOptions {
        start_at_ms: Some(T0 + HOUR),
        ..StartOptions::default()
    };
    let mut ids = Vec::new();
    for _ in 0..2 {
        let run = keel
            .start_with(&testbed, "ten_steps", "3", &options)
            .await
            .unwrap();
        keel.pause_run(run.run_id.as_str(), "test").await.unwrap();
        ids.push(run.run_id.to_string());
    }
    let status = |id: &str| {
        let keel = keel.clone();
        let id = id.to_string();
        async move { keel.get_run(&id).await.unwrap() }
    };
    keel.work_once().await.unwrap();
    for id in &ids {
        assert_eq!(status(id).await.status, RunStatus::Paused);
    }

    // Resumed before its time, the first waits for it again.
    clock.advance(HOUR / 2);
    keel.resume_run(&ids[0], "test").await.unwrap();
    keel.work_once().await.unwrap();
    let resumed = status(&ids[0]).await;
    assert_eq!(
        (resumed.status, resumed.wake_at_ms),
        (RunStatus::Scheduled, Some(T0 + HOUR)),
        "{resumed:?}"
    );
    assert_eq!(
        keel.journal(&ids[0])
            .await
            .unwrap()
            .iter()
            .filter(|e| e.fact.command().is_some())
            .count(),
        0
    );

    // At its time it runs; the second, its time passed while paused, stays.
    clock.advance(HOUR);
    assert_eq!(keel.work_once().await.unwrap(), 1);
    assert_eq!(status(&ids[0]).await.status, RunStatus::Completed);
    assert_eq!(status(&ids[1]).await.status, RunStatus::Paused);
    assert_eq!(
        keel.work_once().await.unwrap(),
        0,
        "a paused run is not due"
    );

    // Resumed after its time, it starts at once.
    keel.resume_run(&ids[1], "test").await.unwrap();
    keel.work_once().await.unwrap();
    let done = status(&ids[1]).await;
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    for id in &ids {
        assert_eq!(
            pauses(&keel, id).await,
            ["paused from scheduled", "resumed"]
        );
    }
}

/// Two workers share the store: one pauses a run the other drives, the
/// other honours it (on PostgreSQL, two engines told by `NOTIFY`).
#[tokio::test(flavor = "multi_thread")]
async fn a_pause_made_on_one_worker_holds_on_another() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let config = granted(&store, &api);
    let (shared, _backend) = common::open_store(&config).await;
    let mut first = config.engine.clone();
    first.worker_id = "worker-a".into();
    let mut second = config.engine.clone();
    second.worker_id = "worker-b".into();
    let a = Keel::open(first, shared.clone()).unwrap();
    let b = Keel::open(second, shared).unwrap();
    let testbed = a.load(keel_tests::TESTBED).await.unwrap();
    b.load(keel_tests::TESTBED).await.unwrap();
    let input = inbox_input(&api, "/probe", "inbox:2");
    let run = a.start(&testbed, "inbox", &input).await.unwrap();
    let id = run.run_id.clone();
    let worker = {
        let b = b.clone();
        tokio::spawn(async move { b.work(false).await })
    };
    let settled = |keel: &Keel| {
        let (keel, id) = (keel.clone(), id.clone());
        async move {
            keel.wait_for(id.as_str(), Until::Settled, Duration::from_secs(30))
                .await
                .unwrap()
        }
    };
    assert_eq!(settled(&a).await.status, RunStatus::Waiting, "b drove it");
    a.resume_hook("inbox:2", "1").await.unwrap();
    api.wait_for(|r| r.path == "/probe").await;

    a.pause_run(id.as_str(), "worker a's operator")
        .await
        .unwrap();
    let paused = a
        .wait_for(id.as_str(), Until::Paused, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(paused.status, RunStatus::Paused, "{paused:?}");
    for n in ["2", "3"] {
        a.resume_hook("inbox:2", n).await.unwrap();
    }
    // The worker is woken by each payload and drives nothing.
    assert_eq!(
        a.get_run(id.as_str()).await.unwrap().status,
        RunStatus::Paused
    );
    assert_eq!(calls(&api, "/probe"), ["1"]);

    b.resume_run(id.as_str(), "worker b's operator")
        .await
        .unwrap();
    api.wait_for(|r| r.path == "/probe" && r.body == "3").await;
    a.resume_hook("inbox:2", "0").await.unwrap();
    let done = a
        .wait_for(id.as_str(), Until::Ended, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_eq!(json(done.output.as_deref().unwrap()), json("[1,2,3]"));
    assert_eq!(calls(&api, "/probe"), ["1", "2", "3"]);
    b.shutdown();
    worker.await.unwrap().unwrap();
}

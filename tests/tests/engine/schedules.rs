//! Schedules end to end on the engine's clock: fires become runs with
//! derived IDs, overlap and catch-up hold, pause, trigger and backfill,
//! and two engines sharing a store fire each time once.

use std::sync::Arc;

use crate::common::{ManualClock, TestStore, open_backend, open_store};
use keel_host::Keel;
use keel_host::core::RunStatus;
use keel_host::core::schedule::{
    FireOutcome, Overlap, ScheduleRecord, ScheduleSpec, Spec, fire_run_id,
};

/// 2026-12-01T00:00:00Z.
const T0: u64 = 1_796_083_200_000;
const MINUTE: u64 = 60_000;

fn every_minute(name: &str, workflow: &str, input: &str, overlap: Overlap) -> ScheduleSpec {
    ScheduleSpec {
        name: name.into(),
        workflow: workflow.into(),
        deployment: None,
        input: input.into(),
        additional_metadata: None,
        spec: Spec::every(MINUTE, 0).unwrap(),
        overlap,
        catchup_window_ms: MINUTE,
        paused: false,
        note: None,
        start_at_ms: None,
        end_at_ms: None,
        declared_by: None,
    }
}

/// An engine on the manual clock at `T0` with the testbed deployed.
async fn engine(store: &TestStore) -> (Keel, Arc<ManualClock>) {
    let clock = ManualClock::at(T0);
    let mut config = store.config();
    config.clock = clock.clone();
    let (keel, _, _) = open_backend(config, keel_tests::TESTBED).await;
    keel.deploy_file(std::path::Path::new(keel_tests::TESTBED), None)
        .await
        .unwrap();
    (keel, clock)
}

fn outcomes(s: &ScheduleRecord) -> Vec<(u64, FireOutcome)> {
    s.recent
        .iter()
        .map(|f| ((f.nominal_ms - T0) / MINUTE, f.outcome))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fire_is_a_run_with_the_derived_id_and_fires_once() {
    let store = TestStore::new();
    let (keel, clock) = engine(&store).await;
    let created = keel
        .create_schedule(every_minute("tick", "ten_steps", "2", Overlap::Skip))
        .await
        .unwrap();
    assert_eq!(created.next_fire_ms, Some(T0 + MINUTE));
    // Not yet due: nothing fires.
    assert_eq!(keel.fire_schedules().await.unwrap(), Some(T0 + MINUTE));
    assert!(keel.list_runs().await.unwrap().is_empty());

    clock.advance(MINUTE);
    assert_eq!(keel.fire_schedules().await.unwrap(), Some(T0 + 2 * MINUTE));
    let run_id = fire_run_id("tick", T0 + MINUTE);
    assert_eq!(run_id.as_str(), "tick:20261201T000100Z");
    let run = keel.drive(run_id.as_str()).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.input, "2", "the schedule's input");
    // Firing again at the same moment decides nothing new.
    keel.fire_schedules().await.unwrap();
    assert_eq!(keel.list_runs().await.unwrap().len(), 1);
    let s = keel.schedule("tick").await.unwrap();
    assert_eq!(outcomes(&s), [(1, FireOutcome::Started)]);
    assert_eq!(s.last_run_id, Some(run_id));
    assert!(s.claim.is_none(), "the claim is dropped after the fire");
}

#[tokio::test(flavor = "multi_thread")]
async fn skip_holds_a_fire_back_while_the_previous_run_is_live() {
    let store = TestStore::new();
    let (keel, clock) = engine(&store).await;
    keel.create_schedule(every_minute("slow", "ten_steps", "1", Overlap::Skip))
        .await
        .unwrap();
    clock.advance(MINUTE);
    keel.fire_schedules().await.unwrap();
    // The first fire's run is admitted and not driven: it is live.
    clock.advance(MINUTE);
    keel.fire_schedules().await.unwrap();
    let s = keel.schedule("slow").await.unwrap();
    assert_eq!(
        outcomes(&s),
        [(1, FireOutcome::Started), (2, FireOutcome::Skipped)]
    );
    assert_eq!(keel.list_runs().await.unwrap().len(), 1);
    // Once it has ended, the next fire starts.
    keel.drive(fire_run_id("slow", T0 + MINUTE).as_str())
        .await
        .unwrap();
    clock.advance(MINUTE);
    keel.fire_schedules().await.unwrap();
    let s = keel.schedule("slow").await.unwrap();
    assert_eq!(outcomes(&s).last(), Some(&(3, FireOutcome::Started)));
}

#[tokio::test(flavor = "multi_thread")]
async fn buffer_one_starts_one_waiting_fire_when_the_live_run_ends() {
    let store = TestStore::new();
    let (keel, clock) = engine(&store).await;
    let mut spec = every_minute("buf", "ten_steps", "1", Overlap::BufferOne);
    spec.catchup_window_ms = 10 * MINUTE;
    keel.create_schedule(spec).await.unwrap();
    clock.advance(MINUTE);
    keel.fire_schedules().await.unwrap();
    clock.advance(2 * MINUTE);
    keel.fire_schedules().await.unwrap();
    let s = keel.schedule("buf").await.unwrap();
    assert_eq!(
        outcomes(&s),
        [
            (1, FireOutcome::Started),
            (2, FireOutcome::Buffered),
            (3, FireOutcome::Skipped)
        ]
    );
    keel.drive(fire_run_id("buf", T0 + MINUTE).as_str())
        .await
        .unwrap();
    keel.fire_schedules().await.unwrap();
    let s = keel.schedule("buf").await.unwrap();
    assert_eq!(outcomes(&s).last(), Some(&(2, FireOutcome::Started)));
    assert!(
        keel.get_run(fire_run_id("buf", T0 + 2 * MINUTE).as_str())
            .await
            .is_ok()
    );
    assert_eq!(keel.list_runs().await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_outage_of_three_periods_fires_two_late_and_records_one_missed() {
    let store = TestStore::new();
    let (keel, clock) = engine(&store).await;
    let mut spec = every_minute("catchup", "ten_steps", "1", Overlap::AllowAll);
    spec.catchup_window_ms = 2 * MINUTE;
    keel.create_schedule(spec).await.unwrap();
    // Down from before the first fire until just after the third.
    clock.advance(3 * MINUTE + 30_000);
    keel.fire_schedules().await.unwrap();
    let s = keel.schedule("catchup").await.unwrap();
    assert_eq!(
        outcomes(&s),
        [
            (1, FireOutcome::Missed),
            (2, FireOutcome::Started),
            (3, FireOutcome::Started)
        ]
    );
    assert_eq!(s.missed, 1);
    let mut runs: Vec<String> = keel
        .list_runs()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id.into_string())
        .collect();
    runs.sort();
    assert_eq!(
        runs,
        ["catchup:20261201T000200Z", "catchup:20261201T000300Z"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_schedule_fires_nothing_and_resumes_from_now() {
    let store = TestStore::new();
    let (keel, clock) = engine(&store).await;
    keel.create_schedule(every_minute("p", "ten_steps", "1", Overlap::AllowAll))
        .await
        .unwrap();
    let paused = keel
        .pause_schedule("p", Some("maintenance".into()))
        .await
        .unwrap();
    assert!(paused.settings.paused);
    assert_eq!(paused.settings.note.as_deref(), Some("maintenance"));
    clock.advance(5 * MINUTE);
    keel.fire_schedules().await.unwrap();
    assert!(keel.list_runs().await.unwrap().is_empty());
    let resumed = keel.resume_schedule("p", None).await.unwrap();
    assert_eq!(resumed.next_fire_ms, Some(T0 + 6 * MINUTE));
    keel.fire_schedules().await.unwrap();
    assert!(keel.list_runs().await.unwrap().is_empty(), "not caught up");
    clock.advance(MINUTE);
    keel.fire_schedules().await.unwrap();
    assert_eq!(keel.list_runs().await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn trigger_fires_now_under_the_overlap_policy() {
    let store = TestStore::new();
    let (keel, clock) = engine(&store).await;
    keel.create_schedule(every_minute("t", "ten_steps", "1", Overlap::Skip))
        .await
        .unwrap();
    clock.advance(10_000);
    let fire = keel.trigger_schedule("t").await.unwrap();
    assert_eq!(fire.outcome, FireOutcome::Started);
    assert_eq!(fire.run_id, Some(fire_run_id("t", T0 + 10_000)));
    clock.advance(1_000);
    let again = keel.trigger_schedule("t").await.unwrap();
    assert_eq!(again.outcome, FireOutcome::Skipped, "the first is live");
    // The schedule's own next fire is unchanged.
    assert_eq!(
        keel.schedule("t").await.unwrap().next_fire_ms,
        Some(T0 + MINUTE)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn backfill_starts_one_run_per_nominal_time_and_a_second_starts_none() {
    let store = TestStore::new();
    let (keel, _clock) = engine(&store).await;
    keel.create_schedule(every_minute("bf", "ten_steps", "1", Overlap::Skip))
        .await
        .unwrap();
    let from = T0 - 60 * MINUTE;
    let to = T0 - 55 * MINUTE;
    let fires = keel.backfill_schedule("bf", from, to).await.unwrap();
    assert_eq!(fires.len(), 6, "each minute of [from, to]");
    assert!(fires.iter().all(|f| f.outcome == FireOutcome::Started));
    let again = keel.backfill_schedule("bf", from, to).await.unwrap();
    assert!(
        again.iter().all(|f| f.outcome == FireOutcome::AlreadyFired),
        "{again:?}"
    );
    assert_eq!(keel.list_runs().await.unwrap().len(), 6);
    let too_many = keel.backfill_schedule("bf", 0, T0).await.unwrap_err();
    assert_eq!(too_many.kind().as_str(), "invalid_schedule");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_engines_on_one_store_fire_each_time_once() {
    let store = TestStore::new();
    let clock = ManualClock::at(T0);
    let mut config = store.config();
    config.clock = clock.clone();
    let (shared, _) = open_store(&config).await;
    // Two workers: each its own engine and worker ID, over one store.
    let a = Keel::open(config.engine.clone(), shared.clone()).unwrap();
    let mut other = store.config();
    other.clock = clock.clone();
    let b = Keel::open(other.engine, shared).unwrap();
    a.deploy_file(std::path::Path::new(keel_tests::TESTBED), None)
        .await
        .unwrap();
    a.create_schedule(every_minute("shared", "ten_steps", "1", Overlap::AllowAll))
        .await
        .unwrap();
    for _ in 0..5 {
        clock.advance(MINUTE);
        let (x, y) = tokio::join!(a.fire_schedules(), b.fire_schedules());
        x.unwrap();
        y.unwrap();
    }
    let runs = a.list_runs().await.unwrap();
    let s = a.schedule("shared").await.unwrap();
    assert_eq!(
        runs.len(),
        5,
        "one run per minute, none twice: {:?}",
        s.recent
    );
    let started: Vec<u64> = s
        .recent
        .iter()
        .filter(|f| f.outcome == FireOutcome::Started)
        .map(|f| (f.nominal_ms - T0) / MINUTE)
        .collect();
    assert_eq!(started, [1, 2, 3, 4, 5]);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_schedules_are_refused_naming_the_problem() {
    let store = TestStore::new();
    let (keel, _) = engine(&store).await;
    let mut spec = every_minute("x", "ten_steps", "1", Overlap::Skip);
    spec.spec = Spec::Cron {
        expr: "0 25 * * *".into(),
        tz: "UTC".into(),
    };
    let e = keel.create_schedule(spec).await.unwrap_err();
    assert_eq!(e.kind().as_str(), "invalid_schedule", "{e}");
    let spec = every_minute("y", "no_such_workflow", "1", Overlap::Skip);
    let e = keel.create_schedule(spec).await.unwrap_err();
    assert_eq!(e.kind().as_str(), "unknown_workflow", "{e}");
    let spec = every_minute("bad name!", "ten_steps", "1", Overlap::Skip);
    let e = keel.create_schedule(spec).await.unwrap_err();
    assert_eq!(e.kind().as_str(), "invalid_name", "{e}");
    keel.create_schedule(every_minute("z", "ten_steps", "1", Overlap::Skip))
        .await
        .unwrap();
    let e = keel
        .create_schedule(every_minute("z", "ten_steps", "1", Overlap::Skip))
        .await
        .unwrap_err();
    assert_eq!(e.kind().as_str(), "schedule_exists", "{e}");
    let e = keel.schedule("nope").await.unwrap_err();
    assert_eq!(e.kind().as_str(), "schedule_not_found", "{e}");
    let runtime = keel.schedules().await.unwrap();
    assert!(
        runtime
            .iter()
            .all(|s| s.settings.name != "y" && s.settings.name != "bad name!")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delayed_start_waits_for_its_time_holds_its_token_and_can_be_cancelled() {
    use keel_host::{StartHook, StartOptions};
    const HOUR: u64 = 60 * MINUTE;
    let store = TestStore::new();
    let (keel, clock) = engine(&store).await;
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    let options = StartOptions {
        start_at_ms: Some(T0 + HOUR),
        ..StartOptions::from(StartHook::new("report:1"))
    };
    let run = keel
        .start_with(&testbed, "ten_steps", "3", &options)
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Scheduled);
    assert_eq!(run.wake_at_ms, Some(T0 + HOUR));
    // Not activated before its time, whoever drives it.
    let driven = keel.drive(run.run_id.as_str()).await.unwrap();
    assert_eq!(driven.status, RunStatus::Scheduled);
    assert_eq!(keel.work_once().await.unwrap(), 0);
    assert_eq!(keel.journal(run.run_id.as_str()).await.unwrap().len(), 1);
    assert_eq!(keel.next_wake().await.unwrap(), Some(T0 + HOUR));
    // Its token is held from admission.
    let e = keel
        .start_with(
            &testbed,
            "ten_steps",
            "3",
            &StartOptions::from(StartHook::new("report:1")),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind().as_str(), "hook_conflict", "{e}");
    // At its time, a worker runs it.
    clock.advance(HOUR);
    assert_eq!(keel.work_once().await.unwrap(), 1);
    let ended = keel.get_run(run.run_id.as_str()).await.unwrap();
    assert_eq!(ended.status, RunStatus::Completed, "{ended:?}");

    // Cancelled before its time, it never runs.
    let options = StartOptions {
        start_at_ms: Some(T0 + 3 * HOUR),
        ..StartOptions::default()
    };
    let later = keel
        .start_with(&testbed, "ten_steps", "3", &options)
        .await
        .unwrap();
    let cancelled = keel
        .cancel(later.run_id.as_str(), "", "test")
        .await
        .unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    clock.advance(3 * HOUR);
    assert_eq!(keel.work_once().await.unwrap(), 0);
    let journal = keel.journal(later.run_id.as_str()).await.unwrap();
    assert!(
        !journal
            .iter()
            .any(|e| matches!(e.fact, keel_host::core::journal::Fact::StepScheduled { .. })),
        "no step of a cancelled delayed start ran: {journal:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_declared_schedule_is_created_on_deploy_kept_on_redeploy_and_dropped_with_its_code() {
    use keel_host::DeploySpec;
    let store = TestStore::new();
    let (keel, clock) = engine(&store).await;
    let runtime = keel
        .create_schedule(every_minute("runtime", "ten_steps", "1", Overlap::Skip))
        .await
        .unwrap();
    assert_eq!(runtime.settings.declared_by, None);
    // Deploying the testbed created the schedule its `hourly` declares.
    let declared = keel.schedule("testbed.hourly").await.unwrap();
    assert_eq!(declared.settings.declared_by.as_deref(), Some("testbed"));
    assert_eq!(declared.settings.deployment.as_deref(), Some("testbed"));
    assert_eq!(declared.settings.spec, Spec::every(3_600_000, 0).unwrap());
    assert_eq!(declared.settings.overlap, Overlap::AllowAll);
    assert_eq!(declared.settings.input, "4");
    clock.advance(60 * MINUTE);
    keel.fire_schedules().await.unwrap();
    let run_id = fire_run_id("testbed.hourly", T0 + 60 * MINUTE);
    let run = keel.drive(run_id.as_str()).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert_eq!(run.workflow, "hourly");
    // The workflow learns which schedule fired it, and the nominal time.
    let output: serde_json::Value = serde_json::from_str(run.output.as_deref().unwrap()).unwrap();
    assert_eq!(
        output,
        serde_json::json!([6, "testbed.hourly", T0 + 60 * MINUTE]),
        "sum of 0..4, the schedule, the nominal time"
    );
    // Listed by its schedule.
    let filter = keel_host::core::RunFilter {
        schedule: Some("testbed.hourly".into()),
        ..Default::default()
    };
    let listed = keel.runs_page(&filter, None, 10).await.unwrap().runs;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].run_id, run_id);

    // Redeployed: kept, fires and pause included.
    keel.pause_schedule("testbed.hourly", Some("quiet".into()))
        .await
        .unwrap();
    let testbed = std::path::Path::new(keel_tests::TESTBED);
    let named = |name: &str| DeploySpec {
        name: Some(name.into()),
        ..DeploySpec::default()
    };
    keel.deploy_file(testbed, Some(named("testbed")))
        .await
        .unwrap();
    let kept = keel.schedule("testbed.hourly").await.unwrap();
    assert!(kept.settings.paused, "a redeploy keeps a pause");
    assert_eq!(kept.recent.len(), 1, "and the fires");

    // Deployed under another name too: a schedule of its own.
    keel.deploy_file(testbed, Some(named("staging")))
        .await
        .unwrap();
    assert!(keel.schedule("staging.hourly").await.is_ok());

    // A component that no longer declares it, under the same name: gone.
    keel.deploy_file(
        std::path::Path::new(keel_tests::ORDER_HOOKS),
        Some(named("testbed")),
    )
    .await
    .unwrap();
    let e = keel.schedule("testbed.hourly").await.unwrap_err();
    assert_eq!(e.kind().as_str(), "schedule_not_found");
    let names: Vec<String> = keel
        .schedules()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.settings.name)
        .collect();
    assert_eq!(names, ["runtime", "staging.hourly"], "the others stay");
}

#[tokio::test(flavor = "multi_thread")]
async fn sleep_until_waits_for_an_absolute_time_on_the_workflow_clock() {
    let store = TestStore::new();
    let (keel, clock) = engine(&store).await;
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    let at = T0 + 2 * 60 * MINUTE;
    let run = keel
        .start(&testbed, "sleep_until_ms", &at.to_string())
        .await
        .unwrap();
    let waiting = keel.drive(run.run_id.as_str()).await.unwrap();
    assert_eq!(waiting.status, RunStatus::Waiting);
    assert_eq!(waiting.wake_at_ms, Some(at), "a durable timer to that time");
    clock.advance(2 * 60 * MINUTE);
    let done = keel.drive(run.run_id.as_str()).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_eq!(done.output.as_deref(), Some(at.to_string().as_str()));
    // A time already past completes at once.
    let past = keel
        .run(&testbed, "sleep_until_ms", &T0.to_string())
        .await
        .unwrap();
    assert_eq!(past.status, RunStatus::Completed, "{past:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_keeps_the_fires_and_the_pause_and_refuses_a_declared_schedule() {
    let store = TestStore::new();
    let (keel, clock) = engine(&store).await;
    keel.create_schedule(every_minute("u", "ten_steps", "1", Overlap::AllowAll))
        .await
        .unwrap();
    clock.advance(MINUTE);
    keel.fire_schedules().await.unwrap();
    keel.pause_schedule("u", Some("tuning".into()))
        .await
        .unwrap();
    let mut settings = every_minute("u", "ten_steps", "7", Overlap::Skip);
    settings.spec = Spec::every(10 * MINUTE, 0).unwrap();
    let updated = keel.update_schedule(settings).await.unwrap();
    assert_eq!(updated.settings.input, "7");
    assert_eq!(updated.settings.overlap, Overlap::Skip);
    assert!(updated.settings.paused, "an update does not resume");
    assert_eq!(updated.settings.note.as_deref(), Some("tuning"));
    assert_eq!(updated.recent.len(), 1, "its fires are kept");
    assert_eq!(
        updated.next_fire_ms,
        Some(T0 + 10 * MINUTE),
        "the new spec fires next at its first time after now"
    );
    let e = keel
        .update_schedule(every_minute("nope", "ten_steps", "1", Overlap::Skip))
        .await
        .unwrap_err();
    assert_eq!(e.kind().as_str(), "schedule_not_found");
    let declared = keel.schedule("testbed.hourly").await.unwrap();
    let e = keel
        .update_schedule(declared.settings.clone())
        .await
        .unwrap_err();
    assert_eq!(e.kind().as_str(), "invalid_schedule");
    assert!(e.to_string().contains("redeploy"), "{e}");
}

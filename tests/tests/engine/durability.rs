//! Step IDs, retries, replay and recovery, end to end.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{
    TestStore, attempts, json, open, open_backend, order_keel, step_ids, step_names,
};
use keel_host::core::RunStatus;
use keel_host::core::divergence::Verdict;
use keel_host::core::journal::Fact;
use keel_host::core::manifest::Durability;
use keel_host::{Grants, Keel};
use keel_payment_api::PaymentApi;

#[tokio::test(flavor = "multi_thread")]
async fn lost_confirmation_charges_once_with_one_idempotency_key() {
    let api = PaymentApi::start(true).await.unwrap();
    let store = TestStore::new();
    let mut config = store.config();
    config.grants = Grants {
        http: vec![api.addr.to_string()],
        ..Grants::default()
    };
    let keel = config.open_sled().unwrap();
    let order = keel.load(keel_tests::ORDER).await.unwrap();
    let input = serde_json::json!({
        "order_id": "o-1", "user_id": "u-1", "amount": 500, "payment_url": api.url("/charge"),
    });
    let run = keel
        .run(&order, "process_order", &input.to_string())
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);

    let journal = keel.journal(&run.run_id).await.unwrap();
    let ids = step_ids(&journal);
    assert_eq!(ids.len(), 2, "reserve_inventory, then charge_user");
    // reserve_inventory: attempt 1; charge_user: attempts 1 and 2.
    assert_eq!(attempts(&journal), vec![1, 1, 2]);
    let requests = api.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.idempotency_key.as_deref(), Some(ids[1].as_str()));
        // The SDK's client sends the length of a body it knows.
        assert_eq!(r.content_length, Some(r.body.len().to_string()));
    }
    let seen: Vec<_> = requests
        .iter()
        .map(|r| r.attempt.clone().unwrap())
        .collect();
    assert_eq!(seen, ["1", "2"]);
    let charges = api.charges();
    assert_eq!(
        charges.len(),
        1,
        "the API charged more than once: {charges:?}"
    );
    assert_eq!(
        json(run.output.as_deref().unwrap())["charge_id"],
        charges[0].1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_of_a_completed_run_gives_the_same_ids_and_results() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let run = keel.run(&testbed, "ten_steps", "5").await.unwrap();
    assert_eq!(run.output.as_deref(), Some("10"));
    let before = keel.journal(&run.run_id).await.unwrap();
    let ids = step_ids(&before);
    assert_eq!(ids.len(), 5);
    assert!(ids.iter().all(|id| id.starts_with(run.run_id.as_str())));

    let replay = keel.replay(&run.run_id, None).await.unwrap();
    assert_eq!(
        replay,
        Verdict::Ok {
            output: Some("10".into())
        }
    );
    // Driving a finished run again changes nothing.
    keel.drive(&run.run_id).await.unwrap();
    assert_eq!(keel.journal(&run.run_id).await.unwrap(), before);

    // Another run gets other step IDs.
    let other = keel.run(&testbed, "ten_steps", "5").await.unwrap();
    let other_ids = step_ids(&keel.journal(&other.run_id).await.unwrap());
    assert!(other_ids.iter().all(|id| !ids.contains(id)));
}

#[tokio::test(flavor = "multi_thread")]
async fn clock_and_randomness_come_from_the_journal_and_the_run_id() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let run = keel.run(&testbed, "clock_random", "null").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let out = json(run.output.as_deref().unwrap());
    let journal = keel.journal(&run.run_id).await.unwrap();

    // Before the step the clock reads the run's start; after it, the time
    // of the completion the workflow was handed.
    assert_eq!(out["before"][0], run.created_at_ms);
    assert_eq!(out["started_at_ms"], run.created_at_ms);
    let completed_at = journal
        .iter()
        .find(|e| matches!(e.fact, Fact::StepCompleted { .. }))
        .unwrap()
        .at_ms;
    assert_eq!(out["after"][0], completed_at);
    assert_ne!(
        out["before"][1], out["after"][1],
        "two draws of randomness are equal"
    );

    let replay = keel.replay(&run.run_id, None).await.unwrap();
    assert_eq!(
        replay,
        Verdict::Ok {
            output: run.output.clone()
        }
    );

    let other = keel.run(&testbed, "clock_random", "null").await.unwrap();
    assert_ne!(
        json(other.output.as_deref().unwrap())["before"][1],
        out["before"][1]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_steps_keep_their_ids_and_delivery_order_on_replay() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let run = keel
        .run(&testbed, "concurrent", "[400, 10, 150]")
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let out = json(run.output.as_deref().unwrap());
    let labels: Vec<_> = out
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["s1", "s2", "s0"], "completion order");

    // Step IDs follow the order the steps were scheduled, not finished.
    let journal = keel.journal(&run.run_id).await.unwrap();
    let ids = step_ids(&journal);
    for l in out.as_array().unwrap() {
        let i: usize = l["label"].as_str().unwrap()[1..].parse().unwrap();
        assert_eq!(l["step_id"], ids[i]);
    }
    let replay = keel.replay(&run.run_id, None).await.unwrap();
    assert_eq!(
        replay,
        Verdict::Ok {
            output: run.output.clone()
        }
    );

    let unordered = keel
        .run(&testbed, "unordered", "[400, 10, 150]")
        .await
        .unwrap();
    assert_eq!(unordered.output.as_deref(), Some(r#"["s1","s2","s0"]"#));
    let replay = keel.replay(&unordered.run_id, None).await.unwrap();
    assert_eq!(
        replay,
        Verdict::Ok {
            output: unordered.output.clone()
        }
    );

    let joined = keel.run(&testbed, "joined", "null").await.unwrap();
    assert_eq!(joined.status, RunStatus::Completed, "{:?}", joined.error);
    let replay = keel.replay(&joined.run_id, None).await.unwrap();
    assert_eq!(
        replay,
        Verdict::Ok {
            output: joined.output.clone()
        }
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn select_between_a_step_and_a_timer_replays_the_winner() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let timer_wins = keel.run(&testbed, "race", "[2000, 20]").await.unwrap();
    assert_eq!(timer_wins.output.as_deref(), Some("\"timer\""));
    let step_wins = keel.run(&testbed, "race", "[1, 2000]").await.unwrap();
    assert_eq!(step_wins.output.as_deref(), Some("\"step\""));
    for run in [timer_wins, step_wins] {
        let replay = keel.replay(&run.run_id, None).await.unwrap();
        assert_eq!(
            replay,
            Verdict::Ok {
                output: run.output.clone()
            }
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn code_that_calls_steps_in_another_order_is_non_deterministic() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let run = keel.run(&testbed, "two_steps", "5").await.unwrap();
    assert_eq!(run.output.as_deref(), Some("[6,10]"));
    let reordered = keel.load(keel_tests::TESTBED_REORDERED).await.unwrap();
    match keel.replay(&run.run_id, Some(&reordered)).await.unwrap() {
        Verdict::Diverged(d) => {
            assert_eq!(d.position, 0);
            assert_eq!(d.recorded.step_name.as_deref(), Some("add"));
            assert_eq!(d.requested.step_name.as_deref(), Some("mul"));
            assert_eq!(d.recorded.excerpt, "[5,1]");
            assert_eq!(d.requested.excerpt, "[5,2]");
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
    // The recorded build still replays cleanly.
    let own = keel.replay(&run.run_id, None).await.unwrap();
    assert!(own.is_ok(), "{own:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn fatal_errors_are_not_retried() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let run = keel.run(&testbed, "flaky", "\"fatal\"").await.unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert!(
        run.error
            .as_ref()
            .unwrap()
            .message
            .contains("card declined")
    );
    assert_eq!(attempts(&keel.journal(&run.run_id).await.unwrap()), vec![1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_after_is_honoured() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let run = keel
        .run(&testbed, "flaky", "\"retry_after\"")
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let journal = keel.journal(&run.run_id).await.unwrap();
    let failed_at = journal
        .iter()
        .find(|e| matches!(e.fact, Fact::StepAttemptFailed { .. }))
        .unwrap()
        .at_ms;
    let out = json(run.output.as_deref().unwrap());
    assert_eq!(out["attempt"], 2);
    let second_started = out["started_at_ms"].as_u64().unwrap();
    assert!(
        second_started >= failed_at + 400,
        "attempt 2 started {} ms after the failure; the step asked for 400",
        second_started - failed_at
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn exhausted_retries_fail_the_run_with_the_last_error() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let run = keel.run(&testbed, "flaky", "\"exhaust\"").await.unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    let message = &run.error.as_ref().unwrap().message;
    assert!(message.contains("attempt 3 failed"), "{message}");
    assert!(message.contains("retries exhausted"), "{message}");
    assert_eq!(
        attempts(&keel.journal(&run.run_id).await.unwrap()),
        vec![1, 2, 3]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_sleep_suspends_the_run_and_a_worker_resumes_it() {
    let store = TestStore::new();
    // On the engine's clock, so that "not due yet" does not depend on how
    // fast a loaded machine gets from the park to the worker's pass.
    let clock = common::ManualClock::at(1_800_000_000_000);
    let mut config = store.config();
    config.clock = clock.clone();
    config.park_limit = Duration::ZERO;
    let (keel, testbed) = open(config).await;
    let run = keel.run(&testbed, "sleeper", "300").await.unwrap();
    assert_eq!(run.status, RunStatus::Waiting);
    let wake_at = run.wake_at_ms.unwrap();
    assert_eq!(wake_at, 1_800_000_000_300);
    assert_eq!(keel.next_wake().await.unwrap(), Some(wake_at));
    assert_eq!(
        keel.work_once().await.unwrap(),
        0,
        "the timer is not due yet"
    );
    clock.advance(299);
    assert_eq!(keel.work_once().await.unwrap(), 0, "a millisecond before");

    clock.advance(1);
    assert_eq!(keel.work_once().await.unwrap(), 1);
    let done = keel.get_run(&run.run_id).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let fired = keel
        .journal(&run.run_id)
        .await
        .unwrap()
        .iter()
        .find(|e| matches!(e.fact, Fact::TimerFired { .. }))
        .unwrap()
        .at_ms;
    assert!(fired >= wake_at);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sleep_kept_in_memory_is_waiting_and_a_start_settles_at_once() {
    let store = TestStore::new();
    // The default park limit keeps a 30 s sleep's instance in memory.
    let (keel, testbed) = open(store.config()).await;
    let run = keel.start(&testbed, "sleeper", "30000").await.unwrap();
    let settled = keel
        .drive_and_wait(&run.run_id, keel_host::Until::Settled, Duration::MAX)
        .await
        .unwrap();
    assert_eq!(settled.status, RunStatus::Waiting, "{settled:?}");
    let wake_at = settled.wake_at_ms.expect("it says until when");
    assert!(wake_at >= keel_host_now() + 20_000, "wakes at {wake_at}");
    assert_eq!(keel.active_runs(), 1, "its instance is kept in memory");
    let read = keel.get_run(&run.run_id).await.unwrap();
    assert_eq!(read.status, RunStatus::Waiting);
    assert_eq!(read.wake_at_ms, Some(wake_at));
    // Its timer and its lease's expiry, not a read of the run, bring it back.
    let due = keel.next_wake().await.unwrap().expect("a due time");
    assert!(due <= wake_at, "due at {due}, its timer at {wake_at}");
    let ended = keel.terminate(&run.run_id).await.unwrap();
    assert_eq!(ended.status, RunStatus::Cancelled);
}

fn keel_host_now() -> u64 {
    use keel_host::core::Clock;
    keel_host::SystemClock.now_ms()
}

/// The child side of the crash test: drives `crashable` until killed.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "run by kill_9_in_the_middle_of_a_step_then_a_worker_completes_the_run"]
async fn crash_child() {
    let db = std::env::var("KEEL_CRASH_DB").unwrap();
    let url = std::env::var("KEEL_CRASH_URL").unwrap();
    let host = std::env::var("KEEL_CRASH_HOST").unwrap();
    let mut config = keel_host::Config::caching_in(keel_tests::compiled_cache());
    config.grants.http = vec![host];
    let sled = keel_host::store::sled::SledOptions::new(&db);
    let keel = Keel::open_sled(config, &sled).unwrap();
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    let input = serde_json::Value::String(url).to_string();
    keel.run(&testbed, "crashable", &input).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_in_the_middle_of_a_step_then_a_worker_completes_the_run() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "durability::crash_child",
            "--nocapture",
        ])
        .env("KEEL_CRASH_DB", store.path())
        .env("KEEL_CRASH_URL", api.url("/probe"))
        .env("KEEL_CRASH_HOST", api.addr.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Step `b` hangs on its first attempt once it has reported in.
    api.wait_for(|r| r.body.contains("\"label\":\"b\"")).await;
    child.kill().unwrap();
    child.wait().unwrap();

    let mut config = store.config();
    config.grants.http = vec![api.addr.to_string()];
    let keel = config.open_sled().unwrap();
    let runs = keel.list_runs().await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, RunStatus::Running, "interrupted mid-run");
    let before = step_ids(&keel.journal(&runs[0].run_id).await.unwrap());
    assert_eq!(keel.work_once().await.unwrap(), 1);

    let run = keel.get_run(&runs[0].run_id).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let journal = keel.journal(&run.run_id).await.unwrap();
    let after = step_ids(&journal);
    assert_eq!(&after[..before.len()], &before[..], "step IDs changed");
    // a: attempt 1; b: attempts 1 (killed) and 2; c: attempt 1.
    assert_eq!(attempts(&journal), vec![1, 1, 2, 1]);
    let bodies: Vec<serde_json::Value> = api.requests().iter().map(|r| json(&r.body)).collect();
    let labels: Vec<_> = bodies
        .iter()
        .map(|b| b["label"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(labels, ["a", "b", "b", "c"], "a completed step ran twice");
    assert_eq!(bodies[1]["step_id"], bodies[2]["step_id"]);
    assert_eq!(bodies[2]["attempt"], 2);
    let out = json(run.output.as_deref().unwrap());
    assert_eq!(out[1]["step_id"], after[1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn steps_get_only_the_granted_env_and_directories() {
    let granted = tempfile::tempdir().unwrap();
    let file = granted.path().join("note.txt");
    std::fs::write(&file, "granted").unwrap();
    let input = serde_json::json!(["KEEL_TEST_GRANT", file.to_str().unwrap()]).to_string();

    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let run = keel.run(&testbed, "grants", &input).await.unwrap();
    let out = json(run.output.as_deref().unwrap());
    assert_eq!(
        out,
        serde_json::json!({"env": null, "file": null}),
        "nothing is granted by default"
    );
    drop(keel);

    let mut config = store.config();
    config.grants = Grants {
        env: vec![("KEEL_TEST_GRANT".into(), "yes".into())],
        dirs: vec![granted.path().to_path_buf()],
        ..Grants::default()
    };
    let (keel, testbed) = open(config).await;
    let run = keel.run(&testbed, "grants", &input).await.unwrap();
    let out = json(run.output.as_deref().unwrap());
    assert_eq!(out, serde_json::json!({"env": "yes", "file": "granted"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_worker_resumes_due_timers_and_stops_when_only_far_ones_remain() {
    let store = TestStore::new();
    let mut config = store.config();
    config.park_limit = Duration::ZERO;
    let (keel, testbed) = open(config).await;
    let near = keel.run(&testbed, "sleeper", "300").await.unwrap();
    let far = keel.run(&testbed, "sleeper", "600000").await.unwrap();
    assert_eq!(near.status, RunStatus::Waiting);
    assert_eq!(far.status, RunStatus::Waiting);

    assert_eq!(keel.work(true).await.unwrap().driven, 1);
    assert_eq!(
        keel.get_run(&near.run_id).await.unwrap().status,
        RunStatus::Completed
    );
    assert_eq!(
        keel.get_run(&far.run_id).await.unwrap().status,
        RunStatus::Waiting
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_denied_http_says_which_host_it_lacks() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let input = serde_json::json!(api.url("/probe")).to_string();
    let run = keel.run(&testbed, "crashable", &input).await.unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap().message;
    assert!(
        error.contains(&format!("the host denied HTTP requests to {}", api.addr)),
        "{error}"
    );
    assert!(api.requests().is_empty(), "no request reached the API");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_run_is_retried_from_its_failed_step_once_the_service_is_back() {
    let api = PaymentApi::start(false).await.unwrap();
    api.set_refusing(true);
    let store = TestStore::new();
    let keel = order_keel(&store, &api).await;
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    // A charge with no compensation (a saga's is refused a retry: see
    // composed.rs): three attempts, then the run fails.
    let input = serde_json::json!(api.url("/charge")).to_string();
    let run = keel.run(&testbed, "charge_once", &input).await.unwrap();
    assert_eq!(run.status, RunStatus::Failed, "the charge failed for good");
    let before = keel.journal(&run.run_id).await.unwrap();
    let ids = step_ids(&before);
    assert_eq!(attempts(&before), vec![1, 2, 3], "the charge 3 times");

    let err = keel.retry("nope").await.unwrap_err();
    assert_eq!(err.kind().as_str(), "run_not_found");
    api.set_refusing(false);
    // Only a failed run is retried: a completed one is refused.
    let other = keel.run(&testbed, "charge_once", &input).await.unwrap();
    assert_eq!(other.status, RunStatus::Completed);
    let err = keel.retry(&other.run_id).await.unwrap_err();
    assert_eq!(err.kind().as_str(), "not_retryable");

    let retried = keel.retry(&run.run_id).await.unwrap();
    assert_eq!(retried.status, RunStatus::Pending);
    let done = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    let charge_id = json(done.output.as_deref().unwrap());

    let journal = keel.journal(&run.run_id).await.unwrap();
    assert!(
        journal
            .iter()
            .any(|e| matches!(e.fact, Fact::RunRetried { .. }))
    );
    // The charge went on with attempt 4 under the same step ID, and the
    // API charged once for it.
    assert_eq!(attempts(&journal), vec![1, 2, 3, 4]);
    assert_eq!(step_ids(&journal), ids, "no step was scheduled anew");
    let charges = api.charges();
    assert_eq!(charges.len(), 2, "each run once: {charges:?}");
    assert!(
        charges
            .iter()
            .any(|(key, id)| key == &ids[0] && charge_id == id.as_str())
    );
    let keys: Vec<_> = api
        .requests()
        .iter()
        .filter_map(|r| r.idempotency_key.clone())
        .filter(|k| k.starts_with(run.run_id.as_str()))
        .collect();
    assert_eq!(keys.len(), 4);
    assert!(keys.iter().all(|k| k == &ids[0]));

    // The retried journal replays clean, and a finished run is not retried again.
    let verdict = keel.replay(&run.run_id, None).await.unwrap();
    assert!(verdict.is_ok(), "{verdict:?}");
    let err = keel.retry(&run.run_id).await.unwrap_err();
    assert!(
        err.to_string().contains("only a failed run is retried"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_acknowledged_start_whose_drive_meets_a_failed_store_names_its_run() {
    let store = TestStore::new();
    let (keel, testbed, backend) = common::open_backend(store.config(), keel_tests::TESTBED).await;
    let run = keel.start(&testbed, "two_steps", "4").await.unwrap();
    backend.fail_reads(true);
    // Driving it now fails on the store: the answer names the run it
    // acknowledged, never a bare storage error a caller could retry.
    let driven = keel.drive_acknowledged(&run.run_id).await;
    match &driven {
        Err(e @ keel_host::Error::DriveInterrupted { run_id, .. }) => {
            assert_eq!(*run_id, run.run_id);
            assert!(e.is_storage());
            assert!(e.ids().contains(&("run_id", run.run_id.to_string())));
        }
        other => panic!("expected drive_interrupted, got {other:?}"),
    }
    // A cancel that cannot be confirmed says so, naming the run.
    match keel.cancel(&run.run_id, "", "test").await {
        Err(keel_host::Error::OutcomeUnknown {
            run_id, operation, ..
        }) => assert_eq!((run_id, operation), (run.run_id.clone(), "cancel")),
        other => panic!("cancel: expected outcome_unknown, got {other:?}"),
    }
    backend.fail_reads(false);
    // Nothing acknowledged was lost: the run goes on to its end.
    let ended = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(ended.status, RunStatus::Completed, "{:?}", ended.error);
    assert_eq!(ended.output.as_deref(), Some("[5,8]"));

    // A retry whose write lands unheard is unknown; asking again is safe.
    let failed = keel.run(&testbed, "trap", "null").await.unwrap();
    assert_eq!(failed.status, RunStatus::Failed);
    backend.unconfirm_next_write();
    match keel.retry(&failed.run_id).await {
        Err(keel_host::Error::OutcomeUnknown {
            run_id, operation, ..
        }) => assert_eq!((run_id, operation), (failed.run_id.clone(), "retry")),
        other => panic!("retry: expected outcome_unknown, got {other:?}"),
    }
    let again = keel.retry(&failed.run_id).await;
    assert!(
        matches!(again, Err(keel_host::Error::NotRetryable { .. })),
        "the retry had landed: {again:?}"
    );
}

/// Relaxed durability (`#[workflow(durability = "relaxed")]`), and the
/// default, effect-gated, for steps that make no effect: a run of
/// sequential steps makes its steps durable with its end, in one journal
/// write instead of one per step (strict: one per step). A crash that loses that write loses the
/// steps' results: recovery runs each step again, under the same step ID,
/// counted as a first attempt, and the run ends as it would have.
#[tokio::test(flavor = "multi_thread")]
async fn relaxed_durability_journals_steps_with_the_end_and_recovery_runs_lost_ones_again() {
    let store = TestStore::new();
    let mut config = store.config();
    config.default_durability = Durability::EffectGated;
    let (keel, testbed, backend) = open_backend(config.clone(), keel_tests::TESTBED).await;

    let writes = |before: u64| backend.journal_writes() - before;
    let before = backend.journal_writes();
    let strict = keel.run(&testbed, "ten_steps_strict", "5").await.unwrap();
    let strict_writes = writes(before);
    let before = backend.journal_writes();
    let gated = keel.run(&testbed, "ten_steps", "5").await.unwrap();
    let gated_writes = writes(before);
    let before = backend.journal_writes();
    let relaxed = keel.run(&testbed, "ten_steps_relaxed", "5").await.unwrap();
    let relaxed_writes = writes(before);
    assert_eq!(relaxed.status, RunStatus::Completed, "{:?}", relaxed.error);
    assert_eq!(relaxed.output, strict.output);
    assert!(
        strict_writes >= 6,
        "strict: a write before each of 5 steps, then the end ({strict_writes})"
    );
    assert_eq!(relaxed_writes, 1, "relaxed: the end's write alone");
    assert_eq!(gated.output, strict.output);
    assert_eq!(
        gated_writes, 1,
        "effect-gated, steps with no effect: the end's write alone"
    );
    let journal = keel.journal(&relaxed.run_id).await.unwrap();
    assert_eq!(step_ids(&journal).len(), 5);
    assert_eq!(attempts(&journal), vec![1; 5]);

    // The run's one write is lost as the process dies.
    let run = keel
        .start(&testbed, "ten_steps_relaxed", "4")
        .await
        .unwrap();
    backend.crash_at(keel_host::store::faulty::Crash {
        at_write: backend.journal_writes() + 1,
        when: keel_host::store::faulty::CrashWhen::Before,
    });
    let _ = keel.drive(&run.run_id).await;
    assert!(backend.has_crashed());
    let lost = keel.journal(&run.run_id).await.unwrap();
    assert!(
        !lost
            .iter()
            .any(|e| matches!(e.fact, Fact::StepCompleted { .. })),
        "no step result was durable: {lost:?}"
    );
    drop((keel, testbed, backend));

    // A worker started after the dead one's lease expired recovers it.
    let mut config = config.clone();
    config.clock =
        common::ManualClock::at(keel_host_now() + config.lease_ttl.as_millis() as u64 + 60_000);
    config.worker_id = "second-worker".into();
    let (keel, _testbed, _backend) = open_backend(config, keel_tests::TESTBED).await;
    let recovered = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(
        recovered.status,
        RunStatus::Completed,
        "{:?}",
        recovered.error
    );
    assert_eq!(recovered.output.as_deref(), Some("6"));
    let journal = keel.journal(&run.run_id).await.unwrap();
    assert_eq!(
        attempts(&journal),
        vec![1; 4],
        "each step ran again as attempt 1"
    );
    let ids = step_ids(&journal);
    let expected: Vec<String> = (0..4)
        .map(|n| run.run_id.step_id("noop", n).into_string())
        .collect();
    assert_eq!(
        ids, expected,
        "the step IDs derive from the run and the steps alone"
    );
}

/// Effect-gated durability (the default): a step attempt's start, and the
/// result of every step before it, are durable before the attempt's first
/// HTTP request leaves, though neither step made a write of its own.
#[tokio::test(flavor = "multi_thread")]
async fn effect_gated_steps_are_durable_before_their_http_request_leaves() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let mut config = store.config();
    config.default_durability = Durability::EffectGated;
    config.grants = Grants {
        http: vec![api.addr.to_string()],
        ..Grants::default()
    };
    let (keel, testbed) = open(config).await;
    let url = serde_json::Value::String(api.url("/probe")).to_string();
    let run = keel.start(&testbed, "crashable", &url).await.unwrap();
    keel.drive_in_background(run.run_id.as_str());
    // Step b's first attempt has sent its request (and now hangs).
    api.wait_for(|r| r.body.contains("\"label\":\"b\"")).await;
    let journal = keel.journal(&run.run_id).await.unwrap();
    assert_eq!(
        step_names(&journal),
        ["probe", "probe"],
        "a and b scheduled: {journal:?}"
    );
    let completed: Vec<_> = journal
        .iter()
        .filter_map(|e| match e.fact {
            Fact::StepCompleted { command, .. } => Some(command),
            _ => None,
        })
        .collect();
    assert_eq!(completed, [0], "a's result is durable: {journal:?}");
    assert_eq!(
        attempts(&journal),
        [1, 1],
        "a's and b's first attempts are durable: {journal:?}"
    );
}

/// A run admitted to be driven here at once (as the API admits one for a
/// caller that waits for it) is driven under the lease its admission took:
/// the drive asks the store for no lease of its own, which saves a store
/// write per such run. A run admitted without one takes its lease when it
/// is driven, as before.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_admitted_to_be_driven_here_is_driven_under_its_admissions_lease() {
    let store = TestStore::new();
    let (keel, testbed, backend) = open_backend(store.config(), keel_tests::TESTBED).await;
    let here = keel_host::StartOptions {
        driven_here: true,
        ..Default::default()
    };
    let run = keel
        .start_with(&testbed, "ten_steps", "3", &here)
        .await
        .unwrap();
    let ended = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(ended.status, RunStatus::Completed, "{:?}", ended.error);
    assert_eq!(ended.output.as_deref(), Some("3"));
    assert_eq!(
        backend.lease_takes(),
        0,
        "driven under the admission's lease"
    );

    let other = keel.start(&testbed, "ten_steps", "3").await.unwrap();
    let ended = keel.drive(&other.run_id).await.unwrap();
    assert_eq!(ended.status, RunStatus::Completed, "{:?}", ended.error);
    assert_eq!(
        backend.lease_takes(),
        1,
        "a run admitted without a lease takes one"
    );

    // The admission's lease is used once: a second drive of a run that
    // waits takes the lease from the store.
    let waits = keel
        .start_with(&testbed, "step_then_sleep", "[5, 3600000]", &here)
        .await
        .unwrap();
    let parked = keel.drive(&waits.run_id).await.unwrap();
    assert_eq!(parked.status, RunStatus::Waiting, "{parked:?}");
    assert_eq!(backend.lease_takes(), 1);
    let parked = keel.drive(&waits.run_id).await.unwrap();
    assert_eq!(parked.status, RunStatus::Waiting, "{parked:?}");
    assert_eq!(backend.lease_takes(), 2, "the second drive takes its own");
}

/// A run that kills its worker each time before anything of it is
/// durable (here: its end's write is lost, again and again) is counted by
/// its takeovers, each durable, and fails once they pass `max_takeovers`
/// with no step completed in between: a crash loop ends, however its
/// steps' attempts are journaled.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_keeps_killing_its_worker_fails_after_max_takeovers() {
    use keel_host::store::faulty::{Crash, CrashWhen};
    let store = TestStore::new();
    let mut config = store.config();
    config.default_durability = Durability::EffectGated;
    config.limits.max_takeovers = 2;
    let (keel, testbed, backend) = open_backend(config.clone(), keel_tests::TESTBED).await;
    let run = keel.start(&testbed, "ten_steps", "3").await.unwrap();
    // The first worker dies as it writes the run's end.
    backend.crash_at(Crash {
        at_write: backend.journal_writes() + 1,
        when: CrashWhen::Before,
    });
    let _ = keel.drive(&run.run_id).await;
    assert!(backend.has_crashed());
    let ttl = config.lease_ttl.as_millis() as u64;
    let mut now = keel_host_now();
    // A dead process gives nothing back: the worker still holds the run.
    async fn died_holding(
        backend: &common::Backend,
        run_id: &str,
        worker: &str,
        ttl: u64,
        now: u64,
    ) {
        use keel_host::store::LeaseStore;
        let held = backend
            .acquire_lease(run_id, worker, ttl, now)
            .await
            .unwrap();
        assert!(held.is_some(), "{worker} holds the run");
    }
    died_holding(&backend, run.run_id.as_str(), "worker-0", ttl, now).await;
    drop((keel, testbed, backend));

    for takeover in 1..=3 {
        // Each next worker starts after the last one's lease expired.
        now += ttl + 60_000;
        let mut config = config.clone();
        config.clock = common::ManualClock::at(now);
        config.worker_id = format!("worker-{takeover}");
        let (keel, _testbed, backend) = open_backend(config, keel_tests::TESTBED).await;
        if takeover <= 2 {
            // Its takeover is written; the run's end is lost again.
            backend.crash_at(Crash {
                at_write: backend.journal_writes() + 2,
                when: CrashWhen::Before,
            });
            let _ = keel.drive(&run.run_id).await;
            assert!(backend.has_crashed(), "takeover {takeover}");
            let worker = format!("worker-{takeover}");
            died_holding(&backend, run.run_id.as_str(), &worker, ttl, now).await;
            continue;
        }
        let ended = keel.drive(&run.run_id).await.unwrap();
        assert_eq!(ended.status, RunStatus::Failed, "{ended:?}");
        let error = ended.error.unwrap();
        assert_eq!(error.kind, "bound_exceeded");
        assert!(error.message.contains("max_takeovers"), "{}", error.message);
        let journal = keel.journal(&run.run_id).await.unwrap();
        let taken = journal
            .iter()
            .filter(|e| matches!(e.fact, Fact::TakenOver { .. }))
            .count();
        assert_eq!(taken, 3, "every takeover is journaled: {journal:?}");
        assert!(
            !journal
                .iter()
                .any(|e| matches!(e.fact, Fact::StepCompleted { .. })),
            "{journal:?}"
        );
    }
}

/// An effect-gated step that makes no effect but runs longer than a
/// second has its start made durable while it runs: the run shows the
/// attempt, and a crash from then on counts it.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_effect_gated_step_is_durable_while_it_runs() {
    let store = TestStore::new();
    let mut config = store.config();
    config.default_durability = Durability::EffectGated;
    let (keel, testbed) = open(config).await;
    let run = keel.start(&testbed, "concurrent", "[8000]").await.unwrap();
    keel.drive_in_background(run.run_id.as_str());
    let deadline = std::time::Instant::now() + Duration::from_secs(7);
    let journal = loop {
        let journal = keel.journal(&run.run_id).await.unwrap();
        if !attempts(&journal).is_empty() || std::time::Instant::now() > deadline {
            break journal;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(attempts(&journal), [1], "{journal:?}");
    assert!(
        !journal
            .iter()
            .any(|e| matches!(e.fact, Fact::StepCompleted { .. })),
        "the step still runs: {journal:?}"
    );
    let record = keel.get_run(&run.run_id).await.unwrap();
    assert_eq!(record.status, RunStatus::Running, "{record:?}");
}

//! A run's lifecycle end to end: a cancel the workflow receives and
//! compensates (a step in flight finishes and is journaled, its
//! compensation runs once), a cancel while the run waits on a hook, the
//! grace bound that ends a workflow swallowing its cancel, `--force`, and
//! a deadline passing on the injectable clock. Real guests, a real
//! downstream service; on sled, or PostgreSQL with `KEEL_TEST_STORE`.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use crate::common::{ManualClock, TestStore, open, open_backend};
use keel_host::core::journal::Fact;
use keel_host::core::lifecycle::Grace;
use keel_host::core::{RunRecord, RunStatus};
use keel_host::{Keel, Loaded, StartOptions};
use keel_payment_api::recorder::Recorder;

/// 2026-12-01T00:00:00Z.
const T0: u64 = 1_796_083_200_000;

/// An engine allowed to call `recorder`.
async fn engine(store: &TestStore, recorder: &Recorder) -> (Keel, Arc<Loaded>) {
    let mut config = store.config();
    config.grants = keel_host::Grants {
        http: vec![recorder.addr.to_string()],
        ..keel_host::Grants::default()
    };
    open(config).await
}

fn booking(recorder: &Recorder, id: &str, charge_ms: u64) -> String {
    serde_json::json!({"url": recorder.url(), "id": id, "charge_ms": charge_ms}).to_string()
}

/// Waits until the downstream has received a call of `tenant`.
async fn until_called(recorder: &Recorder, tenant: &str) {
    tokio::time::timeout(Duration::from_secs(20), async {
        while !recorder.arrivals().iter().any(|(t, _)| t == tenant) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no call of {tenant} arrived"));
}

/// Drives `run` on a task of its own, so that the test can act meanwhile.
fn drive_in_background(
    keel: &Keel,
    run: &RunRecord,
) -> tokio::task::JoinHandle<keel_host::Result<RunRecord>> {
    let (keel, run_id) = (keel.clone(), run.run_id.to_string());
    tokio::spawn(async move { keel.drive(&run_id).await })
}

fn facts(journal: &[keel_host::core::Entry]) -> Vec<&'static str> {
    journal.iter().map(|e| e.fact.name()).collect()
}

fn error_of(run: &RunRecord) -> (String, String) {
    let e = run.error.clone().expect("a cancelled run has an error");
    (e.kind, e.message)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_lets_the_step_in_flight_finish_and_compensates_it_once() {
    let recorder = Recorder::start().await.unwrap();
    let store = TestStore::new();
    let (keel, loaded) = engine(&store, &recorder).await;
    let run = keel
        .start(&loaded, "refundable", &booking(&recorder, "b1", 400))
        .await
        .unwrap();
    let driving = drive_in_background(&keel, &run);
    until_called(&recorder, "charge-b1").await;
    let asked = keel
        .cancel(&run.run_id, "the customer changed their mind", "test")
        .await
        .unwrap();
    assert!(!asked.status.is_final(), "the cleanup has yet to run");
    driving.await.unwrap().unwrap();
    let ended = keel.result(&run.run_id, true).await.unwrap();
    assert_eq!(ended.status, RunStatus::Cancelled);
    let (kind, message) = error_of(&ended);
    assert_eq!(kind, "cancelled");
    assert_eq!(
        message,
        "cancelled by test: the customer changed their mind"
    );
    assert_eq!(recorder.finished_of("charge-b1"), 1, "the charge finished");
    assert_eq!(recorder.finished_of("refund-b1"), 1, "refunded once");
    assert_eq!(recorder.finished_of("ship-b1"), 0, "nothing shipped");

    let journal = keel.journal(&run.run_id).await.unwrap();
    let names = facts(&journal);
    let cancel = names.iter().position(|n| *n == "cancel_requested").unwrap();
    let charged = journal
        .iter()
        .position(|e| matches!(e.fact, Fact::StepCompleted { command: 0, .. }))
        .expect("the charge's result is journaled");
    assert!(
        cancel < charged,
        "the charge ended after the cancel: {names:?}"
    );
    assert_eq!(names.last(), Some(&"run_ended_cancelled"));
    let verdict = keel.replay(&run.run_id, None).await.unwrap();
    assert!(verdict.is_ok(), "the cancelled run replays: {verdict:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_waiting_on_a_hook_is_cancelled_through_its_cleanup_or_at_once_with_force() {
    let recorder = Recorder::start().await.unwrap();
    let store = TestStore::new();
    let (keel, loaded) = engine(&store, &recorder).await;
    let mut runs = Vec::new();
    for id in ["w1", "w2"] {
        let run = keel
            .start(&loaded, "refundable", &booking(&recorder, id, 0))
            .await
            .unwrap();
        let waiting = keel.drive(&run.run_id).await.unwrap();
        assert_eq!(waiting.status, RunStatus::Waiting);
        runs.push(run.run_id);
    }
    keel.cancel(&runs[0], "", "test").await.unwrap();
    let ended = keel.result(&runs[0], true).await.unwrap();
    assert_eq!(ended.status, RunStatus::Cancelled);
    assert_eq!(error_of(&ended).1, "cancelled by test");
    assert_eq!(recorder.finished_of("refund-w1"), 1);

    let forced = keel.terminate(&runs[1]).await.unwrap();
    assert_eq!(forced.status, RunStatus::Cancelled);
    let journal = keel.journal(&runs[1]).await.unwrap();
    assert_eq!(facts(&journal).last(), Some(&"run_cancelled"));
    assert_eq!(
        recorder.finished_of("refund-w2"),
        0,
        "--force runs no cleanup"
    );
    let hook = keel.resume_hook("confirm:w2", "true").await;
    assert!(hook.is_err(), "a terminated run's hook is gone: {hook:?}");

    // A cancel of an ended run changes nothing.
    let again = keel.cancel(&runs[0], "again", "test").await.unwrap();
    assert_eq!(again, ended);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_that_swallows_its_cancel_is_ended_at_the_grace_bound() {
    let store = TestStore::new();
    let mut config = store.config();
    config.limits.cancel_grace = Grace {
        ms: 600_000,
        steps: 5,
    };
    let (keel, loaded, _) = open_backend(config, keel_tests::TESTBED).await;
    for (mode, why) in [
        ("sleep", "refused for the cancel"),
        ("steps", "more than 5 step(s)"),
    ] {
        let run = keel
            .start(&loaded, "stubborn", &format!("\"{mode}\""))
            .await
            .unwrap();
        let driving = drive_in_background(&keel, &run);
        // It loops on 20 ms timers until it hears the cancel.
        keel.cancel(&run.run_id, "stop", "test").await.unwrap();
        driving.await.unwrap().unwrap();
        let ended = keel.result(&run.run_id, true).await.unwrap();
        assert_eq!(ended.status, RunStatus::Cancelled, "{mode}");
        let (kind, message) = error_of(&ended);
        assert_eq!(kind, "cancelled");
        assert!(
            message.starts_with("cancelled by test: stop; ") && message.contains(why),
            "{mode}: {message}"
        );
        let journal = keel.journal(&run.run_id).await.unwrap();
        let cleanup = journal
            .iter()
            .skip_while(|e| !matches!(e.fact, Fact::CancelRequested { .. }))
            .filter(|e| matches!(e.fact, Fact::StepScheduled { .. }))
            .count();
        let expected = if mode == "steps" { 5 } else { 0 };
        assert_eq!(cleanup, expected, "{mode}: cleanup steps");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deadline_that_passes_while_the_run_waits_cancels_it_through_its_cleanup() {
    let recorder = Recorder::start().await.unwrap();
    let store = TestStore::new();
    let clock = ManualClock::at(T0);
    let mut config = store.config();
    config.clock = clock.clone();
    config.grants = keel_host::Grants {
        http: vec![recorder.addr.to_string()],
        ..keel_host::Grants::default()
    };
    let (keel, loaded, _) = open_backend(config, keel_tests::TESTBED).await;

    // The workflow's own timeout (one hour).
    let declared = keel
        .start(&loaded, "confirm_within_an_hour", "\"d1\"")
        .await
        .unwrap();
    // A start's timeout.
    let options = StartOptions {
        timeout: Some(Duration::from_secs(600)),
        ..StartOptions::default()
    };
    let started = keel
        .start_with(
            &loaded,
            "refundable",
            &booking(&recorder, "d2", 0),
            &options,
        )
        .await
        .unwrap();
    for (run, deadline) in [(&declared, T0 + 3_600_000), (&started, T0 + 600_000)] {
        let journal = keel.journal(&run.run_id).await.unwrap();
        assert_eq!(
            journal[1].fact,
            Fact::DeadlineSet {
                deadline_ms: deadline
            }
        );
        let waiting = keel.drive(&run.run_id).await.unwrap();
        assert_eq!(waiting.status, RunStatus::Waiting);
        assert_eq!(waiting.wake_at_ms, Some(deadline), "woken at its deadline");
    }
    clock.advance(600_000);
    let ended = keel.result(&started.run_id, true).await.unwrap();
    assert_eq!(ended.status, RunStatus::Cancelled);
    assert_eq!(
        error_of(&ended),
        (
            "deadline_exceeded".into(),
            "the run passed its deadline".into()
        )
    );
    assert_eq!(recorder.finished_of("refund-d2"), 1, "compensated");
    let still = keel.drive(&declared.run_id).await.unwrap();
    assert_eq!(still.status, RunStatus::Waiting, "its deadline is later");

    clock.advance(3_000_000);
    let ended = keel.result(&declared.run_id, true).await.unwrap();
    assert_eq!(ended.status, RunStatus::Cancelled);
    assert_eq!(error_of(&ended).0, "deadline_exceeded");
    let journal = keel.journal(&declared.run_id).await.unwrap();
    assert!(
        journal.iter().any(|e| matches!(
            &e.fact,
            Fact::CancelRequested { reason, by } if reason == "deadline_exceeded" && by == "deadline"
        )),
        "{:?}",
        facts(&journal)
    );
    let cleanup = journal
        .iter()
        .any(|e| matches!(&e.fact, Fact::StepScheduled { input, .. } if input == "7"));
    assert!(cleanup, "its cleanup step ran: {:?}", facts(&journal));
    let verdict = keel.replay(&declared.run_id, None).await.unwrap();
    assert!(verdict.is_ok(), "{verdict:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_order_refunds_its_charge_once_then_releases_its_items() {
    let api = keel_payment_api::PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let mut config = store.config();
    config.grants = keel_host::Grants {
        http: vec![api.addr.to_string()],
        ..keel_host::Grants::default()
    };
    let (keel, loaded) = common::open_with(config, keel_tests::ORDER).await;
    // The charge is refused (retried) until the cancel is in.
    api.set_refusing(true);
    let run = keel
        .start(&loaded, "process_order", &common::order_input(&api, "o-9"))
        .await
        .unwrap();
    let driving = drive_in_background(&keel, &run);
    api.wait_for(|r| r.path == "/charge").await;
    keel.cancel(&run.run_id, "out of stock", "test")
        .await
        .unwrap();
    // Accepted once the cancel is journaled (with the next attempt's
    // start), so that the charge ends after it and must be refunded.
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let journal = keel.journal(&run.run_id).await.unwrap();
            if facts(&journal).contains(&"cancel_requested") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the cancel is journaled");
    api.set_refusing(false);
    driving.await.unwrap().unwrap();
    let ended = keel.result(&run.run_id, true).await.unwrap();
    assert_eq!(ended.status, RunStatus::Cancelled);
    assert_eq!(error_of(&ended).1, "cancelled by test: out of stock");
    let charges = api.charges();
    assert_eq!(charges.len(), 1, "charged once: {charges:?}");
    let refunds: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.path == "/refund")
        .collect();
    assert_eq!(refunds.len(), 1, "refunded once: {refunds:?}");
    assert!(refunds[0].body.contains(&charges[0].1), "{:?}", refunds[0]);
    let journal = keel.journal(&run.run_id).await.unwrap();
    let steps = common::step_names(&journal);
    assert_eq!(
        steps,
        [
            "reserve_inventory",
            "charge_user",
            "refund_charge",
            "release_inventory"
        ],
        "undone in reverse order"
    );
    let verdict = keel.replay(&run.run_id, None).await.unwrap();
    assert!(verdict.is_ok(), "{verdict:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_parent_cancels_its_child_which_runs_its_own_cleanup() {
    let recorder = Recorder::start().await.unwrap();
    let store = TestStore::new();
    let (keel, loaded) = engine(&store, &recorder).await;
    let parent = keel
        .start(&loaded, "book_through_child", &booking(&recorder, "p1", 0))
        .await
        .unwrap();
    let waiting = keel.drive(&parent.run_id).await.unwrap();
    assert_eq!(waiting.status, RunStatus::Waiting, "it awaits its child");
    let child = child_of(&parent, 0);
    let waiting = keel.drive(&child).await.unwrap();
    assert_eq!(
        waiting.status,
        RunStatus::Waiting,
        "the child awaits its hook"
    );
    assert_eq!(recorder.finished_of("charge-p1"), 1);

    keel.cancel(&parent.run_id, "trip called off", "test")
        .await
        .unwrap();
    let ended = keel.result(&parent.run_id, true).await.unwrap();
    assert_eq!(ended.status, RunStatus::Cancelled);
    assert_eq!(error_of(&ended).1, "cancelled by test: trip called off");
    let child_end = keel.result(&child, true).await.unwrap();
    assert_eq!(child_end.status, RunStatus::Cancelled);
    assert_eq!(
        error_of(&child_end).1,
        format!(
            "cancelled by parent {}: its parent {} was cancelled",
            parent.run_id, parent.run_id
        )
    );
    assert_eq!(
        recorder.finished_of("refund-p1"),
        1,
        "the child refunded once"
    );
}

/// The child of `parent` started by its `command`.
fn child_of(parent: &RunRecord, command: u32) -> String {
    parent.run_id.child(command).to_string()
}

/// Waits (on the store) until `run_id` has reached `status`.
async fn until_status(keel: &Keel, run_id: &str, status: RunStatus) -> RunRecord {
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let run = keel.get_run(run_id).await.unwrap();
            if run.status == status {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{run_id} never reached {status:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_parent_closes_each_child_by_its_policy() {
    let recorder = Recorder::start().await.unwrap();
    let store = TestStore::new();
    let (keel, loaded) = engine(&store, &recorder).await;
    let parent = keel
        .start(&loaded, "family", &booking(&recorder, "f", 400))
        .await
        .unwrap();
    let waiting = keel.drive(&parent.run_id).await.unwrap();
    assert_eq!(waiting.status, RunStatus::Waiting, "it awaits its go");
    let [cancel, abandon, wait] = [0, 1, 2].map(|c| child_of(&parent, c));
    for (child, id) in [
        (&cancel, "f-cancel"),
        (&abandon, "f-abandon"),
        (&wait, "f-wait"),
    ] {
        let run = keel.get_run(child).await.unwrap();
        assert_eq!(run.parent_run_id.as_ref(), Some(&parent.run_id), "{id}");
        let waiting = keel.drive(child).await.unwrap();
        assert_eq!(waiting.status, RunStatus::Waiting, "{id} awaits its hook");
    }
    let children: Vec<_> = keel
        .children(&parent.run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.child.run_id.to_string(), c.child.close.as_str()))
        .collect();
    assert_eq!(
        children,
        [
            (cancel.clone(), "cancel"),
            (abandon.clone(), "abandon"),
            (wait.clone(), "wait")
        ]
    );

    keel.resume_hook("go:f", "true").await.unwrap();
    let driving = drive_in_background(&keel, &parent);
    until_called(&recorder, "charge-f").await;
    // The parent's charge is in flight.
    keel.cancel(&parent.run_id, "trip called off", "test")
        .await
        .unwrap();
    let held = driving.await.unwrap().unwrap();
    assert_eq!(
        held.status,
        RunStatus::Waiting,
        "its end waits for its `wait` child"
    );
    assert_eq!(recorder.finished_of("charge-f"), 1, "the charge finished");
    assert_eq!(recorder.finished_of("refund-f"), 1, "and was refunded");
    let journal = keel.journal(&parent.run_id).await.unwrap();
    assert!(
        !facts(&journal).contains(&"run_ended_cancelled"),
        "{:?}",
        facts(&journal)
    );

    // The `cancel` child ran its own cleanup.
    let cancelled = until_status(&keel, &cancel, RunStatus::Cancelled).await;
    assert_eq!(
        error_of(&cancelled).1,
        format!(
            "cancelled by parent {}: its parent {} was cancelled",
            parent.run_id, parent.run_id
        )
    );
    assert_eq!(recorder.finished_of("refund-f-cancel"), 1);
    // The `abandon` child goes on, and completes.
    assert!(!keel.get_run(&abandon).await.unwrap().status.is_final());
    keel.resume_hook("confirm:f-abandon", "true").await.unwrap();
    let done = keel.drive(&abandon).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(recorder.finished_of("refund-f-abandon"), 0);
    let still = keel.drive(&parent.run_id).await.unwrap();
    assert_eq!(still.status, RunStatus::Waiting, "still held by `wait`");

    // The `wait` child's end lets the parent end, cancelled.
    keel.resume_hook("confirm:f-wait", "true").await.unwrap();
    let done = keel.drive(&wait).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    let ended = keel.drive(&parent.run_id).await.unwrap();
    assert_eq!(ended.status, RunStatus::Cancelled);
    assert_eq!(error_of(&ended).1, "cancelled by test: trip called off");
    assert_eq!(recorder.finished_of("refund-f"), 1, "refunded once");
    for run in [&parent.run_id.to_string(), &cancel, &abandon, &wait] {
        let verdict = keel.replay(run, None).await.unwrap();
        assert!(verdict.is_ok(), "{run}: {verdict:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parent_that_completes_cancels_its_live_children_and_can_start_another_deployment_s() {
    let recorder = Recorder::start().await.unwrap();
    let store = TestStore::new();
    let (keel, _) = engine(&store, &recorder).await;
    let spec = |name: &str| keel_host::DeploySpec {
        name: Some(name.into()),
        grants: Some(keel_host::core::GrantSpec {
            http: vec![recorder.addr.to_string()],
            ..Default::default()
        }),
        ..Default::default()
    };
    let (_, order) = keel
        .deploy_file(
            std::path::Path::new(keel_tests::ORDER_HOOKS),
            Some(spec("shop")),
        )
        .await
        .unwrap();
    keel.deploy_file(
        std::path::Path::new(keel_tests::TESTBED),
        Some(spec("bookings")),
    )
    .await
    .unwrap();
    let input = serde_json::json!({
        "deployment": "bookings",
        "booking": {"url": recorder.url(), "id": "x", "charge_ms": 0},
    })
    .to_string();
    let parent = keel.start(&order, "book_elsewhere", &input).await.unwrap();
    let ended = keel.drive(&parent.run_id).await.unwrap();
    assert_eq!(ended.status, RunStatus::Completed, "{ended:?}");
    let child = child_of(&parent, 0);
    let started = keel.get_run(&child).await.unwrap();
    assert_eq!(started.workflow, "refundable");
    assert_ne!(
        started.component_hash, order.hash,
        "it runs on the deployment named"
    );
    assert_eq!(started.parent_run_id.as_ref(), Some(&parent.run_id));
    // The parent ended with its child live: the child was asked to cancel.
    let cancelled = until_status(&keel, &child, RunStatus::Cancelled).await;
    assert_eq!(
        error_of(&cancelled).1,
        format!(
            "cancelled by parent {}: its parent {} completed",
            parent.run_id, parent.run_id
        )
    );
    // A deployment that does not export the workflow is refused, journaled.
    let input = serde_json::json!({"deployment": "shop", "booking": {"url": "x", "id": "y", "charge_ms": 0}})
        .to_string();
    let refused = keel.run(&order, "book_elsewhere", &input).await.unwrap();
    assert_eq!(refused.status, RunStatus::Failed);
    let message = refused.error.unwrap().message;
    assert!(message.contains("refundable"), "{message}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_past_its_retry_budget_fails_though_retries_are_left() {
    let store = TestStore::new();
    let (keel, loaded) = open(store.config()).await;
    let run = keel.run(&loaded, "budgeted", "null").await.unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    let journal = keel.journal(&run.run_id).await.unwrap();
    let failed = journal
        .iter()
        .find_map(|e| match &e.fact {
            Fact::StepFailed {
                error, attempts, ..
            } => Some((error.clone(), *attempts)),
            _ => None,
        })
        .expect("the step failed for good");
    assert!(failed.0.contains("retry budget ran out"), "{failed:?}");
    // 100 retries 50 ms apart, but 200 ms for all of them.
    assert!((1..=5).contains(&failed.1), "{failed:?}");
}

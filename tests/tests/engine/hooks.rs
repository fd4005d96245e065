//! Start tokens, hooks, run handles and the conflict strategies (the
//! Workflow SDK's run idempotency), end to end through the `order-hooks`
//! guest.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use crate::common::{Backend, ManualClock, TestStore, json, open_backend, open_with};
use keel_host::core::journal::Fact;
use keel_host::core::{Capabilities, RunId, RunRecord, RunStatus};
use keel_host::{Error, Keel, Loaded, StartHook, StartOptions};
use serde_json::{Value, json};

const DAY_MS: u64 = 24 * 3600 * 1000;

async fn hooks_engine(store: &TestStore) -> (Keel, Arc<Loaded>) {
    open_with(store.config(), keel_tests::ORDER_HOOKS).await
}

/// An engine whose store can be made to fail or to support less.
async fn hooks_engine_with_backend(store: &TestStore) -> (Keel, Arc<Loaded>, Arc<Backend>) {
    open_backend(store.config(), keel_tests::ORDER_HOOKS).await
}

fn note(order_id: &str, note: &str) -> String {
    json!({"order_id": order_id, "note": note}).to_string()
}

fn request(order_id: &str, confirmed: bool) -> String {
    json!({"order_id": order_id, "confirmed": confirmed}).to_string()
}

fn output(run: &RunRecord) -> Value {
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    json(run.output.as_deref().expect("an output"))
}

fn conflicting_run(result: keel_host::Result<RunRecord>) -> RunId {
    match result {
        Err(Error::HookConflict {
            conflicting_run_id, ..
        }) => conflicting_run_id,
        other => panic!("expected a hook conflict, got {other:?}"),
    }
}

/// Starts `workflow` and drives it until it completes, fails or waits.
async fn run(keel: &Keel, c: &Loaded, workflow: &str, input: &str) -> RunRecord {
    let run = keel.start(c, workflow, input).await.expect("started");
    keel.drive(&run.run_id).await.expect("driven")
}

/// Drives every run that can make progress until none can.
async fn settle(keel: &Keel) {
    for _ in 0..100 {
        if keel.work_once().await.expect("a worker pass") == 0 {
            return;
        }
    }
    panic!("runs were still due after 100 worker passes");
}

/// A finished `order_updates` run that keeps `order:{order}` for a day.
async fn finished_retained_owner(keel: &Keel, c: &Loaded, order: &str) -> RunId {
    let hook =
        StartHook::new(format!("order:{order}")).min_retention(Duration::from_millis(DAY_MS));
    let owner = keel
        .start_with(
            c,
            "order_updates",
            &note(order, "a"),
            &StartOptions::from(hook),
        )
        .await
        .unwrap()
        .run_id;
    let token = format!("order:{order}");
    keel.resume_hook(&token, r#"{"note": "b", "done": true}"#)
        .await
        .unwrap();
    assert_eq!(
        keel.drive(&owner).await.unwrap().status,
        RunStatus::Completed
    );
    owner
}

/// Every run replays against its own component to the same journal.
async fn assert_replays(keel: &Keel, runs: &[&str]) {
    for run_id in runs {
        let verdict = keel.replay(run_id, None).await.expect("replayed");
        assert!(verdict.is_ok(), "run {run_id}: {verdict:?}");
    }
}

#[test]
fn thirty_two_concurrent_starts_with_one_token_admit_one_run() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let store = TestStore::new();
    let (keel, c) = runtime.block_on(hooks_engine(&store));
    let results: Vec<_> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..32)
            .map(|i| {
                let (keel, c, handle) = (&keel, &c, runtime.handle());
                s.spawn(move || {
                    handle.block_on(keel.start_with(
                        c,
                        "order_updates",
                        &note("32", &format!("caller {i}")),
                        &StartOptions::token("order:32"),
                    ))
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let admitted: Vec<RunId> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().map(|run| run.run_id.clone()))
        .collect();
    assert_eq!(admitted.len(), 1, "{results:?}");
    let refusals: Vec<RunId> = results
        .into_iter()
        .filter(|r| r.is_err())
        .map(conflicting_run)
        .collect();
    assert_eq!(refusals.len(), 31);
    assert!(refusals.iter().all(|owner| *owner == admitted[0]));
    assert_eq!(
        runtime.block_on(keel.list_runs()).unwrap().len(),
        1,
        "refused starts are not runs"
    );
}

/// The seed's loop: start, or deliver the payload to the owner, or learn
/// which run holds the token.
async fn start_or_route(keel: &Keel, c: &Loaded, order_id: &str, update: Value) -> (RunId, bool) {
    let token = format!("order:{order_id}");
    for _ in 0..3 {
        let input = note(order_id, update["note"].as_str().unwrap());
        match keel
            .start_with(c, "order_updates", &input, &StartOptions::token(&token))
            .await
        {
            Ok(run) => return (run.run_id, true),
            Err(Error::HookConflict { .. }) => {}
            Err(e) => panic!("start: {e}"),
        }
        match keel.resume_hook(&token, &update.to_string()).await {
            Ok(owner) => return (owner, false),
            Err(Error::HookNotFound { .. }) => {}
            Err(e) => panic!("resume: {e}"),
        }
    }
    panic!("the token is held and cannot be resumed");
}

#[tokio::test(flavor = "multi_thread")]
async fn duplicates_are_routed_to_the_owner_in_order_even_before_it_runs() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;
    let (owner, started) = start_or_route(&keel, &c, "1", json!({"note": "first"})).await;
    assert!(started);
    for (text, done) in [("second", false), ("third", false), ("last", true)] {
        let routed = start_or_route(&keel, &c, "1", json!({"note": text, "done": done})).await;
        assert_eq!(routed, (owner.clone(), false), "delivered to the owner");
    }
    assert_eq!(
        keel.get_run(&owner).await.unwrap().status,
        RunStatus::Pending,
        "the owner has not executed yet"
    );
    let done = keel.drive(&owner).await.unwrap();
    assert_eq!(output(&done), json!(["first", "second", "third", "last"]));

    // The run ended without retention: the token is free and not resumable.
    let resumed = keel.resume_hook("order:1", r#"{"note": "late"}"#).await;
    assert!(
        matches!(resumed, Err(Error::HookNotFound { .. })),
        "{resumed:?}"
    );
    assert!(matches!(
        keel.get_hook("order:1").await,
        Err(Error::HookNotFound { .. })
    ));
    let (next, started) = start_or_route(&keel, &c, "1", json!({"note": "again"})).await;
    assert!(
        started && next != owner,
        "a new run takes the released token"
    );
    assert_replays(&keel, &[&owner]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn retention_holds_the_token_after_the_run_ends_until_it_passes() {
    let clock = ManualClock::at(1_800_000_000_000);
    let store = TestStore::new();
    let mut config = store.config();
    config.clock = clock.clone();
    let (keel, c) = open_with(config, keel_tests::ORDER_HOOKS).await;
    let hook = StartHook::new("order:2")
        .min_retention(Duration::from_millis(30 * DAY_MS))
        .metadata(json!({"order_id": "2"}));
    let options = StartOptions::from(hook);
    let owner = keel
        .start_with(&c, "order_updates", &note("2", "first"), &options)
        .await
        .unwrap()
        .run_id;
    keel.resume_hook("order:2", r#"{"note": "done", "done": true}"#)
        .await
        .unwrap();
    assert_eq!(
        keel.drive(&owner).await.unwrap().status,
        RunStatus::Completed
    );

    clock.advance(29 * DAY_MS);
    let again = keel
        .start_with(&c, "order_updates", &note("2", "x"), &options)
        .await;
    assert_eq!(
        conflicting_run(again),
        owner,
        "refused, naming the finished owner"
    );
    let held = keel.get_hook("order:2").await.unwrap();
    assert_eq!((held.run_id.as_str(), held.active), (owner.as_str(), false));
    assert_eq!(
        json(held.metadata.as_deref().unwrap()),
        json!({"order_id": "2"})
    );
    let resumed = keel.resume_hook("order:2", r#"{"note": "late"}"#).await;
    assert!(
        matches!(resumed, Err(Error::HookNotFound { .. })),
        "{resumed:?}"
    );

    clock.advance(DAY_MS + 1);
    assert!(matches!(
        keel.get_hook("order:2").await,
        Err(Error::HookNotFound { .. })
    ));
    let admitted = keel
        .start_with(
            &c,
            "order_updates",
            &note("2", "x"),
            &StartOptions::token("order:2"),
        )
        .await;
    assert!(admitted.is_ok(), "retention passed: {admitted:?}");

    // A running owner holds its token even after its retention passes.
    let short =
        StartOptions::from(StartHook::new("order:3").min_retention(Duration::from_secs(60)));
    let running = keel
        .start_with(&c, "order_updates", &note("3", "a"), &short)
        .await
        .unwrap();
    clock.advance(DAY_MS);
    let refused = keel
        .start_with(&c, "order_updates", &note("3", "b"), &short)
        .await;
    assert_eq!(conflicting_run(refused), running.run_id);
    assert_replays(&keel, &[&owner]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn disposing_in_an_inner_scope_releases_the_token_while_the_run_goes_on() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;
    let options =
        StartOptions::from(StartHook::new("order:4").min_retention(Duration::from_millis(DAY_MS)));
    let owner = keel
        .start_with(&c, "order_updates_scoped", &note("4", "first"), &options)
        .await
        .unwrap()
        .run_id;
    keel.resume_hook("order:4", r#"{"note": "packed", "done": true}"#)
        .await
        .unwrap();
    let waiting = keel.drive(&owner).await.unwrap();
    assert_eq!(
        waiting.status,
        RunStatus::Waiting,
        "it waits for the ship hook"
    );

    let newcomer = keel
        .start_with(
            &c,
            "order_updates",
            &note("4", "new"),
            &StartOptions::token("order:4"),
        )
        .await;
    assert!(
        newcomer.is_ok(),
        "the disposed token is free, retention or not: {newcomer:?}"
    );
    assert_eq!(
        keel.get_hook("order:4").await.unwrap().run_id,
        newcomer.unwrap().run_id
    );

    assert_eq!(keel.resume_hook("ship:4", "{}").await.unwrap(), owner);
    let done = keel.drive(&owner).await.unwrap();
    assert_eq!(output(&done), json!(["first", "packed", "shipped"]));
    assert_replays(&keel, &[&owner]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn force_takes_the_token_over_and_the_old_owner_learns_who_took_it() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;
    let old = run(&keel, &c, "supersede", &request("5", true)).await;
    assert_eq!(old.status, RunStatus::Waiting);
    let new = run(&keel, &c, "supersede", &request("5", true)).await;
    assert_eq!(new.status, RunStatus::Waiting);

    let superseded = keel.drive(&old.run_id).await.unwrap();
    assert_eq!(
        output(&superseded),
        json!({"status": "superseded", "run_id": new.run_id})
    );
    let owner = keel
        .resume_hook("order:5", r#"{"confirmed": true}"#)
        .await
        .unwrap();
    assert_eq!(owner, new.run_id, "resumes reach the new owner");
    let processed = keel.drive(&new.run_id).await.unwrap();
    assert_eq!(
        output(&processed),
        json!({"status": "processed", "order_id": "5"})
    );

    // Force also takes a token a finished run keeps for its retention.
    let finished = finished_retained_owner(&keel, &c, "6").await;
    let taker = run(&keel, &c, "supersede", &request("6", true)).await;
    assert_eq!(keel.get_hook("order:6").await.unwrap().run_id, taker.run_id);
    assert_replays(&keel, &[&old.run_id, &new.run_id, &finished, &taker.run_id]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_five_strategies_return_what_the_seed_says() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;

    // Reject the duplicate: it names the owner.
    let owner = run(&keel, &c, "reject_duplicate", &request("r", true)).await;
    assert_eq!(owner.status, RunStatus::Waiting);
    let dup = run(&keel, &c, "reject_duplicate", &request("r", true)).await;
    assert_eq!(
        output(&dup),
        json!({"status": "duplicate", "run_id": owner.run_id})
    );

    // Adopt the owner's result: both runs return the same.
    let adopter_owner = run(&keel, &c, "adopt_result", &request("a", true)).await;
    let adopter = run(&keel, &c, "adopt_result", &request("a", true)).await;
    assert_eq!(adopter.status, RunStatus::Waiting, "it waits for the owner");
    keel.resume_hook("order:a", r#"{"confirmed": true}"#)
        .await
        .unwrap();
    settle(&keel).await;
    let (first, second) = (
        keel.get_run(&adopter_owner.run_id).await.unwrap(),
        keel.get_run(&adopter.run_id).await.unwrap(),
    );
    assert_eq!(
        output(&first),
        json!({"status": "processed", "order_id": "a"})
    );
    assert_eq!(output(&second), output(&first));

    // Inspect the owner: a running owner is a duplicate...
    let inspected = run(&keel, &c, "inspect_owner", &request("i", true)).await;
    let dup = run(&keel, &c, "inspect_owner", &request("i", true)).await;
    assert_eq!(
        output(&dup),
        json!({"status": "duplicate", "run_id": inspected.run_id})
    );
    // ...and a completed one (holding its token for its retention) lends its result.
    finished_retained_owner(&keel, &c, "i2").await;
    let reused = run(&keel, &c, "inspect_owner", &request("i2", true)).await;
    assert_eq!(output(&reused), json!(["a", "b"]));

    // Signal the owner: the request reaches the running owner's hook.
    let signalled = run(&keel, &c, "signal_owner", &request("s", false)).await;
    let signaller = run(&keel, &c, "signal_owner", &request("s", true)).await;
    assert_eq!(
        output(&signaller),
        json!({"status": "forwarded", "run_id": signalled.run_id})
    );
    settle(&keel).await;
    assert_eq!(
        output(&keel.get_run(&signalled.run_id).await.unwrap()),
        json!({"status": "processed", "order_id": "s"}),
        "the forwarded confirmation decided the owner's outcome"
    );

    // Supersede (see also the force test): the old owner stops cleanly.
    let old = run(&keel, &c, "supersede", &request("n", true)).await;
    let new = run(&keel, &c, "supersede", &request("n", false)).await;
    settle(&keel).await;
    assert_eq!(
        output(&keel.get_run(&old.run_id).await.unwrap()),
        json!({"status": "superseded", "run_id": new.run_id})
    );

    let all: Vec<RunId> = keel
        .list_runs()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_replays(&keel, &all.iter().map(RunId::as_str).collect::<Vec<_>>()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_start_hook_refuses_options_that_belong_to_start() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;
    let run = keel
        .start_with(
            &c,
            "start_hook_with_options",
            &note("7", "a"),
            &StartOptions::token("order:7"),
        )
        .await
        .unwrap();
    let done = keel.drive(&run.run_id).await.unwrap();
    let refused = output(&done)["refused"].as_str().unwrap().to_string();
    assert!(
        refused.contains("start hook") && refused.contains("metadata"),
        "{refused}"
    );
    assert_replays(&keel, &[&run.run_id]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unconfirmed_start_can_be_retried_with_its_token() {
    let store = TestStore::new();
    let (keel, c, backend) = hooks_engine_with_backend(&store).await;
    backend.unconfirm_next_write();
    let first = keel
        .start_with(
            &c,
            "order_updates",
            &note("8", "a"),
            &StartOptions::token("order:8"),
        )
        .await;
    let Err(Error::StartOutcomeUnknown { run_id, .. }) = first else {
        panic!("expected an unknown outcome, got {first:?}");
    };
    let retry = keel
        .start_with(
            &c,
            "order_updates",
            &note("8", "a"),
            &StartOptions::token("order:8"),
        )
        .await;
    assert_eq!(
        conflicting_run(retry),
        run_id,
        "the retry learns that its candidate owns the token"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_run_ends_it_and_releases_its_token() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;
    let run = keel
        .start_with(
            &c,
            "order_updates",
            &note("9", "a"),
            &StartOptions::token("order:9"),
        )
        .await
        .unwrap();
    assert_eq!(
        keel.drive(&run.run_id).await.unwrap().status,
        RunStatus::Waiting
    );
    keel.cancel(&run.run_id, "", "test").await.unwrap();
    let cancelled = keel.result(&run.run_id, true).await.unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    let resumed = keel.resume_hook("order:9", r#"{"note": "b"}"#).await;
    assert!(
        matches!(resumed, Err(Error::HookNotFound { .. })),
        "{resumed:?}"
    );
    let next = keel
        .start_with(
            &c,
            "order_updates",
            &note("9", "b"),
            &StartOptions::token("order:9"),
        )
        .await;
    assert!(next.is_ok(), "{next:?}");
    let journal = keel.journal(&run.run_id).await.unwrap();
    assert_eq!(journal.last().unwrap().fact.name(), "run_ended_cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_starts_a_run_with_a_token_once() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;
    let parent = run(&keel, &c, "start_order", &note("10", "a")).await;
    let child = output(&parent)["started"].as_str().unwrap().to_string();
    assert!(
        child.starts_with(parent.run_id.as_str()),
        "derived from the parent: {child}"
    );
    assert_eq!(keel.get_hook("order:10").await.unwrap().run_id, child);

    let other = run(&keel, &c, "start_order", &note("10", "b")).await;
    assert_eq!(output(&other), json!({"owner": child}));
    keel.resume_hook("order:10", r#"{"note": "b", "done": true}"#)
        .await
        .unwrap();
    let done = keel.drive(&child).await.unwrap();
    assert_eq!(output(&done), json!(["a", "b"]));
    assert_replays(&keel, &[&parent.run_id, &other.run_id, &child]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_without_a_capability_refuses_the_start_before_writing() {
    let store = TestStore::new();
    let (keel, c, backend) = hooks_engine_with_backend(&store).await;
    backend.limit_capabilities(Capabilities {
        atomic_start_hook: true,
        hook_retention: false,
    });
    let options =
        StartOptions::from(StartHook::new("order:11").min_retention(Duration::from_secs(60)));
    let refused = keel
        .start_with(&c, "order_updates", &note("11", "a"), &options)
        .await;
    assert!(
        matches!(&refused, Err(Error::StoreCapability { capability }) if capability == "hook retention"),
        "{refused:?}"
    );
    backend.limit_capabilities(Capabilities {
        atomic_start_hook: false,
        hook_retention: false,
    });
    let refused = keel
        .start_with(
            &c,
            "order_updates",
            &note("11", "a"),
            &StartOptions::token("order:11"),
        )
        .await;
    assert!(
        matches!(refused, Err(Error::StoreCapability { .. })),
        "{refused:?}"
    );
    assert!(
        keel.list_runs().await.unwrap().is_empty(),
        "nothing was written"
    );
    assert!(matches!(
        keel.get_hook("order:11").await,
        Err(Error::HookNotFound { .. })
    ));
    let plain = keel.start(&c, "order_updates", &note("11", "a")).await;
    assert!(plain.is_ok(), "a start without a token needs neither");
}

/// Waits until the run's journal holds an entry of `kind` (a minute at most).
async fn journaled(keel: &Keel, run_id: &str, kind: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !keel
        .journal(run_id)
        .await
        .unwrap()
        .iter()
        .any(|e| e.fact.name() == kind)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no {kind} in run {run_id}"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_payload_reaches_a_live_activation_and_cancel_stops_one() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;
    let start = |order: &'static str| {
        let (keel, c) = (keel.clone(), c.clone());
        async move {
            let input = note(order, "a");
            let options = StartOptions::token(format!("order:{order}"));
            let run = keel
                .start_with(&c, "note_or_timeout", &input, &options)
                .await
                .unwrap();
            let driving = tokio::spawn({
                let (keel, run_id) = (keel.clone(), run.run_id.clone());
                async move { keel.drive(&run_id).await }
            });
            journaled(&keel, &run.run_id, "hook_next").await;
            (run.run_id, driving)
        }
    };

    // The activation waits in memory on a payload or a 30 s timer.
    let (live, driving) = start("12").await;
    keel.resume_hook("order:12", r#"{"note": "live"}"#)
        .await
        .unwrap();
    let done = driving.await.unwrap().unwrap();
    assert_eq!(
        output(&done),
        json!("live"),
        "delivered without a new drive"
    );

    let (cancelled, driving) = start("13").await;
    let record = keel.terminate(&cancelled).await.unwrap();
    assert_eq!(record.status, RunStatus::Cancelled);
    assert_eq!(driving.await.unwrap().unwrap().status, RunStatus::Cancelled);
    let resumed = keel.resume_hook("order:13", r#"{"note": "late"}"#).await;
    assert!(
        matches!(resumed, Err(Error::HookNotFound { .. })),
        "{resumed:?}"
    );
    assert_replays(&keel, &[&live]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_reports_a_hook_the_code_no_longer_asks_for() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;
    let owner = keel
        .start_with(
            &c,
            "order_updates",
            &note("14", "a"),
            &StartOptions::token("order:14"),
        )
        .await
        .unwrap();
    keel.resume_hook("order:14", r#"{"note": "b", "done": true}"#)
        .await
        .unwrap();
    keel.drive(&owner.run_id).await.unwrap();
    let mut journal = keel.journal(&owner.run_id).await.unwrap();
    for entry in &mut journal {
        if let Fact::HookCreated { token, .. } = &mut entry.fact {
            *token = "order:other".into();
        }
    }
    let run = keel.get_run(&owner.run_id).await.unwrap();
    match keel.replay_entries(&c, &run, journal).await.unwrap() {
        keel_host::core::divergence::Verdict::Diverged(d) => {
            assert_eq!(d.recorded.kind, "hook_created");
            assert!(d.recorded.excerpt.contains("order:other"), "{d:?}");
            assert!(d.requested.excerpt.contains("order:14"), "{d:?}");
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_is_held_by_one_open_hook_within_a_run_too() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;
    let run = keel
        .start_with(
            &c,
            "open_twice",
            &note("15", "a"),
            &StartOptions::token("order:15"),
        )
        .await
        .unwrap();
    let done = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(output(&done), json!({"second_held_by": run.run_id}));
    assert_replays(&keel, &[&run.run_id]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unopened_start_token_is_only_an_idempotency_key() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;
    // `start_order` never opens its own start hook.
    let run = keel
        .start_with(
            &c,
            "start_order",
            &note("16", "a"),
            &StartOptions::token("import:16"),
        )
        .await
        .unwrap();
    keel.resume_hook("import:16", r#"{"note": "unread"}"#)
        .await
        .unwrap();
    let done = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(
        done.status,
        RunStatus::Completed,
        "unread payloads are left unread"
    );
    let again = keel
        .start_with(
            &c,
            "start_order",
            &note("16", "b"),
            &StartOptions::token("import:16"),
        )
        .await;
    assert!(again.is_ok(), "released when the run ended: {again:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hook_dropped_as_the_run_returns_releases_the_token_despite_retention() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;
    let options =
        StartOptions::from(StartHook::new("order:17").min_retention(Duration::from_millis(DAY_MS)));
    // reject_duplicate holds its hook in a local, dropped as it returns.
    let run = keel
        .start_with(&c, "reject_duplicate", &request("17", false), &options)
        .await
        .unwrap();
    keel.resume_hook("order:17", r#"{"confirmed": false}"#)
        .await
        .unwrap();
    let done = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(output(&done), json!({"status": "cancelled"}));
    let again = keel
        .start_with(&c, "reject_duplicate", &request("17", true), &options)
        .await;
    assert!(
        again.is_ok(),
        "disposed at return, so no retention: {again:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_may_reopen_a_disposed_token_unless_another_run_took_it() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;
    let reopen = |order: &str| {
        let (keel, c) = (keel.clone(), c.clone());
        let order = order.to_string();
        async move {
            let options = StartOptions::token(format!("order:{order}"));
            let run = keel
                .start_with(&c, "reopen_after_dispose", &note(&order, "a"), &options)
                .await
                .unwrap();
            let waiting = keel.drive(&run.run_id).await.unwrap();
            assert_eq!(waiting.status, RunStatus::Waiting);
            run.run_id
        }
    };
    let alone = reopen("18").await;
    keel.resume_hook("gate:18", "{}").await.unwrap();
    let done = keel.drive(&alone).await.unwrap();
    assert_eq!(output(&done), json!({"reopened_held_by": null}));

    let first = reopen("19").await;
    let taker = keel
        .start_with(
            &c,
            "order_updates",
            &note("19", "b"),
            &StartOptions::token("order:19"),
        )
        .await
        .unwrap();
    keel.resume_hook("gate:19", "{}").await.unwrap();
    let done = keel.drive(&first).await.unwrap();
    assert_eq!(output(&done), json!({"reopened_held_by": taker.run_id}));
    assert_replays(&keel, &[&alone, &first]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_run_keeps_its_token_for_its_retention() {
    let clock = ManualClock::at(1_800_000_000_000);
    let store = TestStore::new();
    let mut config = store.config();
    config.clock = clock.clone();
    let (keel, c) = open_with(config, keel_tests::ORDER_HOOKS).await;
    let options =
        StartOptions::from(StartHook::new("order:20").min_retention(Duration::from_secs(3600)));
    let run = keel
        .start_with(&c, "order_updates", &note("20", "a"), &options)
        .await
        .unwrap();
    keel.cancel(&run.run_id, "", "test").await.unwrap();
    keel.result(&run.run_id, true).await.unwrap();
    let refused = keel
        .start_with(&c, "order_updates", &note("20", "b"), &options)
        .await;
    assert_eq!(conflicting_run(refused), run.run_id);
    clock.advance(3600 * 1000 + 1);
    let admitted = keel
        .start_with(&c, "order_updates", &note("20", "b"), &options)
        .await;
    assert!(admitted.is_ok(), "{admitted:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn awaiting_a_hook_another_run_holds_fails_with_hook_conflict() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;
    let owner = keel
        .start_with(
            &c,
            "order_updates",
            &note("21", "a"),
            &StartOptions::token("order:21"),
        )
        .await
        .unwrap();
    // Started without the token, the second run's hook on `order:21` conflicts.
    let second = run(&keel, &c, "order_updates", &note("21", "b")).await;
    assert_eq!(second.status, RunStatus::Failed);
    let message = second.error.unwrap().message;
    assert!(
        message.contains(owner.run_id.as_str()) && message.contains("order:21"),
        "{message}"
    );
    assert_replays(&keel, &[&second.run_id]).await;
}

/// Every payload replays the run's whole history; only the work after it
/// counts against the activation's fuel, so a long-lived run never runs
/// out of it.
#[tokio::test(flavor = "multi_thread")]
async fn replaying_a_long_history_costs_no_fuel() {
    let store = TestStore::new();
    let mut config = store.config();
    // Enough for one payload's new work, far too little to replay them all.
    config.workflow_fuel = FUEL_PER_PAYLOAD;
    let (keel, c) = open_with(config, keel_tests::ORDER_HOOKS).await;
    let run = keel
        .start(&c, "order_updates", &note("long", "first"))
        .await
        .unwrap();
    keel.drive(&run.run_id).await.unwrap();
    for i in 0..PAYLOADS {
        let update = json!({"note": format!("n{i}"), "done": i + 1 == PAYLOADS});
        keel.resume_hook("order:long", &update.to_string())
            .await
            .unwrap();
        let driven = keel.drive(&run.run_id).await.unwrap();
        assert!(driven.error.is_none(), "payload {i}: {:?}", driven.error);
    }
    let run = keel.get_run(&run.run_id).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let notes: Vec<String> = serde_json::from_str(run.output.as_deref().unwrap()).unwrap();
    assert_eq!(notes.len(), PAYLOADS + 1);
}

/// Fuel that one payload's new work fits in many times over, and that the
/// replay of [`PAYLOADS`] payloads' history does not.
const FUEL_PER_PAYLOAD: u64 = 2_000_000;
const PAYLOADS: usize = 250;

#[tokio::test(flavor = "multi_thread")]
async fn a_payload_whose_delivery_is_unconfirmed_says_its_outcome_is_unknown() {
    let store = TestStore::new();
    let (keel, c, backend) = hooks_engine_with_backend(&store).await;
    let run = keel
        .start_with(
            &c,
            "order_updates",
            &note("9", "a"),
            &StartOptions::token("order:9"),
        )
        .await
        .unwrap();
    keel.drive(&run.run_id).await.unwrap();
    backend.unconfirm_next_write();
    let resumed = keel
        .resume_hook("order:9", r#"{"note": "b", "done": true}"#)
        .await;
    match resumed {
        Err(e @ Error::ResumeOutcomeUnknown { .. }) => {
            assert!(e.ids().contains(&("token", "order:9".to_string())), "{e}");
        }
        other => panic!("expected resume_outcome_unknown, got {other:?}"),
    }
    // It was in fact delivered: the run reads it and ends.
    let ended = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(ended.status, RunStatus::Completed, "{:?}", ended.error);
}

/// The facts of `run_id`'s journal, by name.
async fn fact_names(keel: &Keel, run_id: &str) -> Vec<&'static str> {
    let journal = keel.journal(run_id).await.unwrap();
    journal.iter().map(|e| e.fact.name()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_payload_that_does_not_fit_the_hooks_type_is_refused_and_the_run_keeps_waiting() {
    let store = TestStore::new();
    let (keel, c) = common::open(store.config()).await;
    let waiting = run(&keel, &c, "decide", r#""a""#).await;
    assert_eq!(waiting.status, RunStatus::Waiting);
    let hook = keel.get_hook("decide:a").await.unwrap();
    assert!(
        hook.payload_schema
            .as_deref()
            .is_some_and(|s| s.contains("approved")),
        "the hook keeps its payload type's schema: {hook:?}"
    );
    for (payload, at) in [
        (r#"{"approved": "yes", "note": "n"}"#, "/approved"),
        (r#"{"approved": true}"#, "/"),
        (r#"{"approved": true, "note": "n", "extra": 1}"#, "/"),
    ] {
        match keel.resume_hook("decide:a", payload).await {
            Err(e @ Error::PayloadMismatch { .. }) => {
                assert_eq!(e.kind(), keel_host::core::ErrorKind::InvalidInput);
                let Error::PayloadMismatch {
                    token,
                    run_id,
                    problems,
                } = &e
                else {
                    unreachable!()
                };
                assert_eq!((token.as_str(), run_id), ("decide:a", &waiting.run_id));
                assert!(
                    problems.iter().any(|p| p.starts_with(&format!("at {at}:"))),
                    "{payload}: {problems:?}"
                );
            }
            other => panic!("{payload} was not refused: {other:?}"),
        }
    }
    let still = keel.drive(&waiting.run_id).await.unwrap();
    assert_eq!(still.status, RunStatus::Waiting, "nothing was delivered");
    assert!(
        !fact_names(&keel, &waiting.run_id)
            .await
            .contains(&"hook_received")
    );
    keel.resume_hook("decide:a", r#"{"approved": true, "note": "fine"}"#)
        .await
        .unwrap();
    let done = keel.drive(&waiting.run_id).await.unwrap();
    assert_eq!(output(&done), json!({"approved": true, "note": "fine"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_failed_by_a_payload_it_refused_is_retried_past_it() {
    let store = TestStore::new();
    let (keel, c) = common::open(store.config()).await;
    let waiting = run(&keel, &c, "decide", r#""b""#).await;
    // Fits the schema (a string), but the workflow's type refuses a blank
    // note.
    keel.resume_hook("decide:b", r#"{"approved": true, "note": " "}"#)
        .await
        .unwrap();
    let failed = keel.drive(&waiting.run_id).await.unwrap();
    assert_eq!(failed.status, RunStatus::Failed, "{failed:?}");
    assert!(
        failed
            .error
            .as_ref()
            .is_some_and(|e| e.message.contains("a note cannot be blank")),
        "{failed:?}"
    );
    assert!(
        fact_names(&keel, &waiting.run_id)
            .await
            .contains(&"hook_refused")
    );
    let first_step_ids = common::step_ids(&keel.journal(&waiting.run_id).await.unwrap());

    keel.retry(&waiting.run_id).await.unwrap();
    let retried = keel.drive(&waiting.run_id).await.unwrap();
    assert_eq!(
        retried.status,
        RunStatus::Waiting,
        "the refused payload is skipped: the run waits for the next one ({retried:?})"
    );
    let names = fact_names(&keel, &waiting.run_id).await;
    assert!(names.contains(&"payload_skipped"), "{names:?}");
    keel.resume_hook("decide:b", r#"{"approved": false, "note": "no"}"#)
        .await
        .unwrap();
    let done = keel.drive(&waiting.run_id).await.unwrap();
    assert_eq!(output(&done), json!({"approved": false, "note": "no"}));
    let journal = keel.journal(&waiting.run_id).await.unwrap();
    let attempts_of_first_step = journal
        .iter()
        .filter(|e| matches!(e.fact, Fact::StepAttemptStarted { command: 0, .. }))
        .count();
    assert_eq!(
        attempts_of_first_step, 1,
        "the step before the payload did not run again"
    );
    assert_eq!(
        common::step_ids(&keel_host::core::index::effective_entries(&journal))[0],
        first_step_ids[0],
        "the first step keeps its ID"
    );
    assert!(keel.replay(&waiting.run_id, None).await.unwrap().is_ok());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_that_passes_over_a_refused_payload_takes_the_next() {
    let store = TestStore::new();
    let (keel, c) = common::open(store.config()).await;
    let waiting = run(&keel, &c, "decide_patiently", r#""c""#).await;
    keel.resume_hook("decide:c", r#"{"approved": true, "note": ""}"#)
        .await
        .unwrap();
    keel.resume_hook("decide:c", r#"{"approved": true, "note": "yes"}"#)
        .await
        .unwrap();
    let done = keel.drive(&waiting.run_id).await.unwrap();
    assert_eq!(output(&done), json!({"approved": true, "note": "yes"}));
    let journal = keel.journal(&waiting.run_id).await.unwrap();
    let refused: Vec<u64> = journal
        .iter()
        .filter_map(|e| match &e.fact {
            Fact::HookRefused { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    assert_eq!(refused, vec![0], "payload 0 was refused, once");
    assert!(keel.replay(&waiting.run_id, None).await.unwrap().is_ok());
}

/// The `Traced` entry of `run_id`'s journal: trace, span, parent span.
async fn traced(keel: &Keel, run_id: &str) -> Option<(String, String, Option<String>)> {
    keel.journal(run_id)
        .await
        .unwrap()
        .into_iter()
        .find_map(|e| match e.fact {
            Fact::Traced {
                trace_id,
                span_id,
                parent_span_id,
            } => Some((trace_id, span_id, parent_span_id)),
            _ => None,
        })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_started_run_joins_its_callers_trace_and_its_child_joins_it_and_both_replay() {
    let store = TestStore::new();
    let (keel, c) = hooks_engine(&store).await;
    let (trace, caller) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let options = StartOptions {
        traceparent: Some(format!("00-{trace}-{caller}-01")),
        ..StartOptions::default()
    };
    let parent = keel
        .start_with(&c, "start_order", &note("11", "a"), &options)
        .await
        .unwrap();
    let parent = keel.drive(&parent.run_id).await.unwrap();
    let child = output(&parent)["started"].as_str().unwrap().to_string();
    let (t, parent_span, under) = traced(&keel, &parent.run_id).await.expect("traced");
    assert_eq!((t.as_str(), under.as_deref()), (trace, Some(caller)));
    let (t, child_span, under) = traced(&keel, &child).await.expect("the child is traced");
    assert_eq!(t, trace, "the child's spans are in the parent's trace");
    assert_eq!(
        under.as_deref(),
        Some(parent_span.as_str()),
        "under the parent's run span"
    );
    assert_ne!(child_span, parent_span);
    // A start with no traceparent, on an engine not asked to trace, has none.
    let plain = run(&keel, &c, "start_order", &note("12", "a")).await;
    assert_eq!(traced(&keel, &plain.run_id).await, None);
    assert_replays(&keel, &[&parent.run_id, &child, &plain.run_id]).await;
}

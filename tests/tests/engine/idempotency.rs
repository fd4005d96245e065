//! TTL idempotency keys and event triggers (the Hatchet semantics).

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::common::{ManualClock, TestStore, json, open, open_backend};
use keel_host::core::Clock;
use keel_host::core::{RunId, RunStatus};
use keel_host::store::KeyStore;
use keel_host::{Error, Keel, Loaded, StartOptions};
use serde_json::json;

const MINUTE: u64 = 60_000;

fn tenant(t: &str) -> StartOptions {
    StartOptions {
        additional_metadata: Some(json!({ "tenant": t })),
        ..StartOptions::default()
    }
}

async fn start(
    keel: &Keel,
    c: &Loaded,
    workflow: &str,
    input: &str,
    o: &StartOptions,
) -> Result<RunId, Error> {
    keel.start_with(c, workflow, input, o)
        .await
        .map(|r| r.run_id)
}

fn collided_with(result: Result<RunId, Error>) -> RunId {
    match result {
        Err(Error::IdempotencyCollision {
            existing_run_id, ..
        }) => existing_run_id,
        other => panic!("expected a collision, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_seed_timeline_admits_at_00_00_and_00_06_and_holds_the_key_until_00_11() {
    let clock = Arc::new(ManualClock(AtomicU64::new(1_800_000_000_000)));
    let t0 = clock.now_ms();
    let store = TestStore::new();
    let mut config = store.config();
    config.clock = clock.clone();
    let (keel, testbed, backend) = open_backend(config, keel_tests::TESTBED).await;
    // tenant_task: key `additional_metadata.tenant + ':' + input.id`, TTL 5 minutes.
    let at = |m: u64| clock.0.store(t0 + m * MINUTE, Ordering::SeqCst);
    let acme = tenant("acme");
    let trigger = || start(&keel, &testbed, "tenant_task", r#"{"id": "42"}"#, &acme);

    at(0);
    let first = trigger().await.unwrap();
    at(2);
    assert_eq!(collided_with(trigger().await), first);
    at(4);
    assert_eq!(
        collided_with(trigger().await),
        first,
        "a refused trigger extended the window"
    );
    at(6);
    let second = trigger().await.unwrap();
    assert_ne!(second, first);
    let hold = backend
        .key_hold("tenant_task", "acme:42")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(hold.run_id, second);
    assert_eq!(hold.expires_at_ms, t0 + 11 * MINUTE);
    at(10);
    assert_eq!(collided_with(trigger().await), second);
    at(11);
    trigger().await.unwrap();
    assert_eq!(keel.list_runs().await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_colliding_start_names_the_first_run_and_reads_the_same_result() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let first = keel
        .run(&testbed, "idempotent_task", r#"{"id": "7"}"#)
        .await
        .unwrap();
    assert_eq!(
        json(first.output.as_deref().unwrap()),
        json!({"result": "Hello, world from task 7"})
    );
    let err = keel
        .run(&testbed, "idempotent_task", r#"{"id": "7"}"#)
        .await
        .unwrap_err();
    assert_eq!(err.kind().as_str(), "idempotency_collision");
    let existing = collided_with(Err(err));
    assert_eq!(existing, first.run_id);
    let result = keel.result(&existing, true).await.unwrap();
    assert_eq!(result.output, first.output);
    // Another key is admitted.
    keel.run(&testbed, "idempotent_task", r#"{"id": "8"}"#)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_duplicate_event_starts_one_run_and_both_events_are_stored() {
    let store = TestStore::new();
    let (keel, _) = open(store.config()).await;
    let first = keel
        .push_event("idempotency:example", r#"{"id": "e-1"}"#, "{}")
        .await
        .unwrap();
    let second = keel
        .push_event("idempotency:example", r#"{"id": "e-1"}"#, "{}")
        .await
        .unwrap();
    assert_eq!(first.outcomes.len(), 1);
    let run_id = first.outcomes[0].run_id.clone().unwrap();
    assert!(!first.outcomes[0].deduplicated);
    assert!(second.outcomes[0].deduplicated);
    assert_eq!(second.outcomes[0].run_id.as_deref(), Some(run_id.as_str()));
    assert_eq!(keel.list_runs().await.unwrap().len(), 1);
    let events = keel.list_events().await.unwrap();
    assert_eq!(events.len(), 2);
    assert_ne!(events[0].event_id, events[1].event_id);
    let run = keel.result(&run_id, true).await.unwrap();
    assert_eq!(
        json(run.output.as_deref().unwrap())["result"],
        "Hello, world from task e-1"
    );
    // An event nobody subscribes to is stored and starts nothing.
    let lonely = keel
        .push_event("nobody:listens", "null", "{}")
        .await
        .unwrap();
    assert!(lonely.outcomes.is_empty());
    assert_eq!(keel.list_events().await.unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn thirty_two_concurrent_starts_with_one_key_admit_one_run() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let (keel, testbed) = (keel.clone(), testbed.clone());
        tasks.spawn(async move {
            keel.start(&testbed, "idempotent_task", r#"{"id": "race"}"#)
                .await
        });
    }
    let (mut admitted, mut refused) = (Vec::new(), Vec::new());
    while let Some(result) = tasks.join_next().await {
        match result.unwrap() {
            Ok(run) => admitted.push(run.run_id),
            Err(e) => refused.push(collided_with(Err(e))),
        }
    }
    assert_eq!(admitted.len(), 1);
    assert_eq!(refused.len(), 31);
    assert!(refused.iter().all(|r| *r == admitted[0]));
    assert_eq!(keel.list_runs().await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_key_expressions_are_clear_errors_and_create_nothing() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let err = keel
        .start(&testbed, "numeric_key", r#"{"count": 3}"#)
        .await
        .unwrap_err();
    assert_eq!(err.kind().as_str(), "key_expression");
    assert!(
        err.to_string().contains("input.count") && err.to_string().contains("string"),
        "{err}"
    );
    let err = keel
        .start(&testbed, "idempotent_task", r#"{"other": 1}"#)
        .await
        .unwrap_err();
    assert_eq!(err.kind().as_str(), "key_expression");
    assert!(err.to_string().contains("input.id"), "{err}");
    assert!(keel.list_runs().await.unwrap().is_empty());

    let err = keel.load(keel_tests::TESTBED_BAD_KEY).await.unwrap_err();
    assert_eq!(err.kind().as_str(), "key_expression");
    assert!(
        err.to_string().contains("broken_key") && err.to_string().contains("input.("),
        "{err}"
    );
    assert!(err.to_string().contains("does not parse"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn keys_can_come_from_additional_metadata() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let input = r#"{"id": "1"}"#;
    let a = start(&keel, &testbed, "tenant_task", input, &tenant("a"))
        .await
        .unwrap();
    let b = start(&keel, &testbed, "tenant_task", input, &tenant("b"))
        .await
        .unwrap();
    assert_ne!(a, b);
    assert_eq!(
        collided_with(start(&keel, &testbed, "tenant_task", input, &tenant("a")).await),
        a
    );
    let run = keel.result(&b, true).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    // Without the metadata the expression cannot be evaluated.
    let err = keel
        .start(&testbed, "tenant_task", input)
        .await
        .unwrap_err();
    assert_eq!(err.kind().as_str(), "key_expression");
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_keys_are_purged_by_the_worker() {
    let clock = Arc::new(ManualClock(AtomicU64::new(1_800_000_000_000)));
    let store = TestStore::new();
    let mut config = store.config();
    config.clock = clock.clone();
    let (keel, testbed, backend) = open_backend(config, keel_tests::TESTBED).await;
    let run = keel
        .run(&testbed, "idempotent_task", r#"{"id": "p"}"#)
        .await
        .unwrap();
    assert!(
        backend
            .key_hold("idempotent_task", "p")
            .await
            .unwrap()
            .is_some()
    );
    keel.work_once().await.unwrap();
    assert!(
        backend
            .key_hold("idempotent_task", "p")
            .await
            .unwrap()
            .is_some(),
        "purged early"
    );
    clock.0.fetch_add(MINUTE, Ordering::SeqCst);
    keel.work_once().await.unwrap();
    assert!(
        backend
            .key_hold("idempotent_task", "p")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        keel.get_run(&run.run_id).await.unwrap().status,
        RunStatus::Completed
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_event_whose_record_is_unconfirmed_names_the_runs_it_started() {
    let store = TestStore::new();
    let (keel, _, backend) = common::open_backend(store.config(), keel_tests::TESTBED).await;
    backend.unconfirm_next_event();
    let pushed = keel
        .push_event("idempotency:example", r#"{"id": "e-9"}"#, "{}")
        .await;
    let Err(e @ keel_host::Error::EventUnrecorded { .. }) = pushed else {
        panic!("expected event_unrecorded, got {pushed:?}");
    };
    let runs = keel.list_runs().await.unwrap();
    assert_eq!(runs.len(), 1, "the run it started is admitted");
    let named = e
        .ids()
        .into_iter()
        .find(|(k, _)| *k == "started_run_ids")
        .map(|(_, v)| v);
    assert_eq!(named.as_deref(), Some(runs[0].run_id.as_str()), "{e}");
}

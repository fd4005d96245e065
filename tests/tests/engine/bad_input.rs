//! Bad input gets a clear error, and the host stays alive.

use crate::common;

use std::process::Command;

use crate::common::{TestStore, open, open_backend};
use keel_host::core::RunStatus;
use keel_host::core::journal::Fact;
use keel_host::store::LeaseStore;
use keel_host::{Error, Keel};

/// After any bad input, the same engine still runs a good workflow.
async fn still_alive(keel: &Keel) {
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    let run = keel.run(&testbed, "ten_steps", "2").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
}

fn write(store: &TestStore, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = store.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_and_foreign_components_are_refused() {
    let store = TestStore::new();
    let keel = store.config().open_sled().unwrap();

    let garbage = write(&store, "garbage.wasm", b"this is not wasm");
    let err = keel.load(&garbage).await.unwrap_err();
    assert!(matches!(err, Error::InvalidComponent { .. }), "{err}");
    assert!(err.to_string().contains("wasm32-wasip2"), "{err}");

    let core = write(&store, "core.wasm", &wat_bytes("(module)"));
    let err = keel.load(&core).await.unwrap_err();
    assert!(err.to_string().contains("core WebAssembly module"), "{err}");

    let empty = write(&store, "empty.wasm", &wat_bytes("(component)"));
    let err = keel.load(&empty).await.unwrap_err();
    assert!(matches!(err, Error::MissingExports { .. }), "{err}");
    assert!(err.to_string().contains("keel:workflow/guest"), "{err}");

    let foreign = write(
        &store,
        "foreign.wasm",
        &wat_bytes(
            r#"(component (import "acme:db/query@1.0.0" (instance (export "run" (func)))))"#,
        ),
    );
    let err = keel.load(&foreign).await.unwrap_err();
    match &err {
        Error::UnsupportedImport { import, .. } => assert_eq!(import, "acme:db/query@1.0.0"),
        other => panic!("expected UnsupportedImport, got {other}"),
    }
    still_alive(&keel).await;
}

fn wat_bytes(wat: &str) -> Vec<u8> {
    wat.as_bytes().to_vec()
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_json_and_unknown_workflows_create_no_run() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let err = keel
        .run(&testbed, "ten_steps", "{not json")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    let err = keel.run(&testbed, "nope", "1").await.unwrap_err();
    match &err {
        Error::UnknownWorkflow { available, .. } => {
            assert!(available.contains(&"ten_steps".to_string()))
        }
        other => panic!("expected UnknownWorkflow, got {other}"),
    }
    assert!(err.to_string().contains("ten_steps"), "{err}");
    assert!(keel.list_runs().await.unwrap().is_empty());
    still_alive(&keel).await;
}

async fn failed_run(keel: &Keel, workflow: &str, input: &str) -> keel_host::core::RunError {
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    let run = keel.run(&testbed, workflow, input).await.unwrap();
    assert_eq!(run.status, RunStatus::Failed, "{workflow} did not fail");
    run.error.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn io_in_a_workflow_fails_the_run_and_points_to_steps() {
    let store = TestStore::new();
    let (keel, _) = open(store.config()).await;
    let err = failed_run(&keel, "http_in_workflow", "\"http://127.0.0.1:9/\"").await;
    assert_eq!(err.kind, "sandbox_violation");
    assert!(err.message.contains("wasi:http"), "{}", err.message);
    assert!(err.message.contains("#[step]"), "{}", err.message);
    let err = failed_run(&keel, "file_in_workflow", "null").await;
    assert_eq!(err.kind, "sandbox_violation");
    assert!(err.message.contains("wasi:filesystem"), "{}", err.message);
    still_alive(&keel).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn traps_loops_and_memory_bombs_fail_the_run_naming_the_bound() {
    let store = TestStore::new();
    let mut config = store.config();
    config.workflow_fuel = 200_000_000;
    config.max_memory = 64 << 20;
    let (keel, _) = open(config).await;

    let err = failed_run(&keel, "trap", "null").await;
    assert_eq!(err.kind, "guest_trap");
    assert!(
        err.message.contains("boom from the guest"),
        "{}",
        err.message
    );

    let err = failed_run(&keel, "spin", "null").await;
    assert_eq!(err.kind, "fuel_exhausted");
    assert!(err.message.contains("workflow_fuel"), "{}", err.message);

    let err = failed_run(&keel, "memory_bomb", "null").await;
    assert_eq!(err.kind, "memory_exhausted");
    assert!(err.message.contains("max_memory"), "{}", err.message);
    still_alive(&keel).await;
}

/// The child side of the lock test: tries to open the store and reports.
#[test]
#[ignore = "run by a_store_locked_by_another_process_is_refused"]
fn lock_child() {
    let db = std::env::var("KEEL_LOCK_DB").unwrap();
    match Keel::open_sled(
        keel_host::Config::caching_in(keel_tests::compiled_cache()),
        &keel_host::store::sled::SledOptions::new(db),
    ) {
        Ok(_) => println!("KIND=opened"),
        Err(e) => println!("KIND={} MESSAGE={e}", e.kind()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_locked_by_another_process_is_refused() {
    // The embedded store's lock, whichever store the other tests run on.
    let store = TestStore::new();
    let keel = store.config().open_sled().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "bad_input::lock_child",
            "--nocapture",
        ])
        .env("KEEL_LOCK_DB", store.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("KIND=store_locked"), "{stdout}");
    assert!(stdout.contains("another process"), "{stdout}");
    still_alive(&keel).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_that_loops_forever_times_out_and_is_retried() {
    let store = TestStore::new();
    let mut config = store.config();
    config.step_timeout = std::time::Duration::from_millis(300);
    let (keel, testbed) = open(config).await;
    let run = keel.run(&testbed, "spinning_step", "null").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(run.output.as_deref(), Some("2"));
    let journal = keel.journal(&run.run_id).await.unwrap();
    let failed = journal
        .iter()
        .find_map(|e| match &e.fact {
            Fact::StepAttemptFailed { error, .. } => Some(error.clone()),
            _ => None,
        })
        .unwrap();
    assert!(
        failed.contains("timed out") && failed.contains("step timeout"),
        "{failed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_workflows_do_not_stall_other_runs() {
    let store = TestStore::new();
    let mut config = store.config();
    // About a minute of spinning for each, far longer than a small run takes.
    config.workflow_fuel = 200_000_000_000;
    let (keel, testbed, backend) = open_backend(config, keel_tests::TESTBED).await;
    let spinners: Vec<_> = (0..4)
        .map(|_| {
            let (keel, testbed) = (keel.clone(), testbed.clone());
            tokio::spawn(async move { keel.run(&testbed, "spin", "null").await })
        })
        .collect();
    // Each spinner takes its run's lease just before its guest starts.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while backend.held_leases(0).await.unwrap().len() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "the spinners never started"
        );
        tokio::task::yield_now().await;
    }
    let run = keel.run(&testbed, "ten_steps", "3").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert!(
        spinners.iter().all(|s| !s.is_finished()),
        "the small run waited for a spinner to end"
    );
    // Dropping a drive stops its guest at its next yield.
    for spinner in spinners {
        spinner.abort();
        assert!(spinner.await.unwrap_err().is_cancelled());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_over_its_memory_bound_names_the_bound() {
    let store = TestStore::new();
    let mut config = store.config();
    config.max_memory = 32 << 20;
    let (keel, _) = open(config).await;
    let err = failed_run(&keel, "memory_bomb_step", "null").await;
    assert!(
        err.message.contains("memory bound of 33554432 bytes")
            && err.message.contains("max_memory"),
        "{}",
        err.message
    );
    still_alive(&keel).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn input_of_the_wrong_shape_is_refused_before_a_run_exists() {
    let store = TestStore::new();
    let keel = store.config().open_sled().unwrap();
    let order = keel.load(keel_tests::ORDER).await.unwrap();
    let schema = order.manifest.workflow("process_order").unwrap();
    assert_eq!(schema.input_schema.as_ref().unwrap()["title"], "Order");
    assert_eq!(schema.output_schema.as_ref().unwrap()["title"], "Receipt");

    let err = keel
        .run(
            &order,
            "process_order",
            r#"{"order_id": 5, "user_id": "u", "amount": "ten", "payment_url": "x"}"#,
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind().as_str(), "invalid_input");
    let message = err.to_string();
    assert!(
        message.contains("at /order_id: 5 is not of type \"string\""),
        "{message}"
    );
    assert!(message.contains("at /amount"), "{message}");
    // No input at all is `null`, not an order.
    let err = keel.run(&order, "process_order", "null").await.unwrap_err();
    assert!(matches!(err, Error::InputMismatch { .. }), "{err}");
    assert!(
        keel.list_runs().await.unwrap().is_empty(),
        "no run was created"
    );

    // A workflow whose input is a number gets its schema for free.
    let testbed = keel.load(keel_tests::TESTBED).await.unwrap();
    let err = keel
        .run(&testbed, "ten_steps", "\"ten\"")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("is not of type \"integer\""),
        "{err}"
    );
    assert!(keel.list_runs().await.unwrap().is_empty());
    still_alive(&keel).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tampered_compiled_component_is_never_loaded() {
    let store = TestStore::new();
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().join("compiled");
    let mut config = store.config();
    config.cache_dir = cache_dir.clone();
    let keel = config.clone().open_sled().unwrap();
    keel.load(keel_tests::TESTBED).await.unwrap();
    drop(keel);
    let artifact = std::fs::read_dir(&cache_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .expect("the compiled component is cached");
    let digest = std::fs::read_to_string(artifact.with_extension("cwasm.sha256")).unwrap();
    // Flip one byte in the middle, as a corrupted or tampered file would.
    let mut bytes = std::fs::read(&artifact).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&artifact, &bytes).unwrap();

    let (keel, testbed, _) = common::open_backend(config, keel_tests::TESTBED).await;
    let run = keel.run(&testbed, "ten_steps", "3").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    // The tampered bytes were not loaded: the component was compiled again,
    // and the cache holds it under its recorded digest once more.
    let now = std::fs::read(&artifact).unwrap();
    assert_ne!(now, bytes, "the tampered artifact was replaced");
    let recorded = std::fs::read_to_string(artifact.with_extension("cwasm.sha256")).unwrap();
    assert_eq!(recorded, digest);
}

#[tokio::test(flavor = "multi_thread")]
async fn one_run_cannot_take_the_host_s_memory_or_disk() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    // 400 steps with a 1 MiB input each: the first is over the payload
    // bound, so the run fails naming it and nothing that size is stored.
    let run = keel
        .run(
            &testbed,
            "fan_out",
            &serde_json::json!([400, 1 << 20]).to_string(),
        )
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert_eq!(error.kind, "bound_exceeded", "{}", error.message);
    assert!(
        error.message.contains("max_payload_bytes"),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("step `measure`"),
        "{}",
        error.message
    );
    let journal = keel.journal(&run.run_id).await.unwrap();
    let stored: usize = journal
        .iter()
        .map(|e| keel_host::core::journal::entry_to_json(e).to_string().len())
        .sum();
    assert!(stored < 64 << 10, "{stored} bytes journaled");

    // A start whose input is over the bound is refused before a run exists.
    let big = serde_json::json!("x".repeat(2 << 20)).to_string();
    let err = keel
        .run(&testbed, "idempotent_task", &big)
        .await
        .unwrap_err();
    assert_eq!(err.kind().as_str(), "bound_exceeded");
    drop(keel);

    // Steps in flight and journal entries are bounded too.
    let mut config = store.config();
    config.limits.max_steps_in_flight = 20;
    config.limits.max_journal_entries = 200;
    let (keel, testbed) = open(config).await;
    let run = keel
        .run(
            &testbed,
            "fan_out",
            &serde_json::json!([50, 10]).to_string(),
        )
        .await
        .unwrap();
    let error = run.error.unwrap();
    assert!(
        error.message.contains("max_steps_in_flight"),
        "{}",
        error.message
    );
    let run = keel.run(&testbed, "ten_steps", "500").await.unwrap();
    let error = run.error.unwrap();
    assert!(
        error.message.contains("max_journal_entries"),
        "{}",
        error.message
    );
    // The bound, and the run's end.
    assert_eq!(keel.journal(&run.run_id).await.unwrap().len(), 201);
    still_alive(&keel).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn traps_are_explained_in_the_guest_s_terms() {
    let store = TestStore::new();
    let (keel, _) = open(store.config()).await;
    let error = failed_run(&keel, "metadata_in_workflow", "null").await;
    assert_eq!(error.kind, "sandbox_violation", "{}", error.message);
    assert!(
        error.message.contains("only steps may call"),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("workflow_metadata()"),
        "{}",
        error.message
    );
    let error = failed_run(&keel, "wait_twice", "null").await;
    assert_eq!(error.kind, "sandbox_violation", "{}", error.message);
    assert!(
        error.message.contains("already received"),
        "{}",
        error.message
    );
    let error = failed_run(&keel, "deep", "100000").await;
    assert_eq!(error.kind, "guest_trap", "{}", error.message);
    assert!(
        error.message.contains("stack"),
        "a stack overflow says so: {}",
        error.message
    );
    still_alive(&keel).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_that_sleeps_on_the_machine_clock_is_told_to_use_keel_sleep() {
    let store = TestStore::new();
    let (keel, _) = open(store.config()).await;
    let err = failed_run(&keel, "thread_sleep", "3600000").await;
    assert_eq!(err.kind, "sandbox_violation");
    assert!(err.message.contains("keel_sdk::sleep"), "{}", err.message);
    still_alive(&keel).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_computing_past_the_activation_timeout_fails_naming_the_bound() {
    let store = TestStore::new();
    let mut config = store.config();
    // Fuel for minutes; the wall-clock bound ends it first.
    config.workflow_fuel = u64::MAX;
    config.activation_timeout = std::time::Duration::from_millis(300);
    let (keel, _) = open(config).await;
    let err = failed_run(&keel, "spin", "null").await;
    assert_eq!(err.kind, "activation_timeout");
    assert!(
        err.message.contains("activation_timeout"),
        "{}",
        err.message
    );
    assert!(err.message.contains("#[step]"), "{}", err.message);
    still_alive(&keel).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_computing_workflow_is_cancelled_without_waiting_for_it() {
    let store = TestStore::new();
    let mut config = store.config();
    config.workflow_fuel = u64::MAX;
    let (keel, testbed, backend) = open_backend(config, keel_tests::TESTBED).await;
    let run = keel.start(&testbed, "spin", "null").await.unwrap();
    let drive = tokio::spawn({
        let (keel, run_id) = (keel.clone(), run.run_id.clone());
        async move { keel.drive(&run_id).await }
    });
    // The drive takes the run's lease just before its guest starts.
    while backend.held_leases(0).await.unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
    let cancelled = keel.terminate(&run.run_id).await.unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    let driven = drive.await.unwrap().unwrap();
    assert_eq!(driven.status, RunStatus::Cancelled);
    let journal = keel.journal(&run.run_id).await.unwrap();
    assert!(matches!(journal.last().unwrap().fact, Fact::RunCancelled));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_failed_on_a_bound_goes_on_once_the_bound_is_raised() {
    let store = TestStore::new();
    let mut config = store.config();
    config.workflow_fuel = 20_000;
    let (keel, testbed) = open(config).await;
    let run = keel.run(&testbed, "ten_steps", "10").await.unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.unwrap().kind, "fuel_exhausted");
    drop((keel, testbed));

    let (keel, _) = open(store.config()).await;
    keel.retry(&run.run_id).await.unwrap();
    let run = keel.result(&run.run_id, true).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(run.output.as_deref(), Some("45"));
    let verdict = keel.replay(&run.run_id, None).await.unwrap();
    assert!(verdict.is_ok(), "{verdict:?}");
}

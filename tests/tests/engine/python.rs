//! Python workflows (`sdk/python`, built with componentize-py) through the
//! real host, held to the guarantees of Rust ones: one charge through an
//! API that loses a confirmation, a kill -9 mid-step, the hook seeds,
//! replay and divergence, and the deterministic sandbox.

use crate::common;

use std::process::{Command, Stdio};
use std::sync::Arc;

use crate::common::{TestStore, json, open_backend, order_input, step_ids};
use keel_host::core::divergence::Verdict;
use keel_host::core::journal::Fact;
use keel_host::core::{RunId, RunRecord, RunStatus};
use keel_host::{Error, Grants, Keel, Loaded, StartOptions};
use keel_payment_api::PaymentApi;
use serde_json::json;

/// An engine over `store` whose steps may reach `api`, with the Python
/// guest at `component` loaded.
async fn python_engine(
    store: &TestStore,
    api: Option<&PaymentApi>,
    component: &str,
) -> (Keel, Arc<Loaded>) {
    let mut config = store.config();
    if let Some(api) = api {
        config.grants = Grants {
            http: vec![api.addr.to_string()],
            ..Grants::default()
        };
    }
    let (keel, loaded, _) = open_backend(config, component).await;
    (keel, loaded)
}

/// The `Idempotency-Key`s the API received for `/charge`.
fn charge_keys(api: &PaymentApi) -> Vec<String> {
    api.requests()
        .iter()
        .filter(|r| r.path == "/charge")
        .map(|r| r.idempotency_key.clone().expect("an Idempotency-Key"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_order_charges_once_with_the_step_id_when_the_first_confirmation_is_lost() {
    let api = PaymentApi::start(true).await.unwrap();
    let store = TestStore::new();
    let (keel, order) = python_engine(&store, Some(&api), keel_tests::PYTHON_ORDER).await;
    let run = keel
        .run(&order, "process_order", &order_input(&api, "py-1"))
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let out = json(run.output.as_deref().unwrap());
    assert_eq!(
        out,
        json!({"order_id": "py-1", "reservation_id": "res-py-1", "charge_id": "ch_1"})
    );
    assert_eq!(api.charges().len(), 1, "charged once");
    let journal = keel.journal(&run.run_id).await.unwrap();
    let charge_step = journal
        .iter()
        .find_map(|e| match &e.fact {
            Fact::StepScheduled { step_id, name, .. } if name == "charge_user" => {
                Some(step_id.clone())
            }
            _ => None,
        })
        .expect("charge_user was scheduled");
    assert_eq!(charge_keys(&api), [charge_step.clone(), charge_step]);
    // The charge's body went with its length (the payment API, like many
    // servers, refuses chunked bodies), and it is the order's.
    for charge in api.requests().iter().filter(|r| r.path == "/charge") {
        assert_eq!(charge.content_length, Some(charge.body.len().to_string()));
        assert_eq!(json(&charge.body)["order_id"], "py-1");
    }
    // The recorded build replays its journal to the same output.
    assert_eq!(
        keel.replay(&run.run_id, None).await.unwrap(),
        Verdict::Ok {
            output: run.output.clone()
        }
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_journal_diverges_readably_against_a_build_that_charges_first() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let (keel, order) = python_engine(&store, Some(&api), keel_tests::PYTHON_ORDER).await;
    let run = keel
        .run(&order, "process_order", &order_input(&api, "py-2"))
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    let changed = keel.load(keel_tests::PYTHON_ORDER_V2).await.unwrap();
    match keel.replay(&run.run_id, Some(&changed)).await.unwrap() {
        Verdict::Diverged(d) => {
            assert_eq!(d.position, 0);
            assert_eq!(d.recorded.step_name.as_deref(), Some("reserve_inventory"));
            assert_eq!(d.requested.step_name.as_deref(), Some("charge_user"));
            assert!(d.recorded.excerpt.contains("py-2"), "{d:?}");
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
}

/// The child side of the kill test: runs the Python order until killed.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "run by a_python_order_killed_mid_step_is_finished_by_a_worker_with_one_charge"]
async fn python_crash_child() {
    let db = std::env::var("KEEL_CRASH_DB").unwrap();
    let input = std::env::var("KEEL_CRASH_INPUT").unwrap();
    let mut config = keel_host::Config::caching_in(keel_tests::compiled_cache());
    config.grants.http = vec![std::env::var("KEEL_CRASH_HOST").unwrap()];
    let sled = keel_host::store::sled::SledOptions::new(&db);
    let keel = Keel::open_sled(config, &sled).unwrap();
    let order = keel.load(keel_tests::PYTHON_ORDER).await.unwrap();
    keel.run(&order, "process_order", &input).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_order_killed_mid_step_is_finished_by_a_worker_with_one_charge() {
    // The API takes the charge and loses its confirmation; the process is
    // killed as it answers, before the step's attempt can be journaled.
    let api = PaymentApi::start(true).await.unwrap();
    let store = TestStore::new();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "python::python_crash_child",
            "--nocapture",
        ])
        .env("KEEL_CRASH_DB", store.path())
        .env("KEEL_CRASH_INPUT", order_input(&api, "py-kill"))
        .env("KEEL_CRASH_HOST", api.addr.to_string())
        .env_remove("KEEL_TEST_STORE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    api.wait_for(|r| r.path == "/charge").await;
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
    let after = step_ids(&keel.journal(&run.run_id).await.unwrap());
    assert_eq!(&after[..before.len()], &before[..], "step IDs changed");
    assert_eq!(api.charges().len(), 1, "charged once across the kill");
    let keys = charge_keys(&api);
    assert!(keys.len() >= 2, "the charge was sent again: {keys:?}");
    assert!(keys.iter().all(|k| *k == after[1]), "{keys:?} vs {after:?}");
    assert_eq!(json(run.output.as_deref().unwrap())["charge_id"], "ch_1");
}

fn note(order_id: &str, note: &str) -> String {
    json!({"order_id": order_id, "note": note}).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_hooks_example_passes_the_seed_scenarios() {
    let store = TestStore::new();
    let (keel, hooks) = python_engine(&store, None, keel_tests::PYTHON_HOOKS).await;
    let token = "order:py-7";
    let owner = keel
        .start_with(
            &hooks,
            "order_updates",
            &note("py-7", "placed"),
            &StartOptions::token(token),
        )
        .await
        .unwrap()
        .run_id;
    // A duplicate start with the same token is refused, naming the owner.
    match keel
        .start_with(
            &hooks,
            "order_updates",
            &note("py-7", "again"),
            &StartOptions::token(token),
        )
        .await
    {
        Err(Error::HookConflict {
            conflicting_run_id, ..
        }) => assert_eq!(conflicting_run_id, owner),
        other => panic!("expected hook_conflict, got {other:?}"),
    }
    // Payloads are delivered in order.
    keel.resume_hook(token, r#"{"note": "gift wrap"}"#)
        .await
        .unwrap();
    keel.resume_hook(token, r#"{"note": "ring twice"}"#)
        .await
        .unwrap();
    keel.resume_hook(token, r#"{"note": "ship it", "done": true}"#)
        .await
        .unwrap();
    let run = keel.drive(&owner).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(
        json(run.output.as_deref().unwrap()),
        json!(["placed", "gift wrap", "ring twice", "ship it"])
    );
    // After the end, the token is free: no hook holds it.
    match keel.resume_hook(token, r#"{"note": "late"}"#).await {
        Err(Error::HookNotFound { .. }) => {}
        other => panic!("expected hook_not_found, got {other:?}"),
    }
    assert_eq!(
        keel.replay(&owner, None).await.unwrap(),
        Verdict::Ok {
            output: run.output.clone()
        }
    );
}

async fn completed(keel: &Keel, c: &Loaded, workflow: &str, input: &str) -> RunRecord {
    let run = keel.run(c, workflow, input).await.unwrap();
    assert_eq!(
        run.status,
        RunStatus::Completed,
        "{workflow}: {:?}",
        run.error
    );
    run
}

#[tokio::test(flavor = "multi_thread")]
async fn python_children_selects_gathers_and_replies_work_and_replay() {
    let store = TestStore::new();
    let mut config = store.config();
    // A timer suspends the run instead of holding it in memory.
    config.park_limit = std::time::Duration::ZERO;
    let (keel, hooks, _) = open_backend(config, keel_tests::PYTHON_HOOKS).await;
    // A child run started with a token; a second start names the owner.
    let first = completed(&keel, &hooks, "start_order", &note("py-8", "placed")).await;
    let child: RunId = json(first.output.as_deref().unwrap())["started"]
        .as_str()
        .unwrap()
        .into();
    let second = completed(&keel, &hooks, "start_order", &note("py-8", "placed")).await;
    assert_eq!(
        json(second.output.as_deref().unwrap()),
        json!({"owner": child.as_str()})
    );
    // A token is held by one hook at a time.
    let twice = completed(&keel, &hooks, "open_twice", &note("py-9", "x")).await;
    let twice_out = json(twice.output.as_deref().unwrap());
    assert_eq!(twice_out["second_held_by"], twice.run_id.as_str());
    // gather returns in argument order.
    let fan = completed(&keel, &hooks, "fan_out", &note("py-10", "n")).await;
    assert_eq!(
        json(fan.output.as_deref().unwrap()),
        json!(["n 0", "n 1", "n 2"])
    );
    // select: a note beats the 30 s timer.
    let waiting = keel
        .start(&hooks, "note_or_timeout", &note("py-11", "x"))
        .await
        .unwrap()
        .run_id;
    assert_eq!(
        keel.drive(&waiting).await.unwrap().status,
        RunStatus::Waiting
    );
    // The hook's payload type is its schema: a note that is not a string
    // is refused, and nothing is delivered.
    match keel.resume_hook("order:py-11", r#"{"note": 7}"#).await {
        Err(e @ Error::PayloadMismatch { .. }) => assert!(e.to_string().contains("note"), "{e}"),
        other => panic!("a payload that does not fit the hook's type: {other:?}"),
    }
    keel.resume_hook("order:py-11", r#"{"note": "first"}"#)
        .await
        .unwrap();
    let selected = keel.drive(&waiting).await.unwrap();
    assert_eq!(selected.output.as_deref(), Some("\"first\""));
    // A step resumes another run's hook.
    let relay = completed(
        &keel,
        &hooks,
        "relay",
        &json!({"token": "order:py-8", "payload": {"note": "from a step", "done": true}})
            .to_string(),
    )
    .await;
    assert_eq!(
        json(relay.output.as_deref().unwrap()),
        json!(child.as_str())
    );
    for run in [&first, &second, &twice, &fan, &selected, &relay] {
        assert_eq!(
            keel.replay(&run.run_id, None).await.unwrap(),
            Verdict::Ok {
                output: run.output.clone()
            },
            "{}",
            run.workflow
        );
    }
}

async fn failed(keel: &Keel, c: &Loaded, workflow: &str, input: &str) -> keel_host::core::RunError {
    let run = keel.run(c, workflow, input).await.unwrap();
    assert_eq!(run.status, RunStatus::Failed, "{workflow} did not fail");
    run.error.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn python_workflow_io_fails_the_run_as_a_rust_workflow_s_does() {
    let store = TestStore::new();
    let (keel, probes) = python_engine(&store, None, keel_tests::PYTHON_PROBES).await;
    let err = failed(&keel, &probes, "read_file", "\"/etc/hostname\"").await;
    assert_eq!(err.kind, "sandbox_violation", "{}", err.message);
    assert!(err.message.contains("wasi:filesystem"), "{}", err.message);
    assert!(err.message.contains("@keel.step"), "{}", err.message);
    let err = failed(
        &keel,
        &probes,
        "http_in_workflow",
        "\"http://127.0.0.1:9/\"",
    )
    .await;
    assert_eq!(err.kind, "sandbox_violation", "{}", err.message);
    assert!(err.message.contains("wasi:http"), "{}", err.message);
    let err = failed(&keel, &probes, "sleep_on_clock", "3600").await;
    assert_eq!(err.kind, "sandbox_violation", "{}", err.message);
    assert!(err.message.contains("keel.sleep"), "{}", err.message);
    // CPython's socket module reaches the filesystem's preopens first.
    let err = failed(&keel, &probes, "open_socket", "9").await;
    assert_eq!(err.kind, "sandbox_violation", "{}", err.message);
    assert!(
        err.message.contains("not available to workflows"),
        "{}",
        err.message
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn python_clock_randomness_and_hashing_come_from_the_journal_and_the_run_id() {
    let store = TestStore::new();
    let (keel, probes) = python_engine(&store, None, keel_tests::PYTHON_PROBES).await;
    let run = completed(&keel, &probes, "clock_random", "null").await;
    let out = json(run.output.as_deref().unwrap());
    assert_eq!(out["before"][0], run.created_at_ms);
    assert_eq!(out["started_at_ms"], run.created_at_ms);
    let journal = keel.journal(&run.run_id).await.unwrap();
    let completed_at = journal
        .iter()
        .find(|e| matches!(e.fact, Fact::StepCompleted { .. }))
        .unwrap()
        .at_ms;
    assert_eq!(out["after"][0], completed_at);
    assert_ne!(out["before"][1], out["after"][1], "random draws repeat");
    assert_ne!(out["before"][2], out["after"][2], "urandom repeats");
    assert_eq!(out["before"][3], out["after"][3], "a string's hash changes");
    assert_eq!(
        keel.replay(&run.run_id, None).await.unwrap(),
        Verdict::Ok {
            output: run.output.clone()
        }
    );
    // Another run draws other numbers.
    let other = completed(&keel, &probes, "clock_random", "null").await;
    assert_ne!(
        json(other.output.as_deref().unwrap())["before"][1],
        out["before"][1]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_python_run_on_two_stores_writes_byte_identical_journals() {
    let mut journals = Vec::new();
    for _ in 0..2 {
        let store = TestStore::new();
        let mut config = store.config();
        config.clock = keel_tests::ManualClock::at(1_800_000_000_000);
        let (keel, probes, _) = open_backend(config, keel_tests::PYTHON_PROBES).await;
        let options = StartOptions {
            run_id: Some(RunId::from("01a23d00-0000-7000-8000-000000000001")),
            ..StartOptions::default()
        };
        let run = keel
            .start_with(&probes, "clock_random", "null", &options)
            .await
            .unwrap();
        let run = keel.drive(&run.run_id).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
        let journal = keel.journal(&run.run_id).await.unwrap();
        journals.push(serde_json::to_vec(&journal).unwrap());
    }
    assert_eq!(journals[0], journals[1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn python_runs_can_hold_every_instance_slot_at_once() {
    // A componentize-py component instantiates 14 core modules (a Rust
    // one 3): the pool holds enough of them for every slot to hold one.
    let store = TestStore::new();
    let (keel, probes) = python_engine(&store, None, keel_tests::PYTHON_PROBES).await;
    let runs = (0..60).map(|_| keel.run(&probes, "ten_steps", "3"));
    for run in futures::future::join_all(runs).await {
        let run = run.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
        assert_eq!(run.output.as_deref(), Some("3"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_step_reaches_only_the_hosts_its_deployment_granted() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let (keel, order) = python_engine(&store, None, keel_tests::PYTHON_ORDER).await;
    let run = keel
        .run(&order, "process_order", &order_input(&api, "py-deny"))
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap().message;
    assert!(
        error.contains(&format!("the host denied HTTP requests to {}", api.addr)),
        "{error}"
    );
    assert!(api.requests().is_empty(), "no request reached the API");
}

#[tokio::test(flavor = "multi_thread")]
async fn python_attributes_streams_logs_patches_and_queries_work_and_replay() {
    use keel_host::core::stream::ChunkBody;
    let store = TestStore::new();
    let (keel, probes) = python_engine(&store, None, keel_tests::PYTHON_PROBES).await;
    let run = completed(&keel, &probes, "tagged", "\"acme\"").await;
    assert_eq!(
        json(run.output.as_deref().unwrap()),
        json!({"patched": true, "workflow": "tagged"})
    );
    assert_eq!(
        run.attributes.get("tenant").map(String::as_str),
        Some("acme")
    );
    let chunks = keel.chunks(&run.run_id, "progress", 0, 100).await.unwrap();
    let data: Vec<_> = chunks
        .iter()
        .filter_map(|c| match &c.body {
            ChunkBody::Data(j) => Some(json(j)),
            _ => None,
        })
        .collect();
    assert_eq!(data, [json!({"i": 0}), json!({"i": 1}), json!({"i": 2})]);
    assert!(matches!(chunks.last().unwrap().body, ChunkBody::Closed));
    // Its queries, read by a replay, journal nothing.
    let before = keel.journal(&run.run_id).await.unwrap().len();
    let queries = keel.queries(&run.run_id).await.unwrap();
    assert_eq!(
        json(&queries.values["tenant"]),
        json!({"name": "acme", "stage": "tagging"})
    );
    assert_eq!(queries.values["stage"], "\"tagged\"");
    assert_eq!(keel.journal(&run.run_id).await.unwrap().len(), before);
    assert_eq!(
        keel.replay(&run.run_id, None).await.unwrap(),
        Verdict::Ok {
            output: run.output.clone()
        }
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_workflow_continues_as_new_until_it_ends() {
    let store = TestStore::new();
    let (keel, probes) = python_engine(&store, None, keel_tests::PYTHON_PROBES).await;
    let first = keel.run(&probes, "countdown", "2").await.unwrap();
    assert_eq!(first.status, RunStatus::Continued, "{:?}", first.error);
    let mut run = first.run_id.clone();
    for input in ["1", "0"] {
        run = run.continued();
        let next = keel.result(&run, true).await.unwrap();
        assert_eq!(next.input, input);
        let done = input == "0";
        assert_eq!(
            next.status,
            if done {
                RunStatus::Completed
            } else {
                RunStatus::Continued
            },
            "{:?}",
            next.error
        );
    }
    assert_eq!(
        keel.get_run(&run).await.unwrap().output.as_deref(),
        Some("0")
    );
    for id in [first.run_id.clone(), first.run_id.continued(), run] {
        let verdict = keel.replay(&id, None).await.unwrap();
        assert!(verdict.is_ok(), "{id}: {verdict:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_python_order_lets_its_charge_finish_and_refunds_it_once() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let (keel, order) = python_engine(&store, Some(&api), keel_tests::PYTHON_ORDER).await;
    // The charge is refused (retried) until the cancel is in.
    api.set_refusing(true);
    let run = keel
        .start(&order, "process_order", &order_input(&api, "py-cancel"))
        .await
        .unwrap();
    let driving = {
        let (keel, run_id) = (keel.clone(), run.run_id.to_string());
        tokio::spawn(async move { keel.drive(&run_id).await })
    };
    api.wait_for(|r| r.path == "/charge").await;
    keel.cancel(&run.run_id, "out of stock", "test")
        .await
        .unwrap();
    // Once the cancel is journaled, the charge may go through: it ends
    // after the cancel and must be refunded.
    tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            let journal = keel.journal(&run.run_id).await.unwrap();
            if journal.iter().any(|e| e.fact.name() == "cancel_requested") {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the cancel is journaled");
    api.set_refusing(false);
    driving.await.unwrap().unwrap();
    let ended = keel.result(&run.run_id, true).await.unwrap();
    assert_eq!(ended.status, RunStatus::Cancelled, "{:?}", ended.error);
    let charges = api.charges();
    assert_eq!(charges.len(), 1, "charged once: {charges:?}");
    let refunds: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.path == "/refund")
        .collect();
    assert_eq!(refunds.len(), 1, "refunded once: {refunds:?}");
    assert!(refunds[0].body.contains(&charges[0].1), "{:?}", refunds[0]);
    let steps = common::step_names(&keel.journal(&run.run_id).await.unwrap());
    assert_eq!(
        steps,
        [
            "reserve_inventory",
            "charge_user",
            "refund_charge",
            "release_inventory"
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_workflow_s_type_hints_refuse_an_input_that_does_not_fit() {
    let store = TestStore::new();
    let (keel, order) = python_engine(&store, None, keel_tests::PYTHON_ORDER).await;
    let err = keel
        .run(
            &order,
            "process_order",
            r#"{"order_id": 5, "user_id": "u", "payment_url": "http://x/charge"}"#,
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind().as_str(), "invalid_input");
    let Error::InputMismatch { problems, .. } = &err else {
        panic!("expected input_mismatch, got {err:?}");
    };
    assert!(
        problems.iter().any(|p| p.starts_with("at /order_id:")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("amount")),
        "the missing field is named: {problems:?}"
    );
    assert!(
        keel.list_runs().await.unwrap().is_empty(),
        "no run was created"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_orders_limit_per_user_and_nightly_schedule_reach_the_host() {
    use keel_host::core::schedule::Spec;
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let (keel, _) = python_engine(&store, Some(&api), keel_tests::PYTHON_ORDER).await;
    let path = std::path::Path::new(keel_tests::PYTHON_ORDER);
    let bytes = std::fs::read(path).unwrap();
    let spec = keel_host::DeploySpec {
        name: Some("shop".into()),
        grants: Some(keel_host::core::GrantSpec {
            http: vec![api.addr.to_string()],
            ..Default::default()
        }),
        ..keel_host::DeploySpec::default()
    };
    let (_, order) = keel.deploy(path, &bytes, spec).await.unwrap();
    // The schedule `nightly_report` declares, created by the deploy.
    let nightly = keel.schedule("shop.nightly_report").await.unwrap();
    assert_eq!(
        nightly.settings.spec,
        Spec::Cron {
            expr: "0 2 * * *".into(),
            tz: "Europe/Berlin".into()
        }
    );
    assert_eq!(nightly.settings.workflow, "nightly_report");
    // At most four orders of one user in progress: the fifth queues.
    let mut runs = Vec::new();
    for i in 0..5 {
        let input = order_input(&api, &format!("py-limit-{i}"));
        runs.push(keel.start(&order, "process_order", &input).await.unwrap());
    }
    let statuses: Vec<RunStatus> = runs.iter().map(|r| r.status).collect();
    assert_eq!(statuses[..4], [RunStatus::Pending; 4], "{statuses:?}");
    assert_eq!(statuses[4], RunStatus::Queued, "{statuses:?}");
    let rows = keel.limits().await.unwrap();
    let user = rows
        .iter()
        .find(|r| r.workflow == "process_order" && r.key.as_deref() == Some("u-1"))
        .unwrap_or_else(|| panic!("no group of user u-1: {rows:?}"));
    assert_eq!(
        (user.declared, user.in_progress, user.queued),
        (Some(4), 4, 1)
    );
    let summary = keel.work(true).await.unwrap();
    assert!(summary.undriven.is_empty(), "{summary:?}");
    for run in &runs {
        let run = keel.get_run(&run.run_id).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    }
    assert_eq!(api.charges().len(), 5, "one charge per order");
}

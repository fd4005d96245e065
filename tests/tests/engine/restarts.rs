//! Restarts and forks end to end: the steps before the point are not run
//! again, those after are (counted at a service), under the same step IDs
//! in place and the fork's own in a fork; a point on a build where the
//! journal kept does not replay is refused, naming the command; what a
//! restart or a fork cannot take along is refused.

use keel_host::core::RunStatus;
use keel_host::core::journal::{Entry, Fact};
use keel_host::core::restart::RestartPoint;
use keel_host::{DeploySpec, ForkOptions, Grants, Keel};
use keel_payment_api::PaymentApi;

use crate::common::{self, TestStore, json, step_ids};

/// The numbers `api` received at `/count`, in order.
fn counted(api: &PaymentApi) -> Vec<String> {
    api.requests()
        .into_iter()
        .filter(|r| r.path == "/count")
        .map(|r| r.body)
        .collect()
}

/// The position of the entry that scheduled `command`.
fn scheduled_at(journal: &[Entry], command: u32) -> u64 {
    journal
        .iter()
        .rev()
        .find(|e| matches!(e.fact, Fact::StepScheduled { command: c, .. } if c == command))
        .map(|e| e.seq)
        .expect("the command is scheduled")
}

async fn granted(store: &TestStore, api: &PaymentApi) -> (Keel, std::sync::Arc<keel_host::Loaded>) {
    let mut config = store.config();
    config.grants = Grants {
        http: vec![api.addr.to_string()],
        ..Grants::default()
    };
    common::open(config).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_runs_again_only_the_steps_from_its_point_under_their_ids() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let (keel, testbed) = granted(&store, &api).await;
    let input = serde_json::json!([api.url("/count"), 3]).to_string();
    let run = keel.run(&testbed, "ten_calls", &input).await.unwrap();
    assert_eq!(run.output.as_deref(), Some("3"));
    let id = run.run_id.as_str();
    let before = keel.journal(id).await.unwrap();
    assert_eq!(counted(&api), ["0", "1", "2"]);

    // From the third step's scheduling: the first two keep their results.
    let from = scheduled_at(&before, 2);
    let restarted = keel
        .restart_run(id, &RestartPoint::Seq(from), None, "test")
        .await
        .unwrap();
    assert_eq!(restarted.status, RunStatus::Pending);
    let done = keel.drive(id).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_eq!(done.output.as_deref(), Some("3"));
    assert_eq!(counted(&api), ["0", "1", "2", "2"], "only the third again");
    let after = keel.journal(id).await.unwrap();
    assert!(
        after.iter().any(|e| e.fact
            == Fact::RunRestarted {
                from_seq: from,
                by: "test".into()
            }),
        "{after:?}"
    );
    let ids = step_ids(&after);
    assert_eq!(ids.last(), step_ids(&before).last(), "the same step ID");
    assert!(keel.replay(id, None).await.unwrap().is_ok());

    // From a step by name: its first scheduling, so all three run again.
    keel.restart_run(id, &RestartPoint::Step("call".into()), None, "test")
        .await
        .unwrap();
    assert_eq!(keel.drive(id).await.unwrap().status, RunStatus::Completed);
    assert_eq!(counted(&api), ["0", "1", "2", "2", "0", "1", "2"]);

    // A live run, a step it never scheduled, a position out of range.
    let live = keel.start(&testbed, "sleeper", "3600000").await.unwrap();
    let e = keel
        .restart_run(live.run_id.as_str(), &RestartPoint::Seq(1), None, "test")
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("only an ended run is restarted"),
        "{e}"
    );
    let e = keel
        .restart_run(id, &RestartPoint::Step("ship".into()), None, "test")
        .await
        .unwrap_err();
    assert_eq!(e.kind().as_str(), "not_retryable");
    assert!(
        e.to_string()
            .contains("no step `ship` (it scheduled: call)"),
        "{e}"
    );
    let e = keel
        .restart_run(id, &RestartPoint::Seq(10_000), None, "test")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("past its journal's end"), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_runs_again_only_the_steps_from_its_point_under_its_own_ids() {
    let api = PaymentApi::start(false).await.unwrap();
    let store = TestStore::new();
    let (keel, testbed) = granted(&store, &api).await;
    let input = serde_json::json!([api.url("/count"), 3]).to_string();
    let source = keel.run(&testbed, "ten_calls", &input).await.unwrap();
    let source_id = source.run_id.as_str();
    let journal = keel.journal(source_id).await.unwrap();
    let from = scheduled_at(&journal, 2);

    let fork = keel
        .fork_run(
            source_id,
            &RestartPoint::Seq(from),
            &ForkOptions::default(),
            "test",
        )
        .await
        .unwrap();
    assert_ne!(fork.run_id, source.run_id, "a fork is a run of its own");
    assert_eq!(
        fork.attributes.get("forked_from").map(String::as_str),
        Some(source_id)
    );
    let done = keel.drive(fork.run_id.as_str()).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{done:?}");
    assert_eq!(done.output.as_deref(), Some("3"));
    assert_eq!(counted(&api), ["0", "1", "2", "2"], "only the third again");
    let forked = keel.journal(fork.run_id.as_str()).await.unwrap();
    let ids = step_ids(&forked);
    assert_eq!(ids.len(), 3);
    for (n, id) in ids.iter().enumerate() {
        assert_eq!(id, &format!("{}-call-{n}", fork.run_id), "the fork's own");
    }
    assert_eq!(
        keel.get_run(source_id).await.unwrap().status,
        RunStatus::Completed
    );
    assert!(
        keel.replay(fork.run_id.as_str(), None)
            .await
            .unwrap()
            .is_ok()
    );

    // A fork asked again with the run ID its caller chose is refused as
    // existing, naming it: a lost answer never makes a second fork.
    let chosen = ForkOptions {
        run_id: Some(fork.run_id.clone()),
        ..ForkOptions::default()
    };
    let again = keel
        .fork_run(source_id, &RestartPoint::Seq(from), &chosen, "test")
        .await
        .unwrap_err();
    assert_eq!(again.kind().as_str(), "run_exists", "{again}");

    // Another input, which the part carried does not replay with: refused,
    // naming the command where the code asks for something else.
    let other = serde_json::json!([api.url("/elsewhere"), 3]).to_string();
    let e = keel
        .fork_run(
            source_id,
            &RestartPoint::Seq(from),
            &ForkOptions {
                input: Some(other),
                ..ForkOptions::default()
            },
            "test",
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind().as_str(), "not_retryable", "{e}");
    assert!(e.to_string().contains("cannot be forked there"), "{e}");
    assert!(e.to_string().contains("command 0"), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_or_restart_onto_a_build_that_does_not_replay_is_refused_naming_the_command() {
    let store = TestStore::new();
    let (keel, testbed) = common::open(store.config()).await;
    let spec = |name: &str| DeploySpec {
        name: Some(name.into()),
        ..DeploySpec::default()
    };
    let bytes = std::fs::read(keel_tests::TESTBED_REORDERED).unwrap();
    let reordered = keel
        .deploy(
            std::path::Path::new(keel_tests::TESTBED_REORDERED),
            &bytes,
            spec("reordered"),
        )
        .await
        .unwrap()
        .0;
    let run = keel.run(&testbed, "two_steps", "5").await.unwrap();
    assert_eq!(json(run.output.as_deref().unwrap()), json("[6,10]"));
    let id = run.run_id.as_str();
    let point = RestartPoint::Step("mul".into());
    let e = keel
        .fork_run(
            id,
            &point,
            &ForkOptions {
                on: Some("reordered".into()),
                ..ForkOptions::default()
            },
            "test",
        )
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains(&format!(
            "does not replay on build {}",
            &reordered.hash.as_str()[..12]
        )) && text.contains("add")
            && text.contains("mul"),
        "{text}"
    );
    let e = keel
        .restart_run(id, &point, Some("reordered"), "test")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("does not replay on build"), "{e}");
    let still = keel.get_run(id).await.unwrap();
    assert_eq!(
        (still.status, &still.component_hash),
        (RunStatus::Completed, &run.component_hash)
    );
    // On its own build, from `mul`: `add` keeps its result.
    keel.restart_run(id, &point, None, "test").await.unwrap();
    let done = keel.drive(id).await.unwrap();
    assert_eq!(json(done.output.as_deref().unwrap()), json("[6,10]"));
    let journal = keel.journal(id).await.unwrap();
    let names = common::step_names(&journal);
    assert_eq!(names, ["add", "mul", "mul"], "mul scheduled again, add not");
    let ids = step_ids(&journal);
    assert_eq!(ids[1], ids[2], "under its command and step ID");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_refuses_a_hook_and_a_restart_a_stream_it_cannot_take_along() {
    let store = TestStore::new();
    let (keel, testbed) = common::open(store.config()).await;
    let run = keel.start(&testbed, "decide", "\"f1\"").await.unwrap();
    let id = run.run_id.as_str();
    keel.drive(id).await.unwrap();
    keel.resume_hook("decide:f1", r#"{"approved": true, "note": "ok"}"#)
        .await
        .unwrap();
    assert_eq!(keel.drive(id).await.unwrap().status, RunStatus::Completed);
    let end = keel.journal(id).await.unwrap().len() as u64 - 1;
    let e = keel
        .fork_run(id, &RestartPoint::Seq(end), &ForkOptions::default(), "test")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("created hook `decide:f1`"), "{e}");

    let streamed = keel
        .run(&testbed, "streamer", r#"{"count": 2}"#)
        .await
        .unwrap();
    assert_eq!(streamed.status, RunStatus::Completed, "{streamed:?}");
    let e = keel
        .restart_run(
            streamed.run_id.as_str(),
            &RestartPoint::Seq(1),
            None,
            "test",
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("wrote to stream"), "{e}");
}

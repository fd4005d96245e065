//! Streams out of runs and request/reply on hooks, end to end through the
//! real host: a workflow's journaled writes survive a crash as the same
//! chunks, a step's retried attempt is marked for readers, a follower sees
//! every chunk once, a reply reaches the resumer and a retried payload ID
//! is delivered once; replay of such runs writes nothing. On sled, or
//! PostgreSQL with `KEEL_TEST_STORE`.

use crate::common;

use crate::common::{TestStore, json, open};
use futures::StreamExt;
use keel_host::core::RunStatus;
use keel_host::core::divergence::Verdict;
use keel_host::core::journal::Fact;
use keel_host::core::stream::{Chunk, ChunkBody, Origin};
use std::time::Duration;

fn data(chunks: &[Chunk]) -> Vec<serde_json::Value> {
    chunks
        .iter()
        .filter_map(|c| match &c.body {
            ChunkBody::Data(j) => Some(json(j)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflows_stream_survives_a_crash_as_the_same_chunks_and_replays_without_writing() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let plan = r#"{"count": 10, "pause_at": 5, "token": "go:crash"}"#;
    let run = keel.start(&testbed, "streamer", plan).await.unwrap();
    let waiting = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(waiting.status, RunStatus::Waiting);
    let before = keel.chunks(&run.run_id, "progress", 0, 100).await.unwrap();
    assert_eq!(
        data(&before),
        (0..5)
            .map(|i| serde_json::json!({ "i": i }))
            .collect::<Vec<_>>(),
        "the first half is readable while the run waits"
    );
    assert!(
        before
            .iter()
            .all(|c| matches!(c.origin, Origin::Workflow { .. })),
        "{before:?}"
    );
    // The process goes away mid-stream; another opens the store.
    drop(keel);
    let (keel, _) = open(store.config()).await;
    keel.resume_hook("go:crash", "true").await.unwrap();
    let ended = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(ended.status, RunStatus::Completed, "{:?}", ended.error);
    let after = keel.chunks(&run.run_id, "progress", 0, 100).await.unwrap();
    assert_eq!(after.len(), 11, "ten values and the close: {after:?}");
    assert_eq!(
        after[..5],
        before[..],
        "the chunks before the crash are the same"
    );
    assert_eq!(
        data(&after),
        (0..10)
            .map(|i| serde_json::json!({ "i": i }))
            .collect::<Vec<_>>()
    );
    assert_eq!(after[10].body, ChunkBody::Closed);
    let streams = keel.streams(&run.run_id).await.unwrap();
    assert!(streams[0].closed && streams[0].chunks == 11, "{streams:?}");

    // Replay reads the same writes from the journal and writes nothing.
    let verdict = keel.replay(&run.run_id, None).await.unwrap();
    assert!(matches!(verdict, Verdict::Ok { .. }), "{verdict:?}");
    let again = keel.chunks(&run.run_id, "progress", 0, 100).await.unwrap();
    assert_eq!(again, after, "replay wrote no chunk");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runs_streams_are_followed_together_from_the_places_given() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let run = keel.start(&testbed, "step_stream", "null").await.unwrap();
    // Started before anything is written: every stream, from 0.
    let follower = keel.follow_streams(&run.run_id, Default::default());
    let ended = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(ended.status, RunStatus::Completed, "{:?}", ended.error);
    let followed: Vec<(String, u64)> = tokio::time::timeout(
        Duration::from_secs(30),
        follower
            .map(|c| c.map(|(name, chunk)| (name, chunk.index)).unwrap())
            .collect::<Vec<_>>(),
    )
    .await
    .expect("the follower ends with the run");
    let all: Vec<(String, u64)> = (0..7).map(|i| ("tokens".to_string(), i)).collect();
    assert_eq!(followed, all, "each chunk once, in order, to the close");
    // From the places given: only what follows them.
    let from = [("tokens".to_string(), 5)].into_iter().collect();
    let rest: Vec<u64> = keel
        .follow_streams(&run.run_id, from)
        .map(|c| c.unwrap().1.index)
        .collect()
        .await;
    assert_eq!(rest, [5, 6]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retried_steps_stream_is_marked_where_its_second_attempt_begins() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let run = keel.start(&testbed, "step_stream", "null").await.unwrap();
    // A follower from the start sees every chunk once, to the close.
    let follower = keel.follow_stream(&run.run_id, "tokens", 0);
    let ended = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(ended.status, RunStatus::Completed, "{:?}", ended.error);
    assert_eq!(json(ended.output.as_deref().unwrap()), "a2-0a2-1a2-2");
    let followed: Vec<Chunk> = tokio::time::timeout(
        Duration::from_secs(30),
        follower.map(|c| c.unwrap()).collect::<Vec<_>>(),
    )
    .await
    .expect("the follower ends at the close");
    let step_id = run.run_id.step_id("tokens", 0).into_string();
    let bodies: Vec<ChunkBody> = followed.iter().map(|c| c.body.clone()).collect();
    assert_eq!(
        bodies,
        [
            ChunkBody::Data("\"a1-0\"".into()),
            ChunkBody::Data("\"a1-1\"".into()),
            ChunkBody::Restart {
                step_id: step_id.clone(),
                attempt: 2
            },
            ChunkBody::Data("\"a2-0\"".into()),
            ChunkBody::Data("\"a2-1\"".into()),
            ChunkBody::Data("\"a2-2\"".into()),
            ChunkBody::Closed,
        ]
    );
    let indexes: Vec<u64> = followed.iter().map(|c| c.index).collect();
    assert_eq!(indexes, (0..7).collect::<Vec<_>>(), "no gap, no duplicate");
    assert_eq!(
        followed[3].origin,
        Origin::Step {
            step_id: step_id.clone(),
            attempt: 2
        },
        "each chunk is tagged with its attempt"
    );
    // From an index, only what follows it.
    let rest: Vec<u64> = keel
        .follow_stream(&run.run_id, "tokens", 5)
        .map(|c| c.unwrap().index)
        .collect()
        .await;
    assert_eq!(rest, [5, 6]);
    // The step's chunks are not in the journal: replay is unaffected.
    let journal = keel.journal(&run.run_id).await.unwrap();
    assert!(
        !journal
            .iter()
            .any(|e| matches!(e.fact, Fact::StreamWritten { .. })),
        "a step's writes are not journaled"
    );
    let verdict = keel.replay(&run.run_id, None).await.unwrap();
    assert!(matches!(verdict, Verdict::Ok { .. }), "{verdict:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reply_reaches_the_resumer_and_a_retried_payload_id_is_delivered_once() {
    let store = TestStore::new();
    let (keel, testbed) = open(store.config()).await;
    let run = keel.start(&testbed, "replier", "\"ask:1\"").await.unwrap();
    assert_eq!(
        keel.drive(&run.run_id).await.unwrap().status,
        RunStatus::Waiting
    );
    let resumed = keel
        .deliver("ask:1", r#"{"q": "weather?"}"#, Some("p-1"))
        .await
        .unwrap();
    assert!(!resumed.duplicate);
    // The resumer waits while the run is driven elsewhere.
    let waiter = {
        let keel = keel.clone();
        tokio::spawn(async move {
            keel.wait_reply("ask:1", "p-1", Duration::from_secs(30))
                .await
        })
    };
    keel.drive(&run.run_id).await.unwrap();
    let reply = waiter.await.unwrap().unwrap();
    assert_eq!(
        json(reply.reply.as_deref().expect("the reply, within the wait")),
        serde_json::json!({"echo": {"q": "weather?"}, "n": 1})
    );
    assert_eq!(
        (reply.run_id.as_str(), reply.index),
        (run.run_id.as_str(), 0)
    );

    // The answer was lost; the client retries with the same ID after a
    // restart: the same reply, and the workflow saw the payload once.
    drop(keel);
    let (keel, _) = open(store.config()).await;
    let again = keel
        .deliver("ask:1", r#"{"q": "weather?"}"#, Some("p-1"))
        .await
        .unwrap();
    assert!(again.duplicate && again.index == 0, "{again:?}");
    keel.drive(&run.run_id).await.unwrap();
    let same = keel.reply("ask:1", "p-1").await.unwrap();
    assert_eq!(same.reply, reply.reply);
    let journal = keel.journal(&run.run_id).await.unwrap();
    let received = journal
        .iter()
        .filter(|e| matches!(e.fact, Fact::HookReceived { .. }))
        .count();
    assert_eq!(received, 1, "the payload was applied once");

    // An unknown payload ID is named.
    let unknown = keel.reply("ask:1", "p-9").await.unwrap_err();
    assert_eq!(
        unknown.kind(),
        keel_host::core::ErrorKind::PayloadNotFound,
        "{unknown}"
    );
    // A reply not sent yet is none after the wait.
    keel.deliver("ask:1", "\"stop\"", Some("p-2"))
        .await
        .unwrap();
    let pending = keel.reply("ask:1", "p-2").await.unwrap();
    assert_eq!(pending.reply, None, "not driven yet");
    let ended = keel.drive(&run.run_id).await.unwrap();
    assert_eq!(ended.status, RunStatus::Completed);
    assert_eq!(json(ended.output.as_deref().unwrap()), 2);
    let verdict = keel.replay(&run.run_id, None).await.unwrap();
    assert!(matches!(verdict, Verdict::Ok { .. }), "{verdict:?}");
}

/// The tokens of answer `turn` as the README's reader contract has a
/// reader keep them: on a restart marker, the chunks the restarted step's
/// earlier attempts wrote are dropped.
fn answer_read(chunks: &[Chunk], turn: u64) -> String {
    let mut kept: Vec<&Chunk> = Vec::new();
    for chunk in chunks {
        match &chunk.body {
            ChunkBody::Restart { step_id, .. } => kept
                .retain(|c| !matches!(&c.origin, Origin::Step { step_id: s, .. } if s == step_id)),
            ChunkBody::Data(_) => kept.push(chunk),
            ChunkBody::Closed => {}
        }
    }
    kept.iter()
        .filter_map(|c| match &c.body {
            ChunkBody::Data(j) => Some(json(j)),
            _ => None,
        })
        .filter(|t| t["turn"] == turn)
        .map(|t| t["token"].as_str().expect("a token").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chat_agent_streams_its_answers_live_and_refunds_once_a_person_approves() {
    use keel_model_api::{HELD_AFTER, ModelApi, Options};
    let model = ModelApi::start(Options {
        token_delay: Duration::ZERO,
        cut_first_answer: true,
    })
    .await
    .unwrap();
    let store = TestStore::new();
    let mut config = store.config();
    config.grants = keel_host::Grants {
        http: vec![model.addr.to_string()],
        ..keel_host::Grants::default()
    };
    let (keel, agent) = common::open_with(config, keel_tests::CHAT_AGENT).await;
    let input = serde_json::json!({"conversation": "c1", "model_url": model.url("")});
    let run = keel
        .start(&agent, "chat", &input.to_string())
        .await
        .unwrap();
    let run_id = run.run_id.clone();
    assert_eq!(
        keel.drive(&run_id).await.unwrap().status,
        RunStatus::Waiting
    );
    let drive = |keel: &keel_host::Keel| {
        let (keel, run_id) = (keel.clone(), run_id.clone());
        tokio::spawn(async move { keel.drive(&run_id).await })
    };

    // The model stops after its first tokens: they are readable while the
    // step is still running, before any reply.
    model.hold();
    keel.deliver("chat:c1", "\"hello there\"", Some("q-1"))
        .await
        .unwrap();
    let driver = drive(&keel);
    let first: Vec<Chunk> = keel
        .follow_stream(&run_id, "tokens", 0)
        .take(HELD_AFTER)
        .map(|c| c.unwrap())
        .collect()
        .await;
    assert_eq!(answer_read(&first, 1), "You said: hello");
    assert!(!driver.is_finished(), "the step is still answering");
    assert_eq!(keel.reply("chat:c1", "q-1").await.unwrap().reply, None);
    model.release();
    assert_eq!(driver.await.unwrap().unwrap().status, RunStatus::Waiting);
    let reply = keel
        .wait_reply("chat:c1", "q-1", Duration::from_secs(30))
        .await
        .unwrap();
    let reply = json(reply.reply.as_deref().expect("the reply"));
    let said = "You said: hello there. I am a stand-in for a model, so I say it back to you, word by word.";
    assert_eq!(
        reply,
        serde_json::json!({"answer": said, "awaiting_approval": null})
    );
    // The first answer was cut off halfway and retried: the reader saw the
    // cut-off tokens, a restart marker, then the whole answer.
    let chunks = keel.chunks(&run_id, "tokens", 0, 1000).await.unwrap();
    let restarts = chunks
        .iter()
        .filter(|c| matches!(c.body, ChunkBody::Restart { attempt: 2, .. }))
        .count();
    assert_eq!(restarts, 1, "{chunks:?}");
    let of_attempt = |n: u32| {
        chunks
            .iter()
            .filter(|c| matches!(c.origin, Origin::Step { attempt, .. } if attempt == n))
            .filter(|c| matches!(c.body, ChunkBody::Data(_)))
            .count()
    };
    // The connection drops after at most half the tokens (hyper may drop
    // the last before sending it); the held ones were read.
    let words = said.split(' ').count();
    assert!(
        (HELD_AFTER..=words / 2).contains(&of_attempt(1)),
        "{chunks:?}"
    );
    assert_eq!(of_attempt(2), words, "{chunks:?}");
    assert_eq!(answer_read(&chunks, 1), said);

    // A refund is asked for; nothing is refunded until a person approves.
    keel.deliver("chat:c1", "\"Please refund order A-17.\"", Some("q-2"))
        .await
        .unwrap();
    drive(&keel).await.unwrap().unwrap();
    let asked = keel
        .wait_reply("chat:c1", "q-2", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        json(asked.reply.as_deref().unwrap())["awaiting_approval"],
        serde_json::json!({"name": "refund", "arguments": {"order": "A-17"}})
    );
    assert!(model.refunds().is_empty(), "no refund before the approval");
    let chunks = keel.chunks(&run_id, "tokens", 0, 1000).await.unwrap();
    assert_eq!(
        answer_read(&chunks, 2),
        "I can refund order A-17. A person must approve it first."
    );

    keel.deliver("approve:c1", r#"{"approved": true}"#, Some("a-1"))
        .await
        .unwrap();
    drive(&keel).await.unwrap().unwrap();
    let approved = keel.reply("approve:c1", "a-1").await.unwrap();
    let outcome = json(approved.reply.as_deref().expect("the approver's answer"));
    assert!(
        outcome
            .as_str()
            .unwrap()
            .starts_with("refunded as rf_1_A-17"),
        "{outcome}"
    );
    // The approver lost the answer and asks again: the same answer, and
    // still one refund.
    let again = keel
        .deliver("approve:c1", r#"{"approved": true}"#, Some("a-1"))
        .await
        .unwrap();
    assert!(again.duplicate);
    drive(&keel).await.unwrap().unwrap();
    assert_eq!(
        keel.reply("approve:c1", "a-1").await.unwrap().reply,
        approved.reply
    );
    assert_eq!(model.refunds().len(), 1);

    keel.deliver("chat:c1", "\"bye\"", Some("q-3"))
        .await
        .unwrap();
    let ended = drive(&keel).await.unwrap().unwrap();
    assert_eq!(ended.status, RunStatus::Completed, "{:?}", ended.error);
    let roles: Vec<String> = json(ended.output.as_deref().unwrap())
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant", "tool"]);
    let streams = keel.streams(&run_id).await.unwrap();
    assert!(streams[0].closed, "bye closes the stream: {streams:?}");
    let verdict = keel.replay(&run_id, None).await.unwrap();
    assert!(matches!(verdict, Verdict::Ok { .. }), "{verdict:?}");
    assert_eq!(model.refunds().len(), 1, "replay refunds nothing");
}

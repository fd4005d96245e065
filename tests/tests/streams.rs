//! Streams out of runs and request/reply on hooks, end to end through the
//! real host: a workflow's journaled writes survive a crash as the same
//! chunks, a step's retried attempt is marked for readers, a follower sees
//! every chunk once, a reply reaches the resumer and a retried payload ID
//! is delivered once; replay of such runs writes nothing. On sled, or
//! PostgreSQL with `KEEL_TEST_STORE`.

mod common;

use common::{TestStore, json, open};
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
    let step_id = format!("{}-0", run.run_id);
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

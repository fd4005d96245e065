//! Conformance cases of streams and payload IDs: a workflow's writes
//! stored with their journal entries once, a step's numbered and marked
//! on a restart, racing writers, bounds, deletion with the run; a payload
//! ID delivered once.

use keel_core::stream::{Chunk, ChunkBody, Origin, StreamRefusal};

use super::*;

fn step(attempt: u32) -> Origin {
    Origin::Step {
        step_id: "s-0".into(),
        attempt,
    }
}

fn data(json: &str) -> ChunkBody {
    ChunkBody::Data(json.into())
}

fn bodies(chunks: &[Chunk]) -> Vec<(u64, ChunkBody)> {
    chunks.iter().map(|c| (c.index, c.body.clone())).collect()
}

pub(super) async fn a_workflows_stream_writes_are_stored_with_their_entries_once(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "r", None, None, 0)
        .await
        .map_err(fail("admit"))?;
    let writes = JournalBuilder::continuing(1, 5)
        .then(Fact::StreamWritten {
            command: 0,
            stream: "tokens".into(),
            value: "\"a\"".into(),
        })
        .then(Fact::StreamWritten {
            command: 1,
            stream: "tokens".into(),
            value: "\"b\"".into(),
        })
        .then(Fact::StreamClosed {
            command: 2,
            stream: "tokens".into(),
        })
        .entries();
    store
        .append("r", &writes, None, None)
        .await
        .map_err(fail("append"))?;
    let again = store.append("r", &writes, None, None).await;
    check(
        matches!(again, Err(StoreError::JournalConflict { .. })),
        || format!("appending the same entries again: {again:?}"),
    )?;
    let store = h.reopen(store).await;
    let chunks = store
        .chunks("r", "tokens", 0, 100)
        .await
        .map_err(fail("chunks"))?;
    check(
        bodies(&chunks)
            == [
                (0, data("\"a\"")),
                (1, data("\"b\"")),
                (2, ChunkBody::Closed),
            ],
        || format!("the stream holds each write once, in order: {chunks:?}"),
    )?;
    check(
        chunks[1].origin == Origin::Workflow { command: 1 } && chunks[1].at_ms == 5,
        || format!("a chunk keeps its command and time: {:?}", chunks[1]),
    )?;
    let from = store
        .chunks("r", "tokens", 2, 100)
        .await
        .map_err(fail("chunks from 2"))?;
    check(bodies(&from) == [(2, ChunkBody::Closed)], || {
        format!("read from index 2: {from:?}")
    })?;
    let streams = store.streams("r").await.map_err(fail("streams"))?;
    check(
        streams.len() == 1 && streams[0].chunks == 3 && streams[0].closed && streams[0].bytes == 6,
        || format!("the run's streams: {streams:?}"),
    )?;
    // A write journaled with the run's end is stored with it too.
    let mut record = store.get_run("r").await.map_err(fail("get"))?;
    record.status = RunStatus::Completed;
    record.output = Some("1".into());
    let tail = JournalBuilder::continuing(4, 7)
        .then(Fact::StreamWritten {
            command: 3,
            stream: "summary".into(),
            value: "\"done\"".into(),
        })
        .then(Fact::RunCompleted { output: "1".into() })
        .entries();
    store
        .end_run(&record, &tail, 7, None)
        .await
        .map_err(fail("end"))?;
    let summary = store
        .chunks("r", "summary", 0, 10)
        .await
        .map_err(fail("chunks"))?;
    check(bodies(&summary) == [(0, data("\"done\""))], || {
        format!("the write journaled with the end: {summary:?}")
    })?;
    let late = store
        .write_stream("r", "tokens", &step(1), data("1"), 6, u64::MAX)
        .await;
    check(
        matches!(
            late,
            Err(StoreError::StreamRefused {
                refusal: StreamRefusal::Closed { .. },
                ..
            })
        ),
        || format!("a step's write after the close: {late:?}"),
    )
}

pub(super) async fn a_steps_writes_are_numbered_marked_on_restart_and_bounded(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "r", None, None, 0)
        .await
        .map_err(fail("admit"))?;
    for json in ["1", "2"] {
        store
            .write_stream("r", "out", &step(1), data(json), 1, 100)
            .await
            .map_err(fail("write"))?;
    }
    let none = store
        .begin_attempt("r", "other", 2, 2)
        .await
        .map_err(fail("begin"))?;
    check(none.is_empty(), || {
        format!("a step that never wrote gets no marker: {none:?}")
    })?;
    let marked = store
        .begin_attempt("r", "s-0", 2, 2)
        .await
        .map_err(fail("begin"))?;
    let restart = ChunkBody::Restart {
        step_id: "s-0".into(),
        attempt: 2,
    };
    check(bodies(&marked) == [(2, restart.clone())], || {
        format!("the second attempt's marker: {marked:?}")
    })?;
    let written = store
        .write_stream("r", "out", &step(2), data("3"), 3, 100)
        .await
        .map_err(fail("write"))?;
    check(bodies(&written) == [(3, data("3"))], || {
        format!("the second attempt's write, after its marker: {written:?}")
    })?;
    let store = h.reopen(store).await;
    let all = store
        .chunks("r", "out", 0, 100)
        .await
        .map_err(fail("chunks"))?;
    check(
        bodies(&all) == [(0, data("1")), (1, data("2")), (2, restart), (3, data("3"))],
        || format!("the stream: {all:?}"),
    )?;
    check(all[3].origin == step(2), || {
        format!("a chunk is tagged with its attempt: {:?}", all[3])
    })?;
    // 3 bytes held; 98 more would pass 100 across the run's streams.
    let over = store
        .write_stream("r", "other", &step(2), data(&"9".repeat(98)), 4, 100)
        .await;
    check(
        matches!(
            over,
            Err(StoreError::StreamRefused {
                refusal: StreamRefusal::TooLarge {
                    would_hold: 101,
                    limit: 100
                },
                ..
            })
        ),
        || format!("a write past the run's bound: {over:?}"),
    )?;
    let streams = store.streams("r").await.map_err(fail("streams"))?;
    check(streams.iter().all(|s| s.name == "out"), || {
        format!("a refused write made no stream: {streams:?}")
    })
}

pub(super) async fn racing_writers_of_one_stream_get_distinct_indexes(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "r", None, None, 0)
        .await
        .map_err(fail("admit"))?;
    let mut tasks = Vec::new();
    for i in 0..16u32 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let origin = Origin::Step {
                step_id: format!("s-{i}"),
                attempt: 1,
            };
            store
                .write_stream("r", "shared", &origin, data(&i.to_string()), 1, u64::MAX)
                .await
        }));
    }
    for task in tasks {
        task.await
            .map_err(fail("writer task"))?
            .map_err(fail("write"))?;
    }
    let chunks = store
        .chunks("r", "shared", 0, 100)
        .await
        .map_err(fail("chunks"))?;
    let indexes: Vec<u64> = chunks.iter().map(|c| c.index).collect();
    check(indexes == (0..16).collect::<Vec<_>>(), || {
        format!("indexes of 16 racing writes: {indexes:?}")
    })?;
    let mut values: Vec<_> = chunks.iter().map(|c| c.body.clone()).collect();
    values.sort_by_key(|b| format!("{b:?}"));
    values.dedup();
    check(values.len() == 16, || {
        format!("each write stored once: {values:?}")
    })
}

pub(super) async fn a_runs_streams_are_deleted_with_it(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "r", None, None, 0)
        .await
        .map_err(fail("admit"))?;
    store
        .write_stream("r", "out", &step(1), data("1"), 1, u64::MAX)
        .await
        .map_err(fail("write"))?;
    end(&*store, "r", 2).await.map_err(fail("end"))?;
    let deleted = store
        .delete_runs(&["r".into()], None)
        .await
        .map_err(fail("delete"))?;
    check(deleted.runs == ["r"], || format!("deleted: {deleted:?}"))?;
    let chunks = store
        .chunks("r", "out", 0, 10)
        .await
        .map_err(fail("chunks"))?;
    let streams = store.streams("r").await.map_err(fail("streams"))?;
    check(chunks.is_empty() && streams.is_empty(), || {
        format!("left after the deletion: {streams:?} {chunks:?}")
    })
}

/// A payload ID delivered at `now_ms`, remembered for 10,000 ms.
/// A payload ID `id` given at `now_ms`, remembered for 10 s.
pub(super) fn id_at(id: &str, now_ms: u64) -> Option<PayloadId<'_>> {
    Some(PayloadId {
        id,
        now_ms,
        remembered_until_ms: now_ms + 10_000,
    })
}

pub(super) async fn a_payload_id_is_delivered_once(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let start = hook("t", "r", None, None);
    admit(&*store, "r", Some(&start), None, 0)
        .await
        .map_err(fail("admit"))?;
    let first = store
        .deliver("t", "\"a\"", id_at("p-1", 10))
        .await
        .map_err(fail("deliver"))?;
    let other = store
        .deliver("t", "\"b\"", None)
        .await
        .map_err(fail("deliver without an ID"))?;
    let store = h.reopen(store).await;
    let again = store
        .deliver("t", "\"a, again\"", id_at("p-1", 20))
        .await
        .map_err(fail("deliver again"))?;
    check(
        !first.duplicate && first.index == 0 && other.index == 1,
        || format!("first deliveries: {first:?} {other:?}"),
    )?;
    check(
        again.duplicate && again.index == 0 && again.run_id == "r",
        || format!("the same ID again: {again:?}"),
    )?;
    let third = store
        .deliver("t", "\"c\"", id_at("p-2", 30))
        .await
        .map_err(fail("deliver p-2"))?;
    check(third.index == 2 && !third.duplicate, || {
        format!("a new ID after a duplicate: {third:?}")
    })?;
    let payload = store.payload("r", "t", 0).await.map_err(fail("payload"))?;
    check(payload == HookPayload::Ready("\"a\"".into()), || {
        format!("the first delivery's payload stays: {payload:?}")
    })?;
    let found = store
        .delivered("r", "t", "p-1")
        .await
        .map_err(fail("delivered"))?;
    let unknown = store
        .delivered("r", "t", "p-9")
        .await
        .map_err(fail("delivered"))?;
    check(found == Some(0) && unknown.is_none(), || {
        format!("lookups: {found:?} {unknown:?}")
    })
}

/// A payload ID outlives its hook: a sender's retry of the delivery that
/// ended its run (the hook gone, or held by a later run) is a duplicate
/// naming the first delivery until the ID expires; then the token answers
/// as it is, and the purge forgets the ID.
pub(super) async fn a_payload_id_is_remembered_after_its_hook_is_gone(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let start = hook("t", "r1", None, None);
    admit(&*store, "r1", Some(&start), None, 0)
        .await
        .map_err(fail("admit"))?;
    let first = store
        .deliver("t", "\"a\"", id_at("d-1", 10))
        .await
        .map_err(fail("deliver"))?;
    store
        .dispose_hook("r1", "t")
        .await
        .map_err(fail("dispose_hook"))?;
    let store = h.reopen(store).await;
    let retried = store
        .deliver("t", "\"a\"", id_at("d-1", 5_000))
        .await
        .map_err(fail("deliver after the hook is gone"))?;
    check(
        !first.duplicate && retried.duplicate && retried.run_id == "r1" && retried.index == 0,
        || format!("the retry of a delivery whose hook is gone: {first:?} then {retried:?}"),
    )?;
    // A later run holds the token: the old delivery is still not its.
    let later = hook("t", "r2", None, None);
    admit(&*store, "r2", Some(&later), None, 0)
        .await
        .map_err(fail("admit r2"))?;
    let to_later = store
        .deliver("t", "\"a\"", id_at("d-1", 6_000))
        .await
        .map_err(fail("deliver with r2 holding the token"))?;
    check(to_later.duplicate && to_later.run_id == "r1", || {
        format!("a retry while a later run holds the token: {to_later:?}")
    })?;
    let pending = store.payload("r2", "t", 0).await.map_err(fail("payload"))?;
    check(pending == HookPayload::Pending, || {
        format!("the later run was given the old delivery: {pending:?}")
    })?;
    // Past its remembrance (10,010) the ID is new again: r2 takes it.
    let expired = store
        .deliver("t", "\"a\"", id_at("d-1", 10_011))
        .await
        .map_err(fail("deliver past the remembrance"))?;
    check(!expired.duplicate && expired.run_id == "r2", || {
        format!("a delivery after the ID expired: {expired:?}")
    })?;
    // The purge forgets what expired, and nothing remembered anew.
    let purged = store
        .purge_expired_payload_ids(10_011)
        .await
        .map_err(fail("purge"))?;
    let again = store
        .deliver("t", "\"a\"", id_at("d-1", 10_012))
        .await
        .map_err(fail("deliver after the purge"))?;
    check(
        purged == 0 && again.duplicate && again.run_id == "r2",
        || format!("purged {purged}; then {again:?}"),
    )?;
    store
        .dispose_hook("r2", "t")
        .await
        .map_err(fail("dispose_hook r2"))?;
    let forgotten = store
        .purge_expired_payload_ids(20_012)
        .await
        .map_err(fail("purge"))?;
    let gone = store.deliver("t", "\"a\"", id_at("d-1", 20_012)).await;
    check(
        forgotten == 1 && matches!(gone, Err(StoreError::HookNotFound { .. })),
        || format!("purged {forgotten}; a delivery with no hook and no ID left: {gone:?}"),
    )
}

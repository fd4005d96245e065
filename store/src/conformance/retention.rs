//! Conformance cases of retention: ended runs oldest first, deletion of
//! everything a run stored, deletions racing, the store's figures.

use keel_core::EventRecord;

use super::*;

/// Admits `run_id` at `at_ms` with a start hook of token `t-RUN` kept
/// until `retain_until` after its end, delivers a payload to it and, if
/// `ended`, ends the run at `at_ms + 1`.
async fn run_with_data(
    store: &dyn Store,
    run_id: &str,
    at_ms: u64,
    ended: bool,
) -> Result<(), String> {
    let token = format!("t-{run_id}");
    let start = hook(&token, run_id, None, Some(u64::MAX));
    admit(store, run_id, Some(&start), None, at_ms)
        .await
        .map_err(fail("admit"))?;
    store
        .resume_hook(&token, "\"paid\"")
        .await
        .map_err(fail("resume"))?;
    if ended {
        end(store, run_id, at_ms + 1).await.map_err(fail("end"))?;
    }
    Ok(())
}

fn ids(runs: &[RunRecord]) -> Vec<&str> {
    runs.iter().map(|r| r.run_id.as_str()).collect()
}

pub(super) async fn ended_runs_are_read_oldest_first_page_by_page(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    for (id, at, ended) in [
        ("c", 30, true),
        ("a", 10, true),
        ("live", 5, false),
        ("b", 20, true),
        ("late", 50, true),
    ] {
        run_with_data(&*store, id, at, ended).await?;
    }
    let all = store
        .ended_runs(50, None, 10)
        .await
        .map_err(fail("ended"))?;
    check(ids(&all) == ["a", "b", "c"], || {
        format!("ended runs admitted before 50: {:?}", ids(&all))
    })?;
    let first = store.ended_runs(50, None, 2).await.map_err(fail("page"))?;
    let cursor = RunCursor::of(first.last().ok_or("an empty first page")?);
    let rest = store
        .ended_runs(50, Some(&cursor), 2)
        .await
        .map_err(fail("next page"))?;
    check(ids(&first) == ["a", "b"] && ids(&rest) == ["c"], || {
        format!("pages: {:?} then {:?}", ids(&first), ids(&rest))
    })
}

pub(super) async fn deleting_runs_removes_all_they_stored_and_spares_live_ones(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    run_with_data(&*store, "old", 10, true).await?;
    run_with_data(&*store, "live", 11, false).await?;
    admit(&*store, "waiter", None, None, 12)
        .await
        .map_err(fail("admit waiter"))?;
    // A live run watching the deleted one, and the deleted one watching
    // a live one (it ended while it waited).
    store.watch("live", "old").await.map_err(fail("watch"))?;
    let before = store.stats().await.map_err(fail("stats"))?;
    let deleted = store
        .delete_runs(&["old".into(), "live".into(), "nobody".into()], None)
        .await
        .map_err(fail("delete"))?;
    check(deleted.runs == ["old"], || {
        format!("deleted {:?}, not only the ended run", deleted.runs)
    })?;
    check(deleted.journal_entries == 2 && deleted.bytes > 0, || {
        format!("figures of the deletion: {deleted:?}")
    })?;
    let store = h.reopen(store).await;
    let gone = store.get_run("old").await;
    check(matches!(gone, Err(StoreError::RunNotFound { .. })), || {
        format!("the deleted run reads back: {gone:?}")
    })?;
    let journal = store.journal("old").await.map_err(fail("journal"))?;
    check(journal.is_empty(), || format!("its journal: {journal:?}"))?;
    let hook = store.get_hook("t-old", 100).await;
    check(matches!(hook, Err(StoreError::HookNotFound { .. })), || {
        format!("its retained token: {hook:?}")
    })?;
    let listed = store.runs_before(None, 10).await.map_err(fail("list"))?;
    check(ids(&listed) == ["waiter", "live"], || {
        format!("listed after the deletion: {:?}", ids(&listed))
    })?;
    let ended = store
        .ended_runs(u64::MAX >> 1, None, 10)
        .await
        .map_err(fail("ended"))?;
    check(ended.is_empty(), || {
        format!("still ended: {:?}", ids(&ended))
    })?;
    // The live run and its hook are untouched; its token is still its own.
    let live = store.get_run("live").await.map_err(fail("get live"))?;
    check(!live.status.is_final(), || format!("{live:?}"))?;
    let p = store
        .payload("live", "t-live", 0)
        .await
        .map_err(fail("payload"))?;
    check(p == HookPayload::Ready("\"paid\"".into()), || {
        format!("the live run's payload: {p:?}")
    })?;
    // The token the deleted run kept is free again.
    admit(
        &*store,
        "next",
        Some(&super::hook("t-old", "next", None, None)),
        None,
        20,
    )
    .await
    .map_err(fail("the deleted run's token is still held"))?;
    let after = store.stats().await.map_err(fail("stats"))?;
    check(
        after.journal_entries + 2 == before.journal_entries + 1
            && after.payloads == before.payloads,
        || format!("before: {before:?}\nafter: {after:?}"),
    )?;
    // Its watch went with it: the live run's end wakes no one.
    let woken = end(&*store, "live", 30).await.map_err(fail("end live"))?;
    check(woken.is_empty(), || {
        format!("the end of `live` woke {woken:?}")
    })
}

pub(super) async fn a_purge_keeps_a_retained_token_until_its_retention_passes(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    let start = hook("order:1", "first", None, Some(100));
    admit(&*store, "first", Some(&start), None, 0)
        .await
        .map_err(fail("admit"))?;
    end(&*store, "first", 10).await.map_err(fail("end"))?;
    let deleted = store
        .delete_runs(&["first".into()], Some(50))
        .await
        .map_err(fail("delete"))?;
    check(deleted.runs == ["first"], || format!("{deleted:?}"))?;
    let again = admit(
        &*store,
        "second",
        Some(&hook("order:1", "second", None, None)),
        None,
        60,
    )
    .await;
    check(
        matches!(again, Err(StoreError::HookConflict { .. })),
        || format!("a start with the purged run's retained token: {again:?}"),
    )?;
    store
        .purge_expired_hooks(150)
        .await
        .map_err(fail("purge hooks"))?;
    admit(
        &*store,
        "third",
        Some(&hook("order:1", "third", None, None)),
        None,
        150,
    )
    .await
    .map_err(fail("the token is still held after its retention"))
}

pub(super) async fn racing_deletions_delete_each_run_once(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let mut all: Vec<RunId> = Vec::new();
    for n in 0..40 {
        let id = format!("r{n:02}");
        run_with_data(&*store, &id, n, true).await?;
        all.push(id.into());
    }
    let mut tasks = Vec::new();
    for reversed in [false, true, false] {
        let (store, mut ids) = (store.clone(), all.clone());
        if reversed {
            ids.reverse();
        }
        tasks.push(tokio::spawn(async move {
            store.delete_runs(&ids, Some(0)).await
        }));
    }
    let mut deleted: Vec<RunId> = Vec::new();
    for task in tasks {
        deleted.extend(
            task.await
                .map_err(fail("task"))?
                .map_err(fail("delete"))?
                .runs,
        );
    }
    deleted.sort();
    check(deleted == all, || {
        format!(
            "{} deletions reported for {} runs",
            deleted.len(),
            all.len()
        )
    })?;
    let left = store.runs_before(None, 100).await.map_err(fail("list"))?;
    check(left.is_empty(), || format!("left: {:?}", ids(&left)))
}

pub(super) async fn the_stats_count_what_the_store_holds(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    run_with_data(&*store, "done", 1, true).await?;
    run_with_data(&*store, "open", 2, false).await?;
    store
        .put_component("hash-1", &[0u8; 1000], 1)
        .await
        .map_err(fail("component"))?;
    for (id, at) in [("e1", 5), ("e2", 50)] {
        let event = EventRecord {
            event_id: id.into(),
            key: "k".into(),
            payload: "{}".into(),
            metadata: "{}".into(),
            at_ms: at,
            outcomes: vec![],
        };
        store.put_event(&event).await.map_err(fail("event"))?;
    }
    let stats = store.stats().await.map_err(fail("stats"))?;
    let by_status: Vec<(&str, u64)> = stats
        .runs_by_status
        .iter()
        .map(|(s, n)| (s.as_str(), *n))
        .collect();
    check(by_status == [("completed", 1), ("pending", 1)], || {
        format!("runs by status: {by_status:?}")
    })?;
    check(
        stats.journal_entries == 3
            && stats.journal_bytes > 0
            && stats.hooks == 2
            && stats.payloads == 1
            && stats.events == 2
            && stats.components == 1
            && stats.component_bytes == 1000
            && stats.size_bytes > 0,
        || format!("{stats:?}"),
    )?;
    let old = store
        .delete_events_before(10)
        .await
        .map_err(fail("delete events"))?;
    let events = store.list_events().await.map_err(fail("events"))?;
    check(
        old == 1 && events.len() == 1 && events[0].event_id == "e2",
        || format!("deleted {old}, left {events:?}"),
    )
}

//! Conformance cases of flow control: slots, queues, strategies, limits.

use keel_core::flow::{OnLimit, SlotState};

use super::*;
use crate::{Admitted, FlowClaim};

/// Admits `run_id` into group `key` of workflow `w` (declared `limit`) at
/// `priority`, `delayed` if given.
async fn enter(
    store: &dyn Store,
    run_id: &str,
    key: &str,
    limit: u32,
    on_limit: OnLimit,
    priority: u8,
) -> Result<Admitted, StoreError> {
    enter_at(store, run_id, key, limit, on_limit, priority, None).await
}

async fn enter_at(
    store: &dyn Store,
    run_id: &str,
    key: &str,
    limit: u32,
    on_limit: OnLimit,
    priority: u8,
    delayed: Option<u64>,
) -> Result<Admitted, StoreError> {
    let mut record = run(run_id, RunStatus::Pending);
    if delayed.is_some() {
        record.status = RunStatus::Scheduled;
        record.wake_at_ms = delayed;
    }
    let journal = started(&record.workflow);
    store
        .admit(Admission {
            run: &record,
            key: None,
            start_hook: None,
            journal: &journal,
            flow: Some(FlowClaim {
                key,
                limit,
                on_limit,
                priority,
            }),
            now_ms: 1,
            lease: None,
            handover: None,
        })
        .await
}

async fn status(store: &dyn Store, run_id: &str) -> Result<RunStatus, String> {
    Ok(store.get_run(run_id).await.map_err(fail("get"))?.status)
}

pub(super) async fn a_group_holds_its_limit_and_queues_the_rest(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let store = &*store;
    for (id, expected) in [
        ("a", Admitted::AsGiven),
        ("b", Admitted::AsGiven),
        ("c", Admitted::Queued),
    ] {
        let got = enter(store, id, "t1", 2, OnLimit::Queue, 3)
            .await
            .map_err(fail("admit"))?;
        check(got == expected, || {
            format!("{id}: {got:?}, not {expected:?}")
        })?;
    }
    // Another key has slots of its own.
    let other = enter(store, "d", "t2", 2, OnLimit::Queue, 3)
        .await
        .map_err(fail("admit"))?;
    check(other == Admitted::AsGiven, || format!("t2: {other:?}"))?;
    check(status(store, "c").await? == RunStatus::Queued, || {
        "the queued run is stored queued".into()
    })?;
    let slot = store.run_slot("c").await.map_err(fail("slot"))?;
    check(
        slot.as_ref()
            .is_some_and(|s| s.position == Some(1) && s.key == "t1" && s.limit == 2),
        || format!("{slot:?}"),
    )?;
    let woken = end(store, "a", 5).await.map_err(fail("end"))?;
    check(woken == [RunId::from("c")], || {
        format!("ending a holder promotes the queued run: {woken:?}")
    })?;
    check(status(store, "c").await? == RunStatus::Pending, || {
        "the promoted run is pending".into()
    })?;
    let slot = store.run_slot("c").await.map_err(fail("slot"))?;
    check(
        slot.is_some_and(|s| s.state == SlotState::Holding && s.position.is_none()),
        || "the promoted run holds a slot".into(),
    )?;
    check(
        store.run_slot("a").await.map_err(fail("slot"))?.is_none(),
        || "an ended run has no slot".into(),
    )?;
    let rows = store.limit_rows().await.map_err(fail("rows"))?;
    let t1 = rows.iter().find(|r| r.key.as_deref() == Some("t1"));
    check(
        t1.is_some_and(|r| r.in_progress == 2 && r.queued == 0 && r.limit == 2),
        || format!("{rows:?}"),
    )
}

pub(super) async fn queued_runs_start_by_priority_then_arrival(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let store = &*store;
    enter(store, "holder", "k", 1, OnLimit::Queue, 3)
        .await
        .map_err(fail("admit"))?;
    for (id, priority) in [("early", 3), ("urgent", 1), ("late", 3), ("idle", 5)] {
        enter(store, id, "k", 1, OnLimit::Queue, priority)
            .await
            .map_err(fail("admit"))?;
    }
    let slot = store.run_slot("late").await.map_err(fail("slot"))?;
    check(slot.as_ref().and_then(|s| s.position) == Some(3), || {
        format!("late is third in line: {slot:?}")
    })?;
    let mut order = Vec::new();
    let mut ending = "holder".to_string();
    for _ in 0..4 {
        let woken = end(store, &ending, 5).await.map_err(fail("end"))?;
        check(woken.len() == 1, || {
            format!("one slot, one promotion: {woken:?}")
        })?;
        ending = woken[0].to_string();
        order.push(ending.clone());
    }
    check(order == ["urgent", "early", "late", "idle"], || {
        format!("promotion order {order:?}")
    })
}

pub(super) async fn a_full_group_cancels_by_its_strategy(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let store = &*store;
    enter(store, "old", "n", 1, OnLimit::CancelNewest, 3)
        .await
        .map_err(fail("admit"))?;
    let got = enter(store, "new", "n", 1, OnLimit::CancelNewest, 3)
        .await
        .map_err(fail("admit"))?;
    check(
        got == Admitted::Rejected {
            holder: "old".into(),
        },
        || format!("cancel_newest: {got:?}"),
    )?;
    let new = store.get_run("new").await.map_err(fail("get"))?;
    check(new.status == RunStatus::Cancelled, || format!("{new:?}"))?;
    check(
        new.error
            .as_ref()
            .is_some_and(|e| e.message.contains("old")),
        || format!("the cancel names the holder: {:?}", new.error),
    )?;
    let journal = store.journal("new").await.map_err(fail("journal"))?;
    check(
        journal.last().map(|e| &e.fact) == Some(&Fact::RunCancelled),
        || format!("its journal ends cancelled: {journal:?}"),
    )?;
    let live = store.live_runs().await.map_err(fail("live"))?;
    check(live.iter().all(|r| r.run_id != "new"), || {
        "a rejected run is not live".into()
    })?;

    enter(store, "first", "p", 1, OnLimit::CancelInProgress, 3)
        .await
        .map_err(fail("admit"))?;
    let got = enter(store, "second", "p", 1, OnLimit::CancelInProgress, 3)
        .await
        .map_err(fail("admit"))?;
    check(
        got == Admitted::Evicting {
            victim: Some("first".into()),
        },
        || format!("cancel_in_progress: {got:?}"),
    )?;
    // A third finds the victim already chosen: it queues behind the second.
    let got = enter(store, "third", "p", 1, OnLimit::CancelInProgress, 3)
        .await
        .map_err(fail("admit"))?;
    check(got == Admitted::Evicting { victim: None }, || {
        format!("no second victim: {got:?}")
    })?;
    let woken = end(store, "first", 5).await.map_err(fail("end"))?;
    check(woken == [RunId::from("second")], || {
        format!("the victim's slot goes to the run that evicted it: {woken:?}")
    })
}

pub(super) async fn an_override_pauses_and_resumes_a_group(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let store = &*store;
    let promoted = store
        .set_limit("w", Some("k"), Some(0), 1)
        .await
        .map_err(fail("set"))?;
    check(promoted.is_empty(), || format!("{promoted:?}"))?;
    for id in ["a", "b", "c"] {
        let got = enter(store, id, "k", 2, OnLimit::CancelNewest, 3)
            .await
            .map_err(fail("admit"))?;
        check(got == Admitted::Queued, || {
            format!("a paused group queues whatever the strategy: {got:?}")
        })?;
    }
    let rows = store.limit_rows().await.map_err(fail("rows"))?;
    check(
        rows.iter().any(|r| {
            r.key.as_deref() == Some("k")
                && r.limit == 0
                && r.overridden == Some(0)
                && r.queued == 3
        }),
        || format!("{rows:?}"),
    )?;
    // A workflow-wide override of 1 is beaten by the key's 0.
    store
        .set_limit("w", None, Some(1), 2)
        .await
        .map_err(fail("set"))?;
    check(status(store, "a").await? == RunStatus::Queued, || {
        "the key's override still pauses it".into()
    })?;
    let mut promoted = store
        .set_limit("w", Some("k"), None, 3)
        .await
        .map_err(fail("reset"))?;
    check(promoted == [RunId::from("a")], || {
        format!("the workflow's limit of 1 now holds: {promoted:?}")
    })?;
    promoted = store
        .set_limit("w", None, None, 4)
        .await
        .map_err(fail("reset"))?;
    check(promoted == [RunId::from("b")], || {
        format!("the declared limit of 2 holds again: {promoted:?}")
    })?;
    check(status(store, "b").await? == RunStatus::Pending, || {
        "a promoted run is pending".into()
    })
}

pub(super) async fn a_delayed_start_asks_for_its_slot_when_due(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let store = &*store;
    for id in ["x", "y"] {
        let got = enter_at(store, id, "k", 1, OnLimit::Queue, 3, Some(100))
            .await
            .map_err(fail("admit"))?;
        check(got == Admitted::AsGiven, || format!("{id}: {got:?}"))?;
    }
    let slot = store.run_slot("x").await.map_err(fail("slot"))?;
    check(slot.is_some_and(|s| s.state == SlotState::Deferred), || {
        "a delayed start holds no slot until due".into()
    })?;
    let x = store.take_slot("x", 100).await.map_err(fail("take"))?;
    check(x == Some(SlotState::Holding), || format!("x: {x:?}"))?;
    check(status(store, "x").await? == RunStatus::Pending, || {
        "x is pending".into()
    })?;
    let y = store.take_slot("y", 100).await.map_err(fail("take"))?;
    check(y == Some(SlotState::Queued), || format!("y: {y:?}"))?;
    check(status(store, "y").await? == RunStatus::Queued, || {
        "y is queued".into()
    })?;
    let again = store.take_slot("y", 101).await.map_err(fail("take"))?;
    check(again.is_none(), || "a slot is asked for once".into())?;
    let woken = end(store, "x", 200).await.map_err(fail("end"))?;
    check(woken == [RunId::from("y")], || format!("{woken:?}"))
}

pub(super) async fn racing_admissions_never_exceed_the_limit(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            enter(&*store, &format!("run-{i:02}"), "k", 3, OnLimit::Queue, 3).await
        }));
    }
    let mut holding = 0;
    for task in tasks {
        match task.await.map_err(fail("task"))? {
            Ok(Admitted::AsGiven) => holding += 1,
            Ok(Admitted::Queued) => {}
            other => return Err(format!("unexpected: {other:?}")),
        }
    }
    check(holding == 3, || format!("{holding} runs took slots of 3"))?;
    let rows = store.limit_rows().await.map_err(fail("rows"))?;
    check(
        rows.len() == 1 && rows[0].in_progress == 3 && rows[0].queued == 13,
        || format!("{rows:?}"),
    )
}

pub(super) async fn a_rate_window_grants_its_limit_per_window_to_racers(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.take_grant("api", 5, 1000, 10_000).await
        }));
    }
    let mut granted = 0;
    let mut retry_at = Vec::new();
    for task in tasks {
        match task.await.map_err(fail("task"))?.map_err(fail("take"))? {
            crate::Grant::Granted { .. } => granted += 1,
            crate::Grant::Wait { ms } => retry_at.push(ms),
        }
    }
    check(granted == 5, || {
        format!("{granted} of 12 racers got one of 5 grants")
    })?;
    let span = 1000 + keel_core::flow::RateWindow::guard_ms(1000);
    // The refused wait for the window to pass (on PostgreSQL's clock,
    // less whatever time has passed since the grants).
    check(
        retry_at.iter().all(|wait| *wait > 0 && *wait <= span),
        || format!("{retry_at:?}"),
    )?;
    let other = store
        .take_grant("other", 1, 1000, 10_000)
        .await
        .map_err(fail("take"))?;
    check(matches!(other, crate::Grant::Granted { .. }), || {
        "keys have windows of their own".into()
    })
}

pub(super) async fn step_permits_hold_their_limit_against_racers_and_lapse(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    let mut tasks = Vec::new();
    for n in 0..10 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let holder = format!("run-{n}/1");
            (
                holder.clone(),
                store.take_permit("db", &holder, 3, 60_000, 10_000).await,
            )
        }));
    }
    let mut holders = Vec::new();
    for task in tasks {
        match task.await.map_err(fail("task"))? {
            (holder, Ok(crate::Grant::Granted { .. })) => holders.push(holder),
            (_, Ok(crate::Grant::Wait { ms })) => {
                check(ms > 0 && ms <= 60_000, || format!("waits {ms} ms"))?;
            }
            (_, Err(e)) => return Err(format!("take: {e}")),
        }
    }
    check(holders.len() == 3, || format!("{holders:?} took 3 permits"))?;
    // A holder renews whatever the limit; a release frees its permit.
    let renewed = store
        .take_permit("db", &holders[0], 3, 60_000, 10_001)
        .await
        .map_err(fail("renew"))?;
    check(matches!(renewed, crate::Grant::Granted { .. }), || {
        format!("a holder renewing: {renewed:?}")
    })?;
    store
        .release_permit("db", &holders[1])
        .await
        .map_err(fail("release"))?;
    let next = store
        .take_permit("db", "late/1", 3, 60_000, 10_002)
        .await
        .map_err(fail("take"))?;
    check(matches!(next, crate::Grant::Granted { .. }), || {
        format!("after a release: {next:?}")
    })?;
    // Permits that lapse free their places (a short TTL here).
    let short = store
        .take_permit("brief", "a/1", 1, 1, 10_000)
        .await
        .map_err(fail("take"))?;
    check(matches!(short, crate::Grant::Granted { .. }), || {
        format!("{short:?}")
    })?;
    // The clock moves on (the given one here, PostgreSQL's own there).
    let mut later = crate::Grant::Wait { ms: 0 };
    for now in 10_002..12_000 {
        later = store
            .take_permit("brief", "b/1", 1, 60_000, now)
            .await
            .map_err(fail("take"))?;
        if matches!(later, crate::Grant::Granted { .. }) {
            break;
        }
    }
    check(matches!(later, crate::Grant::Granted { .. }), || {
        format!("a lapsed permit still held its place: {later:?}")
    })
}

pub(super) async fn a_failed_runs_slot_is_kept_out_of_its_group_until_a_retry(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    let store = &*store;
    for id in ["f", "h", "q"] {
        enter(store, id, "k", 1, OnLimit::Queue, 2)
            .await
            .map_err(fail("admit"))?;
    }
    // f holds the slot and fails: q takes it; f's slot is out of the group.
    let mut failed = run("f", RunStatus::Failed);
    failed.error = Some(keel_core::RunError {
        kind: "step_failed".into(),
        message: "declined".into(),
    });
    let woken = store
        .end_run(&failed, &[], 5, None)
        .await
        .map_err(fail("end"))?;
    check(woken == [RunId::from("h")], || format!("{woken:?}"))?;
    check(
        store.run_slot("f").await.map_err(fail("slot"))?.is_none(),
        || "a failed run has no slot in its group".into(),
    )?;
    let rows = store.limit_rows().await.map_err(fail("rows"))?;
    check(
        rows.len() == 1 && rows[0].in_progress == 1 && rows[0].queued == 1,
        || format!("{rows:?}"),
    )?;
    // Rearmed for a retry: deferred, with its priority; twice is once.
    check(store.rearm_slot("f").await.map_err(fail("rearm"))?, || {
        "the failed run's slot comes back".into()
    })?;
    check(store.rearm_slot("f").await.map_err(fail("rearm"))?, || {
        "a second rearm finds the deferred slot".into()
    })?;
    let slot = store.run_slot("f").await.map_err(fail("slot"))?;
    check(
        slot.is_some_and(|s| s.state == SlotState::Deferred && s.priority == 2),
        || "deferred, at its old priority".into(),
    )?;
    check(!store.rearm_slot("h").await.map_err(fail("rearm"))?, || {
        "a run that did not fail has nothing to rearm".into()
    })?;
    // It asks for a slot like a delayed start: behind q, which queued first.
    let taken = store.take_slot("f", 6).await.map_err(fail("take"))?;
    check(taken == Some(SlotState::Queued), || format!("{taken:?}"))?;
    let slot = store.run_slot("f").await.map_err(fail("slot"))?;
    check(slot.is_some_and(|s| s.position == Some(2)), || {
        "queued behind the run that queued first".into()
    })
}

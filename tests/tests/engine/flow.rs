//! Flow control end to end: concurrency limits per key with real guests
//! calling a real downstream service, queues in priority order, the
//! `cancel_newest` and `cancel_in_progress` strategies, delayed starts,
//! and limits an operator changes at runtime (0 pauses).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{ManualClock, TestStore, open, open_backend};
use keel_host::core::RunStatus;
use keel_host::core::flow::SlotState;
use keel_host::core::journal::Fact;
use keel_host::{Error, Keel, Loaded, StartOptions};
use keel_payment_api::recorder::Recorder;

/// 2026-12-01T00:00:00Z.
const T0: u64 = 1_796_083_200_000;

/// An engine on the manual clock that suspends every timer (so a drive
/// returns as soon as the run waits).
async fn on_manual_clock(store: &TestStore) -> (Keel, Arc<Loaded>, Arc<ManualClock>) {
    let clock = ManualClock::at(T0);
    let mut config = store.config();
    config.clock = clock.clone();
    config.park_limit = Duration::ZERO;
    let (keel, loaded, _) = open_backend(config, keel_tests::TESTBED).await;
    (keel, loaded, clock)
}

fn at_priority(priority: u8) -> StartOptions {
    StartOptions {
        priority: Some(priority),
        ..StartOptions::default()
    }
}

async fn status(keel: &Keel, run_id: &str) -> RunStatus {
    keel.get_run(run_id).await.unwrap().status
}

#[tokio::test(flavor = "multi_thread")]
async fn three_tenants_with_a_limit_of_two_each_never_exceed_it_and_interleave() {
    // Each tenant's first call waits for its second: the limit is reached
    // however slow the machine.
    let recorder = Recorder::meeting(2).await.unwrap();
    let store = TestStore::new();
    let mut config = store.config();
    config.grants = keel_host::Grants {
        http: vec![recorder.addr.to_string()],
        ..keel_host::Grants::default()
    };
    config.max_concurrent_runs = 16;
    let (keel, loaded) = open(config).await;
    // Each tenant's twenty runs are started together, one tenant after the
    // other: a queue shared by all would finish tenant a first.
    let mut runs = Vec::new();
    for tenant in ["a", "b", "c"] {
        for _ in 0..20 {
            let input = serde_json::json!({"url": recorder.url(), "tenant": tenant, "hold_ms": 40});
            let run = keel
                .start(&loaded, "per_tenant", &input.to_string())
                .await
                .unwrap();
            runs.push((tenant, run));
        }
    }
    let statuses: HashMap<&str, Vec<RunStatus>> =
        runs.iter().fold(HashMap::new(), |mut m, (t, r)| {
            m.entry(*t).or_default().push(r.status);
            m
        });
    for (tenant, statuses) in &statuses {
        assert_eq!(
            statuses[..2],
            [RunStatus::Pending, RunStatus::Pending],
            "{tenant}"
        );
        assert!(
            statuses[2..].iter().all(|s| *s == RunStatus::Queued),
            "{tenant}: {statuses:?}"
        );
    }
    let third = keel.run_slot(&runs[2].1.run_id).await.unwrap().unwrap();
    assert_eq!(
        (third.key.as_str(), third.state, third.position, third.limit),
        ("a", SlotState::Queued, Some(1), 2)
    );
    let rows = keel.limits().await.unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(
        rows.iter().all(|r| r.in_progress == 2 && r.queued == 18),
        "{rows:?}"
    );

    let summary = keel.work(true).await.unwrap();
    assert!(summary.undriven.is_empty(), "{summary:?}");
    for (_, run) in &runs {
        assert_eq!(status(&keel, &run.run_id).await, RunStatus::Completed);
    }
    // An attempt whose connection the transport reset (rarely, on a loaded
    // machine) is retried while the service may still hold the request it
    // abandoned: the service counts that request, the engine ran one
    // attempt at a time. Each such retry may add one to its tenant's count.
    let mut retries: HashMap<String, usize> = HashMap::new();
    for (tenant, run) in &runs {
        let journal = keel.journal(&run.run_id).await.unwrap();
        let rows = keel_host::core::timeline::timeline(&journal);
        let extra: usize = rows
            .iter()
            .map(|r| r.attempts.saturating_sub(1) as usize)
            .sum();
        *retries.entry(tenant.to_string()).or_default() += extra;
    }
    let most = recorder.most_at_once();
    for tenant in ["a", "b", "c"] {
        let seen = most.get(tenant).copied().unwrap_or(0);
        let bound = 2 + retries[tenant];
        assert!(
            (2..=bound).contains(&seen),
            "tenant {tenant} reached its limit of 2 and never passed it (retried attempts: {retries:?}): {most:?}"
        );
    }
    let finished = recorder.finished();
    let retried: usize = retries.values().sum();
    // An abandoned request finishes at the service too, if it reached it.
    assert!(
        (60..=60 + retried).contains(&finished.len()),
        "{} calls finished, {retried} retried",
        finished.len()
    );
    for x in ["a", "b", "c"] {
        let last_x = finished.iter().rposition(|t| t == x).unwrap();
        for y in ["a", "b", "c"].into_iter().filter(|y| *y != x) {
            let first_y = finished.iter().position(|t| t == y).unwrap();
            assert!(
                first_y < last_x,
                "{x} finished all its runs before {y} finished one: {finished:?}"
            );
        }
    }
    assert!(
        keel.limits()
            .await
            .unwrap()
            .iter()
            .all(|r| r.in_progress == 0 && r.queued == 0),
        "every slot was given back"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn queued_runs_start_by_priority_and_a_limit_of_zero_pauses_them() {
    let store = TestStore::new();
    let (keel, loaded, clock) = on_manual_clock(&store).await;
    let holder = keel
        .start(&loaded, "one_at_a_time", r#"["holder", 1000]"#)
        .await
        .unwrap();
    assert_eq!(holder.status, RunStatus::Pending);
    assert_eq!(
        keel.drive(&holder.run_id).await.unwrap().status,
        RunStatus::Waiting,
        "a run parked on a timer keeps its slot"
    );
    let mut ids = HashMap::new();
    for (label, priority) in [("a", 3), ("b", 1), ("c", 3), ("d", 5)] {
        let input = serde_json::json!([label, 0]).to_string();
        let run = keel
            .start_with(&loaded, "one_at_a_time", &input, &at_priority(priority))
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::Queued, "{label}");
        ids.insert(label, run.run_id);
    }
    let position = |slot: Option<keel_host::core::flow::RunSlot>| slot.and_then(|s| s.position);
    assert_eq!(position(keel.run_slot(&ids["b"]).await.unwrap()), Some(1));
    assert_eq!(position(keel.run_slot(&ids["d"]).await.unwrap()), Some(4));
    // A queued run is not driven, even when asked.
    assert_eq!(
        keel.drive(&ids["a"]).await.unwrap().status,
        RunStatus::Queued
    );
    let bad = keel
        .start_with(&loaded, "one_at_a_time", r#"["x", 0]"#, &at_priority(9))
        .await
        .unwrap_err();
    assert!(
        matches!(&bad, Error::InvalidInput { reason } if reason.contains("1 (highest) to 5")),
        "{bad}"
    );

    // Paused: the holder ends and nothing starts.
    assert!(
        keel.set_limit("one_at_a_time", None, 0)
            .await
            .unwrap()
            .is_empty()
    );
    clock.advance(1000);
    assert_eq!(
        keel.drive(&holder.run_id).await.unwrap().status,
        RunStatus::Completed
    );
    for label in ["a", "b", "c", "d"] {
        assert_eq!(
            status(&keel, &ids[label]).await,
            RunStatus::Queued,
            "{label}"
        );
    }
    let rows = keel.limits().await.unwrap();
    let row = |key: Option<&str>| {
        let r = rows.iter().find(|r| r.key.as_deref() == key).unwrap();
        (r.limit, r.overridden, r.in_progress, r.queued)
    };
    assert_eq!(row(Some("all")), (0, Some(0), 0, 4), "{rows:?}");
    assert_eq!(
        row(None),
        (0, Some(0), 0, 0),
        "the workflow's override: {rows:?}"
    );
    // Back to the declared limit: the queue drains in priority order.
    let started = keel.reset_limit("one_at_a_time", None).await.unwrap();
    assert_eq!(started, [ids["b"].clone()]);
    let mut order = Vec::new();
    let mut next = started[0].clone();
    loop {
        let run = keel.drive(&next).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed);
        order.push(serde_json::from_str::<String>(run.output.as_deref().unwrap()).unwrap());
        let pending: Vec<_> = keel
            .list_runs()
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.status == RunStatus::Pending)
            .collect();
        match pending.as_slice() {
            [] => break,
            [one] => next = one.run_id.clone(),
            more => panic!("one slot, but {} runs pending", more.len()),
        }
    }
    assert_eq!(order, ["b", "a", "c", "d"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_newest_ends_the_new_run_at_once_naming_the_holder() {
    let store = TestStore::new();
    let (keel, loaded, clock) = on_manual_clock(&store).await;
    let first = keel.start(&loaded, "solo", "1000").await.unwrap();
    keel.drive(&first.run_id).await.unwrap();
    let second = keel.start(&loaded, "solo", "0").await.unwrap();
    assert_eq!(second.status, RunStatus::Cancelled);
    let stored = keel.get_run(&second.run_id).await.unwrap();
    assert_eq!(stored.status, RunStatus::Cancelled);
    let error = stored.error.unwrap();
    assert_eq!(error.kind, "cancelled");
    assert!(
        error.message.contains(first.run_id.as_str()),
        "{}",
        error.message
    );
    let journal = keel.journal(&second.run_id).await.unwrap();
    assert_eq!(journal.last().unwrap().fact, Fact::RunCancelled);
    // Once the holder ends, a new start runs.
    clock.advance(1000);
    keel.drive(&first.run_id).await.unwrap();
    let third = keel.start(&loaded, "solo", "0").await.unwrap();
    assert_eq!(third.status, RunStatus::Pending);
    assert_eq!(
        keel.drive(&third.run_id).await.unwrap().status,
        RunStatus::Completed
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_in_progress_cancels_the_oldest_and_the_newest_takes_its_slot() {
    let store = TestStore::new();
    let (keel, loaded, _clock) = on_manual_clock(&store).await;
    let old = keel.start(&loaded, "latest", "60000").await.unwrap();
    assert_eq!(
        keel.drive(&old.run_id).await.unwrap().status,
        RunStatus::Waiting
    );
    let new = keel.start(&loaded, "latest", "0").await.unwrap();
    assert_eq!(new.status, RunStatus::Queued, "it waits for the cancel");
    let old = keel
        .wait_for(
            &old.run_id,
            keel_host::Until::Ended,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert_eq!(old.status, RunStatus::Cancelled);
    assert_eq!(status(&keel, &new.run_id).await, RunStatus::Pending);
    assert_eq!(
        keel.drive(&new.run_id).await.unwrap().status,
        RunStatus::Completed
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delayed_start_asks_for_its_slot_when_it_comes_due() {
    let store = TestStore::new();
    let (keel, loaded, clock) = on_manual_clock(&store).await;
    let holder = keel
        .start(&loaded, "one_at_a_time", r#"["holder", 5000]"#)
        .await
        .unwrap();
    keel.drive(&holder.run_id).await.unwrap();
    let options = StartOptions {
        start_at_ms: Some(T0 + 1000),
        ..StartOptions::default()
    };
    let later = keel
        .start_with(&loaded, "one_at_a_time", r#"["later", 0]"#, &options)
        .await
        .unwrap();
    assert_eq!(later.status, RunStatus::Scheduled);
    let slot = keel.run_slot(&later.run_id).await.unwrap().unwrap();
    assert_eq!(slot.state, SlotState::Deferred, "no slot before its time");
    clock.advance(1000);
    assert_eq!(
        keel.drive(&later.run_id).await.unwrap().status,
        RunStatus::Queued,
        "due, but the holder has the slot"
    );
    clock.advance(4000);
    keel.drive(&holder.run_id).await.unwrap();
    assert_eq!(status(&keel, &later.run_id).await, RunStatus::Pending);
    assert_eq!(
        keel.drive(&later.run_id).await.unwrap().status,
        RunStatus::Completed
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_queued_run_frees_its_place() {
    let store = TestStore::new();
    let (keel, loaded, clock) = on_manual_clock(&store).await;
    let holder = keel
        .start(&loaded, "one_at_a_time", r#"["holder", 1000]"#)
        .await
        .unwrap();
    keel.drive(&holder.run_id).await.unwrap();
    let doomed = keel
        .start(&loaded, "one_at_a_time", r#"["doomed", 0]"#)
        .await
        .unwrap();
    let next = keel
        .start(&loaded, "one_at_a_time", r#"["next", 0]"#)
        .await
        .unwrap();
    let cancelled = keel
        .cancel(&doomed.run_id, "duplicate order", "cli")
        .await
        .unwrap();
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    // The reason and who asked are kept, as for a run that had started.
    let error = cancelled.error.unwrap();
    assert_eq!(
        (error.kind.as_str(), error.message.as_str()),
        (
            "cancelled",
            "cancelled by cli: duplicate order, before it started"
        )
    );
    let journal = keel.journal(&doomed.run_id).await.unwrap();
    let asked = journal.iter().find_map(|e| match &e.fact {
        keel_host::core::journal::Fact::CancelRequested { reason, by } => {
            Some((reason.as_str(), by.as_str()))
        }
        _ => None,
    });
    assert_eq!(asked, Some(("duplicate order", "cli")), "{journal:?}");
    let slot = keel.run_slot(&next.run_id).await.unwrap().unwrap();
    assert_eq!(slot.position, Some(1), "the cancelled run left the queue");
    clock.advance(1000);
    keel.drive(&holder.run_id).await.unwrap();
    assert_eq!(status(&keel, &next.run_id).await, RunStatus::Pending);
}

/// No window of `per_ms` starting at an arrival holds more than `limit`
/// arrivals; returns the most any held.
fn most_in_a_window(arrivals: &[u64], per_ms: u64) -> usize {
    arrivals
        .iter()
        .map(|start| {
            arrivals
                .iter()
                .filter(|at| **at >= *start && **at < start + per_ms)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_rate_limit_holds_calls_from_many_runs_to_ten_a_second() {
    let recorder = Recorder::start().await.unwrap();
    let store = TestStore::new();
    let mut config = store.config();
    config.grants = keel_host::Grants {
        http: vec![recorder.addr.to_string()],
        ..keel_host::Grants::default()
    };
    let (keel, loaded) = open(config).await;
    let call = serde_json::json!({"url": recorder.url(), "tenant": "t", "hold_ms": 0});
    let mut runs = Vec::new();
    for _ in 0..5 {
        let input = serde_json::json!([call, 10]).to_string();
        runs.push(keel.start(&loaded, "burst", &input).await.unwrap());
    }
    let summary = keel.work(true).await.unwrap();
    assert!(summary.undriven.is_empty(), "{summary:?}");
    for run in &runs {
        let run = keel.get_run(&run.run_id).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        assert_eq!(run.output.as_deref(), Some("10"));
    }
    let arrivals: Vec<u64> = recorder.arrivals().into_iter().map(|(_, at)| at).collect();
    assert_eq!(arrivals.len(), 50);
    assert_eq!(
        most_in_a_window(&arrivals, 1000),
        10,
        "no second of the service's clock saw more than ten calls: {arrivals:?}"
    );
    let took = arrivals.iter().max().unwrap() - arrivals.iter().min().unwrap();
    assert!(
        took >= 4000,
        "fifty calls at ten a second take four seconds, not {took} ms"
    );

    // The waits are in the journal and the timeline, and are not attempts;
    // the journals replay.
    let mut throttled = 0;
    for run in &runs {
        let journal = keel.journal(&run.run_id).await.unwrap();
        throttled += journal
            .iter()
            .filter(|e| matches!(e.fact, Fact::StepThrottled { .. }))
            .count();
        let rows = keel_host::core::timeline::timeline(&journal);
        assert!(rows.iter().all(|r| r.attempts == 1), "{rows:?}");
        let waited: u64 = rows.iter().map(|r| r.throttled_ms).sum();
        let recorded: u64 = journal
            .iter()
            .filter_map(|e| match &e.fact {
                Fact::StepThrottled { waited_ms, key, .. } => {
                    assert_eq!(key, "downstream");
                    Some(*waited_ms)
                }
                _ => None,
            })
            .sum();
        assert_eq!(waited, recorded);
        assert!(keel.replay(&run.run_id, None).await.unwrap().is_ok());
    }
    assert!(
        throttled >= 40,
        "forty calls waited for a later second: {throttled}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_concurrency_limit_holds_overlapping_calls_per_key_across_runs() {
    let recorder = Recorder::meeting(2).await.unwrap();
    let store = TestStore::new();
    let mut config = store.config();
    config.grants = keel_host::Grants {
        http: vec![recorder.addr.to_string()],
        ..keel_host::Grants::default()
    };
    let (keel, loaded) = open(config).await;
    // Three runs of tenant a and one of tenant b, four calls each at once:
    // the key is per tenant, shared by the runs.
    let mut runs = Vec::new();
    for tenant in ["a", "a", "a", "b"] {
        let call = serde_json::json!({"url": recorder.url(), "tenant": tenant, "hold_ms": 60});
        let input = serde_json::json!([call, 4]).to_string();
        runs.push(keel.start(&loaded, "guarded_burst", &input).await.unwrap());
    }
    let summary = keel.work(true).await.unwrap();
    assert!(summary.undriven.is_empty(), "{summary:?}");
    for run in &runs {
        let run = keel.get_run(&run.run_id).await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        assert_eq!(run.output.as_deref(), Some("4"));
    }
    let most = recorder.most_at_once();
    assert_eq!(most.get("a"), Some(&2), "{most:?}");
    assert_eq!(most.get("b"), Some(&2), "{most:?}");
    assert_eq!(recorder.finished().len(), 16);

    // The waits are journaled under the key and are not attempts; the
    // journals replay.
    let mut waits = 0;
    for run in &runs {
        let journal = keel.journal(&run.run_id).await.unwrap();
        for e in &journal {
            if let Fact::StepThrottled { key, .. } = &e.fact {
                assert!(key == "guarded-a" || key == "guarded-b", "{key}");
                waits += 1;
            }
        }
        let rows = keel_host::core::timeline::timeline(&journal);
        assert!(rows.iter().all(|r| r.attempts == 1), "{rows:?}");
        assert!(keel.replay(&run.run_id, None).await.unwrap().is_ok());
    }
    assert!(waits >= 10, "ten of tenant a's calls waited: {waits}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retried_run_asks_for_its_slot_again() {
    let store = TestStore::new();
    let (keel, loaded, clock) = on_manual_clock(&store).await;
    let failed = keel
        .start(&loaded, "one_at_a_time", r#"["declined", 0]"#)
        .await
        .unwrap();
    assert_eq!(
        keel.drive(&failed.run_id).await.unwrap().status,
        RunStatus::Failed
    );
    // Its slot is free for others while it lies failed.
    let holder = keel
        .start(&loaded, "one_at_a_time", r#"["b", 1000]"#)
        .await
        .unwrap();
    assert_eq!(holder.status, RunStatus::Pending);
    keel.drive(&holder.run_id).await.unwrap();
    assert_eq!(status(&keel, &holder.run_id).await, RunStatus::Waiting);

    // Retried while the slot is held: it queues rather than run beside it.
    keel.retry(&failed.run_id).await.unwrap();
    keel.drive(&failed.run_id).await.unwrap();
    assert_eq!(status(&keel, &failed.run_id).await, RunStatus::Queued);
    let slot = keel.run_slot(&failed.run_id).await.unwrap().unwrap();
    assert_eq!((slot.state, slot.position), (SlotState::Queued, Some(1)));
    let journal = keel.journal(&failed.run_id).await.unwrap();
    assert!(
        !journal
            .iter()
            .skip_while(|e| !matches!(e.fact, Fact::RunRetried { .. }))
            .any(|e| matches!(e.fact, Fact::StepAttemptStarted { .. })),
        "the queued retry ran nothing: {journal:?}"
    );

    // The holder ends: the retried run takes the slot and runs (and,
    // declined again, fails again).
    clock.advance(1000);
    assert_eq!(
        keel.drive(&holder.run_id).await.unwrap().status,
        RunStatus::Completed
    );
    assert_eq!(status(&keel, &failed.run_id).await, RunStatus::Pending);
    assert_eq!(
        keel.drive(&failed.run_id).await.unwrap().status,
        RunStatus::Failed
    );
    let rows = keel.limits().await.unwrap();
    assert!(
        rows.iter().all(|r| r.in_progress == 0 && r.queued == 0),
        "{rows:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_permit_is_renewed_while_its_attempt_outlasts_the_ttl() {
    let recorder = Recorder::start().await.unwrap();
    let store = TestStore::new();
    let mut config = store.config();
    config.grants = keel_host::Grants {
        http: vec![recorder.addr.to_string()],
        ..keel_host::Grants::default()
    };
    // Permits last 300 ms unless renewed; each call holds for a second.
    config.lease_ttl = Duration::from_millis(300);
    let (keel, loaded) = open(config).await;
    let call = serde_json::json!({"url": recorder.url(), "tenant": "slow", "hold_ms": 1000});
    let input = serde_json::json!([call, 3]).to_string();
    let run = keel.start(&loaded, "guarded_burst", &input).await.unwrap();
    let summary = keel.work(true).await.unwrap();
    assert!(summary.undriven.is_empty(), "{summary:?}");
    let run = keel.get_run(&run.run_id).await.unwrap();
    assert_eq!(run.output.as_deref(), Some("3"), "{run:?}");
    // Had the first two permits lapsed, the third call would have joined
    // them.
    let most = recorder.most_at_once();
    assert_eq!(most.get("slow"), Some(&2), "{most:?}");
}

//! Conformance cases of continue-as-new: a continuation's admission takes
//! its predecessor's start hook over, with the payloads it did not take
//! renumbered from 0 and their payload IDs, in the admission's one
//! transaction; a predecessor without a start hook hands nothing over.

use super::streams::id_at;
use super::*;

/// Admits `run_id` continuing `from`, which took `taken` payloads.
async fn admit_continuing(
    store: &dyn Store,
    run_id: &str,
    from: &RunId,
    taken: u64,
) -> Result<(), StoreError> {
    let record = run(run_id, RunStatus::Pending);
    let journal = started(&record.workflow);
    store
        .admit(Admission {
            run: &record,
            key: None,
            start_hook: None,
            journal: &journal,
            flow: None,
            now_ms: 40,
            lease: None,
            handover: Some(crate::Handover { from, taken }),
        })
        .await
        .map(|_| ())
}

pub(super) async fn a_continuation_takes_over_the_start_hook_with_its_untaken_payloads(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    let start = hook("t", "a", None, None);
    admit(&*store, "a", Some(&start), None, 0)
        .await
        .map_err(fail("admit a"))?;
    for (i, payload) in ["1", "2", "3"].iter().enumerate() {
        let id = format!("p-{i}");
        store
            .deliver("t", payload, id_at(&id, 10))
            .await
            .map_err(fail("deliver"))?;
    }
    // Another hook of the run stays with it.
    store
        .register_hook(&hook("own", "a", Some(4), None), false, 20)
        .await
        .map_err(fail("register own"))?;
    admit_continuing(&*store, "b", &"a".into(), 1)
        .await
        .map_err(fail("admit b"))?;
    let store = h.reopen(store).await;
    let held = store.get_hook("t", 50).await.map_err(fail("get hook"))?;
    check(
        held.run_id == "b" && held.next_payload == 2 && held.is_start_hook(),
        || format!("the start hook moved with two payloads: {held:?}"),
    )?;
    let own = store.get_hook("own", 50).await.map_err(fail("get own"))?;
    check(own.run_id == "a", || format!("the run's own hook: {own:?}"))?;
    for (index, want) in [(0, "2"), (1, "3")] {
        let got = store
            .payload("b", "t", index)
            .await
            .map_err(fail("payload"))?;
        check(got == HookPayload::Ready(want.into()), || {
            format!("b's payload {index}: {got:?}")
        })?;
    }
    let gone = store
        .payload("a", "t", 1)
        .await
        .map_err(fail("a's payload"))?;
    check(gone == HookPayload::Pending, || {
        format!("a's untaken payload is no longer a's: {gone:?}")
    })?;
    let taken = store
        .payload("a", "t", 0)
        .await
        .map_err(fail("a's payload"))?;
    check(taken == HookPayload::Ready("1".into()), || {
        format!("a keeps what it took: {taken:?}")
    })?;
    let found = store
        .delivered("b", "t", "p-2")
        .await
        .map_err(fail("delivered"))?;
    check(found == Some(1), || {
        format!("p-2 is b's payload 1: {found:?}")
    })?;
    let again = store
        .deliver("t", "3", id_at("p-2", 60))
        .await
        .map_err(fail("deliver again"))?;
    check(
        again.duplicate && again.run_id == "b" && again.index == 1,
        || format!("a retried moved payload: {again:?}"),
    )?;
    let first = store
        .deliver("t", "1", id_at("p-0", 60))
        .await
        .map_err(fail("deliver p-0 again"))?;
    check(
        first.duplicate && first.run_id == "a" && first.index == 0,
        || format!("a retried taken payload stays a's: {first:?}"),
    )?;
    let next = store
        .deliver("t", "4", None)
        .await
        .map_err(fail("deliver 4"))?;
    check(next.run_id == "b" && next.index == 2, || {
        format!("a new payload follows the moved ones: {next:?}")
    })
}

pub(super) async fn a_continuation_of_a_run_without_a_start_hook_hands_nothing_over(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    admit(&*store, "a", None, None, 0)
        .await
        .map_err(fail("admit a"))?;
    store
        .register_hook(&hook("own", "a", Some(1), None), false, 20)
        .await
        .map_err(fail("register own"))?;
    store
        .deliver("own", "1", None)
        .await
        .map_err(fail("deliver"))?;
    admit_continuing(&*store, "b", &"a".into(), 0)
        .await
        .map_err(fail("admit b"))?;
    let own = store.get_hook("own", 50).await.map_err(fail("get own"))?;
    check(own.run_id == "a" && own.next_payload == 1, || {
        format!("a hook the workflow made is not handed over: {own:?}")
    })?;
    let record = store.get_run("b").await.map_err(fail("get b"))?;
    check(record.status == RunStatus::Pending, || {
        format!("b is admitted: {record:?}")
    })?;
    // Admitted twice (a recovered run continuing again): refused.
    match admit_continuing(&*store, "b", &"a".into(), 0).await {
        Err(StoreError::RunExists { .. }) => Ok(()),
        other => Err(format!("a second admission of b: {other:?}")),
    }
}

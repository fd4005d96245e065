//! Conformance cases of pauses (`PauseStore`): a pause kept once until
//! lifted, waking its run both ways, a paused record out of the due index
//! whatever its timer, and a pause gone with its run's end.

use keel_core::lifecycle::PauseRequest;

use super::*;

fn pause(by: &str, at_ms: u64) -> PauseRequest {
    PauseRequest {
        by: by.into(),
        at_ms,
    }
}

/// Stores `lease`'s run as its driver does when a pause takes hold: the
/// pause journaled, the record `paused` (its timer kept), the lease
/// released.
async fn hold(store: &dyn Store, lease: &Lease, request: &PauseRequest) -> Outcome {
    let run_id = lease.run_id.as_str();
    let mut record = store.get_run(run_id).await.map_err(fail("get_run"))?;
    let seq = store.journal(run_id).await.map_err(fail("journal"))?.len() as u64;
    let entries = JournalBuilder::continuing(seq, 2)
        .then(request.fact(&record))
        .entries();
    record.status = RunStatus::Paused;
    record.wake_at_ms = Some(3);
    store
        .append(run_id, &entries, Some(&record), Some(lease))
        .await
        .map_err(fail("append"))?;
    store
        .release_lease(lease, None)
        .await
        .map_err(fail("release"))
}

pub(super) async fn a_pause_is_kept_once_until_lifted_and_wakes_its_run_both_ways(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    let missing = store.request_pause("nobody", &pause("cli", 1)).await;
    check(
        matches!(missing, Err(StoreError::RunNotFound { .. })),
        || format!("a pause of no run: {missing:?}"),
    )?;
    let missing = store.lift_pause("nobody").await;
    check(
        matches!(missing, Err(StoreError::RunNotFound { .. })),
        || format!("a resume of no run: {missing:?}"),
    )?;
    admit(&*store, "a", None, None, 0)
        .await
        .map_err(fail("admit"))?;
    take_wake(&*store, "a").await?;
    let first = store
        .request_pause("a", &pause("cli", 1))
        .await
        .map_err(fail("request_pause"))?;
    check(first == Some(pause("cli", 1)), || {
        format!("first: {first:?}")
    })?;
    let second = store
        .request_pause("a", &pause("api", 2))
        .await
        .map_err(fail("second request_pause"))?;
    check(second == Some(pause("cli", 1)), || {
        format!("a second pause replaced the first: {second:?}")
    })?;
    check(store.is_woken("a").await.map_err(fail("is_woken"))?, || {
        "the pause did not wake the run".into()
    })?;
    let store = h.reopen(store).await;
    admit(&*store, "b", None, None, 0)
        .await
        .map_err(fail("admit b"))?;
    let kept = store
        .pause_request("a")
        .await
        .map_err(fail("pause_request"))?;
    check(kept == Some(pause("cli", 1)), || {
        format!("after a reopen: {kept:?}")
    })?;
    let other = store
        .pause_request("b")
        .await
        .map_err(fail("pause_request b"))?;
    check(other.is_none(), || format!("b was never paused: {other:?}"))?;
    let lifted = store.lift_pause("b").await.map_err(fail("lift_pause b"))?;
    check(lifted.is_none(), || {
        format!("b had no pause to lift: {lifted:?}")
    })?;

    // Its driver takes hold: a paused record is due never, whatever its
    // timer.
    let lease = store
        .acquire_lease("a", "w1", 1_000, 1)
        .await
        .map_err(fail("acquire_lease"))?
        .ok_or("a's lease is held")?;
    hold(&*store, &lease, &pause("cli", 1)).await?;
    let due = store
        .claim_due("w1", 1_000, 10, 10)
        .await
        .map_err(fail("claim_due"))?;
    check(due.iter().all(|l| l.run_id.as_str() != "a"), || {
        format!("a paused run was claimed: {due:?}")
    })?;
    for lease in &due {
        store
            .release_lease(lease, None)
            .await
            .map_err(fail("release"))?;
    }
    let entries = store.journal("a").await.map_err(fail("journal"))?;
    let journaled = entries.last().map(|e| &e.fact);
    check(
        matches!(journaled, Some(Fact::RunPaused { status, .. }) if status == "pending"),
        || format!("the pause's entry: {journaled:?}"),
    )?;

    let lifted = store.lift_pause("a").await.map_err(fail("lift_pause"))?;
    check(lifted == Some(pause("cli", 1)), || {
        format!("the lift gave back {lifted:?}")
    })?;
    let again = store
        .lift_pause("a")
        .await
        .map_err(fail("second lift_pause"))?;
    check(again.is_none(), || format!("lifted twice: {again:?}"))?;
    let gone = store
        .pause_request("a")
        .await
        .map_err(fail("pause_request"))?;
    check(gone.is_none(), || format!("kept past its lift: {gone:?}"))?;
    let resumed = store
        .claim_due("w1", 1_000, 20, 10)
        .await
        .map_err(fail("claim_due"))?;
    check(resumed.iter().any(|l| l.run_id.as_str() == "a"), || {
        format!("the lift did not make its run due: {resumed:?}")
    })?;
    for lease in &resumed {
        store
            .release_lease(lease, None)
            .await
            .map_err(fail("release"))?;
    }

    // An end takes the pause with it; an ended run takes none.
    store
        .request_pause("b", &pause("cli", 3))
        .await
        .map_err(fail("request_pause b"))?;
    end(&*store, "b", 4).await.map_err(fail("end b"))?;
    let gone = store
        .pause_request("b")
        .await
        .map_err(fail("pause_request b"))?;
    check(gone.is_none(), || {
        format!("kept past the run's end: {gone:?}")
    })?;
    let late = store
        .request_pause("b", &pause("cli", 5))
        .await
        .map_err(fail("late request_pause"))?;
    check(late.is_none(), || {
        format!("an ended run took a pause: {late:?}")
    })?;
    let late = store
        .lift_pause("b")
        .await
        .map_err(fail("late lift_pause"))?;
    check(late.is_none(), || format!("an ended run lifted: {late:?}"))
}

//! Continue-as-new end to end, on both stores: an entity workflow that
//! ends each run after a few payloads and continues as a new run keeps
//! its start token, the payloads it had not taken (in order, with their
//! payload IDs), its attributes and a bounded journal; a parent awaiting a
//! child that continues gets the output of the last run of the chain; a
//! recovered run that continues again finds the run it started.

use keel_host::core::journal::Fact;
use keel_host::core::{RunId, RunStatus};
use keel_host::{Keel, StartHook, StartOptions};
use serde_json::{Value, json};

use crate::common::{self, TestStore};

/// An entity's input: its token, carried state, and numbers per run.
fn entity_input(token: &str, per_run: u64) -> String {
    json!({"token": token, "total": 0, "count": 0, "runs": 0, "per_run": per_run}).to_string()
}

/// The last fact of `run_id`'s journal.
async fn last_fact(keel: &Keel, run_id: &str) -> Fact {
    keel.journal(run_id).await.unwrap().pop().unwrap().fact
}

#[tokio::test(flavor = "multi_thread")]
async fn an_entity_continues_as_new_with_its_token_its_untaken_payloads_and_its_attributes() {
    let store = TestStore::new();
    let (keel, testbed) = common::open(store.config()).await;
    let options = StartOptions {
        hook: Some(StartHook::new("entity:1")),
        attributes: [("tenant".to_string(), "a".to_string())].into(),
        ..StartOptions::default()
    };
    let first = keel
        .start_with(&testbed, "entity", &entity_input("entity:1", 3), &options)
        .await
        .unwrap();
    let first_id = first.run_id.clone();
    assert_eq!(
        keel.drive(&first_id).await.unwrap().status,
        RunStatus::Waiting
    );
    // Five numbers before the run takes any: it takes three and continues;
    // the other two (one with a payload ID) move to the run that continues.
    for (n, id) in [(1, None), (2, None), (3, None), (4, Some("p-4")), (5, None)] {
        let resumed = keel.deliver("entity:1", &n.to_string(), id).await.unwrap();
        assert_eq!(resumed.run_id, first_id);
    }
    let ended = keel.drive(&first_id).await.unwrap();
    assert_eq!(ended.status, RunStatus::Continued, "{ended:?}");
    assert_eq!((ended.output, ended.error), (None, None));
    let next = first_id.continued();
    let Fact::RunContinued { next_run_id, input } = last_fact(&keel, &first_id).await else {
        panic!("the run's end is its continuation");
    };
    assert_eq!(next_run_id, next.as_str());
    let carried: Value = serde_json::from_str(&input).unwrap();
    assert_eq!(
        (&carried["total"], &carried["count"], &carried["runs"]),
        (&json!(6), &json!(3), &json!(1))
    );

    let continued = keel.get_run(&next).await.unwrap();
    assert_eq!(continued.workflow, "entity");
    assert_eq!(continued.component_hash, first.component_hash);
    assert_eq!(
        serde_json::from_str::<Value>(&continued.input).unwrap(),
        carried
    );
    assert_eq!(
        continued.attributes, options.attributes,
        "attributes carry over"
    );
    assert_eq!(continued.parent_run_id, None);
    let hook = keel.get_hook("entity:1").await.unwrap();
    assert_eq!(
        (hook.run_id.as_str(), hook.next_payload),
        (next.as_str(), 2),
        "the token and its two untaken payloads moved"
    );
    // A retried resume of a moved payload is a duplicate, now of the run
    // that holds it; a new payload goes after the moved ones.
    let again = keel.deliver("entity:1", "4", Some("p-4")).await.unwrap();
    assert_eq!(
        (again.run_id.as_str(), again.index, again.duplicate),
        (next.as_str(), 0, true)
    );
    let stop = keel.deliver("entity:1", "0", None).await.unwrap();
    assert_eq!((stop.run_id.as_str(), stop.index), (next.as_str(), 2));

    let last = keel.drive(&next).await.unwrap();
    assert_eq!(last.status, RunStatus::Completed, "{last:?}");
    assert_eq!(last.output.as_deref(), Some("15"), "1+2+3, then 4+5");
    assert_eq!(keel.query(&next, "runs").await.unwrap().1, "1");
    assert_eq!(keel.query(&next, "count").await.unwrap().1, "5");
    for run in [&first_id, &next] {
        let verdict = keel.replay(run, None).await.unwrap();
        assert!(verdict.is_ok(), "{run}: {verdict:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recovered_run_that_continues_again_finds_the_run_it_started() {
    let store = TestStore::new();
    let (keel, testbed) = common::open(store.config()).await;
    let first = keel.start(&testbed, "countdown", "[1,0]").await.unwrap();
    let first_id = first.run_id.clone();
    let ended = keel.drive(&first_id).await.unwrap();
    assert_eq!(ended.status, RunStatus::Continued);
    // As if its worker had died after admitting the continuation and
    // before the run's end: the end is voided by a restart from the last
    // step, and the run drives to its continuation again.
    let restarted = keel
        .restart_run(
            &first_id,
            &keel_host::core::restart::RestartPoint::Step("noop".into()),
            None,
            "test",
        )
        .await
        .unwrap();
    assert!(!restarted.status.is_final(), "{restarted:?}");
    let again = keel.drive(&first_id).await.unwrap();
    assert_eq!(again.status, RunStatus::Continued);
    let continued: Vec<RunId> = keel
        .journal(&first_id)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.fact {
            Fact::RunContinued { next_run_id, .. } => Some(next_run_id.into()),
            _ => None,
        })
        .collect();
    assert_eq!(
        continued,
        [first_id.continued(), first_id.continued()],
        "the same continuation both times"
    );
    let last = keel.result(&first_id.continued(), true).await.unwrap();
    assert_eq!(
        (last.status, last.output.as_deref()),
        (RunStatus::Completed, Some("2"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parent_awaiting_a_child_that_continues_gets_the_output_of_the_chains_last_run() {
    let store = TestStore::new();
    let (keel, testbed) = common::open(store.config()).await;
    let parent = keel.start(&testbed, "await_countdown", "3").await.unwrap();
    assert_eq!(
        keel.drive(&parent.run_id).await.unwrap().status,
        RunStatus::Waiting
    );
    // The child, then each run that continues it, in turn.
    let mut child = parent.run_id.child(0);
    for _ in 0..3 {
        let ended = keel.drive(&child).await.unwrap();
        assert_eq!(ended.status, RunStatus::Continued, "{ended:?}");
        assert_eq!(ended.parent_run_id.as_ref(), Some(&parent.run_id));
        let waiting = keel.drive(&parent.run_id).await.unwrap();
        assert_eq!(waiting.status, RunStatus::Waiting, "the chain goes on");
        child = child.continued();
    }
    let last = keel.drive(&child).await.unwrap();
    assert_eq!(
        (
            last.status,
            last.output.as_deref(),
            last.parent_run_id.as_ref()
        ),
        (RunStatus::Completed, Some("4"), Some(&parent.run_id))
    );
    let ended = keel.result(&parent.run_id, true).await.unwrap();
    assert_eq!(
        (ended.status, ended.output.as_deref()),
        (RunStatus::Completed, Some("4")),
        "the output of the chain's last run"
    );
    let verdict = keel.replay(&parent.run_id, None).await.unwrap();
    assert!(verdict.is_ok(), "{verdict:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_cancelled_before_it_continues_is_not_continued() {
    let store = TestStore::new();
    let (keel, testbed) = common::open(store.config()).await;
    let options = StartOptions {
        hook: Some(StartHook::new("entity:c")),
        ..StartOptions::default()
    };
    let run = keel
        .start_with(&testbed, "entity", &entity_input("entity:c", 1), &options)
        .await
        .unwrap();
    assert_eq!(
        keel.drive(&run.run_id).await.unwrap().status,
        RunStatus::Waiting
    );
    keel.deliver("entity:c", "7", None).await.unwrap();
    keel.cancel(&run.run_id, "closing the account", "test")
        .await
        .unwrap();
    let ended = keel.result(&run.run_id, true).await.unwrap();
    assert_eq!(ended.status, RunStatus::Cancelled, "{ended:?}");
    assert!(
        matches!(
            keel.get_run(&run.run_id.continued()).await,
            Err(keel_host::Error::RunNotFound { .. })
        ),
        "nothing continues a cancelled run"
    );
}

/// How many events the long-lived entity handles, and how many each of
/// its runs takes before it continues as new.
const EVENTS: u64 = 300_000;
const PER_RUN: u64 = 2_000;
/// Senders resuming the entity at once (their deliveries share flushes).
const SENDERS: u64 = 16;

#[tokio::test(flavor = "multi_thread")]
async fn an_entity_handles_300_000_events_through_continue_as_new_with_bounded_journals() {
    let store = TestStore::new();
    let mut config = store.config();
    // Far below the events handled: only continuing keeps under it.
    config.limits.max_journal_entries = 3 * PER_RUN as usize;
    let (keel, testbed) = common::open(config).await;
    let options = StartOptions {
        hook: Some(StartHook::new("entity:big")),
        ..StartOptions::default()
    };
    let first = keel
        .start_with(
            &testbed,
            "entity",
            &entity_input("entity:big", PER_RUN),
            &options,
        )
        .await
        .unwrap();
    let worker = tokio::spawn({
        let keel = keel.clone();
        async move { keel.work(false).await }
    });
    // Sixteen senders, each its share of 1..=EVENTS; each payload reaches a
    // run of the entity's chain, whichever holds the token then.
    let senders: Vec<_> = (0..SENDERS)
        .map(|lane| {
            let keel = keel.clone();
            tokio::spawn(async move {
                let mut runs = std::collections::BTreeSet::new();
                for n in (1..=EVENTS).filter(|n| n % SENDERS == lane) {
                    let resumed = keel.deliver("entity:big", &n.to_string(), None).await;
                    runs.insert(resumed.unwrap().run_id);
                }
                runs
            })
        })
        .collect();
    let mut reached = std::collections::BTreeSet::new();
    for sender in senders {
        reached.extend(sender.await.unwrap());
    }
    let holder = keel.get_hook("entity:big").await.unwrap().run_id;
    keel.deliver("entity:big", "0", None).await.unwrap();
    // The chain, from the first run to the one that ends.
    let mut chain = vec![first.run_id.clone()];
    let last = loop {
        let id = chain.last().unwrap().clone();
        let run = keel
            .wait_for(
                &id,
                keel_host::Until::Ended,
                std::time::Duration::from_secs(600),
            )
            .await
            .unwrap();
        match run.status {
            RunStatus::Continued => chain.push(id.continued()),
            _ => break run,
        }
    };
    keel.shutdown();
    worker.await.unwrap().unwrap();
    assert_eq!(last.status, RunStatus::Completed, "{:?}", last.error);
    assert_eq!(
        last.output.as_deref(),
        Some((EVENTS * (EVENTS + 1) / 2).to_string().as_str()),
        "every event counted once"
    );
    assert!(
        chain.len() as u64 > EVENTS / PER_RUN,
        "{} runs for {EVENTS} events",
        chain.len()
    );
    assert!(
        reached.iter().all(|r| chain.contains(r)) && chain.contains(&holder),
        "the token stayed with the chain"
    );
    for run in &chain {
        let len = keel.journal(run).await.unwrap().len();
        assert!(len < 3 * PER_RUN as usize, "{run}: {len} entries");
    }
    let before = keel.journal(&last.run_id).await.unwrap().len();
    assert_eq!(
        keel.query(&last.run_id, "count").await.unwrap().1,
        EVENTS.to_string()
    );
    assert_eq!(keel.journal(&last.run_id).await.unwrap().len(), before);
}

//! Queries end to end: a workflow's `set_query` values are answered by a
//! replay of its journal as it stands, live or ended, on both stores;
//! answering writes nothing; a name it never set is refused naming those
//! it did.

use keel_host::core::RunStatus;
use keel_host::{Error, Keel};

use crate::common::{self, TestStore};

/// The length of `run_id`'s journal.
async fn journal_len(keel: &Keel, run_id: &str) -> usize {
    keel.journal(run_id).await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_query_answers_the_state_the_journal_reached_and_writes_nothing() {
    let store = TestStore::new();
    let (keel, testbed) = common::open(store.config()).await;
    let run = keel
        .start(&testbed, "running_total", "\"total:1\"")
        .await
        .unwrap();
    let id = run.run_id.as_str();
    assert_eq!(keel.drive(id).await.unwrap().status, RunStatus::Waiting);
    let (at_start, total) = keel.query(id, "total").await.unwrap();
    assert_eq!(total, "0");
    assert_eq!(at_start.values["count"], "0");

    for n in [5, 7] {
        keel.resume_hook("total:1", &n.to_string()).await.unwrap();
        assert_eq!(keel.drive(id).await.unwrap().status, RunStatus::Waiting);
    }
    let before = journal_len(&keel, id).await;
    let queries = keel.queries(id).await.unwrap();
    assert_eq!(queries.values["total"], "12");
    assert_eq!(queries.values["count"], "2");
    assert_eq!(
        queries.position,
        keel.journal(id).await.unwrap().last().unwrap().seq,
        "the answer says how far the journal went"
    );
    assert_eq!(
        journal_len(&keel, id).await,
        before,
        "a query journals nothing"
    );

    // A payload delivered but not yet taken is not in the state: the
    // journal has not reached it.
    keel.resume_hook("total:1", "30").await.unwrap();
    assert_eq!(keel.query(id, "total").await.unwrap().1, "12");

    // Unknown names are refused naming the set ones.
    let refused = keel.query(id, "balance").await.unwrap_err();
    assert!(
        matches!(&refused, Error::QueryNotFound { set, .. } if set == &["count", "total"]),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("`count`, `total`"),
        "{refused}"
    );

    // Ended, the run still answers with its last state.
    keel.resume_hook("total:1", "0").await.unwrap();
    let ended = keel.drive(id).await.unwrap();
    assert_eq!(
        (ended.status, ended.output.as_deref()),
        (RunStatus::Completed, Some("42"))
    );
    assert_eq!(keel.query(id, "count").await.unwrap().1, "3");
    assert!(keel.replay(id, None).await.unwrap().is_ok());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_sets_no_query_says_so() {
    let store = TestStore::new();
    let (keel, testbed) = common::open(store.config()).await;
    let run = keel.run(&testbed, "ten_steps", "3").await.unwrap();
    let refused = keel.query(&run.run_id, "total").await.unwrap_err();
    assert!(refused.to_string().contains("set none"), "{refused}");
    assert!(matches!(
        keel.query("no-such-run", "total").await,
        Err(Error::RunNotFound { .. })
    ));
}

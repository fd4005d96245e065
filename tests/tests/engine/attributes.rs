//! Run attributes end to end: set at start and by the workflow
//! (journaled), kept on the record, found by `runs_page`'s attribute
//! filter (the store's index on PostgreSQL) with the other filters and
//! its cursor, and refused over their bounds. On sled, or PostgreSQL with
//! `KEEL_TEST_STORE`.

use crate::common::{TestStore, open};
use keel_host::core::journal::Fact;
use keel_host::core::{Attributes, RunFilter, RunStatus};
use keel_host::{Error, StartOptions};

fn attrs(pairs: &[(&str, &str)]) -> Attributes {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn filter(pairs: &[(&str, &str)]) -> RunFilter {
    RunFilter {
        attributes: attrs(pairs),
        ..RunFilter::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_are_found_by_the_attributes_set_at_start_and_by_their_workflow() {
    let store = TestStore::new();
    let (keel, loaded) = open(store.config()).await;
    let mut ids = Vec::new();
    for (tenant, plan) in [("acme", "pro"), ("globex", "pro"), ("acme", "free")] {
        let options = StartOptions {
            attributes: attrs(&[("plan", plan)]),
            ..StartOptions::default()
        };
        let run = keel
            .start_with(&loaded, "tagged", &format!("\"{tenant}\""), &options)
            .await
            .unwrap();
        let ended = keel.drive(&run.run_id).await.unwrap();
        assert_eq!(ended.status, RunStatus::Completed);
        assert_eq!(
            ended.attributes,
            attrs(&[("plan", plan), ("stage", "done"), ("tenant", tenant)]),
            "the start's and the workflow's, its last value of each"
        );
        ids.push(run.run_id.to_string());
    }
    let listed = |f: RunFilter| {
        let keel = keel.clone();
        async move {
            let page = keel.runs_page(&f, None, 50).await.unwrap();
            page.runs
                .into_iter()
                .map(|r| r.run_id.to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        listed(filter(&[("tenant", "acme")])).await,
        [ids[2].clone(), ids[0].clone()]
    );
    assert_eq!(
        listed(filter(&[("tenant", "acme"), ("plan", "pro")])).await,
        [ids[0].clone()]
    );
    assert_eq!(listed(filter(&[("stage", "done")])).await.len(), 3);
    assert!(
        listed(filter(&[("stage", "charged")])).await.is_empty(),
        "a value the workflow replaced is not found"
    );
    let failed_acme = RunFilter {
        statuses: vec![RunStatus::Failed],
        ..filter(&[("tenant", "acme")])
    };
    assert!(
        listed(failed_acme).await.is_empty(),
        "with the other filters"
    );
    // Paged with the cursor.
    let first = keel
        .runs_page(&filter(&[("plan", "pro")]), None, 1)
        .await
        .unwrap();
    assert_eq!(first.runs[0].run_id, ids[1]);
    let cursor = keel_host::core::RunCursor::decode(&first.next_cursor.unwrap()).unwrap();
    let next = keel
        .runs_page(&filter(&[("plan", "pro")]), Some(&cursor), 1)
        .await
        .unwrap();
    assert_eq!(next.runs[0].run_id, ids[0]);

    // Journaled, so a replay sets the same.
    let journal = keel.journal(&ids[0]).await.unwrap();
    let set: Vec<_> = journal
        .iter()
        .filter_map(|e| match &e.fact {
            Fact::AttributeSet { key, value, .. } => Some(format!("{key}={value}")),
            _ => None,
        })
        .collect();
    assert_eq!(set, ["tenant=acme", "stage=charged", "stage=done"]);
    let verdict = keel.replay(&ids[0], None).await.unwrap();
    assert!(verdict.is_ok(), "{verdict:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn attributes_over_their_bounds_are_refused_by_name() {
    let store = TestStore::new();
    let (keel, loaded) = open(store.config()).await;
    for (attributes, said) in [
        (attrs(&[("has space", "x")]), "attribute name `has space`"),
        (
            attrs(&[("k", &"v".repeat(300))]),
            "300 bytes, over the limit of 256",
        ),
    ] {
        let options = StartOptions {
            attributes,
            ..StartOptions::default()
        };
        let err = keel
            .start_with(&loaded, "tagged", "\"acme\"", &options)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        assert!(err.to_string().contains(said), "{err}");
    }
    assert!(
        keel.list_runs().await.unwrap().is_empty(),
        "nothing admitted"
    );
}

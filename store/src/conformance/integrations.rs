//! Conformance cases of integrations: one signing secret per store, kept
//! across reopens and shared by racers; webhooks created once and deleted
//! with what they remember; a signature claimed once until it expires.

use keel_core::webhook::{Scheme, Target, WebhookRecord};

use super::*;

fn webhook(id: &str) -> WebhookRecord {
    WebhookRecord {
        id: id.into(),
        target: Target::Hook {
            token: "order:{/data/object/id}".into(),
        },
        scheme: Scheme::Stripe { tolerance_s: 300 },
        secret: "whsec_test".into(),
        created_at_ms: 5,
    }
}

pub(super) async fn the_signing_secret_is_the_first_one_stored(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let racers = (0..8u8).map(|n| {
        let store = store.clone();
        async move { store.signing_secret(&[n; 32]).await }
    });
    let got: Vec<Vec<u8>> = race(racers)
        .await?
        .into_iter()
        .collect::<Result<_, _>>()
        .map_err(fail("signing secret"))?;
    check(got.iter().all(|s| s == &got[0] && s.len() == 32), || {
        format!("racers got different secrets: {got:?}")
    })?;
    let store = h.reopen(store).await;
    let again = store
        .signing_secret(&[99; 32])
        .await
        .map_err(fail("signing secret after a reopen"))?;
    check(again == got[0], || {
        format!("after a reopen the secret changed: {again:?}")
    })
}

pub(super) async fn a_webhook_is_created_once_and_deleted_with_its_signatures(
    h: &dyn Harness,
) -> Outcome {
    let store = h.fresh().await;
    store
        .create_webhook(&webhook("stripe"))
        .await
        .map_err(fail("create"))?;
    let again = store.create_webhook(&webhook("stripe")).await;
    check(
        matches!(again, Err(StoreError::WebhookExists { ref id }) if id == "stripe"),
        || format!("a second create: {again:?}"),
    )?;
    // A hook that routes deliveries no run holds to an event key.
    let github = WebhookRecord {
        target: Target::HookOrEvent {
            token: "pr:{/number}".into(),
            unheld_event: "github.unheld".into(),
        },
        ..webhook("github")
    };
    store
        .create_webhook(&github)
        .await
        .map_err(fail("create"))?;
    store
        .claim_signature("stripe", "abc", 1_000, 0)
        .await
        .map_err(fail("claim"))?;
    let store = h.reopen(store).await;
    let read = store.webhook("stripe").await.map_err(fail("read"))?;
    check(read == Some(webhook("stripe")), || {
        format!("read back whole after a reopen: {read:?}")
    })?;
    let read = store.webhook("github").await.map_err(fail("read"))?;
    check(read.as_ref() == Some(&github), || {
        format!("read back whole after a reopen: {read:?}")
    })?;
    let ids: Vec<String> = store
        .list_webhooks()
        .await
        .map_err(fail("list"))?
        .into_iter()
        .map(|w| w.id)
        .collect();
    check(ids == ["github", "stripe"], || {
        format!("listed by ID: {ids:?}")
    })?;
    check(
        store
            .delete_webhook("stripe")
            .await
            .map_err(fail("delete"))?,
        || "the delete found nothing".into(),
    )?;
    check(
        !store
            .delete_webhook("stripe")
            .await
            .map_err(fail("delete"))?,
        || "a second delete found it".into(),
    )?;
    check(
        store
            .webhook("stripe")
            .await
            .map_err(fail("read"))?
            .is_none(),
        || "deleted, still read".into(),
    )?;
    // Created anew, it remembers no signature of the old one.
    store
        .create_webhook(&webhook("stripe"))
        .await
        .map_err(fail("create again"))?;
    let claimed = store
        .claim_signature("stripe", "abc", 1_000, 0)
        .await
        .map_err(fail("claim"))?;
    check(claimed, || {
        "a deleted webhook's signature is still claimed".into()
    })
}

pub(super) async fn a_signature_is_claimed_once_until_it_expires(h: &dyn Harness) -> Outcome {
    let store = h.fresh().await;
    let racers = (0..8).map(|_| {
        let store = store.clone();
        async move { store.claim_signature("w", "sig", 1_000, 10).await }
    });
    let won = race(racers)
        .await?
        .into_iter()
        .collect::<Result<Vec<bool>, _>>()
        .map_err(fail("claim"))?;
    check(won.iter().filter(|w| **w).count() == 1, || {
        format!("racers that claimed one signature: {won:?}")
    })?;
    let store = h.reopen(store).await;
    let replay = store
        .claim_signature("w", "sig", 1_000, 999)
        .await
        .map_err(fail("claim"))?;
    check(!replay, || "a replay before expiry was claimed".into())?;
    let other = store
        .claim_signature("v", "sig", 1_000, 999)
        .await
        .map_err(fail("claim"))?;
    check(other, || {
        "another webhook's same signature was refused".into()
    })?;
    let purged = store
        .purge_expired_signatures(1_001)
        .await
        .map_err(fail("purge"))?;
    check(purged == 2, || format!("purged {purged}, expected 2"))?;
    let later = store
        .claim_signature("w", "sig", 5_000, 1_001)
        .await
        .map_err(fail("claim"))?;
    check(later, || {
        "an expired signature was not claimable again".into()
    })
}

/// The outcomes of `racers`, each run on its own task at once.
async fn race<T: Send + 'static>(
    racers: impl Iterator<Item = impl Future<Output = T> + Send + 'static>,
) -> Result<Vec<T>, String> {
    let tasks: Vec<_> = racers.map(tokio::spawn).collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.map_err(fail("racing task"))?);
    }
    Ok(outcomes)
}

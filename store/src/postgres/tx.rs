//! Transactions: every store operation runs as one, retried while it loses
//! a race (a unique key, a serialization failure, a deadlock); a commit
//! that fails is `Unconfirmed`, since it may have landed.

use super::*;

/// An attempt at a transaction: done, refused, or to be retried because it
/// lost a race (a unique key, a serialization failure, a deadlock).
pub(super) enum Attempt<T> {
    Done(T),
    Retry,
}

/// Runs `$body` (an async block's body, with `$tx` the transaction) and
/// commits, again while it loses races; evaluates to the store result. A
/// failed commit is [`StoreError::Unconfirmed`].
macro_rules! transact {
    ($store:expr, |$tx:ident| $body:block) => {{
        let mut client = $store.client().await?;
        let mut outcome = None;
        for _ in 0..RETRIES {
            let txn = client.transaction().await.map_err(pg)?;
            let attempt: Result<Attempt<_>> = {
                let $tx = &txn;
                async { $body }.await
            };
            // A statement that lost a race (a deadlock, a serialization
            // failure) aborted the transaction: it is tried again, as a
            // commit that lost one is.
            let attempt = match attempt {
                Err(StoreError::Race { .. }) => Ok(Attempt::Retry),
                attempt => attempt,
            };
            match attempt? {
                Attempt::Retry => {
                    let _ = txn.rollback().await;
                }
                Attempt::Done(value) => match txn.commit().await {
                    Ok(()) => {
                        outcome = Some(Ok(value));
                        break;
                    }
                    Err(e) if is_race(&e) => {}
                    Err(e) => {
                        outcome = Some(Err(StoreError::Unconfirmed {
                            reason: describe(&e),
                        }));
                        break;
                    }
                },
            }
        }
        outcome.unwrap_or_else(|| {
            Err(StoreError::Backend {
                reason: format!("the transaction lost {RETRIES} races in a row"),
            })
        })
    }};
}

/// How many times a transaction that lost a race is tried again.
pub(super) const RETRIES: usize = 50;

/// The error lost a race that a retry resolves.
pub(super) fn is_race(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::UNIQUE_VIOLATION
            || *c == SqlState::T_R_SERIALIZATION_FAILURE
            || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// `Retry` if `e` lost a race, the error otherwise.
pub(super) fn race<T>(e: tokio_postgres::Error) -> Result<Attempt<T>> {
    if is_race(&e) {
        Ok(Attempt::Retry)
    } else {
        Err(pg(e))
    }
}

//! Group commit for sled: callers that need their writes on disk share
//! flushes, and no flush runs on an async worker thread.

use tokio::sync::Notify;

use crate::{Result, StoreError};

/// Group commit without a thread of its own: the first caller to need a
/// flush leads it, on tokio's blocking pool so that no async worker stalls
/// on the disk; callers that arrive while it runs wait, and the next of
/// them leads one flush for all. One run at a time pays one hand-off to the
/// blocking pool; many runs share flushes.
pub(super) struct GroupCommit {
    db: sled::Db,
    state: std::sync::Mutex<CommitState>,
    flushed: Notify,
}

#[derive(Default)]
struct CommitState {
    /// A leader is flushing.
    leading: bool,
    /// Flushes started and completed, numbered from 1.
    started: u64,
    completed: u64,
    /// The outcome of the last completed flush.
    last: Option<String>,
}

impl GroupCommit {
    pub(super) fn new(db: sled::Db) -> Self {
        GroupCommit {
            db,
            state: Default::default(),
            flushed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CommitState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a flush that started after this call: every write made
    /// before the call is then on disk.
    pub(super) async fn sync(&self) -> Result<()> {
        let needed = self.lock().started + 1;
        loop {
            let flushed = self.flushed.notified();
            tokio::pin!(flushed);
            flushed.as_mut().enable();
            let lead = {
                let mut state = self.lock();
                if state.completed >= needed {
                    return match &state.last {
                        None => Ok(()),
                        Some(reason) => Err(StoreError::Unconfirmed {
                            reason: reason.clone(),
                        }),
                    };
                }
                if state.leading {
                    None
                } else {
                    state.leading = true;
                    state.started += 1;
                    Some(state.started)
                }
            };
            match lead {
                Some(flush) => {
                    // If this caller is dropped mid-flush, another leads.
                    let guard = Abdicate(self);
                    let db = self.db.clone();
                    let result = match tokio::task::spawn_blocking(move || db.flush()).await {
                        Ok(Ok(_)) => None,
                        Ok(Err(e)) => Some(e.to_string()),
                        Err(e) => Some(format!("the flush task failed: {e}")),
                    };
                    std::mem::forget(guard);
                    {
                        let mut state = self.lock();
                        state.leading = false;
                        state.completed = flush;
                        state.last = result;
                    }
                    self.flushed.notify_waiters();
                }
                None => flushed.await,
            }
        }
    }
}

/// Hands leadership back when a leader is dropped before its flush ended.
struct Abdicate<'a>(&'a GroupCommit);

impl Drop for Abdicate<'_> {
    fn drop(&mut self) {
        self.0.lock().leading = false;
        self.0.flushed.notify_waiters();
    }
}

//! Group commit for sled: callers that need their writes on disk share
//! flushes, and no flush runs on an async worker thread.
//!
//! sled's own flush writes its log with `sync_file_range` on Linux, which
//! waits for the pages to reach the device but neither flushes the
//! device's write cache nor records the file's new length: it survives a
//! killed process, not a power cut or a crashed kernel. A flush here
//! therefore ends with `fdatasync` of the log file, which does both.

use std::sync::Arc;

use tokio::sync::Notify;

use crate::{Result, StoreError};

/// Group commit without a thread of its own: the first caller to need a
/// flush leads it, without stalling the other async tasks (see
/// [`GroupCommit::flush`]); callers that arrive while it runs wait, and the next of
/// them leads one flush for all. One run at a time pays no hand-off; many
/// runs share flushes.
pub(super) struct GroupCommit {
    db: sled::Db,
    /// sled's log file, synced after each flush of sled's; `None` for a
    /// temporary database, which has no file.
    log: Option<Arc<std::fs::File>>,
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
    /// Group commit over `db`, whose log is the file `log` (opened to be
    /// synced).
    pub(super) fn new(db: sled::Db, log: Option<std::fs::File>) -> Self {
        GroupCommit {
            db,
            log: log.map(Arc::new),
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
                    let result = self.flush().await;
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

impl GroupCommit {
    /// Flushes sled without stalling the async workers: on a multi-thread
    /// runtime the leader's worker hands its other tasks to the runtime and
    /// flushes in place (no thread hop); elsewhere the flush goes to the
    /// blocking pool.
    async fn flush(&self) -> Option<String> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let in_place =
            Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
        let result = if in_place {
            tokio::task::block_in_place(|| self.flush_now())
        } else {
            let (db, log) = (self.db.clone(), self.log.clone());
            let flushed = tokio::task::spawn_blocking(move || flush_and_sync(&db, log.as_deref()));
            match flushed.await {
                Ok(result) => result,
                Err(e) => return Some(format!("the flush task failed: {e}")),
            }
        };
        result.err()
    }

    fn flush_now(&self) -> std::result::Result<(), String> {
        flush_and_sync(&self.db, self.log.as_deref())
    }
}

/// sled's flush, then the log file's data and length on the device.
fn flush_and_sync(db: &sled::Db, log: Option<&std::fs::File>) -> std::result::Result<(), String> {
    db.flush().map_err(|e| e.to_string())?;
    if let Some(log) = log {
        log.sync_data()
            .map_err(|e| format!("syncing sled's log file: {e}"))?;
    }
    Ok(())
}

/// Hands leadership back when a leader is dropped before its flush ended.
struct Abdicate<'a>(&'a GroupCommit);

impl Drop for Abdicate<'_> {
    fn drop(&mut self) {
        self.0.lock().leading = false;
        self.0.flushed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn commit() -> (tempfile::TempDir, Arc<GroupCommit>) {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        (dir, Arc::new(GroupCommit::new(db, None)))
    }

    /// Callers that arrive while a flush runs share the next one: with a
    /// flush in progress, 64 callers ask; once all of them wait, the flush
    /// ends, and a single further flush answers every one (a flush per
    /// caller would make 64). Nothing here depends on timing: the test
    /// waits until each caller's first step has run, on one thread.
    #[tokio::test(flavor = "current_thread")]
    async fn callers_that_arrive_during_a_flush_share_the_next_one() {
        let (_dir, commit) = commit();
        {
            let mut state = commit.lock();
            state.leading = true;
            state.started = 1;
        }
        let callers = 64;
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..callers {
            let (commit, asked) = (commit.clone(), asked.clone());
            tasks.spawn(async move {
                asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                commit.sync().await
            });
        }
        // A caller's first step (counting itself, then asking) runs to its
        // wait in one poll; on this one thread, the count is then complete.
        while asked.load(std::sync::atomic::Ordering::SeqCst) < callers {
            tokio::task::yield_now().await;
        }
        {
            let mut state = commit.lock();
            state.leading = false;
            state.completed = 1;
        }
        commit.flushed.notify_waiters();
        while let Some(result) = tasks.join_next().await {
            result.unwrap().unwrap();
        }
        let flushes = commit.lock().completed;
        assert_eq!(
            flushes, 2,
            "the one in progress and one more, for {callers} callers"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_dropped_while_leading_hands_leadership_on() {
        let (_dir, commit) = commit();
        {
            let mut state = commit.lock();
            state.leading = true;
            state.started = 1;
        }
        // A caller waits for the leader; the leader goes away unfinished.
        let waiter = tokio::spawn({
            let commit = commit.clone();
            async move { commit.sync().await }
        });
        tokio::task::yield_now().await;
        drop(Abdicate(&commit));
        tokio::time::timeout(std::time::Duration::from_secs(10), waiter)
            .await
            .expect("the waiter was left waiting")
            .unwrap()
            .unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_current_thread_runtime_flushes_on_the_blocking_pool() {
        let (_dir, commit) = commit();
        commit.sync().await.unwrap();
        assert_eq!(commit.lock().completed, 1);
    }
}

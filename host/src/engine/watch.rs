//! Watching a run: each journal entry once it is durable and each change of
//! the run's record, until the run ends. A watcher follows this process's
//! journal writes and the wakes the store announces ([`Changes`]), so it
//! hears of a write at once; it looks again every `Config::watch_poll`
//! only for the writes of other processes that announce nothing.

use std::collections::VecDeque;

use futures::Stream;
use keel_core::{Entry, RunId, RunRecord};
use keel_store::Wake;
use tokio::sync::broadcast;

use super::Keel;
use crate::Result;

/// What a watcher sees of a run.
#[derive(Clone, Debug, PartialEq)]
pub enum Watched {
    /// A journal entry, in order, each once.
    Entry(Entry),
    /// The run's record, when it changed (first as it is).
    Run(RunRecord),
}

/// Hears that a run may have changed: this process's journal and stream
/// writes, the wakes the store announces, and, for writes of other
/// processes that announce nothing, the passing of `Config::watch_poll`.
pub(super) struct Changes {
    run_id: RunId,
    poll: std::time::Duration,
    journaled: broadcast::Receiver<RunId>,
    wakes: Option<broadcast::Receiver<Wake>>,
}

impl Changes {
    /// Subscribed now: a write after this call is heard.
    pub(super) fn of(keel: &Keel, run_id: &RunId) -> Changes {
        Changes {
            run_id: run_id.clone(),
            poll: keel.inner.config.watch_poll,
            journaled: keel.inner.journaled.subscribe(),
            wakes: keel.store().wake_stream(),
        }
    }

    /// Waits until something may have changed the run.
    pub(super) async fn next(&mut self) {
        let run_id = &self.run_id;
        let journaled = async {
            loop {
                match self.journaled.recv().await {
                    Ok(id) if id == *run_id => return,
                    Ok(_) => {}
                    // Missed some: look, in case this run was among them.
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                }
            }
        };
        let woken = async {
            let Some(wakes) = self.wakes.as_mut() else {
                return std::future::pending().await;
            };
            loop {
                match wakes.recv().await {
                    Ok(Wake::Run(id) | Wake::Cancel(id)) if id == *run_id => return,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                }
            }
        };
        tokio::select! {
            () = journaled => {}
            () = woken => {}
            () = tokio::time::sleep(self.poll) => {}
        }
    }
}

/// A watcher's place in a run.
struct Watcher {
    keel: Keel,
    run_id: RunId,
    /// Entries already seen.
    sent: usize,
    last: Option<RunRecord>,
    ended: bool,
    pending: VecDeque<Watched>,
    changes: Changes,
}

impl Watcher {
    /// Reads the run and its journal; queues what is new.
    async fn look(&mut self) -> Result<()> {
        let run = self.keel.get_run(&self.run_id).await?;
        let journal = self.keel.journal(&self.run_id).await?;
        let new = journal.into_iter().skip(self.sent);
        let before = self.pending.len();
        self.pending.extend(new.map(Watched::Entry));
        self.sent += self.pending.len() - before;
        if self.last.as_ref() != Some(&run) {
            self.ended = run.status.is_final();
            self.last = Some(run.clone());
            self.pending.push_back(Watched::Run(run));
        }
        Ok(())
    }
}

impl Keel {
    /// The run's journal entries, then each new one once it is durable, and
    /// its record whenever it changes, until it has ended. An error (the
    /// run unknown, the store failing) is the stream's last item.
    pub fn watch(&self, run_id: &RunId) -> impl Stream<Item = Result<Watched>> + Send + use<> {
        let watcher = Watcher {
            keel: self.clone(),
            run_id: run_id.clone(),
            sent: 0,
            last: None,
            ended: false,
            pending: VecDeque::new(),
            // Subscribed before the first look: a write after it is heard.
            changes: Changes::of(self, run_id),
        };
        futures::stream::unfold(watcher, |mut w| async move {
            loop {
                if let Some(item) = w.pending.pop_front() {
                    return Some((Ok(item), w));
                }
                if w.ended {
                    return None;
                }
                if let Err(e) = w.look().await {
                    w.ended = true;
                    return Some((Err(e), w));
                }
                if w.pending.is_empty() && !w.ended {
                    w.changes.next().await;
                }
            }
        })
    }
}

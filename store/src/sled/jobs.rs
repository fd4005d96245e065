//! Bulk operations' jobs: one record per job ID in the `jobs` tree (IDs
//! sort by time), updated by compare-and-swap on the bytes read, so a
//! revision is written once; `running_jobs` holds the IDs of those still
//! running (added before a record says so, removed after), so a worker's
//! look for work reads those only.

use keel_core::bulk::{JobRecord, JobState};

use super::*;
use crate::JobStore;

fn decode(bytes: &[u8]) -> Result<JobRecord> {
    Ok(codec::decode(bytes, "job")?)
}

#[async_trait]
impl JobStore for SledStore {
    async fn create_job(&self, job: &JobRecord) -> Result<()> {
        self.room()?;
        let mut record = job.clone();
        record.revision = 0;
        self.index_running(&record)?;
        let created = self
            .inner
            .jobs
            .compare_and_swap(
                record.job_id.as_bytes(),
                None::<&[u8]>,
                Some(codec::encode(&record)),
            )
            .map_err(backend)?;
        if created.is_err() {
            return Err(StoreError::JobConflict {
                job_id: record.job_id,
            });
        }
        self.sync().await
    }

    async fn update_job(&self, job: &JobRecord) -> Result<u64> {
        self.room()?;
        let job_id = job.job_id.as_str();
        let Some(current) = self.inner.jobs.get(job_id).map_err(backend)? else {
            return Err(StoreError::JobNotFound {
                job_id: job_id.into(),
            });
        };
        let conflict = || StoreError::JobConflict {
            job_id: job_id.into(),
        };
        if decode(&current)?.revision != job.revision {
            return Err(conflict());
        }
        let mut next = job.clone();
        next.revision += 1;
        if next.state == JobState::Running {
            self.index_running(&next)?;
        }
        let swapped = self
            .inner
            .jobs
            .compare_and_swap(job_id, Some(current), Some(codec::encode(&next)))
            .map_err(backend)?;
        if swapped.is_err() {
            return Err(conflict());
        }
        self.index_running(&next)?;
        self.sync().await?;
        Ok(next.revision)
    }

    async fn job(&self, job_id: &str) -> Result<Option<JobRecord>> {
        match self.inner.jobs.get(job_id).map_err(backend)? {
            Some(bytes) => Ok(Some(decode(&bytes)?)),
            None => Ok(None),
        }
    }

    async fn jobs(&self, limit: usize) -> Result<Vec<JobRecord>> {
        self.inner
            .jobs
            .iter()
            .rev()
            .take(limit)
            .map(|kv| decode(&kv.map_err(backend)?.1))
            .collect()
    }

    async fn running_jobs(&self) -> Result<Vec<JobRecord>> {
        let mut running = Vec::new();
        for id in self.inner.running_jobs.iter().keys() {
            let id = id.map_err(backend)?;
            match self.inner.jobs.get(&id).map_err(backend)? {
                Some(bytes) if decode(&bytes)?.state == JobState::Running => {
                    running.push(decode(&bytes)?)
                }
                // Ended (or never created): its index entry goes.
                _ => {
                    self.inner.running_jobs.remove(&id).map_err(backend)?;
                }
            }
        }
        Ok(running)
    }
}

impl SledStore {
    /// Keeps `job`'s place in `running_jobs` as its state says.
    pub(super) fn index_running(&self, job: &JobRecord) -> Result<()> {
        let id = job.job_id.as_bytes();
        match job.state == JobState::Running {
            true => self.inner.running_jobs.insert(id, &[]),
            false => self.inner.running_jobs.remove(id),
        }
        .map_err(backend)?;
        Ok(())
    }
}

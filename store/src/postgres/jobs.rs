//! Bulk operations' jobs: one row per job, the record beside the columns
//! the queries read. An update is a compare-and-set on the revision, so a
//! worker that lost a job's claim never writes over the one that took it.

use keel_core::bulk::{JobRecord, JobState};

use super::*;
use crate::JobStore;

#[async_trait]
impl JobStore for PgStore {
    async fn create_job(&self, job: &JobRecord) -> Result<()> {
        let mut record = job.clone();
        record.revision = 0;
        let created = self
            .exec(
                "INSERT INTO jobs (job_id, revision, running, record) VALUES ($1, 0, $2, $3)
                 ON CONFLICT (job_id) DO NOTHING",
                &[
                    &record.job_id,
                    &(record.state == JobState::Running),
                    &codec::encode(&record),
                ],
            )
            .await?;
        if created == 0 {
            return Err(StoreError::JobConflict {
                job_id: record.job_id,
            });
        }
        Ok(())
    }

    async fn update_job(&self, job: &JobRecord) -> Result<u64> {
        let mut next = job.clone();
        next.revision += 1;
        let updated = self
            .exec(
                "UPDATE jobs SET revision = $2, running = $3, record = $4
                 WHERE job_id = $1 AND revision = $5",
                &[
                    &next.job_id,
                    &i(next.revision),
                    &(next.state == JobState::Running),
                    &codec::encode(&next),
                    &i(job.revision),
                ],
            )
            .await?;
        if updated == 1 {
            return Ok(next.revision);
        }
        let job_id = next.job_id;
        Err(match self.job(&job_id).await? {
            Some(_) => StoreError::JobConflict { job_id },
            None => StoreError::JobNotFound { job_id },
        })
    }

    async fn job(&self, job_id: &str) -> Result<Option<JobRecord>> {
        Ok(self
            .records(
                "SELECT record FROM jobs WHERE job_id = $1",
                &[&job_id],
                "job",
            )
            .await?
            .pop())
    }

    async fn jobs(&self, limit: usize) -> Result<Vec<JobRecord>> {
        self.records(
            "SELECT record FROM jobs ORDER BY job_id DESC LIMIT $1",
            &[&(limit.min(i64::MAX as usize) as i64)],
            "job",
        )
        .await
    }

    async fn running_jobs(&self) -> Result<Vec<JobRecord>> {
        self.records(
            "SELECT record FROM jobs WHERE running ORDER BY job_id",
            &[],
            "job",
        )
        .await
    }
}

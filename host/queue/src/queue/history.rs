//! A job's history through the [`Queue`]: its attempts (stored ones plus
//! the one its row describes now) and its stored log lines.

use super::Queue;
use crate::attempt::{derived_attempt, Attempt, LogQuery, StoredLogLine};
use crate::store::StoreError;

impl Queue {
    /// Every attempt of job `id`, oldest first: the finished ones as
    /// stored, then the one running now (or an expiry) as the job row
    /// describes it. `None` when there is no such job.
    ///
    /// # Errors
    /// The store failed.
    pub async fn attempts(&self, id: &str) -> Result<Option<Vec<Attempt>>, StoreError> {
        let Some(job) = self.inner.store.get(id).await? else {
            return Ok(None);
        };
        let mut attempts = self.inner.store.attempts(id).await?;
        let derived = derived_attempt(&job).filter(|d| {
            !attempts
                .iter()
                .any(|a| a.attempt == d.attempt && a.started_at == d.started_at)
        });
        attempts.extend(derived);
        Ok(Some(attempts))
    }

    /// Stored log lines of a job, in the order they were stored.
    ///
    /// # Errors
    /// The store failed.
    pub async fn logs(&self, query: &LogQuery) -> Result<Vec<StoredLogLine>, StoreError> {
        self.inner.store.logs(query).await
    }
}

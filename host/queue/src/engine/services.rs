//! [`JobServices`] for one run: progress (fenced on this worker's lease),
//! follow-up enqueue restricted to the handler's `may_enqueue` list, and the
//! run's children (flows).

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::handler::{ChildJobRequest, ChildSummary, JobServices, ServiceError};
use crate::job::{JobFilter, NewJob};
use crate::queue::{Queue, QueueError};

pub(crate) struct RunServices {
    pub queue: Queue,
    pub worker_id: String,
    pub job_id: String,
    pub may_enqueue: Vec<String>,
}

/// Most children listed for one parent.
const MAX_CHILDREN: u32 = 10_000;

impl JobServices for RunServices {
    fn progress(&self, json: String) -> BoxFuture<'_, Result<(), ServiceError>> {
        async move {
            if serde_json::from_str::<serde_json::Value>(&json).is_err() {
                return Err(ServiceError::Invalid("progress must be JSON text".into()));
            }
            self.queue
                .store()
                .set_progress(&self.worker_id, &self.job_id, &json)
                .await
                .map(|_| ())
                .map_err(|e| ServiceError::Host(e.to_string()))
        }
        .boxed()
    }

    fn enqueue(&self, request: ChildJobRequest) -> BoxFuture<'_, Result<String, ServiceError>> {
        async move {
            let allowed = self
                .may_enqueue
                .iter()
                .any(|t| t == "*" || *t == request.job_type);
            if !allowed {
                return Err(ServiceError::NotAllowed(request.job_type));
            }
            let job = NewJob {
                job_type: request.job_type,
                payload: request.payload,
                scope: request.scope,
                dedupe_key: request.dedupe_key,
                max_attempts: request.max_attempts,
                delay: request.delay,
                priority: request.priority.unwrap_or(0),
                ..NewJob::default()
            };
            match self.queue.add(job).await {
                Ok(r) => Ok(r.id),
                Err(QueueError::Enqueue(e)) => Err(ServiceError::Invalid(e.to_string())),
                Err(QueueError::Store(e)) => Err(ServiceError::Host(e.to_string())),
            }
        }
        .boxed()
    }

    fn children(&self) -> BoxFuture<'_, Result<Vec<ChildSummary>, ServiceError>> {
        async move {
            let filter = JobFilter {
                parent_id: Some(self.job_id.clone()),
                limit: Some(MAX_CHILDREN),
                ..JobFilter::default()
            };
            let jobs = self
                .queue
                .find(&filter)
                .await
                .map_err(|e| ServiceError::Host(e.to_string()))?;
            Ok(jobs
                .into_iter()
                .map(|j| ChildSummary {
                    id: j.id,
                    job_type: j.job_type,
                    status: j.status.as_str().to_string(),
                    result: j.result,
                    error: j.last_error,
                })
                .collect())
        }
        .boxed()
    }
}

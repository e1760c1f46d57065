//! The producer side: typed enqueue and wait on a `boxcar_queue::Queue`.
//!
//! Invariants: `enqueue_typed` goes through `Queue::add`, so it validates
//! exactly as an untyped enqueue does (known types, payload limits and
//! schemas); `wait_typed` reads back only jobs of the declared type and
//! returns a failure's message, code and details intact.

use std::future::Future;
use std::time::Duration;

use boxcar_queue::{AddResult, JobStatus, NewJob, Queue, QueueError, WaitError};

use crate::{decode_output, encode_payload, JobType};

/// A typed enqueue was refused.
#[derive(Debug, thiserror::Error)]
pub enum TypedEnqueueError {
    /// The payload could not be serialized.
    #[error("{0}")]
    Encode(String),
    /// The queue refused the job (e.g. `UnknownJobType`) or the store failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// A typed wait ended without the declared output.
#[derive(Debug, thiserror::Error)]
pub enum TypedWaitError {
    /// Timed out, no such job, or the store failed.
    #[error(transparent)]
    Wait(#[from] WaitError),
    /// The job ended `failed` or `cancelled`.
    #[error("job `{id}` {status}: {message}")]
    Failed {
        /// The job.
        id: String,
        /// `failed` or `cancelled`.
        status: JobStatus,
        /// The handler's (or the queue's) error message.
        message: String,
        /// The handler's machine-readable code, e.g. `content-refused`.
        code: Option<String>,
        /// The handler's JSON details.
        details: Option<serde_json::Value>,
    },
    /// The job is of another type than the declaration waited with.
    #[error("job `{id}` is of type `{actual}`, not `{expected}`; wait with the declaration of `{actual}`")]
    WrongType {
        /// The job.
        id: String,
        /// The declared type.
        expected: &'static str,
        /// The job's type.
        actual: String,
    },
    /// The stored result does not have the declared output shape.
    #[error("job `{id}`: {reason}")]
    BadOutput {
        /// The job.
        id: String,
        /// What did not match.
        reason: String,
    },
}

impl TypedWaitError {
    /// The handler's error code, when the job failed with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Failed { code, .. } => code.as_deref(),
            _ => None,
        }
    }
}

/// Typed enqueue and wait. Implemented for `boxcar_queue::Queue`.
pub trait TypedQueue {
    /// Enqueues a job of type `J` with a typed payload.
    fn enqueue_typed<J: JobType>(
        &self,
        payload: &J::Payload,
    ) -> impl Future<Output = Result<AddResult, TypedEnqueueError>> + Send {
        self.enqueue_typed_with::<J>(payload, |job| job)
    }

    /// Like [`TypedQueue::enqueue_typed`], with the envelope (scope, dedupe
    /// key, TTL, …) set by `configure` on the untyped [`NewJob`].
    fn enqueue_typed_with<J: JobType>(
        &self,
        payload: &J::Payload,
        configure: impl FnOnce(NewJob) -> NewJob + Send,
    ) -> impl Future<Output = Result<AddResult, TypedEnqueueError>> + Send;

    /// Waits up to `timeout` for job `id` of type `J` to finish and returns
    /// its typed result.
    fn wait_typed<J: JobType>(
        &self,
        id: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<J::Output, TypedWaitError>> + Send;
}

impl TypedQueue for Queue {
    fn enqueue_typed_with<J: JobType>(
        &self,
        payload: &J::Payload,
        configure: impl FnOnce(NewJob) -> NewJob + Send,
    ) -> impl Future<Output = Result<AddResult, TypedEnqueueError>> + Send {
        let job = encode_payload::<J>(payload).map(|value| configure(NewJob::new(J::NAME, &value)));
        async move {
            let job = job.map_err(TypedEnqueueError::Encode)?;
            Ok(self.add(job).await?)
        }
    }

    fn wait_typed<J: JobType>(
        &self,
        id: &str,
        timeout: Duration,
    ) -> impl Future<Output = Result<J::Output, TypedWaitError>> + Send {
        let id = id.to_string();
        async move {
            let job = self.wait(&id, timeout).await?;
            if job.job_type != J::NAME {
                return Err(TypedWaitError::WrongType {
                    id,
                    expected: J::NAME,
                    actual: job.job_type,
                });
            }
            match job.status {
                JobStatus::Succeeded => decode_output::<J>(job.result.as_deref())
                    .map_err(|reason| TypedWaitError::BadOutput { id, reason }),
                status => Err(TypedWaitError::Failed {
                    id,
                    status,
                    message: job.last_error.unwrap_or_default(),
                    code: job.error_code,
                    details: job
                        .error_details
                        .as_deref()
                        .and_then(|d| serde_json::from_str(d).ok()),
                }),
            }
        }
    }
}

//! Test doubles for crates whose tests run handlers outside a worker (the
//! sandbox's test binaries and benchmarks): host services that record what
//! a job asked for, and a ready-made [`JobRun`] and [`JobContext`]. Behind
//! the cargo feature `test-util`; never compiled into a release build.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::handler::{
    ChildJobRequest, ChildSummary, JobContext, JobRun, JobServices, ServiceError,
};

/// Host services that accept every call and record it: progress reports in
/// order, and enqueue requests (answered with ids `child-1`, `child-2`, …).
/// A job has no children.
#[derive(Default)]
pub struct RecordingServices {
    enqueued: Mutex<Vec<ChildJobRequest>>,
    progress: Mutex<Vec<String>>,
}

impl RecordingServices {
    /// The enqueue requests so far.
    pub fn enqueued(&self) -> Vec<ChildJobRequest> {
        self.enqueued.lock().clone()
    }

    /// The progress reports so far.
    pub fn progress(&self) -> Vec<String> {
        self.progress.lock().clone()
    }
}

impl JobServices for RecordingServices {
    fn progress(&self, json: String) -> BoxFuture<'_, Result<(), ServiceError>> {
        self.progress.lock().push(json);
        Box::pin(async { Ok(()) })
    }

    fn enqueue(&self, request: ChildJobRequest) -> BoxFuture<'_, Result<String, ServiceError>> {
        let mut all = self.enqueued.lock();
        all.push(request);
        let id = format!("child-{}", all.len());
        Box::pin(async move { Ok(id) })
    }

    fn children(&self) -> BoxFuture<'_, Result<Vec<ChildSummary>, ServiceError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// A first attempt (of 3) of job `job-1` of `job_type` with `payload`,
/// whose deadline is `timeout` from now.
pub fn job_run(job_type: &str, payload: &str, timeout: Duration) -> JobRun {
    JobRun {
        id: "job-1".into(),
        job_type: job_type.into(),
        payload: payload.into(),
        attempt: 1,
        max_attempts: 3,
        scope: None,
        schedule_id: None,
        parent_id: None,
        deadline: crate::time::after(chrono::Utc::now(), timeout),
    }
}

/// A context with a fresh cancellation token and recording services.
pub fn context() -> (JobContext, Arc<RecordingServices>) {
    let services = Arc::new(RecordingServices::default());
    let ctx = JobContext {
        cancel: CancellationToken::new(),
        services: services.clone(),
        record: Arc::new(crate::RunRecord::new("job-1", 1)),
    };
    (ctx, services)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_recording_services_record_in_order() {
        let (ctx, services) = context();
        ctx.services.progress("{\"pct\":1}".into()).await.ok();
        let first = ctx
            .services
            .enqueue(ChildJobRequest {
                job_type: "a".into(),
                ..ChildJobRequest::default()
            })
            .await;
        let second = ctx.services.enqueue(ChildJobRequest::default()).await;
        assert_eq!(
            (first, second),
            (Ok("child-1".into()), Ok("child-2".into()))
        );
        assert_eq!(services.progress(), vec!["{\"pct\":1}".to_string()]);
        assert_eq!(services.enqueued()[0].job_type, "a");
        assert!(ctx.services.children().await.unwrap_or_default().is_empty());
        let run = job_run("t", "{}", Duration::from_secs(5));
        assert!(run.deadline > chrono::Utc::now());
    }
}

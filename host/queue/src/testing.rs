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

/// Host services that record every call: progress reports in order, and
/// the enqueue requests they accept (answered with ids `child-1`,
/// `child-2`, …). The default accepts every enqueue; one made with
/// [`RecordingServices::allowing`] refuses other types as the queue's own
/// services refuse types outside `may_enqueue`. A job has no children.
#[derive(Default)]
pub struct RecordingServices {
    enqueued: Mutex<Vec<ChildJobRequest>>,
    progress: Mutex<Vec<String>>,
    /// `Some`: the only types an enqueue may name.
    may_enqueue: Option<Vec<String>>,
}

impl RecordingServices {
    /// Services that accept enqueues of `types` only and refuse any other
    /// with [`ServiceError::NotAllowed`] (a refused request is not
    /// recorded).
    pub fn allowing(types: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            may_enqueue: Some(types.into_iter().map(Into::into).collect()),
            ..Self::default()
        }
    }

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
        if let Some(allowed) = &self.may_enqueue {
            if !allowed.contains(&request.job_type) {
                return Box::pin(async move { Err(ServiceError::NotAllowed(request.job_type)) });
            }
        }
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

/// A context with a fresh cancellation token and recording services that
/// accept every enqueue.
pub fn context() -> (JobContext, Arc<RecordingServices>) {
    context_with(RecordingServices::default())
}

/// A context with a fresh cancellation token and `services`.
pub fn context_with(services: RecordingServices) -> (JobContext, Arc<RecordingServices>) {
    let services = Arc::new(services);
    let ctx = JobContext {
        cancel: CancellationToken::new(),
        services: services.clone(),
        record: Arc::new(crate::RunRecord::new("job-1", 1)),
        lease: crate::LeaseClock::unbounded(),
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

    #[tokio::test]
    async fn an_allow_list_refuses_other_types_unrecorded() {
        let (ctx, services) = context_with(RecordingServices::allowing(["a"]));
        let request = |t: &str| ChildJobRequest {
            job_type: t.into(),
            ..ChildJobRequest::default()
        };
        assert_eq!(
            ctx.services.enqueue(request("b")).await,
            Err(ServiceError::NotAllowed("b".into()))
        );
        assert_eq!(
            ctx.services.enqueue(request("a")).await,
            Ok("child-1".into())
        );
        let recorded: Vec<String> = services
            .enqueued()
            .into_iter()
            .map(|r| r.job_type)
            .collect();
        assert_eq!(recorded, ["a"]);
    }
}

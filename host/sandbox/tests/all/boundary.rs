//! Real guests through the queue's engine: the sandbox forwards what a
//! guest asks and answers, and the queue decides — `may_enqueue` and the
//! enqueue bounds in one place, and output it could not store (a raw NUL in
//! a result, message, code or details) refused as `invalid-output`.

use std::{sync::Arc, time::Duration};

use boxcar_queue::INVALID_OUTPUT;
use boxcar_queue::{
    connect, Handler, HandlerSettings, Job, JobFilter, JobStatus, NewJob, Queue, QueueOptions,
    Registry, Worker, WorkerHandle, WorkerOptions,
};
use boxcar_sandbox::{Capabilities, HandlerLimits};
use serde_json::{json, Value};

use crate::common::{load, load_with};

/// A memory-store queue whose worker runs `handler` for `job_type`.
async fn engine(
    job_type: &str,
    handler: Arc<dyn Handler>,
    may_enqueue: &[&str],
) -> (Queue, WorkerHandle) {
    let queue = Queue::new(
        connect("memory://").await.expect("store"),
        QueueOptions::default(),
    )
    .expect("queue");
    let registry = Registry::new();
    registry.declare_elsewhere(["echo".to_string(), "secret-admin".to_string()]);
    let mut settings = HandlerSettings::default();
    settings.concurrency = 4;
    settings.timeout = Duration::from_secs(10);
    settings.max_attempts = Some(1);
    settings.may_enqueue = may_enqueue.iter().map(|t| t.to_string()).collect();
    registry
        .register(job_type, handler, settings)
        .expect("register");
    let mut opts = WorkerOptions::default();
    opts.poll_interval = Duration::from_millis(20);
    let worker = Worker::start(queue.clone(), registry, opts).expect("worker");
    (queue, worker)
}

async fn run(queue: &Queue, job_type: &str, payload: Value) -> Job {
    let id = queue
        .add(NewJob::new(job_type, &payload))
        .await
        .expect("add")
        .id;
    queue
        .wait(&id, Duration::from_secs(20))
        .await
        .expect("wait")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_of_a_type_not_granted_is_refused() {
    let (queue, worker) = engine("enqueue-flood", load("enqueue-flood"), &[]).await;
    let job = run(&queue, "enqueue-flood", json!({"job_type": "secret-admin"})).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{job:?}");
    let result = job.result.unwrap_or_default();
    assert!(result.contains("NotAllowed"), "{result}");
    assert!(result.contains("capabilities.may_enqueue"), "{result}");
    let mut secret = JobFilter::default();
    secret.types = vec!["secret-admin".into()];
    let enqueued = queue.find(&secret).await.expect("find");
    assert!(enqueued.is_empty(), "nothing was enqueued: {enqueued:?}");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_cannot_store_what_the_database_cannot_hold() {
    let poison = load_with("poison", HandlerLimits::default(), Capabilities::default());
    let (queue, worker) = engine("poison", poison, &["echo"]).await;
    for mode in [
        "nul-result",
        "not-json",
        "nul-message",
        "nul-code",
        "nul-details",
        "nul-retry",
    ] {
        let job = run(&queue, "poison", json!({ "mode": mode })).await;
        assert_eq!(job.status, JobStatus::Failed, "{mode}: {job:?}");
        assert_eq!(job.error_code.as_deref(), Some(INVALID_OUTPUT), "{mode}");
        let error = job.last_error.unwrap_or_default();
        assert!(error.starts_with("invalid output: "), "{mode}: {error}");
        assert!(!error.contains('\0'), "{mode}: {error:?}");
        assert!(
            job.result.is_none() && job.error_details.is_none(),
            "{mode}"
        );
    }
    let job = run(&queue, "poison", json!({"mode": "nul-progress"})).await;
    assert_eq!(job.status, JobStatus::Succeeded, "{job:?}");
    let result = job.result.unwrap_or_default();
    assert!(
        result.contains("Invalid") && result.contains("JSON"),
        "{result}"
    );
    assert!(
        job.progress.is_none(),
        "the refused progress was not stored"
    );

    let job = run(
        &queue,
        "poison",
        json!({"mode": "enqueue", "enqueue": {"job_type": "echo", "priority": i32::MIN}}),
    )
    .await;
    let result = job.result.unwrap_or_default();
    assert!(
        result.contains("Invalid") && result.contains("enqueue_priority"),
        "{result}"
    );
    worker.shutdown().await;
}

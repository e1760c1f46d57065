//! A run that loses its lease says so in its own span at the moment its
//! handler stops being polled: the line is the evidence (for an operator,
//! and for the chaos harness) of when the guest took its last step, which
//! the run's close line only bounds from much later (after the host has
//! read the job back and stored the run's last log lines).

use std::sync::Arc;
use std::time::{Duration, Instant};

use boxcar_queue::{
    HandlerSettings, JobRun, LifecycleOutcome, NewJob, Outcome, Queue, QueueOptions, Registry,
    Worker, WorkerOptions,
};
use parking_lot::Mutex;
use serde_json::json;

use crate::support::{eventually, handler, Recorder};
use crate::tracing_capture::{global_log, Logged};

fn options() -> WorkerOptions {
    let mut opts = WorkerOptions::default();
    opts.poll_interval = Duration::from_millis(50);
    opts.abandon_grace = Duration::from_millis(100);
    opts.shutdown_grace = Duration::from_millis(200);
    opts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_is_logged_in_the_run_span_once_its_handler_stopped() {
    let log = global_log();

    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("lease.db").display());
    let store = boxcar_queue::open_store(&url).await.unwrap();
    store.migrate().await.unwrap();
    let queue = Queue::new(store, QueueOptions::default()).unwrap();
    let rec = Arc::new(Recorder::default());
    queue.observe(rec.clone());

    // Steps every 2 ms until it is stopped; a renewal never comes within
    // the 300 ms lease, so the lease lapses mid-run.
    let last_step: Arc<Mutex<Option<Instant>>> = Arc::default();
    let steps = Arc::clone(&last_step);
    let h = handler(move |job: JobRun, ctx| {
        let steps = Arc::clone(&steps);
        async move {
            while !ctx.cancel.is_cancelled() {
                // The job runs again once its lapsed lease is rescued: only
                // the first run's steps count.
                if job.attempt == 1 {
                    *steps.lock() = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Outcome::Cancelled
        }
    });
    let mut settings = HandlerSettings::default();
    settings.timeout = Duration::from_secs(60);
    settings.lease_duration = Some(Duration::from_millis(300));
    settings.lease_renew_interval = Some(Duration::from_secs(30));
    let registry = Registry::new();
    registry.register("lapsing", h, settings).unwrap();
    let worker = Worker::start(queue.clone(), registry, options()).unwrap();

    let id = queue
        .add(NewJob::new("lapsing", &json!({})))
        .await
        .unwrap()
        .id;
    assert!(
        eventually(Duration::from_secs(10), || async {
            rec.outcomes(&id).contains(&LifecycleOutcome::LeaseLost)
        })
        .await,
        "the run ends as a lost lease: {:?}",
        rec.outcomes(&id)
    );
    worker.shutdown().await;

    let lost: Vec<Logged> = log
        .0
        .lock()
        .iter()
        .filter(|l| l.fields.contains("lease lost:"))
        .cloned()
        .collect();
    let ours: Vec<&Logged> = lost
        .iter()
        .filter(|l| {
            l.span.starts_with("job{")
                && l.span.contains(&format!("job_id={id} "))
                && l.span.contains("attempt=1 ")
        })
        .collect();
    assert_eq!(
        ours.len(),
        1,
        "one `lease lost` line in the first run's span; the lines: {lost:#?}"
    );
    let line = ours[0];
    assert!(
        line.fields.contains("it could no longer be proved")
            && line.target == boxcar_queue::RUN_SPAN_TARGET,
        "the line says why, under the run span's target: {line:?}"
    );
    let stepped = last_step.lock().expect("the handler ran");
    assert!(
        stepped <= line.at,
        "the handler stepped {:?} after the `lease lost` line",
        stepped - line.at
    );
}

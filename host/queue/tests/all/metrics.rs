//! The queue's metrics after a workload of native handlers: run and wait
//! histograms count every run, attempts are counted by the outcome their
//! stored attempt records, the host's overhead is counted for runs whose
//! handler measured its guest time, and store round trips by operation.

use std::time::Duration;

use boxcar_queue::metrics::StoreOp;
use boxcar_queue::{
    AttemptOutcome, HandlerSettings, JobRun, JobStatus, NewJob, Outcome, Registry, Worker,
    WorkerOptions,
};
use serde_json::json;

use crate::support::{eventually, handler, Backend, Fixture};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_runs_waits_outcomes_and_store_round_trips() {
    let fx = Fixture::new(Backend::Memory).await.expect("memory");
    let q = fx.queue();
    let h = handler(|job: JobRun, ctx| async move {
        let p: serde_json::Value = serde_json::from_str(&job.payload).unwrap_or_default();
        match p["kind"].as_str().unwrap_or_default() {
            "ok" => {
                ctx.record.set_guest_time(Duration::ZERO);
                Outcome::Succeeded { result: None }
            }
            "retry" => Outcome::Retryable {
                message: "again".into(),
                retry_after: Some(Duration::from_millis(10)),
                consumes_attempt: true,
            },
            "oom" => Outcome::OutOfMemory,
            _ => {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Outcome::Succeeded { result: None }
            }
        }
    });
    let mut settings = HandlerSettings::default();
    settings.concurrency = 4;
    settings.timeout = Duration::from_millis(100);
    let reg = Registry::new();
    reg.register("m", h, settings).unwrap();
    let mut opts = WorkerOptions::default();
    opts.poll_interval = Duration::from_millis(50);
    opts.base_backoff = Duration::from_millis(10);
    opts.max_backoff = Duration::from_millis(50);
    opts.abandon_grace = Duration::from_millis(100);
    let worker = Worker::start(q.clone(), reg, opts).unwrap();

    let mut ids = Vec::new();
    for kind in ["ok", "ok", "ok", "retry", "oom", "slow"] {
        let job = NewJob::new("m", &json!({ "kind": kind })).max_attempts(if kind == "retry" {
            2
        } else {
            1
        });
        ids.push(q.add(job).await.unwrap().id);
    }
    q.add(NewJob::new("m", &json!({"kind": "ok"})).delay(Duration::from_secs(3600)))
        .await
        .unwrap();
    let all_done = eventually(Duration::from_secs(10), || {
        let q = q.clone();
        let ids = ids.clone();
        async move {
            for id in &ids {
                let done =
                    q.get(id).await.unwrap().is_some_and(|j| {
                        matches!(j.status, JobStatus::Succeeded | JobStatus::Failed)
                    });
                if !done {
                    return false;
                }
            }
            true
        }
    })
    .await;
    assert!(all_done, "every job finished");
    let metrics = q.metrics().clone();
    let counted = eventually(Duration::from_secs(5), || {
        let metrics = metrics.clone();
        async move {
            metrics
                .types()
                .first()
                .is_some_and(|(_, m)| m.run.snapshot().count == 7)
        }
    })
    .await;
    worker.shutdown().await;

    let types = metrics.types();
    assert_eq!(types.len(), 1, "one job type");
    let (job_type, m) = &types[0];
    assert_eq!(job_type, "m");
    assert!(counted, "7 runs: {:?}", m.run.snapshot());
    assert_eq!(m.wait.snapshot().count, 7, "every run's queue wait");
    assert_eq!(
        m.overhead.snapshot().count,
        3,
        "the runs that measured their guest time"
    );
    let outcomes: Vec<(AttemptOutcome, u64)> =
        m.outcomes().into_iter().filter(|(_, n)| *n > 0).collect();
    assert_eq!(
        outcomes,
        vec![
            (AttemptOutcome::Succeeded, 3),
            (AttemptOutcome::Retried, 1),
            (AttemptOutcome::Failed, 1),
            (AttemptOutcome::TimedOut, 1),
            (AttemptOutcome::OutOfMemory, 1),
        ]
    );
    let ops = metrics.store_latency();
    let count = |op: StoreOp| {
        ops.iter()
            .find(|(o, _)| *o == op)
            .map_or(0, |(_, h)| h.count)
    };
    assert_eq!(count(StoreOp::Enqueue), 7);
    assert_eq!(count(StoreOp::Retry), 1);
    assert_eq!(count(StoreOp::Fail), 3);
    assert!(count(StoreOp::Claim) >= 1 && count(StoreOp::Complete) >= 1);
    fx.finish().await;
}

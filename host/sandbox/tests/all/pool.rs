//! The instance pool is shared fairly: each handler reserves its
//! concurrency and a reservation that does not fit is refused with what to
//! change; a job that still finds the pool full goes back to the queue
//! without using an attempt.

use std::{sync::Arc, time::Duration};

use boxcar_queue::{
    connect, HandlerSettings, JobStatus, NewJob, Queue, QueueOptions, Registry, Worker,
    WorkerOptions,
};
use boxcar_sandbox::{Capabilities, HandlerLimits, Outcome, Sandbox, SandboxConfig, SandboxError};
use serde_json::json;

use crate::common::cache_dir;
use boxcar_queue::testing::{context, job_run};

fn small_pool(instances: u32) -> Sandbox {
    Sandbox::new(SandboxConfig {
        pool_instances: instances,
        cache_dir: Some(cache_dir()),
        ..SandboxConfig::default()
    })
    .expect("sandbox builds")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_must_fit_the_pool_and_handlers_within_it_all_run() {
    let sandbox = small_pool(4);
    let refused = sandbox
        .reserve_instances("greedy", 100, 1)
        .err()
        .expect("100 instances do not fit in 4");
    assert!(
        matches!(refused, SandboxError::PoolFull { .. }),
        "{refused}"
    );
    let text = refused.to_string();
    assert!(
        text.contains("greedy") && text.contains("pool_instances") && text.contains("concurrency"),
        "{text}"
    );
    assert_eq!(
        sandbox.reserved_instances(),
        0,
        "a refusal reserves nothing"
    );

    sandbox.reserve_instances("a", 2, 1).expect("fits").keep();
    sandbox.reserve_instances("b", 2, 1).expect("fits").keep();
    assert!(
        sandbox.reserve_instances("c", 1, 1).is_err(),
        "the pool is spoken for"
    );

    let bytes = boxcar_examples::bytes("sleep");
    let a = sandbox
        .load(&bytes, HandlerLimits::default(), Capabilities::default())
        .expect("loads");
    let b = sandbox
        .load(&bytes, HandlerLimits::default(), Capabilities::default())
        .expect("loads");
    let runs = [&a, &a, &b, &b].map(|h| {
        let h = Arc::clone(h);
        tokio::spawn(async move {
            let (ctx, _) = context();
            h.run(
                job_run("sleep", r#"{"ms": 200}"#, Duration::from_secs(10)),
                ctx,
            )
            .await
        })
    });
    for run in runs {
        let outcome = run.await.expect("run task");
        assert!(
            matches!(outcome, Outcome::Succeeded { .. }),
            "every job within the budget runs: {outcome:?}"
        );
    }

    sandbox.release_instances("a");
    sandbox
        .reserve_instances("c", 2, 1)
        .expect("a's share was freed")
        .keep();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_gives_the_job_back_without_using_an_attempt() {
    let sandbox = small_pool(1);
    let sleep = sandbox
        .load(
            &boxcar_examples::bytes("sleep"),
            HandlerLimits::default(),
            Capabilities::default(),
        )
        .expect("loads");

    // Straight from the sandbox: not run, attempt kept.
    let (ctx, _) = context();
    let busy = {
        let sleep = Arc::clone(&sleep);
        tokio::spawn(async move {
            sleep
                .run(
                    job_run("sleep", r#"{"ms": 500}"#, Duration::from_secs(10)),
                    ctx,
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (ctx, _) = context();
    let second = sleep
        .run(
            job_run("sleep", r#"{"ms": 1}"#, Duration::from_secs(10)),
            ctx,
        )
        .await;
    match &second {
        Outcome::Retryable {
            consumes_attempt,
            message,
            ..
        } => {
            assert!(!consumes_attempt, "{message}");
            assert!(message.contains("pool"), "{message}");
        }
        other => panic!("expected a retry that keeps the attempt, got {other:?}"),
    }
    assert!(matches!(
        busy.await.expect("run task"),
        Outcome::Succeeded { .. }
    ));

    // Through the engine: a handler registered with more concurrency than
    // the pool holds (as during a redeploy's overlap) loses no attempt.
    let queue = Queue::new(
        connect("memory://").await.expect("store"),
        QueueOptions::default(),
    )
    .expect("queue");
    let registry = Registry::new();
    let mut settings = HandlerSettings::default();
    settings.concurrency = 3;
    settings.timeout = Duration::from_secs(10);
    settings.max_attempts = Some(1);
    registry
        .register("sleep", sleep, settings)
        .expect("register");
    let mut opts = WorkerOptions::default();
    opts.poll_interval = Duration::from_millis(20);
    opts.base_backoff = Duration::from_millis(50);
    opts.max_backoff = Duration::from_millis(200);
    let worker = Worker::start(queue.clone(), registry, opts).expect("worker");
    let mut ids = Vec::new();
    for _ in 0..3 {
        let added = queue
            .add(NewJob::new("sleep", &json!({"ms": 300})))
            .await
            .expect("add");
        ids.push(added.id);
    }
    for id in ids {
        let done = queue
            .wait(&id, Duration::from_secs(30))
            .await
            .expect("wait");
        assert_eq!(done.status, JobStatus::Succeeded, "{done:?}");
        assert_eq!(
            done.attempts, 1,
            "only the run that happened counts: {done:?}"
        );
    }
    worker.shutdown().await;
}

//! `replay`: one run of a stored job on a given handler, with the engine's
//! rules for what the guest asks, and nothing written to the store.

use std::time::Duration;

use boxcar_queue::{
    replay, ChildJobRequest, HandlerSettings, JobFilter, NewJob, Outcome, ReplayRequest,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::{handler, Fixture};

async fn writes_nothing_and_dry_runs_enqueues(fx: &Fixture) {
    let queue = fx.queue();
    let id = queue
        .add(NewJob::new("parent", &json!({ "x": 1 })))
        .await
        .expect("add")
        .id;
    let job = queue.get(&id).await.expect("get").expect("job");
    let guest = handler(|run, ctx| async move {
        ctx.record.log("info", &format!("attempt {}", run.attempt));
        ctx.services
            .progress("{\"half\":true}".into())
            .await
            .expect("progress");
        let allowed = ctx
            .services
            .enqueue(ChildJobRequest {
                job_type: "child".into(),
                payload: "{\"y\":2}".into(),
                ..ChildJobRequest::default()
            })
            .await;
        let refused = ctx
            .services
            .enqueue(ChildJobRequest {
                job_type: "other".into(),
                payload: "{}".into(),
                ..ChildJobRequest::default()
            })
            .await;
        assert!(allowed.is_ok() && refused.is_err());
        Outcome::Retryable {
            message: format!("failing on {}", run.payload),
            retry_after: None,
            consumes_attempt: true,
        }
    });
    let mut settings = HandlerSettings::default();
    settings.may_enqueue = vec!["child".into()];
    settings.timeout = Duration::from_secs(5);
    let before = queue.find(&JobFilter::default()).await.expect("find");
    let replayed = replay(
        &queue,
        ReplayRequest {
            job: &job,
            attempt: 3,
            handler: guest,
            settings: &settings,
            abandon_grace: Duration::from_secs(1),
            cancel: CancellationToken::new(),
        },
    )
    .await;
    assert_eq!(replayed.outcome_name(), "retryable");
    assert_eq!(
        replayed.outcome.error_message().as_deref(),
        Some("failing on {\"x\":1}")
    );
    let messages: Vec<_> = replayed.logs.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(messages, ["attempt 3"]);
    assert_eq!(replayed.progress, ["{\"half\":true}"]);
    assert_eq!(replayed.enqueues.len(), 2);
    assert!(
        replayed.enqueues[0].answer.is_ok(),
        "{:?}",
        replayed.enqueues
    );
    assert!(replayed.enqueues[1]
        .answer
        .as_ref()
        .is_err_and(|e| e.contains("may_enqueue")));
    assert!(replayed.usage.wall_ms.is_some());

    let after = queue.find(&JobFilter::default()).await.expect("find");
    assert_eq!(before, after, "the store is unchanged");
    assert!(queue
        .attempts(&id)
        .await
        .expect("attempts")
        .expect("job")
        .is_empty());
}

async fn a_handler_past_its_deadline_times_out(fx: &Fixture) {
    let queue = fx.queue();
    let id = queue
        .add(NewJob::new("slow", &json!({})))
        .await
        .expect("add")
        .id;
    let job = queue.get(&id).await.expect("get").expect("job");
    let stuck = handler(|_, _| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Outcome::Succeeded { result: None }
    });
    let mut settings = HandlerSettings::default();
    settings.timeout = Duration::from_millis(50);
    let replayed = replay(
        &queue,
        ReplayRequest {
            job: &job,
            attempt: 1,
            handler: stuck,
            settings: &settings,
            abandon_grace: Duration::from_millis(50),
            cancel: CancellationToken::new(),
        },
    )
    .await;
    assert_eq!(replayed.outcome, Outcome::TimedOut);
}

backends!(
    writes_nothing_and_dry_runs_enqueues,
    a_handler_past_its_deadline_times_out
);

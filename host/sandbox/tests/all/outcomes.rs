//! The handler's own answers map to the right outcomes.

use std::time::Duration;

use boxcar_queue::Handler;
use boxcar_sandbox::Outcome;

use crate::common::load;
use boxcar_queue::testing::{context, job_run};

#[tokio::test]
async fn echo_returns_its_payload() {
    let (ctx, _) = context();
    let payload = r#"{"a":[1,2,3],"b":{"c":"d"}}"#;
    let outcome = load("echo")
        .run(job_run("echo", payload, Duration::from_secs(5)), ctx)
        .await;
    assert_eq!(
        outcome,
        Outcome::Succeeded {
            result: Some(payload.into())
        }
    );
}

#[tokio::test]
async fn noop_succeeds_without_result() {
    let (ctx, _) = context();
    let outcome = load("noop")
        .run(job_run("noop", "{}", Duration::from_secs(5)), ctx)
        .await;
    assert_eq!(outcome, Outcome::Succeeded { result: None });
}

#[tokio::test]
async fn flaky_is_retryable_with_retry_after_and_flag() {
    let flaky = load("flaky");
    let (ctx, _) = context();
    let payload = r#"{"succeed_on": 3, "retry_after_ms": 1500, "keep_attempt": true}"#;
    let outcome = flaky
        .run(job_run("flaky", payload, Duration::from_secs(5)), ctx)
        .await;
    match outcome {
        Outcome::Retryable {
            message,
            retry_after,
            consumes_attempt,
        } => {
            assert!(message.contains("attempt 1"), "{message}");
            assert_eq!(retry_after, Some(Duration::from_millis(1500)));
            assert!(!consumes_attempt);
        }
        other => panic!("expected Retryable, got {other:?}"),
    }
    let (ctx, _) = context();
    let payload = r#"{"succeed_on": 3}"#;
    let outcome = flaky
        .run(job_run("flaky", payload, Duration::from_secs(5)), ctx)
        .await;
    assert!(matches!(
        outcome,
        Outcome::Retryable {
            retry_after: None,
            consumes_attempt: true,
            ..
        }
    ));
    let (ctx, _) = context();
    let mut last = job_run("flaky", payload, Duration::from_secs(5));
    last.attempt = 3;
    assert_eq!(
        flaky.run(last, ctx).await,
        Outcome::Succeeded {
            result: Some(r#"{"attempt":3}"#.into())
        }
    );
}

#[tokio::test]
async fn wrong_payload_shape_is_terminal_naming_the_type_not_the_payload() {
    let (ctx, _) = context();
    let payload = r#"{"succeed_on": "hunter2"}"#;
    let outcome = load("flaky")
        .run(job_run("flaky", payload, Duration::from_secs(5)), ctx)
        .await;
    match outcome {
        Outcome::Terminal { message, code, .. } => {
            assert!(message.contains("Flaky"), "{message}");
            assert!(message.contains("succeed_on"), "{message}");
            assert!(!message.contains("hunter2"), "{message}");
            assert_eq!(code.as_deref(), Some("invalid-payload"));
        }
        other => panic!("expected Terminal, got {other:?}"),
    }
}

#[tokio::test]
async fn handler_trait_runs_jobs_and_reports_the_digest() {
    use sha2::Digest;
    let echo = load("echo");
    let expected = hex::encode(sha2::Sha256::digest(boxcar_examples::bytes("echo")));
    assert_eq!(Handler::version(&*echo), expected);
    let (ctx, _) = context();
    let outcome = Handler::handle(&*echo, job_run("echo", "{}", Duration::from_secs(5)), ctx).await;
    assert_eq!(
        outcome,
        Outcome::Succeeded {
            result: Some("{}".into())
        }
    );
}

//! Hostile guests end in the right outcome and the host keeps running.

use std::time::Duration;

use boxcar_sandbox::{Capabilities, HandlerLimits, LimitKind, Outcome};

use crate::common::{load, load_with, CPU};
use boxcar_queue::testing::{context, job_run};

#[tokio::test]
async fn memory_hog_is_out_of_memory_at_32mib() {
    let hog = load_with(
        "memory-hog",
        HandlerLimits {
            memory: 32 << 20,
            ..HandlerLimits::default()
        },
        Capabilities::default(),
    );
    let (ctx, _) = context();
    let outcome = hog
        .run(job_run("memory-hog", "{}", Duration::from_secs(10)), ctx)
        .await;
    assert_eq!(outcome, Outcome::OutOfMemory);
    // The same guest under the cap succeeds.
    let (ctx, _) = context();
    let outcome = hog
        .run(
            job_run("memory-hog", r#"{"max_mib": 4}"#, Duration::from_secs(10)),
            ctx,
        )
        .await;
    assert_eq!(
        outcome,
        Outcome::Succeeded {
            result: Some("4".into())
        }
    );
}

#[tokio::test]
async fn deep_recursion_traps_with_stack_overflow_and_host_survives() {
    let _cpu = CPU.lock().await;
    let deep = load("deep-recursion");
    let (ctx, _) = context();
    let outcome = deep
        .run(
            job_run("deep-recursion", "{}", Duration::from_secs(10)),
            ctx,
        )
        .await;
    match outcome {
        Outcome::Trapped { message } => assert!(message.contains("stack overflow"), "{message}"),
        other => panic!("expected Trapped, got {other:?}"),
    }
    let (ctx, _) = context();
    let echo = load("echo")
        .run(job_run("echo", "{}", Duration::from_secs(5)), ctx)
        .await;
    assert_eq!(
        echo,
        Outcome::Succeeded {
            result: Some("{}".into())
        }
    );
}

#[tokio::test]
async fn trap_reports_the_panic_message() {
    let trap = load("trap");
    let (ctx, _) = context();
    let outcome = trap
        .run(
            job_run("trap", r#"{"message":"kaboom 42"}"#, Duration::from_secs(5)),
            ctx,
        )
        .await;
    match outcome {
        Outcome::Trapped { message } => assert!(message.contains("kaboom 42"), "{message}"),
        other => panic!("expected Trapped, got {other:?}"),
    }
}

#[tokio::test]
async fn huge_result_exceeds_max_result() {
    let huge = load("huge-result");
    let (ctx, _) = context();
    let outcome = huge
        .run(job_run("huge-result", "{}", Duration::from_secs(10)), ctx)
        .await;
    match outcome {
        Outcome::LimitExceeded { which, detail } => {
            assert_eq!(which, LimitKind::ResultSize, "{detail}");
        }
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
}

#[tokio::test]
async fn log_flood_is_stopped_at_max_log() {
    let _cpu = CPU.lock().await;
    let flood = load("log-flood");
    for payload in [r#"{}"#, r#"{"stderr": true}"#] {
        let (ctx, _) = context();
        let outcome = flood
            .run(job_run("log-flood", payload, Duration::from_secs(20)), ctx)
            .await;
        match outcome {
            Outcome::LimitExceeded { which, detail } => {
                assert_eq!(which, LimitKind::LogVolume, "{payload}: {detail}");
            }
            other => panic!("{payload}: expected LimitExceeded, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn log_within_budget_succeeds() {
    let flood = load("log-flood");
    let (ctx, _) = context();
    let outcome = flood
        .run(
            job_run(
                "log-flood",
                r#"{"lines": 10, "line_len": 100000}"#,
                Duration::from_secs(5),
            ),
            ctx,
        )
        .await;
    assert_eq!(
        outcome,
        Outcome::Succeeded {
            result: Some("10".into())
        }
    );
}

#[tokio::test]
async fn enqueue_flood_is_cut_off_at_max_enqueues() {
    let flood = load_with(
        "enqueue-flood",
        HandlerLimits {
            max_enqueues: 10,
            ..HandlerLimits::default()
        },
        Capabilities::default(),
    );
    let (ctx, recorder) = context();
    let outcome = flood
        .run(job_run("enqueue-flood", "{}", Duration::from_secs(10)), ctx)
        .await;
    let Outcome::Succeeded {
        result: Some(result),
    } = outcome
    else {
        panic!("expected success, got {outcome:?}");
    };
    let v: serde_json::Value = serde_json::from_str(&result).expect("json result");
    assert_eq!(v["accepted"], 10);
    assert!(
        v["refused"]
            .as_str()
            .expect("refused")
            .contains("LimitReached"),
        "{v}"
    );
    assert_eq!(recorder.enqueued().len(), 10);
}

//! What the sandbox measures into a run's `RunRecord`: the guest's log
//! lines (with the marker when the log is cut), peak linear memory, fuel,
//! enqueues.

use std::time::Duration;

use boxcar_sandbox::{Capabilities, HandlerLimits, Outcome, Sandbox, SandboxConfig};

use crate::common::{load, load_with};
use boxcar_queue::testing::{context as new_ctx, job_run as job};

#[tokio::test]
async fn log_lines_are_recorded_in_order_with_their_levels() {
    let flood = load("log-flood");
    let (ctx, _) = new_ctx();
    let record = ctx.record.clone();
    let payload = r#"{"lines": 3, "line_len": 10}"#;
    let outcome = flood
        .run(job("log-flood", payload, Duration::from_secs(5)), ctx)
        .await;
    assert!(matches!(outcome, Outcome::Succeeded { .. }), "{outcome:?}");
    let lines = record.take_logs();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines.iter().map(|l| l.seq).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(lines.iter().all(|l| l.job_id == "job-1" && l.attempt == 1));
    let usage = record.usage();
    assert_eq!(
        usage.log_bytes,
        Some(lines.iter().map(|l| l.message.len() as u64).sum())
    );
    assert!(usage.peak_memory_bytes.is_some_and(|b| b > 0), "{usage:?}");
    assert_eq!(usage.fuel, None, "no fuel metering, no fuel figure");
}

#[tokio::test]
async fn a_cut_log_keeps_the_budget_and_ends_with_the_marker() {
    let max_log = 64 << 10;
    let flood = load_with(
        "log-flood",
        HandlerLimits {
            max_log,
            ..HandlerLimits::default()
        },
        Capabilities::default(),
    );
    let (ctx, _) = new_ctx();
    let record = ctx.record.clone();
    let outcome = flood
        .run(job("log-flood", "{}", Duration::from_secs(20)), ctx)
        .await;
    assert!(
        matches!(outcome, Outcome::LimitExceeded { .. }),
        "{outcome:?}"
    );
    let lines = record.take_logs();
    let (marker, guest) = lines.split_last().expect("lines");
    assert_eq!(marker.level, "host");
    assert!(
        marker.message.contains("bytes dropped"),
        "{}",
        marker.message
    );
    let stored: usize = guest.iter().map(|l| l.message.len()).sum();
    assert!(stored <= max_log && stored > max_log / 2, "{stored}");
}

#[tokio::test]
async fn peak_memory_reaches_the_cap_of_a_memory_hog() {
    let cap = 32u64 << 20;
    let hog = load_with(
        "memory-hog",
        HandlerLimits {
            memory: cap,
            ..HandlerLimits::default()
        },
        Capabilities::default(),
    );
    let (ctx, _) = new_ctx();
    let record = ctx.record.clone();
    let outcome = hog
        .run(job("memory-hog", "{}", Duration::from_secs(10)), ctx)
        .await;
    assert_eq!(outcome, Outcome::OutOfMemory);
    let peak = record.usage().peak_memory_bytes.expect("peak");
    assert!(
        peak <= cap && peak > cap - (2 << 20),
        "peak {peak} of cap {cap}"
    );
}

#[tokio::test]
async fn fuel_consumed_is_recorded_when_metered() {
    let sandbox = Sandbox::new(SandboxConfig {
        fuel: true,
        pooling: false,
        cache_dir: Some(crate::common::cache_dir()),
        ..SandboxConfig::default()
    })
    .expect("sandbox");
    let limit = 5_000_000;
    let spin = sandbox
        .load(
            &boxcar_examples::bytes("spin"),
            HandlerLimits {
                fuel: Some(limit),
                ..HandlerLimits::default()
            },
            Capabilities::default(),
        )
        .expect("loads");
    let (ctx, _) = new_ctx();
    let record = ctx.record.clone();
    let outcome = spin
        .run(job("spin", "{}", Duration::from_secs(10)), ctx)
        .await;
    assert_eq!(outcome, Outcome::FuelExhausted);
    assert_eq!(record.usage().fuel, Some(limit));
    let echo = sandbox
        .load(
            &boxcar_examples::bytes("echo"),
            HandlerLimits {
                fuel: Some(limit),
                ..HandlerLimits::default()
            },
            Capabilities::default(),
        )
        .expect("loads");
    let (ctx, _) = new_ctx();
    let record = ctx.record.clone();
    let outcome = echo
        .run(job("echo", "{}", Duration::from_secs(10)), ctx)
        .await;
    assert!(matches!(outcome, Outcome::Succeeded { .. }), "{outcome:?}");
    let used = record.usage().fuel.expect("fuel");
    assert!(used > 0 && used < limit, "{used}");
}

//! The `backlog`, `retained`, `inflight` and `enqueue` benchmark workloads
//! on every store, at a small size: each reports its figures and leaves
//! nothing pending or running behind; the `retained` rows are finished, the
//! `inflight` jobs were in their handler together, and concurrent
//! producers store every job of their shares once.

use std::sync::Arc;

use boxcar_queue::bench::{self, BenchConfig, NoopHandler, SleepHandler};
use boxcar_queue::Handler;

use crate::support::Fixture;

fn small() -> BenchConfig {
    BenchConfig {
        drain_jobs: 200,
        batch_size: 70,
        drain_concurrency: 4,
        ..BenchConfig::default()
    }
}

async fn backlog_drains_from_a_deep_queue_and_cancels_the_rest(fx: &Fixture) {
    let handler: Arc<dyn Handler> = Arc::new(NoopHandler);
    let line = bench::backlog(fx.store.clone(), handler, &small(), 1_000)
        .await
        .expect("backlog workload");
    assert_eq!(line.workload, "backlog");
    assert_eq!(line.rows, Some(1_000));
    assert!(line.work_per_s.is_some_and(|r| r > 0.0), "{line:?}");
    assert!(
        line.work_per_s_baseline.is_some_and(|r| r > 0.0),
        "{line:?}"
    );
    assert!(
        line.enqueue_batch_per_s.is_some_and(|r| r > 0.0),
        "{line:?}"
    );
    let counts = fx.queue().count_by_status().await.expect("counts");
    assert_eq!(
        counts.pending + counts.running,
        0,
        "the backlog's rest is cancelled: {counts:?}"
    );
    assert_eq!(
        counts.succeeded + counts.cancelled,
        200 + 1_000,
        "the baseline's and the backlog's rows remain, finished: {counts:?}"
    );
}

async fn retained_drains_beside_finished_rows(fx: &Fixture) {
    let handler: Arc<dyn Handler> = Arc::new(NoopHandler);
    let line = bench::retained(fx.store.clone(), handler, &small(), 1_000)
        .await
        .expect("retained workload");
    assert_eq!(line.workload, "retained");
    assert_eq!(line.rows, Some(1_000));
    assert!(line.work_per_s.is_some_and(|r| r > 0.0), "{line:?}");
    assert!(
        line.work_per_s_baseline.is_some_and(|r| r > 0.0),
        "{line:?}"
    );
    let counts = fx.queue().count_by_status().await.expect("counts");
    assert_eq!(counts.pending + counts.running, 0, "{counts:?}");
    assert_eq!(counts.cancelled, 1_000, "the retained rows are finished");
    assert_eq!(counts.succeeded, 400, "both drains ran every job once");
    let json: serde_json::Value = serde_json::from_str(&line.to_json_line()).expect("json line");
    assert_eq!(json["rows"], 1_000);
    assert!(json["work_per_s_baseline"].is_number(), "{json}");
}

async fn inflight_runs_waiting_jobs_side_by_side(fx: &Fixture) {
    let config = BenchConfig {
        drain_jobs: 60,
        drain_concurrency: 30,
        ..BenchConfig::default()
    };
    let payload = serde_json::json!({"ms": 300});
    let line = bench::inflight(fx.store.clone(), Arc::new(SleepHandler), &config, &payload)
        .await
        .expect("inflight workload");
    assert_eq!(line.workload, "inflight");
    let peak = line.peak_inflight.expect("a peak");
    assert!(
        (20..=30).contains(&peak),
        "30 slots and 300 ms jobs: most slots wait at once, never more than 30: {line:?}"
    );
    let rate = line.work_per_s.expect("a rate");
    assert!(
        rate < 30.0 / 0.3,
        "no faster than 30 slots of 300 ms allow: {line:?}"
    );
    if cfg!(target_os = "linux") {
        assert!(line.rss_per_inflight_kib.is_some(), "{line:?}");
    }
    let counts = fx.queue().count_by_status().await.expect("counts");
    assert_eq!(counts.succeeded, 60, "{counts:?}");
}

async fn enqueue_producers_share_the_batches(fx: &Fixture) {
    let config = BenchConfig {
        drain_jobs: 203,
        single_jobs: 5,
        batch_size: 20,
        producers: 3,
        ..BenchConfig::default()
    };
    let line = bench::enqueue(fx.store.clone(), &config)
        .await
        .expect("enqueue workload");
    assert_eq!(line.workload, "enqueue");
    assert_eq!(line.producers, Some(3));
    assert!(
        line.enqueue_batch_per_s.is_some_and(|r| r > 0.0),
        "{line:?}"
    );
    let counts = fx.queue().count_by_status().await.expect("counts");
    assert_eq!(
        (counts.pending, counts.running, counts.cancelled),
        (0, 0, 203 + 5),
        "every producer's share stored once, then cancelled: {counts:?}"
    );
    let json: serde_json::Value = serde_json::from_str(&line.to_json_line()).expect("json line");
    assert_eq!(json["producers"], 3);
}

backends!(
    enqueue_producers_share_the_batches,
    backlog_drains_from_a_deep_queue_and_cancels_the_rest,
    retained_drains_beside_finished_rows,
    inflight_runs_waiting_jobs_side_by_side
);

//! A job enqueued alone and the same job enqueued in a batch are stored
//! alike: Postgres inserts a lone job with its own statement (scalar
//! binds), so every column the batch statement computes — the deployed
//! type's attempt budget, `run_at` from a delay, `expires_at` from a time
//! to live — must come out the same from both.

use std::sync::Arc;
use std::time::Duration;

use boxcar_queue::bench::NoopHandler;
use boxcar_queue::{HandlerSettings, Job, NewJob, Queue, Registry, Scope};
use chrono::TimeDelta;
use serde_json::json;

use crate::support::Fixture;

/// The job under test, with every column a producer can set.
fn described(parent: &str) -> NewJob {
    NewJob::new("report", &json!({"n": 1}))
        .scope(Scope::new("tenant", "42"))
        .priority(-3)
        .delay(Duration::from_secs(60))
        .ttl(Duration::from_secs(600))
        .traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        .parent(parent)
}

/// Adds `job` alone and again beside another job; answers both stored rows.
async fn alone_and_batched(q: &Queue, job: impl Fn() -> NewJob) -> (Job, Job) {
    let alone = q.add(job()).await.unwrap().id;
    let batch = q
        .add_many(vec![job(), NewJob::new("other", &json!({}))])
        .await
        .unwrap();
    let get = |id: String| async move { q.get(&id).await.unwrap().expect("stored job") };
    (get(alone).await, get(batch[0].id.clone()).await)
}

/// `at` minus the job's creation, to the second.
fn after_creation(job: &Job, at: chrono::DateTime<chrono::Utc>) -> i64 {
    (at - job.created_at).num_seconds()
}

fn assert_stored_alike(alone: &Job, batched: &Job) {
    assert_eq!(alone.job_type, batched.job_type);
    assert_eq!(alone.payload, batched.payload);
    assert_eq!(alone.scope, batched.scope);
    assert_eq!(alone.status, batched.status);
    assert_eq!(alone.priority, batched.priority);
    assert_eq!(alone.max_attempts, batched.max_attempts);
    assert_eq!(alone.parent_id, batched.parent_id);
    assert_eq!(alone.traceparent, batched.traceparent);
    assert_eq!(alone.expires_at.is_some(), batched.expires_at.is_some());
    let slack = TimeDelta::seconds(5);
    assert!((alone.run_at - alone.created_at) - (batched.run_at - batched.created_at) < slack);
}

async fn every_column_alike(fx: &Fixture) {
    let q = fx.queue();
    let parent = q.add(NewJob::new("parent", &json!({}))).await.unwrap().id;
    let (alone, batched) = alone_and_batched(&q, || described(&parent)).await;
    assert_stored_alike(&alone, &batched);
    assert_eq!(alone.priority, -3);
    assert_eq!(alone.parent_id.as_deref(), Some(parent.as_str()));
    assert_eq!(alone.scope, Some(Scope::new("tenant", "42")));
    assert_eq!(after_creation(&alone, alone.run_at), 60);
    let expires = alone.expires_at.expect("a time to live sets expires_at");
    assert_eq!(after_creation(&alone, expires), 600);
}

async fn the_deployed_budget_alike(fx: &Fixture) {
    let host = fx.queue();
    let registry = Registry::new();
    registry.set_host_id("host-1");
    let mut settings = HandlerSettings::default();
    settings.max_attempts = Some(1);
    registry
        .register("report", Arc::new(NoopHandler), settings)
        .unwrap();
    host.record_deployed_types(&registry).await.unwrap();
    let q = fx.queue();
    let (alone, batched) = alone_and_batched(&q, || NewJob::new("report", &json!({}))).await;
    assert_stored_alike(&alone, &batched);
    assert_eq!(alone.max_attempts, 1, "the deployed type's budget");
    let (alone, batched) =
        alone_and_batched(&q, || NewJob::new("report", &json!({})).max_attempts(9)).await;
    assert_stored_alike(&alone, &batched);
    assert_eq!(alone.max_attempts, 9, "the job's own budget wins");
    assert!(alone.expires_at.is_none());
}

backends!(every_column_alike, the_deployed_budget_alike);

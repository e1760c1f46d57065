//! Deployed types: a host's record replaces its own rows only, a heartbeat
//! refreshes `seen_at` without making a deploy look newer, rows not seen
//! for `forget_after` are deleted, and every insert without an attempt
//! budget takes the one of the type's newest deploy.

use std::sync::Arc;

use boxcar_queue::bench::NoopHandler;
use boxcar_queue::store::deployed_types::{DeployedType, DeployedTypeRecord, RecordDeployedTypes};
use boxcar_queue::store::InsertJob;
use boxcar_queue::{HandlerSettings, Registry};

use super::*;
use crate::support::Fixture;

const HOUR: Duration = Duration::from_secs(3600);

fn served(job_type: &str, version: &str, max_attempts: Option<u32>) -> DeployedType {
    DeployedType {
        job_type: job_type.into(),
        version: version.into(),
        max_attempts,
    }
}

async fn record(fx: &Fixture, host: &str, types: Vec<DeployedType>) {
    fx.store
        .record_deployed_types(RecordDeployedTypes {
            host: host.into(),
            types,
            forget_after: HOUR,
        })
        .await
        .unwrap();
}

async fn rows(fx: &Fixture) -> Vec<DeployedTypeRecord> {
    fx.store.deployed_types().await.unwrap()
}

fn row<'a>(rows: &'a [DeployedTypeRecord], job_type: &str, host: &str) -> &'a DeployedTypeRecord {
    rows.iter()
        .find(|r| r.deployed.job_type == job_type && r.host == host)
        .unwrap_or_else(|| panic!("no row ({job_type}, {host}) in {rows:?}"))
}

/// Lets the store's clock move past millisecond resolution.
async fn tick() {
    tokio::time::sleep(Duration::from_millis(15)).await;
}

async fn a_record_replaces_only_its_hosts_rows(fx: &Fixture) {
    record(
        fx,
        "a",
        vec![served("x", "v1", Some(1)), served("y", "v1", None)],
    )
    .await;
    record(fx, "b", vec![served("x", "v1", Some(5))]).await;
    let first = rows(fx).await;
    let keys: Vec<(&str, &str)> = first
        .iter()
        .map(|r| (r.deployed.job_type.as_str(), r.host.as_str()))
        .collect();
    assert_eq!(
        keys,
        [("x", "a"), ("x", "b"), ("y", "a")],
        "by type, then host"
    );
    assert_eq!(row(&first, "x", "a").deployed, served("x", "v1", Some(1)));
    assert_eq!(row(&first, "y", "a").deployed.max_attempts, None);

    tick().await;
    record(fx, "a", vec![served("x", "v1", Some(1))]).await;
    let beat = rows(fx).await;
    assert_eq!(beat.len(), 2, "a's y is gone, b's x stays: {beat:?}");
    let (before, after) = (row(&first, "x", "a"), row(&beat, "x", "a"));
    assert_eq!(
        after.deployed_at, before.deployed_at,
        "a heartbeat is no deploy"
    );
    assert!(
        after.seen_at > before.seen_at,
        "a heartbeat refreshes seen_at"
    );
    assert_eq!(row(&beat, "x", "b"), row(&first, "x", "b"), "b untouched");

    tick().await;
    record(fx, "a", vec![served("x", "v2", Some(1))]).await;
    let new_version = rows(fx).await;
    let redeployed = row(&new_version, "x", "a");
    assert!(
        redeployed.deployed_at > before.deployed_at,
        "a new version is a deploy"
    );
    assert_eq!(redeployed.deployed.version, "v2");

    tick().await;
    record(fx, "a", vec![served("x", "v2", Some(2))]).await;
    let new_defaults = rows(fx).await;
    assert!(
        row(&new_defaults, "x", "a").deployed_at > redeployed.deployed_at,
        "new defaults are a deploy"
    );
    assert_eq!(row(&new_defaults, "x", "a").deployed.max_attempts, Some(2));

    record(fx, "a", Vec::new()).await;
    let left = rows(fx).await;
    assert_eq!(left.len(), 1, "a serves nothing now: {left:?}");
    assert_eq!(left[0].host, "b");
}

async fn rows_not_seen_for_forget_after_are_deleted(fx: &Fixture) {
    record(fx, "gone", vec![served("x", "v1", Some(1))]).await;
    tick().await;
    fx.store
        .record_deployed_types(RecordDeployedTypes {
            host: "alive".into(),
            types: vec![served("y", "v1", None)],
            forget_after: Duration::from_millis(5),
        })
        .await
        .unwrap();
    let left = rows(fx).await;
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].host, "alive", "its own fresh row is kept");
    let id = add(&fx.queue(), job("x")).await;
    let j = fx.store.get(&id).await.unwrap().unwrap();
    assert_eq!(j.max_attempts, 3, "a forgotten deploy's defaults are gone");
}

async fn max_attempts(fx: &Fixture, id: &str) -> u32 {
    fx.store.get(id).await.unwrap().unwrap().max_attempts
}

async fn inserts_take_the_newest_deploys_max_attempts(fx: &Fixture) {
    let q = fx.queue();
    let id = add(&q, job("x")).await;
    assert_eq!(
        max_attempts(fx, &id).await,
        3,
        "no deploy: the queue's default"
    );

    record(fx, "a", vec![served("x", "v1", Some(1))]).await;
    let id = add(&q, job("x")).await;
    assert_eq!(
        max_attempts(fx, &id).await,
        1,
        "the manifest's max_attempts"
    );
    let id = add(&q, job("x").max_attempts(4)).await;
    assert_eq!(
        max_attempts(fx, &id).await,
        4,
        "the producer's own value wins"
    );
    let batch = q
        .add_many(vec![
            job("x"),
            job("other"),
            job("x").max_attempts(5),
            job("x"),
        ])
        .await
        .unwrap();
    assert_eq!(max_attempts(fx, &batch[0].id).await, 1, "in a batch too");
    assert_eq!(max_attempts(fx, &batch[1].id).await, 3, "per job type");
    assert_eq!(max_attempts(fx, &batch[2].id).await, 5, "per job");
    assert_eq!(
        max_attempts(fx, &batch[3].id).await,
        1,
        "every job of the type"
    );
    let keyed = q
        .add_many(vec![job("other").dedupe_key("k"), job("x").dedupe_key("l")])
        .await
        .unwrap();
    assert_eq!(max_attempts(fx, &keyed[0].id).await, 3, "with dedupe keys");
    assert_eq!(max_attempts(fx, &keyed[1].id).await, 1, "with dedupe keys");

    let raw = InsertJob {
        max_attempts: None,
        default_max_attempts: 7,
        ..super::time::raw("unserved")
    };
    let raw_id = raw.id.clone();
    fx.store.add_many(vec![raw]).await.unwrap();
    assert_eq!(max_attempts(fx, &raw_id).await, 7, "the job's own default");

    tick().await;
    record(fx, "b", vec![served("x", "v2", Some(2))]).await;
    let id = add(&q, job("x")).await;
    assert_eq!(max_attempts(fx, &id).await, 2, "the newest deploy decides");
    record(fx, "a", vec![served("x", "v1", Some(1))]).await;
    let id = add(&q, job("x")).await;
    assert_eq!(max_attempts(fx, &id).await, 2, "a heartbeat does not");

    tick().await;
    record(fx, "c", vec![served("x", "v3", None)]).await;
    let id = add(&q, job("x")).await;
    assert_eq!(
        max_attempts(fx, &id).await,
        3,
        "the newest deploy sets none: the queue's default"
    );

    let registry = Registry::new();
    let mut settings = HandlerSettings::default();
    settings.max_attempts = Some(6);
    registry
        .register("x", Arc::new(NoopHandler), settings)
        .unwrap();
    let serving = fx.queue();
    serving.attach_registry(registry);
    let id = add(&serving, job("x")).await;
    assert_eq!(
        max_attempts(fx, &id).await,
        6,
        "a host enqueueing a type it serves uses its own manifest"
    );
}

backends!(
    a_record_replaces_only_its_hosts_rows,
    rows_not_seen_for_forget_after_are_deleted,
    inserts_take_the_newest_deploys_max_attempts
);

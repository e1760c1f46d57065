//! Enqueue: dedupe keys (one live job per key, across connections) and
//! validation (every rule refused before anything is written).

use boxcar_queue::{EnqueueError, QueueError, Registry, Scope};
use chrono::Utc;

use super::*;
use crate::support::Fixture;

async fn dedupe(fx: &Fixture) {
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = fx.reopen().await;
        tasks.push(tokio::spawn(async move {
            let q = Queue::new(store, Default::default()).unwrap();
            q.add(job("t").dedupe_key("same")).await.unwrap()
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    let fresh: Vec<_> = results.iter().filter(|r| !r.deduplicated).collect();
    assert_eq!(fresh.len(), 1, "exactly one add wins: {results:?}");
    assert!(results.iter().all(|r| r.id == fresh[0].id));
    let live = fx.store.count_by_status().await.unwrap();
    assert_eq!(live.pending, 1);
    let c = fx
        .store
        .claim_batch(claim("t", W1, 1, Duration::from_secs(60)))
        .await
        .unwrap();
    let q = fx.queue();
    assert!(
        q.add(job("t").dedupe_key("same"))
            .await
            .unwrap()
            .deduplicated,
        "running jobs dedupe too"
    );
    let done = fx
        .store
        .complete(completion(
            &c.claimed[0].id,
            c.claimed[0].attempts,
            Some("{\"ok\":true}"),
        ))
        .await
        .unwrap();
    assert_eq!(done.len(), 1);
    let again = q.add(job("t").dedupe_key("same")).await.unwrap();
    assert!(!again.deduplicated, "the key is free once the job finished");
    assert_ne!(again.id, fresh[0].id);
    let batch = q
        .add_many(vec![job("t").dedupe_key("b"), job("t").dedupe_key("b")])
        .await
        .unwrap();
    assert!(!batch[0].deduplicated && batch[1].deduplicated && batch[0].id == batch[1].id);
}

async fn validation(fx: &Fixture) {
    let q = fx.queue();
    let t = |e: QueueError| match e {
        QueueError::Enqueue(e) => e,
        other => panic!("expected a validation error, got {other}"),
    };
    let secret = "hunter2-secret";
    type Check = fn(&EnqueueError) -> bool;
    let cases: Vec<(NewJob, Check)> = vec![
        (job(""), |e| matches!(e, EnqueueError::EmptyJobType)),
        (job("t").dedupe_key(""), |e| {
            matches!(e, EnqueueError::EmptyDedupeKey { .. })
        }),
        (job("t").scope(Scope::new("", "1")), |e| {
            matches!(e, EnqueueError::EmptyScope { part: "type", .. })
        }),
        (job("t").scope(Scope::new("a", "")), |e| {
            matches!(e, EnqueueError::EmptyScope { part: "id", .. })
        }),
        (job("t").max_attempts(0), |e| {
            matches!(e, EnqueueError::InvalidMaxAttempts { .. })
        }),
        (
            NewJob::from_text("t", format!("{{\"pw\": \"{secret}\"")),
            |e| matches!(e, EnqueueError::PayloadNotJson { .. }),
        ),
        (NewJob::from_text("t", format!("[\"{secret}\"]")), |e| {
            matches!(e, EnqueueError::PayloadNotObject { .. })
        }),
        (NewJob::from_text("t", "{\"n\": 1e999}"), |e| {
            matches!(e, EnqueueError::PayloadNonFinite { .. })
        }),
        (
            NewJob::from_text(
                "t",
                format!("{{\"a\":{}1{}}}", "[".repeat(100), "]".repeat(100)),
            ),
            |e| matches!(e, EnqueueError::PayloadTooDeep { .. }),
        ),
        (
            NewJob::from_text(
                "t",
                format!("{{\"a\":\"{}\"}}", "x".repeat(1024 * 1024 + 1)),
            ),
            |e| matches!(e, EnqueueError::PayloadTooLarge { .. }),
        ),
        (job("t").run_at(chrono::DateTime::<Utc>::MIN_UTC), |e| {
            matches!(
                e,
                EnqueueError::InvalidTime {
                    field: "run_at",
                    ..
                }
            )
        }),
        (job("t").delay(Duration::from_secs(u64::MAX)), |e| {
            matches!(e, EnqueueError::InvalidTime { field: "delay", .. })
        }),
        (
            job("t").traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            |e| matches!(e, EnqueueError::InvalidTraceparent { .. }),
        ),
        (job("t").traceparent("not a traceparent"), |e| {
            matches!(e, EnqueueError::InvalidTraceparent { .. })
        }),
    ];
    for (j, check) in cases {
        let e = t(q.add(j).await.unwrap_err());
        assert!(check(&e), "unexpected error {e:?}");
        let msg = e.to_string();
        assert!(!msg.contains(secret), "payload leaked into `{msg}`");
        if !matches!(e, EnqueueError::EmptyJobType) {
            assert!(msg.contains("`t`"), "error names the job type: {msg}");
        }
    }
    let registry = Registry::new();
    registry.declare_elsewhere(["known".to_string()]);
    q.attach_registry(registry);
    let e = t(q.add(job("unknown")).await.unwrap_err());
    assert!(matches!(e, EnqueueError::UnknownJobType { .. }), "{e}");
    q.add(job("known")).await.unwrap();
    assert_eq!(
        fx.store.count_by_status().await.unwrap().pending,
        1,
        "refused jobs write nothing"
    );
}

/// A producer's `traceparent` is stored with the job, read back by `get`
/// and handed to the worker that claims it; a job without one has none.
async fn traceparent(fx: &Fixture) {
    const PRODUCER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let q = fx.queue();
    let traced = add(&q, job("t").traceparent(PRODUCER)).await;
    let plain = add(&q, job("t")).await;
    let flow = q
        .add_flow(job("parent").traceparent(PRODUCER), vec![job("child")])
        .await
        .unwrap();
    let get = |id: String| async move { fx.store.get(&id).await.unwrap().unwrap() };
    assert_eq!(
        get(traced.clone()).await.traceparent.as_deref(),
        Some(PRODUCER)
    );
    assert_eq!(get(plain.clone()).await.traceparent, None);
    assert_eq!(get(flow).await.traceparent.as_deref(), Some(PRODUCER));
    let claimed = fx
        .store
        .claim_batch(claim("t", W1, 2, Duration::from_secs(60)))
        .await
        .unwrap()
        .claimed;
    let of = |id: &str| {
        claimed
            .iter()
            .find(|j| j.id == id)
            .map(|j| j.traceparent.clone())
    };
    assert_eq!(of(&traced), Some(Some(PRODUCER.to_string())), "{claimed:?}");
    assert_eq!(of(&plain), Some(None), "{claimed:?}");
}

/// `add_each`: every valid job of a batch is enqueued in one insert, each
/// invalid one is answered with its own error in its place, and a key
/// repeated in the batch is deduplicated against the earlier item.
async fn add_each_keeps_bad_items_from_failing_the_batch(fx: &Fixture) {
    let q = fx.queue();
    let answers = q
        .add_each(vec![
            job("t"),
            job(""),
            job("t").dedupe_key("k"),
            job("t").max_attempts(0),
            job("t").dedupe_key("k"),
            job("t").scope(Scope::new("", "x")),
        ])
        .await
        .unwrap();
    assert_eq!(answers.len(), 6);
    assert!(matches!(answers[1], Err(EnqueueError::EmptyJobType)));
    assert!(matches!(
        answers[3],
        Err(EnqueueError::InvalidMaxAttempts { .. })
    ));
    assert!(matches!(answers[5], Err(EnqueueError::EmptyScope { .. })));
    let first = answers[0].as_ref().unwrap();
    let keyed = answers[2].as_ref().unwrap();
    let again = answers[4].as_ref().unwrap();
    assert!(!first.deduplicated && !keyed.deduplicated);
    assert!(again.deduplicated, "{answers:?}");
    assert_eq!(again.id, keyed.id);
    assert_eq!(fx.store.count_by_status().await.unwrap().pending, 2);
    let none = q.add_each(vec![job("")]).await.unwrap();
    assert_eq!(none.len(), 1);
    assert!(none[0].is_err());
    assert_eq!(fx.store.count_by_status().await.unwrap().pending, 2);
}

backends!(
    dedupe,
    validation,
    traceparent,
    add_each_keeps_bad_items_from_failing_the_batch
);

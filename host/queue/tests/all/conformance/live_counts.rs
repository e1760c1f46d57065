//! Unfinished jobs per type, as `/metrics` reads them at scrape time: due
//! and scheduled pending jobs apart, running jobs, finished jobs left out.

use boxcar_queue::TypeCounts;

use super::*;
use crate::support::Fixture;

fn counts(job_type: &str, due: u64, scheduled: u64, running: u64) -> TypeCounts {
    TypeCounts {
        job_type: job_type.into(),
        due,
        scheduled,
        running,
    }
}

async fn live_counts_by_type(fx: &Fixture) {
    assert_eq!(fx.store.count_live_by_type().await.unwrap(), vec![]);
    let q = fx.queue();
    add(&q, job("a")).await;
    add(&q, job("a")).await;
    add(&q, job("a").delay(Duration::from_secs(3600))).await;
    add(&q, job("b")).await;
    add(&q, job("b")).await;
    let done = add(&q, job("c")).await;
    let lease = Duration::from_secs(60);
    let b = fx
        .store
        .claim_batch(claim("b", W1, 1, lease))
        .await
        .unwrap();
    assert_eq!(b.claimed.len(), 1);
    let c = fx
        .store
        .claim_batch(claim("c", W1, 1, lease))
        .await
        .unwrap();
    assert_eq!(c.claimed.len(), 1);
    fx.store.complete(completion(&done, 1, None)).await.unwrap();
    assert_eq!(
        fx.store.count_live_by_type().await.unwrap(),
        vec![counts("a", 2, 1, 0), counts("b", 1, 0, 1)]
    );
}

backends!(live_counts_by_type);

//! The jobs list's keyset paging: for every filter the list offers, oldest
//! and newest first, walking the pages by cursor covers every matching job
//! exactly once, in (`created_at`, `id`) order, including jobs created in
//! the same millisecond (a batch shares its instant), and an offset still
//! pages after a cursor.

use std::collections::HashSet;

use boxcar_queue::store::{CancelParams, CancelTarget, FailParams};
use boxcar_queue::{Job, JobCursor, JobFilter, JobStatus, Scope};

use super::*;
use crate::support::Fixture;

/// The filters the list offers, each with a predicate of its own.
/// A named filter and the predicate it must agree with.
type Named = (&'static str, JobFilter, Box<dyn Fn(&Job) -> bool>);

fn filters(parent: &str) -> Vec<Named> {
    let acct = Scope::new("acct", "1");
    let mut out: Vec<Named> = Vec::new();
    out.push(("none", JobFilter::default(), Box::new(|_| true)));
    let mut f = JobFilter::default();
    f.statuses = vec![JobStatus::Pending];
    out.push(("status", f, Box::new(|j| j.status == JobStatus::Pending)));
    let mut f = JobFilter::default();
    f.statuses = vec![JobStatus::Failed, JobStatus::Cancelled];
    out.push((
        "statuses",
        f,
        Box::new(|j| matches!(j.status, JobStatus::Failed | JobStatus::Cancelled)),
    ));
    let mut f = JobFilter::default();
    f.types = vec!["b".into()];
    out.push(("type", f, Box::new(|j| j.job_type == "b")));
    let mut f = JobFilter::default();
    f.types = vec!["a".into(), "c".into()];
    out.push((
        "types",
        f,
        Box::new(|j| j.job_type == "a" || j.job_type == "c"),
    ));
    let mut f = JobFilter::default();
    f.types = vec!["b".into()];
    f.statuses = vec![JobStatus::Failed, JobStatus::Running];
    out.push((
        "type+status",
        f,
        Box::new(|j| {
            j.job_type == "b" && matches!(j.status, JobStatus::Failed | JobStatus::Running)
        }),
    ));
    let mut f = JobFilter::default();
    f.scope = Some(acct.clone());
    let s = acct.clone();
    out.push(("scope", f, Box::new(move |j| j.scope.as_ref() == Some(&s))));
    let mut f = JobFilter::default();
    f.scope = Some(acct.clone());
    f.statuses = vec![JobStatus::Pending];
    f.types = vec!["a".into()];
    out.push((
        "scope+type+status",
        f,
        Box::new(move |j| {
            j.scope.as_ref() == Some(&acct) && j.status == JobStatus::Pending && j.job_type == "a"
        }),
    ));
    let mut f = JobFilter::default();
    f.parent_id = Some(parent.to_string());
    let p = parent.to_string();
    out.push((
        "parent",
        f,
        Box::new(move |j| j.parent_id.as_deref() == Some(p.as_str())),
    ));
    out
}

/// Every page of `f` by cursor, `limit` at a time.
async fn walk(q: &boxcar_queue::Queue, f: &JobFilter, limit: u32) -> Vec<Job> {
    let mut f = f.clone();
    f.limit = Some(limit);
    let mut out = Vec::new();
    for _ in 0..1000 {
        let page = q.find(&f).await.expect("find");
        let next = JobCursor::next_page(&page, limit);
        out.extend(page);
        match next {
            Some(c) => f.after = Some(c.to_string().parse().expect("a cursor round-trips")),
            None => return out,
        }
    }
    panic!("paging did not end");
}

async fn cursor_pages_cover_every_job_once(fx: &Fixture) {
    let q = fx.queue();
    let acct = Scope::new("acct", "1");
    for round in 0..3 {
        let mut batch = Vec::new();
        for n in 0..9 {
            let t = ["a", "b", "c"][n % 3];
            let mut j = job(t).max_attempts(1);
            if (n + round) % 2 == 0 {
                j = j.scope(acct.clone());
            }
            batch.push(j);
        }
        q.add_many(batch).await.expect("add batch");
    }
    let parent = q
        .add_flow(job("p"), (0..5).map(|_| job("c")).collect())
        .await
        .expect("flow");
    let claimed = fx
        .store
        .claim_batch(claim("b", W1, 6, Duration::from_secs(60)))
        .await
        .expect("claim");
    for c in claimed.claimed.iter().take(3) {
        fx.store
            .fail(FailParams {
                worker_id: W1.into(),
                id: c.id.clone(),
                attempt: c.attempts,
                error: "boom".into(),
                code: None,
                details: None,
                ending: Default::default(),
            })
            .await
            .expect("fail");
    }
    let mut everything = JobFilter::default();
    everything.limit = Some(10_000);
    let mut all = q.find(&everything).await.expect("all");
    let doomed: Vec<String> = all
        .iter()
        .filter(|j| j.job_type == "a")
        .take(4)
        .map(|j| j.id.clone())
        .collect();
    fx.store
        .cancel(CancelParams {
            target: CancelTarget::Ids(doomed),
            reason: "test".into(),
        })
        .await
        .expect("cancel");
    all = q.find(&everything).await.expect("all");
    assert_eq!(all.len(), 33);
    let statuses: HashSet<JobStatus> = all.iter().map(|j| j.status).collect();
    assert_eq!(statuses.len(), 4, "pending, running, failed, cancelled");
    let mut same_instant = all.clone();
    same_instant.dedup_by_key(|j| j.created_at);
    assert!(
        same_instant.len() < all.len(),
        "some jobs share their created_at (the tie-break by id is exercised)"
    );
    for (name, filter, keep) in filters(&parent) {
        let expected: HashSet<String> = all
            .iter()
            .filter(|j| keep(j))
            .map(|j| j.id.clone())
            .collect();
        assert!(
            !expected.is_empty(),
            "{name}: the fixture matches something"
        );
        for newest_first in [false, true] {
            let mut f = filter.clone();
            f.newest_first = newest_first;
            for limit in [1, 2, 4, 100] {
                let got = walk(&q, &f, limit).await;
                let ids: Vec<String> = got.iter().map(|j| j.id.clone()).collect();
                let unique: HashSet<String> = ids.iter().cloned().collect();
                let case = format!("{name}, newest_first {newest_first}, limit {limit}");
                assert_eq!(unique.len(), ids.len(), "{case}: a job listed twice");
                assert_eq!(unique, expected, "{case}: every match, nothing else");
                for pair in got.windows(2) {
                    let (a, b) = (
                        (pair[0].created_at, &pair[0].id),
                        (pair[1].created_at, &pair[1].id),
                    );
                    if newest_first {
                        assert!(a > b, "{case}: out of order");
                    } else {
                        assert!(a < b, "{case}: out of order");
                    }
                }
            }
            let mut skip = f.clone();
            let first = walk(&q, &f, 1000).await;
            if first.len() >= 3 {
                skip.after = Some(JobCursor::of(&first[0]));
                skip.offset = Some(1);
                skip.limit = Some(1);
                let page = q.find(&skip).await.expect("find");
                assert_eq!(page[0].id, first[2].id, "{name}: offset after a cursor");
            }
        }
    }
}

async fn a_cursor_survives_its_row(fx: &Fixture) {
    let q = fx.queue();
    let ids: Vec<String> = q
        .add_many((0..4).map(|_| job("a")).collect())
        .await
        .expect("add")
        .into_iter()
        .map(|r| r.id)
        .collect();
    let mut f = JobFilter::default();
    f.limit = Some(2);
    let page = q.find(&f).await.expect("find");
    let cursor = JobCursor::next_page(&page, 2).expect("a full page");
    fx.store
        .cancel(CancelParams {
            target: CancelTarget::Ids(vec![page[1].id.clone()]),
            reason: "gone".into(),
        })
        .await
        .expect("cancel");
    f.after = Some(cursor);
    f.statuses = vec![JobStatus::Pending];
    let rest = q.find(&f).await.expect("find");
    let mut want: Vec<Job> = Vec::new();
    for id in &ids {
        want.push(q.get(id).await.expect("get").expect("job"));
    }
    want.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    let want: Vec<&str> = want[2..].iter().map(|j| j.id.as_str()).collect();
    let got: Vec<&str> = rest.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(got, want);
}

backends!(cursor_pages_cover_every_job_once, a_cursor_survives_its_row);

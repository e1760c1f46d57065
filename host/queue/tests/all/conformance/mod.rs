//! The store conformance suite: every check runs against every backend —
//! memory, SQLite (a real file) and Postgres (its own schema) — as its own
//! test, named `conformance::<group>::<check>::<backend>`, e.g.
//! `conformance::guard::pools::sqlite`. So `cargo test -p boxcar-queue
//! conformance::guard` runs the guard checks once per backend, and every
//! failing case shows. Every store change must extend it.

use std::time::Duration;

use boxcar_queue::store::{ClaimParams, ClaimRef, CompleteParams, Completed};
use boxcar_queue::{ClaimGuards, NewJob, Queue};
use serde_json::json;

mod admin;
mod claim;
mod deployed_types;
mod due;
mod enqueue;
mod guard;
mod history;
mod lease;
mod live_counts;
mod outcome;
mod paging;
mod time;

const W1: &str = "worker-1";
const W2: &str = "worker-2";

fn claim(job_type: &str, worker: &str, limit: u32, lease: Duration) -> ClaimParams {
    ClaimParams {
        worker_id: worker.into(),
        job_type: job_type.into(),
        limit,
        lease,
        handler_version: Some("v1".into()),
        guards: ClaimGuards::default(),
    }
}

/// Worker [`W1`]'s completion of job `id` at attempt `attempt` with
/// `result`, no attempt figures or log lines.
fn completion(id: &str, attempt: u32, result: Option<&str>) -> CompleteParams {
    CompleteParams {
        worker_id: W1.into(),
        jobs: vec![Completed {
            id: id.into(),
            attempt,
            result: result.map(str::to_string),
            ending: Default::default(),
        }],
    }
}

/// The claim of job `id` that made attempt `attempt`.
fn at(id: &str, attempt: u32) -> ClaimRef {
    ClaimRef {
        id: id.into(),
        attempt,
    }
}

fn guarded(job_type: &str, limit: u32, guards: ClaimGuards) -> ClaimParams {
    ClaimParams {
        guards,
        ..claim(job_type, W1, limit, Duration::from_secs(60))
    }
}

async fn add(q: &Queue, job: NewJob) -> String {
    q.add(job).await.expect("add").id
}

fn job(t: &str) -> NewJob {
    NewJob::new(t, &json!({"k": 1}))
}

fn live_scope_guard() -> ClaimGuards {
    let mut guards = ClaimGuards::default();
    guards.serialize_by_scope = true;
    guards
}

//! The dispatcher: one loop per process that claims due jobs for every
//! registered type (in a rotating order, for fairness) up to each type's free
//! concurrency, and spawns a run per claimed job.
//!
//! It sleeps until one of: a local enqueue (`Queue::wake`), a store insert
//! notification (LISTEN/NOTIFY on Postgres), a freed slot, or the poll
//! interval. A type blocked by a guard for `starvation_polls` consecutive
//! polls logs a warning naming the blocker, at most once a minute.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
// tokio's clock, so a paused-time test can cover the once-a-minute repeat.
use tokio::time::Instant;

use super::{run, Engine};
use crate::observer::{LifecycleEvent, LifecycleOutcome};
use crate::store::{ClaimParams, StoreEvent};

const WARN_EVERY: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Starvation {
    polls: u32,
    last_warn: Option<Instant>,
}

/// Claims once for every type; returns whether the store failed.
async fn claim_round(
    engine: &Arc<Engine>,
    tick: usize,
    starving: &mut HashMap<String, Starvation>,
) -> bool {
    let mut types = engine.registry.types();
    if !types.is_empty() {
        let n = tick % types.len();
        types.rotate_left(n);
    }
    let mut failed = false;
    for job_type in types {
        if engine.stop_claiming.is_cancelled() {
            break;
        }
        let Some(entry) = engine.registry.get(&job_type) else {
            continue;
        };
        let free = entry
            .settings
            .concurrency
            .saturating_sub(engine.running_of(&job_type));
        if free == 0 {
            continue;
        }
        let lease = entry
            .settings
            .lease_duration
            .unwrap_or(entry.settings.timeout + engine.opts.lease_grace);
        let params = ClaimParams {
            worker_id: engine.opts.worker_id.clone(),
            job_type: job_type.clone(),
            limit: free,
            lease,
            handler_version: Some(entry.version.clone()),
            guards: engine.registry.guards_for(&job_type),
        };
        let res = match engine.store.claim_batch(params).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(job_type = %job_type, error = %e, "claim failed; retrying at the next poll");
                failed = true;
                continue;
            }
        };
        if !res.expired.is_empty() {
            engine.queue.wake();
        }
        for job in res.expired {
            engine.queue.emit(LifecycleEvent {
                job_id: job.id,
                job_type: job.job_type,
                scope: job.scope,
                outcome: LifecycleOutcome::Expired,
                attempts: job.attempts,
                error: job.last_error,
                duration: None,
            });
        }
        let st = starving.entry(job_type.clone()).or_default();
        match (&res.blocked_by, res.claimed.is_empty()) {
            (Some(blocker), true) => {
                st.polls += 1;
                let due = st.last_warn.is_none_or(|t| t.elapsed() >= WARN_EVERY);
                if st.polls >= engine.opts.starvation_polls && due {
                    tracing::warn!(job_type = %job_type, polls = st.polls, "job type `{job_type}` is starving: blocked by {blocker}");
                    st.last_warn = Some(Instant::now());
                }
            }
            _ => st.polls = 0,
        }
        if res.claimed.is_empty() {
            continue;
        }
        engine.take_slots(&job_type, res.claimed.len() as u32);
        for job in res.claimed {
            let handle = engine.queue.inflight().insert(&job.id);
            engine
                .runs
                .spawn(run::run_job(engine.clone(), entry.clone(), job, handle));
        }
    }
    failed
}

pub(crate) async fn run(engine: Arc<Engine>) {
    let mut events = engine.store.subscribe();
    let mut starving = HashMap::new();
    let mut tick = 0usize;
    loop {
        if engine.stop_claiming.is_cancelled() {
            break;
        }
        let failed = claim_round(&engine, tick, &mut starving).await;
        tick = tick.wrapping_add(1);
        let poll = tokio::time::sleep(engine.opts.poll_interval);
        tokio::pin!(poll);
        loop {
            tokio::select! {
                () = engine.stop_claiming.cancelled() => return,
                () = &mut poll => break,
                () = engine.queue.wake_notify().notified(), if !failed => break,
                () = engine.slot_freed.notified(), if !failed => break,
                ev = events.recv(), if !failed => match ev {
                    Ok(StoreEvent::Inserted(_)) | Err(RecvError::Lagged(_)) => break,
                    Ok(StoreEvent::Finished(_)) => continue,
                    Err(RecvError::Closed) => {
                        events = engine.store.subscribe();
                        continue;
                    }
                },
            }
        }
    }
}

//! The dispatcher: one loop per process that claims due jobs for every
//! registered type up to each type's free concurrency, and spawns a run per
//! claimed job.
//!
//! Fairness: each round asks the types in least-recently-served order (the
//! type that has gone longest without claiming a job asks first; ties in a
//! rotating order). A type stopped because its pool is full reserves that
//! pool for the rest of the round: the pool's other members do not claim
//! until the next round, when the waiting type asks first again. So a type
//! sharing a pool with a busier one (or needing more slots per job) gets the
//! next freed capacity on this host, however the wake-ups interleave.
//!
//! It sleeps until one of: a local enqueue (`Queue::wake`), a store insert
//! notification (LISTEN/NOTIFY on Postgres), a freed slot, or the poll
//! interval. A type blocked by a guard for `starvation_polls` consecutive
//! polls logs a warning naming the blocker, at most once a minute.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
// tokio's clock, so a paused-time test can cover the once-a-minute repeat.
use tokio::time::Instant;

use super::{run, Engine};
use crate::guards::Blocker;
use crate::observer::{LifecycleEvent, LifecycleOutcome};
use crate::registry::HandlerSettings;
use crate::store::{ClaimParams, ClaimRef, StoreEvent};

const WARN_EVERY: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Starvation {
    polls: u32,
    last_warn: Option<Instant>,
}

/// What the dispatcher remembers between rounds.
#[derive(Default)]
struct Rounds {
    /// Rounds so far.
    round: u64,
    /// Per type, the round in which it last claimed a job (0: never).
    served: HashMap<String, u64>,
    starving: HashMap<String, Starvation>,
}

impl Rounds {
    /// This round's type order: least recently served first, ties rotated.
    fn order(&self, mut types: Vec<String>) -> Vec<String> {
        if !types.is_empty() {
            let n = (self.round % types.len() as u64) as usize;
            types.rotate_left(n);
        }
        types.sort_by_key(|t| self.served.get(t).copied().unwrap_or(0));
        types
    }
}

/// Claims once for every type; returns whether the store failed.
/// The lease a claim asks for: the handler's `lease_duration`, else its
/// timeout plus the worker's lease grace (saturating: both are bounded where
/// they are set, but a sum never panics the dispatcher).
fn lease_for(settings: &HandlerSettings, lease_grace: Duration) -> Duration {
    settings
        .lease_duration
        .unwrap_or_else(|| settings.timeout.saturating_add(lease_grace))
}

async fn claim_round(engine: &Arc<Engine>, rounds: &mut Rounds) -> bool {
    rounds.round += 1;
    let types = rounds.order(engine.registry.types());
    let mut reserved: HashSet<String> = HashSet::new();
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
        let lease = lease_for(&entry.settings, engine.opts.lease_grace);
        let params = ClaimParams {
            worker_id: engine.opts.worker_id.clone(),
            job_type: job_type.clone(),
            limit: free,
            lease,
            handler_version: Some(entry.version.clone()),
            guards: engine.registry.guards_for(&job_type),
        };
        if params
            .guards
            .pools
            .iter()
            .any(|p| reserved.contains(&p.name))
        {
            continue;
        }
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
        if res.claimed.is_empty() {
            if let Some(Blocker::PoolFull { pool }) = &res.blocked_by {
                reserved.insert(pool.clone());
            }
        }
        let st = rounds.starving.entry(job_type.clone()).or_default();
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
        rounds.served.insert(job_type.clone(), rounds.round);
        engine.take_slots(&job_type, res.claimed.len() as u32);
        for job in res.claimed {
            let handle = engine.queue.inflight().insert(&ClaimRef::of(&job));
            engine
                .runs
                .spawn(run::run_job(engine.clone(), entry.clone(), job, handle));
        }
    }
    failed
}

pub(crate) async fn run(engine: Arc<Engine>) {
    let mut events = engine.store.subscribe();
    let mut rounds = Rounds::default();
    loop {
        if engine.stop_claiming.is_cancelled() {
            break;
        }
        let failed = claim_round(&engine, &mut rounds).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_is_timeout_plus_grace_and_saturates() {
        let grace = Duration::from_secs(30);
        let mut settings = HandlerSettings {
            timeout: Duration::from_secs(60),
            ..HandlerSettings::default()
        };
        assert_eq!(lease_for(&settings, grace), Duration::from_secs(90));
        settings.timeout = Duration::MAX;
        assert_eq!(lease_for(&settings, grace), Duration::MAX);
        settings.lease_duration = Some(Duration::from_secs(5));
        assert_eq!(lease_for(&settings, grace), Duration::from_secs(5));
    }
}

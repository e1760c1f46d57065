//! The dispatcher: one loop per process that claims due jobs for the
//! registered types that may have due work (the [`DueSet`]) up to each
//! type's free concurrency — plus, for a short-running unguarded type, a
//! bounded number ahead of its slots ([`claim_ahead`]) — and spawns a run
//! per claimed job as its type's slots free, oldest claim first.
//!
//! Unguarded types are claimed together, in one store call for all of
//! them (`JobStore::claim_many`); guarded types claim one by one through
//! the guard policy. So a round costs O(1) statements however many types
//! are registered, and an idle host asks the store one question per poll.
//!
//! Fairness: each round asks the types in least-recently-served order (the
//! type that has gone longest without claiming a job asks first; ties in a
//! rotating order). A guarded type stopped because its pool is full
//! reserves that pool for the rest of the round: the pool's other members
//! do not claim until the next round, when the waiting type asks first
//! again. So a type sharing a pool with a busier one (or needing more slots
//! per job) gets the next freed capacity on this host, however the
//! wake-ups interleave. Unguarded types share nothing but the store, and
//! each takes at most its own free slots.
//!
//! It sleeps until one of: a local enqueue (`Queue::wake_types`), a store
//! insert notification (LISTEN/NOTIFY on Postgres, naming the type), a
//! freed slot, the poll interval (ask the store which types are due), or
//! the moment the earliest scheduled job of an idle type becomes due. A
//! type blocked by a guard for `starvation_polls` consecutive polls logs a
//! warning naming the blocker, at most once a minute.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
// tokio's clock, so a paused-time test can cover the once-a-minute repeat.
use tokio::time::Instant;

use tracing::Instrument;

use super::claim_ahead::{self, Buffered, ClaimAhead};
use super::due_set::DueSet;
use super::{run, run_span, Engine};
use crate::attempt::AttemptOutcome;
use crate::guards::Blocker;
use crate::job::Job;
use crate::metrics::StoreOp;
use crate::observer::{LifecycleEvent, LifecycleOutcome};
use crate::registry::{HandlerEntry, HandlerSettings};
use crate::store::{ClaimManyParams, ClaimParams, ClaimRef, ReleaseParams, StoreEvent, TypeClaim};

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

/// The lease a claim asks for: the handler's `lease_duration`, else its
/// timeout plus the worker's lease grace (saturating: both are bounded where
/// they are set, but a sum never panics the dispatcher).
fn lease_for(settings: &HandlerSettings, lease_grace: Duration) -> Duration {
    settings
        .lease_duration
        .unwrap_or_else(|| settings.timeout.saturating_add(lease_grace))
}

/// Fails expired jobs' lifecycle events (and wakes the dispatcher: a flow
/// parent may have become claimable).
fn report_expired(engine: &Arc<Engine>, expired: Vec<Job>) {
    if !expired.is_empty() {
        engine.queue.wake();
    }
    for job in expired {
        let metrics = engine.queue.metrics();
        metrics.ended(&job.job_type, AttemptOutcome::Expired, None, None);
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
}

/// Records that `job_type` was served this round, queues the claimed jobs
/// behind any of its jobs already waiting here, and starts as many as it
/// has free slots. A run whose claim's lease (counted from before the claim
/// was sent) has run out by the time it starts is not started: another host
/// may own the job.
fn start_runs(
    engine: &Arc<Engine>,
    rounds: &mut Rounds,
    ahead: &mut ClaimAhead,
    entry: &Arc<HandlerEntry>,
    claimed: Vec<Job>,
    lease_deadline: Option<Instant>,
) {
    if claimed.is_empty() {
        return;
    }
    rounds.served.insert(entry.job_type.clone(), rounds.round);
    let inflight = engine.queue.inflight();
    ahead.push(
        &entry.job_type,
        claimed.into_iter().map(|job| Buffered {
            handle: inflight.insert(&ClaimRef::of(&job)),
            job,
            entry: entry.clone(),
            lease_deadline,
        }),
    );
    start_waiting(engine, ahead, &entry.job_type, entry.settings.concurrency);
}

/// Starts `job_type`'s waiting jobs, oldest claim first, in its free slots.
/// Once the host stops claiming nothing more starts: what a claim still in
/// flight at that moment brings back waits, and is given back unrun.
fn start_waiting(engine: &Arc<Engine>, ahead: &mut ClaimAhead, job_type: &str, concurrency: u32) {
    if engine.stop_claiming.is_cancelled() {
        return;
    }
    let free = concurrency.saturating_sub(engine.running_of(job_type));
    let ready = ahead.take(job_type, free);
    if ready.is_empty() {
        return;
    }
    engine.take_slots(job_type, u32::try_from(ready.len()).unwrap_or(u32::MAX));
    for b in ready {
        let span = run_span::span(&b.job, &b.entry.version);
        engine.runs.spawn(
            run::run_job(engine.clone(), b.entry, b.job, b.handle, b.lease_deadline)
                .instrument(span),
        );
    }
}

/// Starts every type's waiting jobs in its free slots; a type no longer
/// registered gives its waiting jobs back.
async fn start_all_waiting(engine: &Arc<Engine>, ahead: &mut ClaimAhead) {
    for job_type in ahead.types() {
        match engine.registry.get(&job_type) {
            Some(entry) => start_waiting(engine, ahead, &job_type, entry.settings.concurrency),
            None => release_waiting(engine, ahead.take_type(&job_type)).await,
        }
    }
}

/// Gives waiting jobs back to the store (lease and attempt), as a shutdown
/// does for aborted runs.
async fn release_waiting(engine: &Engine, waiting: Vec<Buffered>) {
    if waiting.is_empty() {
        return;
    }
    let inflight = engine.queue.inflight();
    let claims: Vec<ClaimRef> = waiting
        .iter()
        .map(|b| {
            let claim = ClaimRef::of(&b.job);
            inflight.remove(&claim);
            claim
        })
        .collect();
    let count = claims.len();
    let params = ReleaseParams {
        worker_id: engine.opts.worker_id.clone(),
        claims,
    };
    let released = engine.store.release(params);
    if let Err(e) = engine
        .queue
        .metrics()
        .timed(StoreOp::Release, released)
        .await
    {
        tracing::warn!(count, error = %e, "giving back jobs claimed ahead failed; they are recovered after their leases");
    }
}

/// Claims once for one guarded type; returns whether the store failed.
async fn claim_guarded(
    engine: &Arc<Engine>,
    rounds: &mut Rounds,
    ahead: &mut ClaimAhead,
    due: &mut DueSet,
    reserved: &mut HashSet<String>,
    entry: &Arc<HandlerEntry>,
    params: ClaimParams,
) -> bool {
    let job_type = params.job_type.clone();
    let asked = params.limit;
    let lease_deadline = Instant::now().checked_add(params.lease);
    let claimed = engine.store.claim_batch(params);
    let res = match engine.queue.metrics().timed(StoreOp::Claim, claimed).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(job_type = %job_type, error = %e, "claim failed; retrying at the next poll");
            return true;
        }
    };
    due.claimed(
        &job_type,
        asked,
        res.claimed.len() + res.expired.len(),
        res.blocked_by.is_some(),
    );
    report_expired(engine, res.expired);
    if res.claimed.is_empty() {
        if let Some(Blocker::PoolFull { pool }) = &res.blocked_by {
            reserved.insert(pool.clone());
        }
    }
    let st = rounds.starving.entry(job_type.clone()).or_default();
    match (&res.blocked_by, res.claimed.is_empty()) {
        (Some(blocker), true) => {
            st.polls += 1;
            let warn_due = st.last_warn.is_none_or(|t| t.elapsed() >= WARN_EVERY);
            if st.polls >= engine.opts.starvation_polls && warn_due {
                tracing::warn!(job_type = %job_type, polls = st.polls, "job type `{job_type}` is starving: blocked by {blocker}");
                st.last_warn = Some(Instant::now());
            }
        }
        _ => st.polls = 0,
    }
    start_runs(engine, rounds, ahead, entry, res.claimed, lease_deadline);
    false
}

/// Claims for every unguarded type of `batch` in one store call; returns
/// whether the store failed.
async fn claim_unguarded(
    engine: &Arc<Engine>,
    rounds: &mut Rounds,
    ahead: &mut ClaimAhead,
    due: &mut DueSet,
    batch: Vec<(TypeClaim, Arc<HandlerEntry>)>,
) -> bool {
    let params = ClaimManyParams {
        worker_id: engine.opts.worker_id.clone(),
        types: batch.iter().map(|(c, _)| c.clone()).collect(),
    };
    let sent = Instant::now();
    let claimed = engine.store.claim_many(params);
    let res = match engine.queue.metrics().timed(StoreOp::Claim, claimed).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(types = batch.len(), error = %e, "claim failed; retrying at the next poll");
            return true;
        }
    };
    let mut taken: HashMap<String, usize> = HashMap::new();
    for job in &res.expired {
        *taken.entry(job.job_type.clone()).or_default() += 1;
    }
    report_expired(engine, res.expired);
    let mut by_type: HashMap<String, Vec<Job>> = HashMap::new();
    for job in res.claimed {
        by_type.entry(job.job_type.clone()).or_default().push(job);
    }
    for (claim, entry) in batch {
        let jobs = by_type.remove(&claim.job_type).unwrap_or_default();
        let expired = taken.get(&claim.job_type).copied().unwrap_or(0);
        due.claimed(&claim.job_type, claim.limit, jobs.len() + expired, false);
        start_runs(
            engine,
            rounds,
            ahead,
            &entry,
            jobs,
            sent.checked_add(claim.lease),
        );
    }
    false
}

/// Starts waiting jobs, then claims once for every type of the due-set
/// with room (free slots, or room ahead of them); returns whether the
/// store failed.
async fn claim_round(
    engine: &Arc<Engine>,
    rounds: &mut Rounds,
    ahead: &mut ClaimAhead,
    due: &mut DueSet,
) -> bool {
    rounds.round += 1;
    start_all_waiting(engine, ahead).await;
    let types = rounds.order(due.types());
    let mut reserved: HashSet<String> = HashSet::new();
    let mut unguarded: Vec<(TypeClaim, Arc<HandlerEntry>)> = Vec::new();
    let mut failed = false;
    for job_type in types {
        if engine.stop_claiming.is_cancelled() {
            return failed;
        }
        let Some(entry) = engine.registry.get(&job_type) else {
            due.forget(&job_type);
            continue;
        };
        let concurrency = entry.settings.concurrency;
        let running = engine.running_of(&job_type);
        let guards = engine.registry.guards_for(&job_type);
        if guards.is_empty() {
            let room_ahead = claim_ahead::ahead_for(
                &entry.settings,
                engine.average_run_of(&job_type),
                engine.opts.claim_ahead,
            );
            let waiting = ahead.buffered(&job_type);
            let limit = claim_ahead::claim_size(concurrency, running, waiting, room_ahead);
            if limit == 0 {
                continue;
            }
            let claim = TypeClaim {
                job_type,
                limit,
                lease: lease_for(&entry.settings, engine.opts.lease_grace),
                handler_version: Some(entry.version.clone()),
            };
            unguarded.push((claim, entry));
            continue;
        }
        let free = concurrency.saturating_sub(running);
        if free == 0 || guards.pools.iter().any(|p| reserved.contains(&p.name)) {
            continue;
        }
        let params = ClaimParams {
            worker_id: engine.opts.worker_id.clone(),
            job_type,
            limit: free,
            lease: lease_for(&entry.settings, engine.opts.lease_grace),
            handler_version: Some(entry.version.clone()),
            guards,
        };
        failed |= claim_guarded(engine, rounds, ahead, due, &mut reserved, &entry, params).await;
    }
    if !unguarded.is_empty() && !engine.stop_claiming.is_cancelled() {
        failed |= claim_unguarded(engine, rounds, ahead, due, unguarded).await;
    }
    failed
}

/// Takes in what local enqueues and generic wakes asked for.
fn take_woken(engine: &Engine, due: &mut DueSet) {
    let woken = engine.queue.take_woken();
    if woken.any {
        due.ask_store();
    }
    for t in woken.types {
        if engine.registry.get(&t).is_some() {
            due.inserted(&t);
        }
    }
}

/// Asks the store which registered types are due, when the due-set says
/// so; returns whether the store failed.
async fn refresh(engine: &Engine, due: &mut DueSet) -> bool {
    if !due.needs_refresh(Instant::now()) {
        return false;
    }
    match engine.store.due_types(&engine.registry.types()).await {
        Ok(answer) => {
            due.refreshed(answer, Instant::now());
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "asking which job types are due failed; retrying at the next poll");
            due.refresh_failed(Instant::now());
            true
        }
    }
}

/// The dispatcher; when it stops, the jobs still waiting here are given
/// back.
pub(crate) async fn run(engine: Arc<Engine>) {
    let mut ahead = ClaimAhead::default();
    dispatch(&engine, &mut ahead).await;
    release_waiting(&engine, ahead.take_all()).await;
}

async fn dispatch(engine: &Arc<Engine>, ahead: &mut ClaimAhead) {
    let mut events = engine.store.subscribe_wakeups();
    let mut rounds = Rounds::default();
    let mut due = DueSet::new(engine.opts.poll_interval);
    loop {
        if engine.stop_claiming.is_cancelled() {
            break;
        }
        take_woken(engine, &mut due);
        let mut failed = refresh(engine, &mut due).await;
        failed |= claim_round(engine, &mut rounds, ahead, &mut due).await;
        // The runs this round spawned wait in this worker's next-task slot,
        // which no other worker may take: let them start before a wake-up
        // already pending (a local enqueue is announced twice, by the store
        // and by the queue) makes another round.
        tokio::task::yield_now().await;
        let wake_at = if failed {
            Instant::now() + engine.opts.poll_interval
        } else {
            due.deadline()
        };
        let poll = tokio::time::sleep_until(wake_at);
        tokio::pin!(poll);
        loop {
            tokio::select! {
                () = engine.stop_claiming.cancelled() => return,
                () = &mut poll => break,
                () = engine.queue.wake_notify().notified(), if !failed => break,
                () = engine.slot_freed.notified(), if !failed => break,
                ev = events.recv(), if !failed => match ev {
                    Ok(StoreEvent::Inserted(t)) if t.is_empty() => {
                        due.ask_store();
                        break;
                    }
                    Ok(StoreEvent::Inserted(t)) => {
                        if engine.registry.get(&t).is_some() {
                            due.inserted(&t);
                            break;
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        due.ask_store();
                        break;
                    }
                    Ok(StoreEvent::Changed) => {
                        due.ask_store();
                        break;
                    }
                    // Not on the wake-up channel; nothing to do if it were.
                    Ok(StoreEvent::Finished(_)) => continue,
                    Err(RecvError::Closed) => {
                        events = engine.store.subscribe_wakeups();
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

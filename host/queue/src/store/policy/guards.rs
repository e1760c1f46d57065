//! The guard decision, once for every store: which due candidates a
//! guarded claim admits, what blocked the rest ([`Blocker`]), a pool's use
//! ([`PoolStatus`]), and the read-only "what blocks this job" answer.
//!
//! Rules, in the order they are evaluated for each candidate (claim order:
//! priority, `run_at`, id):
//! 1. a due job past its `expires_at` is failed as expired, not claimed;
//! 2. `serialize_by_scope`: a live lease in the candidate's scope skips this
//!    candidate only (the next one may be of another scope);
//! 3. `not_while_running`: a live lease of a listed type stops the claim;
//! 4. `waits_for`: a live lease or a due pending job of a listed type stops
//!    the claim;
//! 5. each pool: members' live leases × their costs + this type's cost over
//!    the concurrency stops the claim; so does a rate budget that this
//!    start's rate cost would overrun in the open one-minute window.
//!
//! Only live leases count (running and `lease_expires_at > now`). A claimed
//! job spends its rate cost in every rated pool of its type.
//!
//! A claim decides every candidate first, against what it read plus what
//! it admitted so far (`guard_cache`), then moves all the admitted jobs to
//! running in one statement and stores each rate window once: a claim of
//! n jobs costs O(1) writes, not n. The candidates are read as light rows
//! (id, scope, expiry), and only the claimed jobs come back whole. The
//! candidate rows are locked by the claiming transaction, so an admitted
//! job is still pending when the claim writes; should one not be (the
//! write is fenced all the same), the windows stored are those after the
//! last claimed job's spend, which may count a skipped job's spend too:
//! the error is on the safe side (fewer starts, never more).

use std::collections::HashMap;
use std::future::Future;

use chrono::{DateTime, Utc};

use super::guard_cache::CachedReads;
use crate::guards::{pool_key, Blocker, ClaimGuards, PoolGuard, PoolStatus, RateWindow};
use crate::handler::Scope;
use crate::job::Job;
use crate::store::{ClaimParams, ClaimResult, StoreError};

/// A due pending job as a guarded claim weighs it: what the rules read.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub(crate) id: String,
    pub(crate) scope: Option<Scope>,
    pub(crate) expires_at: Option<DateTime<Utc>>,
}

/// The primitive reads a guard decision needs. Implemented by each store on
/// its transaction (for claims) or connection (for read-only answers).
pub(crate) trait GuardReads: Send {
    /// The instant the decision is taken at (the transaction's clock).
    fn now(&self) -> DateTime<Utc>;

    /// Whether a job of `scope` holds a live lease.
    fn scope_busy(
        &mut self,
        scope: &Scope,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Up to `limit` ids of scopes of type `scope_type` with a job holding
    /// a live lease (one read for a claim that weighs many scopes); `None`
    /// from a store that answers per scope only ([`GuardReads::scope_busy`]).
    fn busy_scope_ids(
        &mut self,
        scope_type: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Option<Vec<String>>, StoreError>> + Send;

    /// Of `types`, those with a job holding a live lease.
    fn live_types(
        &mut self,
        types: &[String],
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Of `types`, those with a job holding a live lease or a due pending
    /// job.
    fn waiting_types(
        &mut self,
        types: &[String],
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Live leases per type, for the types of `types` that have any.
    fn live_counts(
        &mut self,
        types: &[String],
    ) -> impl Future<Output = Result<Vec<(String, u64)>, StoreError>> + Send;

    /// The rate window stored on the guard row `key` (the default when the
    /// row does not exist yet).
    fn rate_window(
        &mut self,
        key: &str,
    ) -> impl Future<Output = Result<RateWindow, StoreError>> + Send;
}

/// The primitive writes of a guarded claim, inside the claiming
/// transaction.
pub(crate) trait ClaimTx: GuardReads {
    /// Locks the guard rows of [`ClaimGuards::lock_keys`] (scope keys for
    /// the candidates' scope types) and returns up to `window` due pending
    /// jobs of `job_type` without live children, in claim order. In which
    /// order the candidate reads and the guard locks happen is the
    /// backend's locking concern.
    fn lock_candidates(
        &mut self,
        job_type: &str,
        window: u32,
        guards: &ClaimGuards,
    ) -> impl Future<Output = Result<Vec<Candidate>, StoreError>> + Send;

    /// Fails pending job `id` as expired (`EXPIRED_ERROR`, `EXPIRED_CODE`);
    /// `None` when it is no longer pending.
    fn expire(&mut self, id: &str) -> impl Future<Output = Result<Option<Job>, StoreError>> + Send;

    /// Moves the pending jobs among `ids` to running under `claim`'s lease
    /// and returns them (in any order); a job no longer pending is left
    /// alone and not returned.
    fn claim_ids(
        &mut self,
        ids: &[String],
        claim: &ClaimParams,
    ) -> impl Future<Output = Result<Vec<Job>, StoreError>> + Send;

    /// Stores the rate window of the guard row `key`.
    fn store_rate_window(
        &mut self,
        key: &str,
        window: RateWindow,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A candidate's verdict.
enum Verdict {
    /// Claim it; then store these rate windows (guard row key, window).
    Admit(Vec<(String, RateWindow)>),
    /// Leave this candidate; the next may pass.
    Skip(Blocker),
    /// No candidate of this claim can pass.
    Stop(Blocker),
}

/// How many candidates a guarded claim of up to `limit` jobs considers:
/// enough that a few busy scopes do not starve the claim, few enough that
/// one claim holds its locks briefly.
pub(crate) fn candidate_window(limit: u32) -> u32 {
    limit.saturating_mul(10).clamp(16, 1000)
}

/// Summed cost of `pool`'s members holding live leases.
async fn occupancy<R: GuardReads>(reads: &mut R, pool: &PoolGuard) -> Result<u64, StoreError> {
    let members: Vec<String> = pool.member_costs.iter().map(|(t, _)| t.clone()).collect();
    let counts = reads.live_counts(&members).await?;
    Ok(counts
        .iter()
        .map(|(t, n)| {
            let cost = pool
                .member_costs
                .iter()
                .find(|(m, _)| m == t)
                .map_or(1, |(_, c)| *c);
            n.saturating_mul(u64::from(cost))
        })
        .sum())
}

async fn verdict<R: GuardReads>(
    reads: &mut R,
    scope: Option<&Scope>,
    guards: &ClaimGuards,
) -> Result<Verdict, StoreError> {
    if guards.serialize_by_scope {
        if let Some(scope) = scope {
            if reads.scope_busy(scope).await? {
                return Ok(Verdict::Skip(Blocker::ScopeBusy {
                    scope_type: scope.scope_type.clone(),
                }));
            }
        }
    }
    if !guards.not_while_running.is_empty() {
        let types = reads.live_types(&guards.not_while_running).await?;
        if !types.is_empty() {
            return Ok(Verdict::Stop(Blocker::Running { types }));
        }
    }
    if !guards.waits_for.is_empty() {
        let types = reads.waiting_types(&guards.waits_for).await?;
        if !types.is_empty() {
            return Ok(Verdict::Stop(Blocker::WaitsFor { types }));
        }
    }
    let now = reads.now();
    let mut spends = Vec::new();
    for pool in &guards.pools {
        if let Some(limit) = pool.concurrency {
            let used = occupancy(reads, pool).await?;
            if used.saturating_add(u64::from(pool.cost)) > u64::from(limit) {
                return Ok(Verdict::Stop(Blocker::PoolFull {
                    pool: pool.name.clone(),
                }));
            }
        }
        if let Some(rate) = pool.rate_per_minute {
            let key = pool_key(&pool.name);
            let window = reads.rate_window(&key).await?;
            if window
                .spent_at(now)
                .saturating_add(u64::from(pool.rate_cost))
                > u64::from(rate)
            {
                return Ok(Verdict::Stop(Blocker::RateSpent {
                    pool: pool.name.clone(),
                }));
            }
            spends.push((key, window.after_spend(now, pool.rate_cost)));
        }
    }
    Ok(Verdict::Admit(spends))
}

/// A claim of up to `claim.limit` jobs under `claim.guards`, decided inside
/// the caller's transaction `tx` (see the module docs for the rules).
pub(crate) async fn claim<T: ClaimTx>(
    tx: &mut T,
    claim: &ClaimParams,
) -> Result<ClaimResult, StoreError> {
    let window = candidate_window(claim.limit);
    let candidates = tx
        .lock_candidates(&claim.job_type, window, &claim.guards)
        .await?;
    let now = tx.now();
    let mut res = ClaimResult::default();
    let mut admitted: Vec<(String, Vec<(String, RateWindow)>)> = Vec::new();
    let mut reads = CachedReads::new(tx);
    for cand in candidates {
        if admitted.len() >= claim.limit as usize {
            break;
        }
        if cand.expires_at.is_some_and(|e| e <= now) {
            if let Some(job) = reads.inner().expire(&cand.id).await? {
                res.expired.push(job);
            }
            continue;
        }
        match verdict(&mut reads, cand.scope.as_ref(), &claim.guards).await? {
            Verdict::Admit(spends) => {
                for (key, window) in &spends {
                    reads.stored_rate_window(key, *window);
                }
                reads.claimed(&claim.job_type, cand.scope.as_ref());
                admitted.push((cand.id, spends));
            }
            Verdict::Skip(blocker) => res.blocked_by = Some(blocker),
            Verdict::Stop(blocker) => {
                res.blocked_by = Some(blocker);
                break;
            }
        }
    }
    if admitted.is_empty() {
        return Ok(res);
    }
    let ids: Vec<String> = admitted.iter().map(|(id, _)| id.clone()).collect();
    let mut jobs: HashMap<String, Job> = tx
        .claim_ids(&ids, claim)
        .await?
        .into_iter()
        .map(|job| (job.id.clone(), job))
        .collect();
    let mut spends = Vec::new();
    for (id, spent) in admitted {
        if let Some(job) = jobs.remove(&id) {
            res.claimed.push(job);
            spends = spent;
        }
    }
    for (key, window) in spends {
        tx.store_rate_window(&key, window).await?;
    }
    Ok(res)
}

/// What would block a claim of `job` under `guards` now (the claim's own
/// predicate, read-only); `None` when the guards admit it.
pub(crate) async fn blocked_by<R: GuardReads>(
    reads: &mut R,
    job: &Job,
    guards: &ClaimGuards,
) -> Result<Option<Blocker>, StoreError> {
    Ok(match verdict(reads, job.scope.as_ref(), guards).await? {
        Verdict::Admit(_) => None,
        Verdict::Skip(blocker) | Verdict::Stop(blocker) => Some(blocker),
    })
}

/// Each pool's occupancy (live leases × member cost) and the spend of its
/// open rate window, in the order given.
pub(crate) async fn pool_status<R: GuardReads>(
    reads: &mut R,
    pools: &[PoolGuard],
) -> Result<Vec<PoolStatus>, StoreError> {
    let now = reads.now();
    let mut out = Vec::with_capacity(pools.len());
    for pool in pools {
        let occupied = occupancy(reads, pool).await?;
        let window = reads.rate_window(&pool_key(&pool.name)).await?;
        out.push(PoolStatus {
            name: pool.name.clone(),
            occupied,
            concurrency: pool.concurrency,
            spent: window.spent_at(now),
            rate_per_minute: pool.rate_per_minute,
            window_resets_at: window.resets_at(now),
        });
    }
    Ok(out)
}

//! The reads of one guarded claim, remembered for the rest of that claim:
//! a claim that weighs many candidates asks the store once per scope, once
//! per pool's member list and once per rate window, instead of once per
//! candidate, and keeps the answers true as it claims.
//!
//! Why the remembered answers stay true inside the claiming transaction:
//! - its clock is fixed (`now`), so no lease counted live expires in it;
//! - the guard rows of its type, scopes and pools are locked by it, so no
//!   other claim under the same guards adds a lease meanwhile; a lease
//!   another host gives up meanwhile only makes a remembered count higher
//!   than the truth — the claim stays on the safe side;
//! - each job it admits is applied to the memory ([`CachedReads::claimed`])
//!   before the next candidate is weighed: its scope becomes busy and its
//!   type's live count grows by one (the claim writes all admitted jobs
//!   together afterwards);
//! - a rate window after an admitted spend is remembered as the one the
//!   claim will store.
//!
//! The `not_while_running` / `waits_for` answers are not remembered: the
//! claimed type may be listed there, and either answer stops the claim.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::guards::GuardReads;
use crate::guards::RateWindow;
use crate::handler::Scope;
use crate::store::StoreError;

/// A [`GuardReads`] that remembers what it read through `inner`.
pub(crate) struct CachedReads<'a, R> {
    inner: &'a mut R,
    busy_scopes: HashMap<Scope, bool>,
    live_counts: HashMap<Vec<String>, Vec<(String, u64)>>,
    rate_windows: HashMap<String, RateWindow>,
}

impl<'a, R: GuardReads> CachedReads<'a, R> {
    pub(crate) fn new(inner: &'a mut R) -> Self {
        Self {
            inner,
            busy_scopes: HashMap::new(),
            live_counts: HashMap::new(),
            rate_windows: HashMap::new(),
        }
    }

    /// The transaction under the memory, for its writes.
    pub(crate) fn inner(&mut self) -> &mut R {
        self.inner
    }

    /// Applies a job just admitted: a live lease of `job_type` in `scope`.
    pub(crate) fn claimed(&mut self, job_type: &str, scope: Option<&Scope>) {
        if let Some(scope) = scope {
            self.busy_scopes.insert(scope.clone(), true);
        }
        for (types, counts) in &mut self.live_counts {
            if !types.iter().any(|t| t == job_type) {
                continue;
            }
            match counts.iter_mut().find(|(t, _)| t == job_type) {
                Some((_, n)) => *n = n.saturating_add(1),
                None => counts.push((job_type.to_string(), 1)),
            }
        }
    }

    /// Remembers a rate window the claim will store.
    pub(crate) fn stored_rate_window(&mut self, key: &str, window: RateWindow) {
        self.rate_windows.insert(key.to_string(), window);
    }
}

impl<R: GuardReads> GuardReads for CachedReads<'_, R> {
    fn now(&self) -> DateTime<Utc> {
        self.inner.now()
    }

    async fn scope_busy(&mut self, scope: &Scope) -> Result<bool, StoreError> {
        if let Some(busy) = self.busy_scopes.get(scope) {
            return Ok(*busy);
        }
        let busy = self.inner.scope_busy(scope).await?;
        self.busy_scopes.insert(scope.clone(), busy);
        Ok(busy)
    }

    async fn live_types(&mut self, types: &[String]) -> Result<Vec<String>, StoreError> {
        self.inner.live_types(types).await
    }

    async fn waiting_types(&mut self, types: &[String]) -> Result<Vec<String>, StoreError> {
        self.inner.waiting_types(types).await
    }

    async fn live_counts(&mut self, types: &[String]) -> Result<Vec<(String, u64)>, StoreError> {
        if let Some(counts) = self.live_counts.get(types) {
            return Ok(counts.clone());
        }
        let counts = self.inner.live_counts(types).await?;
        self.live_counts.insert(types.to_vec(), counts.clone());
        Ok(counts)
    }

    async fn rate_window(&mut self, key: &str) -> Result<RateWindow, StoreError> {
        if let Some(window) = self.rate_windows.get(key) {
            return Ok(*window);
        }
        let window = self.inner.rate_window(key).await?;
        self.rate_windows.insert(key.to_string(), window);
        Ok(window)
    }
}

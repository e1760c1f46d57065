//! The reads of one guarded claim, remembered for the rest of that claim:
//! a claim that weighs many candidates asks the store once per scope type
//! (which of its scopes are busy: one read of the running jobs, up to
//! [`BUSY_SCOPES_READ`] scopes, then once per scope past that; once per
//! scope from a store that lists none), once per
//! pool's member list and once per rate window, instead of once per
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

/// How many busy scopes of one type a claim reads at once. Past that (a
/// fleet running more jobs of one scope type at once), the scopes the read
/// left out are asked one by one.
pub(crate) const BUSY_SCOPES_READ: usize = 256;

/// A [`GuardReads`] that remembers what it read through `inner`.
pub(crate) struct CachedReads<'a, R> {
    inner: &'a mut R,
    busy_scopes: HashMap<Scope, bool>,
    /// Scope types whose busy scopes were read: `true` when the read was
    /// complete (every scope it did not list is free).
    scope_types_read: HashMap<String, bool>,
    live_counts: HashMap<Vec<String>, Vec<(String, u64)>>,
    rate_windows: HashMap<String, RateWindow>,
}

impl<'a, R: GuardReads> CachedReads<'a, R> {
    pub(crate) fn new(inner: &'a mut R) -> Self {
        Self {
            inner,
            busy_scopes: HashMap::new(),
            scope_types_read: HashMap::new(),
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
        let complete = match self.scope_types_read.get(&scope.scope_type) {
            Some(complete) => *complete,
            None => {
                let listed = self
                    .inner
                    .busy_scope_ids(&scope.scope_type, BUSY_SCOPES_READ)
                    .await?;
                let complete = listed
                    .as_ref()
                    .is_some_and(|ids| ids.len() < BUSY_SCOPES_READ);
                for id in listed.into_iter().flatten() {
                    let busy = Scope::new(scope.scope_type.clone(), id);
                    self.busy_scopes.insert(busy, true);
                }
                self.scope_types_read
                    .insert(scope.scope_type.clone(), complete);
                if let Some(busy) = self.busy_scopes.get(scope) {
                    return Ok(*busy);
                }
                complete
            }
        };
        let busy = !complete && self.inner.scope_busy(scope).await?;
        self.busy_scopes.insert(scope.clone(), busy);
        Ok(busy)
    }

    async fn busy_scope_ids(
        &mut self,
        scope_type: &str,
        limit: usize,
    ) -> Result<Option<Vec<String>>, StoreError> {
        self.inner.busy_scope_ids(scope_type, limit).await
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads from a fixed set of busy scopes, counting the store's reads.
    struct Fake {
        busy: Vec<Scope>,
        /// Whether it lists a type's busy scopes (else per scope only).
        lists: bool,
        type_reads: usize,
        point_reads: usize,
    }

    impl Fake {
        fn new(busy: &[(&str, &str)]) -> Self {
            Self {
                busy: busy.iter().map(|(t, i)| Scope::new(*t, *i)).collect(),
                lists: true,
                type_reads: 0,
                point_reads: 0,
            }
        }
    }

    impl GuardReads for Fake {
        fn now(&self) -> DateTime<Utc> {
            Utc::now()
        }

        async fn scope_busy(&mut self, scope: &Scope) -> Result<bool, StoreError> {
            self.point_reads += 1;
            Ok(self.busy.contains(scope))
        }

        async fn busy_scope_ids(
            &mut self,
            scope_type: &str,
            limit: usize,
        ) -> Result<Option<Vec<String>>, StoreError> {
            self.type_reads += 1;
            if !self.lists {
                return Ok(None);
            }
            Ok(Some(
                self.busy
                    .iter()
                    .filter(|s| s.scope_type == scope_type)
                    .take(limit)
                    .map(|s| s.scope_id.clone())
                    .collect(),
            ))
        }

        async fn live_types(&mut self, _: &[String]) -> Result<Vec<String>, StoreError> {
            Ok(Vec::new())
        }

        async fn waiting_types(&mut self, _: &[String]) -> Result<Vec<String>, StoreError> {
            Ok(Vec::new())
        }

        async fn live_counts(&mut self, _: &[String]) -> Result<Vec<(String, u64)>, StoreError> {
            Ok(Vec::new())
        }

        async fn rate_window(&mut self, _: &str) -> Result<RateWindow, StoreError> {
            Ok(RateWindow::default())
        }
    }

    async fn busy(reads: &mut CachedReads<'_, Fake>, t: &str, id: &str) -> bool {
        reads.scope_busy(&Scope::new(t, id)).await.expect("read")
    }

    #[tokio::test]
    async fn one_read_per_scope_type_answers_every_scope_of_it() {
        let mut fake = Fake::new(&[("tenant", "a"), ("tenant", "c"), ("user", "a")]);
        let mut reads = CachedReads::new(&mut fake);
        let answers = [
            busy(&mut reads, "tenant", "a").await,
            busy(&mut reads, "tenant", "b").await,
            busy(&mut reads, "tenant", "c").await,
            busy(&mut reads, "user", "a").await,
            busy(&mut reads, "user", "b").await,
        ];
        assert_eq!(answers, [true, false, true, true, false]);
        assert_eq!((fake.type_reads, fake.point_reads), (2, 0));
    }

    #[tokio::test]
    async fn a_claimed_scope_is_busy_after_its_types_read() {
        let mut fake = Fake::new(&[]);
        let mut reads = CachedReads::new(&mut fake);
        assert!(!busy(&mut reads, "tenant", "a").await);
        reads.claimed("t", Some(&Scope::new("tenant", "a")));
        assert!(busy(&mut reads, "tenant", "a").await);
        assert!(!busy(&mut reads, "tenant", "b").await);
        assert_eq!((fake.type_reads, fake.point_reads), (1, 0));
    }

    #[tokio::test]
    async fn past_a_full_read_the_scopes_left_out_are_asked_one_by_one() {
        let ids: Vec<String> = (0..=BUSY_SCOPES_READ).map(|i| format!("s{i:04}")).collect();
        let pairs: Vec<(&str, &str)> = ids.iter().map(|i| ("tenant", i.as_str())).collect();
        let mut fake = Fake::new(&pairs);
        let last = ids.last().expect("ids").clone();
        let mut reads = CachedReads::new(&mut fake);
        assert!(busy(&mut reads, "tenant", "s0000").await);
        assert!(
            busy(&mut reads, "tenant", &last).await,
            "left out of the read"
        );
        assert!(!busy(&mut reads, "tenant", "free").await);
        assert_eq!((fake.type_reads, fake.point_reads), (1, 2));
    }

    #[tokio::test]
    async fn a_store_that_lists_no_scopes_is_asked_once_per_scope() {
        let mut fake = Fake::new(&[("tenant", "a")]);
        fake.lists = false;
        let mut reads = CachedReads::new(&mut fake);
        assert!(busy(&mut reads, "tenant", "a").await);
        assert!(!busy(&mut reads, "tenant", "b").await);
        assert!(!busy(&mut reads, "tenant", "b").await, "remembered");
        assert_eq!((fake.type_reads, fake.point_reads), (1, 2));
    }
}

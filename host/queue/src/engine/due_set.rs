//! The dispatcher's due-set: the registered types that may have due jobs,
//! so a wake-up claims only for those instead of for every type.
//!
//! Fed by insert notifications (a local enqueue, Postgres NOTIFY carrying
//! the type), by claims that filled their batch (more may be due), and by
//! a periodic store answer "which of my types have due jobs" (one
//! statement), which also tells when the earliest scheduled job of an idle
//! type becomes due.
//!
//! Invariants:
//! - A type leaves the set only after a claim for it returned fewer jobs
//!   than it asked for without a guard holding it back; so a due job is
//!   missed at most until the next store answer, which comes at least
//!   every `poll_interval` however busy the host is.
//! - A wake-up that cannot name its types (reconnect, lagged events, a
//!   generic wake) asks the store before the next round.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use crate::store::DueTypes;

/// See the module docs.
#[derive(Debug)]
pub(super) struct DueSet {
    due: BTreeSet<String>,
    refresh: bool,
    next_refresh: Instant,
    next_due: Option<Instant>,
    poll_interval: Duration,
}

impl DueSet {
    /// A set that asks the store before the first round.
    pub(super) fn new(poll_interval: Duration) -> Self {
        Self {
            due: BTreeSet::new(),
            refresh: true,
            next_refresh: Instant::now(),
            next_due: None,
            poll_interval,
        }
    }

    /// Whether the store must be asked now: asked for, the poll interval
    /// passed, or a scheduled job of an idle type became due.
    pub(super) fn needs_refresh(&self, now: Instant) -> bool {
        self.refresh || now >= self.next_refresh || self.next_due.is_some_and(|t| now >= t)
    }

    /// Takes the store's answer, asked at `now`.
    pub(super) fn refreshed(&mut self, answer: DueTypes, now: Instant) {
        self.due.extend(answer.due);
        self.refresh = false;
        self.next_refresh = now + self.poll_interval;
        self.next_due = answer.next_due_in.map(|w| now + w);
    }

    /// The store could not be asked: ask again at the next poll.
    pub(super) fn refresh_failed(&mut self, now: Instant) {
        self.refresh = false;
        self.next_refresh = now + self.poll_interval;
    }

    /// Asks the store before the next round.
    pub(super) fn ask_store(&mut self) {
        self.refresh = true;
    }

    /// Jobs of `job_type` were inserted.
    pub(super) fn inserted(&mut self, job_type: &str) {
        if !self.due.contains(job_type) {
            self.due.insert(job_type.to_string());
        }
    }

    /// A claim for `job_type` asked for `asked` jobs and took `took` (claimed
    /// or failed as expired); `held_back` when a guard stopped it. The type
    /// stays due when the batch was full or a guard held it back.
    pub(super) fn claimed(&mut self, job_type: &str, asked: u32, took: usize, held_back: bool) {
        let full = took >= asked as usize;
        if !full && !held_back {
            self.due.remove(job_type);
        }
    }

    /// Forgets a type that is no longer registered.
    pub(super) fn forget(&mut self, job_type: &str) {
        self.due.remove(job_type);
    }

    /// The types that may have due jobs, in name order.
    pub(super) fn types(&self) -> Vec<String> {
        self.due.iter().cloned().collect()
    }

    /// When the dispatcher must wake up by itself to ask the store.
    pub(super) fn deadline(&self) -> Instant {
        match self.next_due {
            Some(t) => t.min(self.next_refresh),
            None => self.next_refresh,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLL: Duration = Duration::from_millis(500);

    fn answer(due: &[&str], next_ms: Option<u64>) -> DueTypes {
        DueTypes {
            due: due.iter().map(|s| (*s).to_string()).collect(),
            next_due_in: next_ms.map(Duration::from_millis),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn asks_the_store_first_then_at_each_poll() {
        let mut d = DueSet::new(POLL);
        let now = Instant::now();
        assert!(d.needs_refresh(now));
        d.refreshed(answer(&["a"], None), now);
        assert!(!d.needs_refresh(now));
        assert_eq!(d.types(), vec!["a".to_string()]);
        assert!(!d.needs_refresh(now + POLL - Duration::from_millis(1)));
        assert!(d.needs_refresh(now + POLL));
        assert_eq!(d.deadline(), now + POLL);
    }

    #[tokio::test(start_paused = true)]
    async fn a_scheduled_job_brings_the_next_question_forward() {
        let mut d = DueSet::new(POLL);
        let now = Instant::now();
        d.refreshed(answer(&[], Some(120)), now);
        assert_eq!(d.deadline(), now + Duration::from_millis(120));
        assert!(d.needs_refresh(now + Duration::from_millis(120)));
        d.refreshed(answer(&[], Some(5_000)), now);
        assert_eq!(d.deadline(), now + POLL);
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_claim_removes_a_type_a_full_or_held_back_one_keeps_it() {
        let mut d = DueSet::new(POLL);
        d.inserted("a");
        d.inserted("b");
        d.inserted("c");
        d.claimed("a", 4, 4, false);
        d.claimed("b", 4, 1, false);
        d.claimed("c", 4, 0, true);
        let mut left = d.types();
        left.sort();
        assert_eq!(left, vec!["a".to_string(), "c".to_string()]);
        d.forget("a");
        assert_eq!(d.types(), vec!["c".to_string()]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_without_types_asks_the_store_and_a_failure_waits_a_poll() {
        let mut d = DueSet::new(POLL);
        let now = Instant::now();
        d.refreshed(DueTypes::default(), now);
        d.ask_store();
        assert!(d.needs_refresh(now));
        d.refresh_failed(now);
        assert!(!d.needs_refresh(now));
        assert!(d.needs_refresh(now + POLL));
    }
}

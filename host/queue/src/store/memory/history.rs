//! Attempt rows and log lines of the memory store, kept beside the jobs
//! under the same state mutex, so an attempt is recorded atomically with
//! the transition that ends it (the caller holds the lock for both).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::attempt::{
    Attempt, AttemptEnd, AttemptOutcome, AttemptUsage, LogLine, LogQuery, StoredLogLine,
};
use crate::job::Job;

/// Attempts and logs by job id.
#[derive(Default)]
pub(super) struct History {
    attempts: BTreeMap<String, Vec<Attempt>>,
    logs: BTreeMap<String, Vec<StoredLogLine>>,
    next_cursor: i64,
}

/// What ended an attempt, besides the job row.
pub(super) struct Ending<'a> {
    pub outcome: AttemptOutcome,
    pub error: Option<&'a str>,
    pub code: Option<&'a str>,
    pub details: Option<&'a str>,
    pub usage: AttemptUsage,
}

impl<'a> Ending<'a> {
    /// An ending with only an outcome and an error.
    pub fn bare(outcome: AttemptOutcome, error: Option<&'a str>) -> Self {
        Self {
            outcome,
            error,
            code: None,
            details: None,
            usage: AttemptUsage::default(),
        }
    }

    /// An ending from a transition's [`AttemptEnd`], `default` when it
    /// names no outcome.
    pub fn of(end: &AttemptEnd, default: AttemptOutcome, error: Option<&'a str>) -> Self {
        Self {
            outcome: end.outcome.unwrap_or(default),
            error,
            code: None,
            details: None,
            usage: end.usage.clone(),
        }
    }
}

impl History {
    /// Records the attempt `job` (still as it ran) ends at `now`.
    pub fn record(&mut self, job: &Job, ending: Ending<'_>, now: DateTime<Utc>) {
        let row = Attempt {
            job_id: job.id.clone(),
            attempt: job.attempts,
            worker: job.lease_owner.clone(),
            digest: job.handler_version.clone(),
            started_at: job.started_at,
            finished_at: Some(now),
            outcome: ending.outcome,
            error: ending.error.map(str::to_string),
            error_code: ending.code.map(str::to_string),
            error_details: ending.details.map(str::to_string),
            usage: ending.usage,
        };
        self.attempts.entry(job.id.clone()).or_default().push(row);
    }

    /// Stores lines in order.
    pub fn append(&mut self, lines: Vec<LogLine>) {
        for line in lines {
            self.next_cursor += 1;
            let stored = StoredLogLine {
                cursor: self.next_cursor,
                line,
            };
            self.logs
                .entry(stored.line.job_id.clone())
                .or_default()
                .push(stored);
        }
    }

    /// The stored attempts of `job_id`.
    pub fn attempts(&self, job_id: &str) -> Vec<Attempt> {
        self.attempts.get(job_id).cloned().unwrap_or_default()
    }

    /// The lines `q` asks for.
    pub fn logs(&self, q: &LogQuery) -> Vec<StoredLogLine> {
        self.logs
            .get(&q.job_id)
            .map(|lines| {
                lines
                    .iter()
                    .filter(|l| q.attempt.is_none_or(|a| l.line.attempt == a))
                    .filter(|l| q.after.is_none_or(|c| l.cursor > c))
                    .take(q.page() as usize)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Forgets job `job_id`'s attempts and logs.
    pub fn forget(&mut self, job_id: &str) {
        self.attempts.remove(job_id);
        self.logs.remove(job_id);
    }
}

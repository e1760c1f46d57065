//! Attempt rows and log lines on both SQL backends: the statements, written
//! once over the [`Dialect`], and the JSON the callers bind.
//!
//! How an attempt is recorded: [`Dialect::record_attempts`] is an
//! `INSERT … SELECT` from the job rows, run in the transition's own
//! transaction *before* its `UPDATE`, under the same fence (`status =
//! running`, and the lease owner when one is given). So the attempt's
//! number, worker, digest and start are the job row's as it ran, an attempt
//! is recorded exactly when its transition applies, and the transition
//! statements themselves are unchanged. A Postgres completion batch, the
//! hot path, records instead from the rows its `UPDATE` returns, in the
//! same statement ([`Dialect::record_attempts_of_done`]): one round trip
//! instead of four (five with log lines). What the row cannot know (outcome,
//! error, figures) is bound as one JSON array, one object per job, so a
//! batch of completions records all its attempts in one statement.
//!
//! Log lines are bound the same way, one JSON array per write.
//!
//! A succeeded attempt is the exception: a completion keeps it on the job
//! row it updates anyway (`finished_by` and the figure columns), so the
//! hot path writes no attempt row. [`Dialect::attempts_of`] reads a job's
//! history as its attempt rows followed by that row's own attempt, which
//! exists only when the job succeeded with `finished_by` set (jobs that
//! succeeded before the columns existed have their attempt row instead).

use serde_json::{json, Value};

use super::{Dialect, SqlRow};
use crate::attempt::{Attempt, AttemptEnd, AttemptOutcome, AttemptUsage, LogLine, StoredLogLine};
use crate::store::StoreError;

/// The fields of one attempt ending, as bound in [`endings_json`].
const ENDING_FIELDS: [(&str, &str); 14] = [
    ("id", "text"),
    ("claim_attempt", "integer"),
    ("outcome", "text"),
    ("error", "text"),
    ("error_code", "text"),
    ("error_details", "text"),
    ("wall_ms", "bigint"),
    ("peak_memory_bytes", "bigint"),
    ("fuel", "bigint"),
    ("log_bytes", "bigint"),
    ("result_bytes", "bigint"),
    ("http_requests", "bigint"),
    ("http_bytes", "bigint"),
    ("enqueues", "bigint"),
];

/// The figure columns, in [`ENDING_FIELDS`] and table order; the job row
/// holds the same columns for its succeeded attempt.
pub(in crate::store) const FIGURES: [&str; 8] = [
    "wall_ms",
    "peak_memory_bytes",
    "fuel",
    "log_bytes",
    "result_bytes",
    "http_requests",
    "http_bytes",
    "enqueues",
];

/// The fields of one log line, as bound in [`logs_json`].
const LOG_FIELDS: [(&str, &str); 6] = [
    ("job_id", "text"),
    ("attempt", "integer"),
    ("seq", "integer"),
    ("at_ms", "bigint"),
    ("level", "text"),
    ("message", "text"),
];

/// The columns an attempt row is read with.
const ATTEMPT_COLS: &str = "job_id, attempt, worker, digest, started_at, finished_at, outcome, \
    error, error_code, error_details, wall_ms, peak_memory_bytes, fuel, log_bytes, result_bytes, \
    http_requests, http_bytes, enqueues";

/// One attempt's ending: the job, what ended it, and the transition's
/// error fields.
pub(in crate::store) struct Ending<'a> {
    pub id: &'a str,
    pub outcome: AttemptOutcome,
    pub error: Option<&'a str>,
    pub code: Option<&'a str>,
    pub details: Option<&'a str>,
    pub usage: Option<&'a AttemptUsage>,
    /// The claim's attempt, when the transition is fenced on one.
    pub claim_attempt: Option<u32>,
}

impl<'a> Ending<'a> {
    /// An ending with only an outcome and an error.
    pub fn bare(id: &'a str, outcome: AttemptOutcome, error: Option<&'a str>) -> Self {
        Self {
            id,
            outcome,
            error,
            code: None,
            details: None,
            usage: None,
            claim_attempt: None,
        }
    }

    /// The same ending, recorded only while the job is still at the
    /// claim's `attempt` (the transition's own fence).
    pub fn fenced(self, attempt: u32) -> Self {
        Self {
            claim_attempt: Some(attempt),
            ..self
        }
    }

    /// The ending of a transition's [`AttemptEnd`], `default` when it
    /// names no outcome.
    pub fn of(
        id: &'a str,
        end: &'a AttemptEnd,
        default: AttemptOutcome,
        error: Option<&'a str>,
    ) -> Self {
        Self {
            usage: Some(&end.usage),
            ..Self::bare(id, end.outcome.unwrap_or(default), error)
        }
    }
}

/// `usage`'s figures in [`FIGURES`] order, as the columns store them
/// (saturated at `i64::MAX`).
pub(in crate::store) fn figure_values(usage: &AttemptUsage) -> [Option<i64>; 8] {
    [
        usage.wall_ms,
        usage.peak_memory_bytes,
        usage.fuel,
        usage.log_bytes,
        usage.result_bytes,
        usage.http_requests,
        usage.http_bytes,
        usage.enqueues,
    ]
    .map(|v| v.map(|v| i64::try_from(v).unwrap_or(i64::MAX)))
}

/// The JSON object `row` with `usage`'s figures added under their column
/// names ([`FIGURES`]).
pub(in crate::store) fn with_figures(mut row: Value, usage: &AttemptUsage) -> Value {
    for (name, value) in FIGURES.iter().zip(figure_values(usage)) {
        row[*name] = json!(value);
    }
    row
}

/// `figure = {from}.figure` for every figure column, comma-separated: the
/// `SET` list that keeps a succeeded attempt's figures on its job row.
pub(in crate::store) fn set_figures_from(from: &str) -> String {
    FIGURES.map(|f| format!("{f} = {from}.{f}")).join(", ")
}

/// `endings` as the JSON array [`Dialect::record_attempts`] binds.
pub(in crate::store) fn endings_json(endings: &[Ending<'_>]) -> String {
    let rows = endings
        .iter()
        .map(|e| {
            let u = e.usage.cloned().unwrap_or_default();
            let row = json!({
                "id": e.id,
                "claim_attempt": e.claim_attempt,
                "outcome": e.outcome.as_str(),
                "error": e.error,
                "error_code": e.code,
                "error_details": e.details,
            });
            with_figures(row, &u)
        })
        .collect();
    Value::Array(rows).to_string()
}

/// `lines` as the JSON array [`Dialect::insert_logs`] binds.
pub(in crate::store) fn logs_json<'a>(lines: impl Iterator<Item = &'a LogLine>) -> String {
    Value::Array(
        lines
            .map(|l| {
                json!({
                    "job_id": l.job_id,
                    "attempt": l.attempt,
                    "seq": l.seq,
                    "at_ms": l.at.timestamp_millis(),
                    "level": l.level,
                    "message": l.message,
                })
            })
            .collect(),
    )
    .to_string()
}

impl Dialect {
    /// Records the attempts of the JSON endings `$1` ([`endings_json`]) of
    /// jobs still running (under worker `$2`'s lease when `$2` is not
    /// null, and at the ending's claim attempt when it names one), from
    /// their job rows, finished now. The endings drive the join
    /// ([`Dialect::job_of_each_row`]): each finds its job by primary key.
    /// Joined the other way, both planners walked every running job and
    /// re-read the whole JSON batch for each: on SQLite that cost more than
    /// half the drain rate; on Postgres a 500-job batch took 50 ms instead
    /// of 5.
    pub(in crate::store) fn record_attempts(&self) -> String {
        self.record_attempts_at(1)
    }

    /// [`Dialect::record_attempts`] with its three parameters numbered from
    /// `first` (endings, worker, now), for a statement that runs beside
    /// others in one request.
    pub(in crate::store) fn record_attempts_at(&self, first: usize) -> String {
        let figures = FIGURES.map(|f| format!("a.{f}")).join(", ");
        let worker = first + 1;
        format!(
            "INSERT INTO {} (job_id, attempt, worker, digest, started_at, finished_at, outcome, \
               error, error_code, error_details, {}) \
             SELECT j.id, j.attempts, j.lease_owner, j.handler_version, j.started_at, {}, \
               a.outcome, a.error, a.error_code, a.error_details, {figures} \
             FROM {} {} \
             WHERE j.id = a.id AND {running} = 'running' \
               AND ({} IS NULL OR j.lease_owner = ${worker}) \
               AND (a.claim_attempt IS NULL OR j.attempts = a.claim_attempt)",
            self.attempts,
            FIGURES.join(", "),
            self.now(first + 2),
            self.json_rows(first, &ENDING_FIELDS),
            self.job_of_each_row(),
            self.text_param(worker),
            running = self.unindexed("j.status"),
        )
    }

    /// Records, for each job of the CTE `done` (`id, attempts,
    /// handler_version, started_at`, the job rows a transition changed, as
    /// its `RETURNING` answers them), the attempt its ending in the JSON
    /// endings `$endings` describes, run by worker `$worker`, finished now:
    /// an attempt row exactly when the transition applied, in the
    /// transition's own statement (Postgres).
    #[cfg(feature = "postgres")]
    pub(in crate::store) fn record_attempts_of_done(
        &self,
        endings: usize,
        worker: usize,
    ) -> String {
        let figures = FIGURES.map(|f| format!("a.{f}")).join(", ");
        format!(
            "INSERT INTO {} (job_id, attempt, worker, digest, started_at, finished_at, outcome, \
               error, error_code, error_details, {}) \
             SELECT d.id, d.attempts, ${worker}, d.handler_version, d.started_at, now(), \
               a.outcome, a.error, a.error_code, a.error_details, {figures} \
             FROM done d JOIN {} ON a.id = d.id",
            self.attempts,
            FIGURES.join(", "),
            self.json_rows(endings, &ENDING_FIELDS),
        )
    }

    /// Stores the JSON log lines `$1` ([`logs_json`]).
    pub(in crate::store) fn insert_logs(&self) -> String {
        self.insert_logs_at(1)
    }

    /// [`Dialect::insert_logs`] binding its lines as parameter `$n`.
    pub(in crate::store) fn insert_logs_at(&self, n: usize) -> String {
        format!(
            "INSERT INTO {} (job_id, attempt, seq, at, level, message) \
             SELECT a.job_id, a.attempt, a.seq, {}, a.level, a.message FROM {}",
            self.logs,
            self.time_from_ms("a.at_ms"),
            self.json_rows(n, &LOG_FIELDS),
        )
    }

    /// The attempts of job `$1`, oldest first: its attempt rows, then the
    /// succeeded attempt its job row holds, if any.
    pub(in crate::store) fn attempts_of(&self) -> String {
        format!(
            "SELECT {ATTEMPT_COLS} FROM (\
               SELECT {ATTEMPT_COLS}, 0 AS on_job_row, id AS seq FROM {attempts} \
               WHERE job_id = $1 \
               UNION ALL \
               SELECT id, attempts, finished_by, handler_version, started_at, finished_at, \
                 '{succeeded}', NULL, NULL, NULL, {figures}, 1, 0 FROM {jobs} \
               WHERE id = $1 AND status = 'succeeded' AND finished_by IS NOT NULL) AS h \
             ORDER BY on_job_row, seq",
            attempts = self.attempts,
            jobs = self.jobs,
            succeeded = AttemptOutcome::Succeeded.as_str(),
            figures = FIGURES.join(", "),
        )
    }

    /// Up to `$4` log lines of job `$1`, of attempt `$2` unless null, after
    /// cursor `$3` unless null, in stored order.
    pub(in crate::store) fn logs_of(&self) -> String {
        format!(
            "SELECT id, job_id, attempt, seq, at, level, message FROM {} \
             WHERE job_id = $1 AND ({} IS NULL OR attempt = $2) AND ({} IS NULL OR id > $3) \
             ORDER BY id LIMIT $4",
            self.logs,
            self.int_param(2),
            self.bigint_param(3),
        )
    }

    /// Deletes the attempts and log lines of the jobs in the statuses `$1`
    /// finished before `$2` (run before [`Dialect::prune`], in its
    /// transaction).
    pub(in crate::store) fn prune_history(&self) -> [String; 2] {
        [&self.attempts, &self.logs].map(|table| {
            format!(
                "DELETE FROM {table} WHERE job_id IN \
                 (SELECT id FROM {} WHERE {} AND finished_at < $2)",
                self.jobs,
                self.in_list("status", 1)
            )
        })
    }
}

/// An attempt from a row with the attempt columns.
pub(in crate::store) fn attempt_from_row(r: &impl SqlRow) -> Result<Attempt, StoreError> {
    let outcome = r.text("outcome")?;
    let figure = |c: &str| -> Result<Option<u64>, StoreError> {
        Ok(r.opt_int8(c)?.and_then(|v| u64::try_from(v).ok()))
    };
    Ok(Attempt {
        job_id: r.text("job_id")?,
        attempt: r.count("attempt", 0)?,
        worker: r.opt_text("worker")?,
        digest: r.opt_text("digest")?,
        started_at: r.opt_time("started_at")?,
        finished_at: r.opt_time("finished_at")?,
        outcome: AttemptOutcome::parse(&outcome)
            .ok_or_else(|| StoreError::Corrupt(format!("attempt outcome `{outcome}`")))?,
        error: r.opt_text("error")?,
        error_code: r.opt_text("error_code")?,
        error_details: r.opt_text("error_details")?,
        usage: AttemptUsage {
            wall_ms: figure("wall_ms")?,
            peak_memory_bytes: figure("peak_memory_bytes")?,
            fuel: figure("fuel")?,
            log_bytes: figure("log_bytes")?,
            result_bytes: figure("result_bytes")?,
            http_requests: figure("http_requests")?,
            http_bytes: figure("http_bytes")?,
            enqueues: figure("enqueues")?,
        },
    })
}

/// A stored log line from a row of [`Dialect::logs_of`].
pub(in crate::store) fn log_from_row(r: &impl SqlRow) -> Result<StoredLogLine, StoreError> {
    Ok(StoredLogLine {
        cursor: r.opt_int8("id")?.unwrap_or(0),
        line: LogLine {
            job_id: r.text("job_id")?,
            attempt: r.count("attempt", 0)?,
            seq: r.count("seq", 0)?,
            at: r.time("at")?,
            level: r.text("level")?,
            message: r.text("message")?,
        },
    })
}

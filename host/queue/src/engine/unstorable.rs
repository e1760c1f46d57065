//! When the database refuses an outcome write: what counts as a refusal,
//! and the host-written failure that replaces the refused write.
//!
//! Invariants:
//! - A refusal is the database rejecting this statement's data: Postgres
//!   SQLSTATE classes 22 (data exception, e.g. a NUL in text), 23
//!   (integrity) and 54 (program limit, e.g. an index row too large);
//!   SQLite primary codes 18 (too big), 19 (constraint), 20 (mismatch) and
//!   25 (range), or a value the driver could not encode. Everything else
//!   (lost connections, pool timeouts, deadlocks, busy databases, codes not
//!   listed) is transient: the caller retries it or leaves the job to lease
//!   recovery, as it always did.
//! - The replacement write carries only host-written text (no handler
//!   output) and is fenced on this worker's lease like every completion, so
//!   a job whose outcome cannot be stored fails with a clear error instead
//!   of staying `running` until its lease expires.

use super::handler_output::host_text;
use super::Engine;
use crate::attempt::AttemptEnd;
use crate::observer::{LifecycleEvent, LifecycleOutcome};
use crate::store::{ClaimRef, FailParams, StoreError};

/// `error_code` of a job whose outcome the database refused to store.
pub const UNSTORABLE_OUTCOME: &str = "unstorable-outcome";

/// Whether the database refused the statement's data (see module docs).
pub(crate) fn is_refusal(error: &StoreError) -> bool {
    match error {
        StoreError::Database(sqlx::Error::Database(db)) => {
            db.code().is_some_and(|c| refusal_code(&c))
        }
        StoreError::Database(sqlx::Error::Encode(_)) => true,
        _ => false,
    }
}

/// A Postgres SQLSTATE (five characters) or SQLite extended result code
/// (a number whose low byte is the primary code) that means "this data".
fn refusal_code(code: &str) -> bool {
    if code.len() == 5 {
        return ["22", "23", "54"]
            .iter()
            .any(|class| code.starts_with(class));
    }
    code.parse::<u32>()
        .is_ok_and(|n| matches!(n & 0xff, 18 | 19 | 20 | 25))
}

/// Fails the job of the run's `claim` with a host-written message saying which write the
/// database refused; emits `failed-terminal` when the write lands. `event`
/// describes the run (its `outcome` and `error` are filled in here).
pub(crate) async fn fail_unstorable(
    engine: &Engine,
    claim: ClaimRef,
    refused_write: &str,
    error: &StoreError,
    mut event: LifecycleEvent,
) {
    tracing::warn!(job_id = %event.job_id, %error, "the database refused the {refused_write}; failing the job with a host-written error");
    let message = host_text(format!(
        "unstorable outcome: the database refused the {refused_write} ({error}); the handler's answer is lost"
    ));
    let params = FailParams {
        worker_id: engine.opts.worker_id.clone(),
        id: claim.id,
        attempt: claim.attempt,
        error: message.clone(),
        code: Some(UNSTORABLE_OUTCOME.to_string()),
        details: None,
        ending: AttemptEnd::default(),
    };
    match engine.store.fail(params).await {
        Ok(true) => {
            event.outcome = LifecycleOutcome::FailedTerminal;
            event.error = Some(message);
            engine.queue.emit(event);
        }
        Ok(false) => {
            tracing::warn!(job_id = %event.job_id, "failure write rejected: the lease was lost or the job was cancelled");
        }
        Err(e) => {
            tracing::error!(job_id = %event.job_id, error = %e, "failure write failed; the job is recovered after its lease");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::refusal_code;

    #[test]
    fn refusals_are_told_apart_from_transient_errors() {
        for refusal in ["22021", "22P05", "23505", "54000", "18", "19", "2067", "25"] {
            assert!(refusal_code(refusal), "{refusal}");
        }
        for transient in [
            "08006", "40001", "40P01", "53300", "57P01", "5", "6", "517", "10",
        ] {
            assert!(!refusal_code(transient), "{transient}");
        }
    }
}

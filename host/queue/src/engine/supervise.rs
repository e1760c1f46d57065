//! Supervising one run while its handler works: the handler is polled
//! only while the run's lease is provably held, the lease is renewed on its
//! interval, the run's new log lines are stored as it goes, and the run is
//! aborted at its deadline, on a cancel, or once its lease is lost.
//!
//! Invariants:
//! - The lease is counted from before the claim (then each renewal) was
//!   sent, so this process never believes in a lease longer than the
//!   store's; once it can no longer be proved the handler is not polled
//!   again, even right after this process resumed from a pause and before
//!   any timer fired.
//! - A lost lease is logged in the run's span when the handler has stopped
//!   being polled: the line's time bounds the guest's last step.
//! - The handler future is awaited at most `abandon_grace` after an abort
//!   or the deadline.
//! - Renewal is fenced in the store; a renewal that is refused, or that
//!   keeps failing until the lease would have expired, aborts the run. The
//!   first comes no later than one interval before the lease ends.
//! - A running job's new log lines are stored every [`LOG_FLUSH_EVERY`].

use std::time::Duration;

use super::run_span::TARGET as RUN_TARGET;
use super::Engine;
use crate::handler::Outcome;
use crate::inflight::{AbortReason, RunHandle};
use crate::job::Job;
use crate::lease_clock::LeaseClock;
use crate::metrics::StoreOp;
use crate::registry::HandlerEntry;
use crate::run_record::RunRecord;
use crate::store::{ClaimRef, RenewParams};
use crate::time;

/// How often a running job's new log lines are stored.
pub(crate) const LOG_FLUSH_EVERY: Duration = Duration::from_millis(250);

/// Stores the lines `record` holds, outside any transition.
pub(super) async fn flush_logs(engine: &Engine, record: &RunRecord) {
    let lines = record.take_logs();
    if lines.is_empty() {
        return;
    }
    let stored = engine
        .queue
        .metrics()
        .timed(StoreOp::Logs, engine.store.append_logs(lines));
    if let Err(e) = stored.await {
        tracing::warn!(error = %e, "storing a running job's log lines failed; those lines are lost");
    }
}

/// Renews the lease once; `Ok(false)` when the store refused (lease lost).
async fn renew(engine: &Engine, claim: &ClaimRef, lease: Duration) -> Result<bool, ()> {
    let params = RenewParams {
        worker_id: engine.opts.worker_id.clone(),
        claims: vec![claim.clone()],
        lease,
    };
    let renewed = engine
        .queue
        .metrics()
        .timed(StoreOp::Renew, engine.store.renew_leases(params));
    match renewed.await {
        Ok(ids) => Ok(!ids.is_empty()),
        Err(e) => {
            tracing::warn!(job_id = %claim.id, error = %e, "lease renewal failed; will retry");
            Err(())
        }
    }
}

/// Why a run gave up its lease, for its `lease lost` log line.
#[derive(Clone, Copy)]
enum LeaseLoss {
    /// The lease's last proof ran out: a slow store, or this process was
    /// paused.
    Unproved,
    /// The store refused the renewal: the job was cancelled, or claimed
    /// again after the lease ran out.
    Refused,
}

/// Aborts the run as lease-lost and says so in the run's span, under the
/// span's own target (`boxcar::job`: the line is part of the run's story,
/// and tools read it there). Called when the handler is no longer polled,
/// so the line's time bounds the guest's last step (the chaos harness
/// reads it as the run's end).
fn lose_lease(handle: &RunHandle, why: LeaseLoss) {
    handle.abort(AbortReason::LeaseLost);
    let why = match why {
        LeaseLoss::Unproved => {
            "it could no longer be proved (a slow store, or this process was paused)"
        }
        LeaseLoss::Refused => {
            "the store refused its renewal (the job was cancelled or claimed again)"
        }
    };
    tracing::warn!(
        target: RUN_TARGET,
        "lease lost: {why}; the guest was stopped and the job is left to its next owner"
    );
}

/// When a run's first renewal is due: one interval after its start, or
/// one interval before its lease ends if that is sooner — at once when
/// less than an interval is left (the claim was slow, or this process was
/// paused between the claim and the start). A lease the store still holds
/// is then renewed in time rather than lost to the interval; one the store
/// no longer holds is refused (a renewal needs a live lease).
fn first_renewal(
    lease_deadline: Option<tokio::time::Instant>,
    every: Duration,
) -> tokio::time::Instant {
    let regular = time::instant_after(every);
    match lease_deadline.and_then(|end| end.checked_sub(every)) {
        Some(latest) => regular.min(latest),
        None => regular,
    }
}

/// Waits for the handler, the deadline, an abort, or a renewal failure.
///
/// The handler is polled only while the lease is provably held: until
/// `lease_deadline` (counted from before the claim was sent), then until
/// each successful renewal's lease counted from before it was sent. When
/// that passes — a slow database, or this process paused — the run is
/// aborted as lease-lost before the guest takes another step, since
/// another host may own the job by then.
pub(super) async fn supervise(
    engine: &Engine,
    entry: &HandlerEntry,
    job: &Job,
    handle: &RunHandle,
    (mut fut, lease_deadline, lease): (
        futures::future::BoxFuture<'static, Outcome>,
        Option<tokio::time::Instant>,
        &LeaseClock,
    ),
    deadline: tokio::time::Instant,
    record: &RunRecord,
) -> Outcome {
    let renewal = entry.settings.lease_duration.map(|lease| {
        let every = entry.settings.lease_renew_interval.unwrap_or(lease / 3);
        (lease, every.max(Duration::from_millis(10)))
    });
    let mut lease_valid_until = lease_deadline;
    let mut next_renewal = renewal.map(|(_, every)| first_renewal(lease_deadline, every));
    let mut timed_out = false;
    let mut next_flush = time::instant_after(LOG_FLUSH_EVERY);
    loop {
        if lease_valid_until.is_some_and(|t| tokio::time::Instant::now() >= t) {
            lose_lease(handle, LeaseLoss::Unproved);
            break;
        }
        let renew_at = next_renewal.unwrap_or(deadline);
        let lease_end = lease_valid_until.unwrap_or(deadline);
        // The handler is not polled once the lease has lapsed, even when
        // no timer has fired yet (right after this process resumed from a
        // pause): the run is aborted instead.
        let while_held = std::future::poll_fn(|cx| {
            if lease.has_lapsed() {
                return std::task::Poll::Ready(None);
            }
            fut.as_mut().poll(cx).map(Some)
        });
        tokio::select! {
            biased;
            out = while_held => match out {
                // The handler stopped its guest itself because the lease
                // lapsed (the sandbox reads the same clock): a lost lease,
                // not a cancel of the job's own, so nothing is written.
                Some(Outcome::Cancelled) if lease.has_lapsed() && handle.reason().is_none() => {
                    lose_lease(handle, LeaseLoss::Unproved);
                    return Outcome::Cancelled;
                }
                Some(out) => return out,
                None => {
                    lose_lease(handle, LeaseLoss::Unproved);
                    break;
                }
            },
            () = tokio::time::sleep_until(next_flush) => {
                flush_logs(engine, record).await;
                next_flush = time::instant_after(LOG_FLUSH_EVERY);
            }
            () = tokio::time::sleep_until(deadline) => {
                timed_out = true;
                handle.token.cancel();
                break;
            }
            () = handle.token.cancelled() => break,
            () = tokio::time::sleep_until(lease_end), if lease_valid_until.is_some() => {}
            () = tokio::time::sleep_until(renew_at), if next_renewal.is_some() => {
                let Some((lease_for, every)) = renewal else { continue };
                let sent = tokio::time::Instant::now();
                match renew(engine, &ClaimRef::of(job), lease_for).await {
                    Ok(true) => {
                        lease_valid_until = sent.checked_add(lease_for);
                        if let Some(end) = lease_valid_until {
                            lease.hold_until(end.into_std());
                        }
                        next_renewal = Some(time::instant_after(every));
                    }
                    Ok(false) => lose_lease(handle, LeaseLoss::Refused),
                    Err(()) if lease_valid_until.is_some_and(|t| tokio::time::Instant::now() >= t) => {
                        lose_lease(handle, LeaseLoss::Unproved);
                    }
                    Err(()) => {
                        next_renewal = Some(time::instant_after((every / 4).max(Duration::from_millis(10))));
                    }
                }
            }
        }
    }
    let late = tokio::time::timeout(engine.opts.abandon_grace, &mut fut).await;
    if late.is_err() {
        tracing::warn!(job_id = %job.id, "handler did not stop within abandon_grace; freeing its slot");
    }
    if timed_out {
        Outcome::TimedOut
    } else {
        Outcome::Cancelled
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::first_renewal;

    const EVERY: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn a_fresh_lease_is_renewed_one_interval_after_the_start() {
        let now = Instant::now();
        assert_eq!(first_renewal(Some(now + 3 * EVERY), EVERY), now + EVERY);
        assert_eq!(first_renewal(None, EVERY), now + EVERY);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_spent_before_the_start_is_renewed_before_it_ends() {
        let now = Instant::now();
        assert_eq!(
            first_renewal(Some(now + EVERY * 3 / 2), EVERY),
            now + EVERY / 2,
            "one interval before the end"
        );
        assert!(
            first_renewal(Some(now + Duration::from_millis(10)), EVERY) <= now,
            "less than an interval left: at once"
        );
    }
}

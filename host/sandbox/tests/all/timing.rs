//! Deadlines, cancellation, and a host that stays responsive.

use std::time::{Duration, Instant};

use boxcar_sandbox::Outcome;

use crate::common::{load, CPU};
use boxcar_queue::testing::{context, job_run};
use boxcar_queue::LeaseClock;

#[tokio::test]
async fn spin_times_out_at_100ms_within_50ms() {
    let _cpu = CPU.lock().await;
    let spin = load("spin");
    let (ctx, _) = context();
    let started = Instant::now();
    let outcome = spin
        .run(job_run("spin", "{}", Duration::from_millis(100)), ctx)
        .await;
    let took = started.elapsed();
    assert_eq!(outcome, Outcome::TimedOut);
    assert!(took < Duration::from_millis(150), "took {took:?}");
    assert!(took >= Duration::from_millis(95), "stopped early: {took:?}");
}

#[tokio::test]
async fn spin_cancelled_after_50ms_stops_within_50ms() {
    let _cpu = CPU.lock().await;
    let spin = load("spin");
    let (ctx, _) = context();
    let cancel = ctx.cancel.clone();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
        Instant::now()
    });
    let outcome = spin
        .run(job_run("spin", "{}", Duration::from_secs(10)), ctx)
        .await;
    let ended = Instant::now();
    let cancelled_at = canceller.await.expect("canceller ran");
    assert_eq!(outcome, Outcome::Cancelled);
    let after = ended.duration_since(cancelled_at);
    assert!(
        after < Duration::from_millis(50),
        "ended {after:?} after cancel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_completes_promptly_while_two_spins_run() {
    let _cpu = CPU.lock().await;
    let spin = load("spin");
    let echo = load("echo");
    let mut spins = Vec::new();
    let mut cancels = Vec::new();
    for _ in 0..2 {
        let (ctx, _) = context();
        cancels.push(ctx.cancel.clone());
        let spin = spin.clone();
        spins.push(tokio::spawn(async move {
            spin.run(job_run("spin", "{}", Duration::from_secs(10)), ctx)
                .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (ctx, _) = context();
    let started = Instant::now();
    let outcome = echo
        .run(
            job_run("echo", r#"{"hello":"world"}"#, Duration::from_secs(5)),
            ctx,
        )
        .await;
    let took = started.elapsed();
    for c in &cancels {
        c.cancel();
    }
    assert_eq!(
        outcome,
        Outcome::Succeeded {
            result: Some(r#"{"hello":"world"}"#.into())
        }
    );
    assert!(took < Duration::from_millis(100), "echo took {took:?}");
    for s in spins {
        assert_eq!(s.await.expect("spin task"), Outcome::Cancelled);
    }
}

#[tokio::test]
async fn cooperative_sleep_sees_cancelled_and_ends_cancelled() {
    let handler = load("cooperative-sleep");
    let (ctx, _) = context();
    let cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let outcome = handler
        .run(
            job_run(
                "cooperative-sleep",
                r#"{"ms": 5000}"#,
                Duration::from_secs(10),
            ),
            ctx,
        )
        .await;
    assert_eq!(outcome, Outcome::Cancelled);
    assert!(started.elapsed() < Duration::from_millis(500));
}

#[tokio::test]
async fn sleep_inside_a_host_call_is_stopped_at_the_deadline() {
    let handler = load("sleep");
    let (ctx, _) = context();
    let started = Instant::now();
    let outcome = handler
        .run(
            job_run("sleep", r#"{"ms": 5000}"#, Duration::from_millis(100)),
            ctx,
        )
        .await;
    assert_eq!(outcome, Outcome::TimedOut);
    assert!(
        started.elapsed() < Duration::from_millis(150),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn sleep_finishes_when_given_time() {
    let handler = load("sleep");
    let (ctx, _) = context();
    let outcome = handler
        .run(
            job_run("sleep", r#"{"ms": 20}"#, Duration::from_secs(5)),
            ctx,
        )
        .await;
    assert_eq!(
        outcome,
        Outcome::Succeeded {
            result: Some(r#"{"slept_ms":20}"#.into())
        }
    );
}

#[tokio::test]
async fn past_deadline_times_out_without_running() {
    let echo = load("echo");
    let (ctx, _) = context();
    let mut j = job_run("echo", "{}", Duration::from_secs(1));
    j.deadline = chrono::Utc::now() - chrono::Duration::seconds(1);
    assert_eq!(echo.run(j, ctx).await, Outcome::TimedOut);
}

/// A run whose lease lapses is stopped by the sandbox itself within about
/// a tick, though nothing cancels it (as when the host resumes from a
/// pause before any of its timers fired).
#[tokio::test]
async fn spin_stops_when_its_lease_lapses_without_a_cancel() {
    let _cpu = CPU.lock().await;
    let spin = load("spin");
    let (mut ctx, _) = context();
    let lapses_at = Instant::now() + Duration::from_millis(50);
    ctx.lease = LeaseClock::with_end(Some(lapses_at));
    let outcome = spin
        .run(job_run("spin", "{}", Duration::from_secs(10)), ctx)
        .await;
    let after = Instant::now().duration_since(lapses_at);
    assert_eq!(outcome, Outcome::Cancelled);
    assert!(
        after < Duration::from_millis(50),
        "ended {after:?} after the lease lapsed"
    );
}

/// No guest code runs once the lease has lapsed: the guest, which logs
/// as its first step, logged nothing.
#[tokio::test]
async fn no_guest_code_runs_after_the_lease_lapsed() {
    let flaky = load("flaky");
    let (mut ctx, _) = context();
    ctx.lease = LeaseClock::with_end(Some(Instant::now()));
    let record = ctx.record.clone();
    let outcome = flaky
        .run(
            job_run(
                "flaky",
                r#"{"succeed_on": 1, "log_lines": 2}"#,
                Duration::from_secs(10),
            ),
            ctx,
        )
        .await;
    assert_eq!(outcome, Outcome::Cancelled);
    assert!(record.take_logs().is_empty(), "the guest took a step");
}

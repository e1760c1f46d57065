//! Log attacks that cost little text: empty `log("")` calls, bare newlines
//! on stdout, CR/LF inside a message. Each line costs a fixed overhead
//! against `max_log`, lines per job are capped, and what reaches the host's
//! log is one escaped line per guest line.

use std::time::{Duration, Instant};

use boxcar_sandbox::{HandlerLimits, LimitKind, Outcome};

use crate::common::{captured_logs, load, CPU};
use boxcar_queue::testing::{context, job_run};

/// Lines of the captured host log that belong to job `id`.
fn lines_of(id: &str) -> Vec<String> {
    let logs = captured_logs();
    let text = String::from_utf8_lossy(&logs.lock().expect("lock")).to_string();
    text.lines()
        .filter(|l| l.contains(id))
        .map(str::to_string)
        .collect()
}

/// Runs `payload` on `log-attack` as job `id`; returns the outcome and how
/// long it took.
async fn attack(id: &str, payload: &str) -> (Outcome, Duration) {
    captured_logs();
    let h = load("log-attack");
    let (ctx, _) = context();
    let mut run = job_run("log-attack", payload, Duration::from_secs(30));
    run.id = id.into();
    let started = Instant::now();
    let outcome = h.run(run, ctx).await;
    (outcome, started.elapsed())
}

fn assert_log_limit(what: &str, outcome: &Outcome) {
    match outcome {
        Outcome::LimitExceeded { which, detail } => {
            assert_eq!(*which, LimitKind::LogVolume, "{what}: {detail}");
        }
        other => panic!("{what}: expected LimitExceeded(LogVolume), got {other:?}"),
    }
}

/// Runs a line flood as job `id`: it must end at the log limit within 5 s
/// with at most `max_log_lines` lines in the host log; returns how many
/// reached it.
async fn flood_stops_at_the_line_cap(what: &str, id: &str, payload: &str) -> usize {
    let (outcome, took) = attack(id, payload).await;
    assert_log_limit(what, &outcome);
    assert!(took < Duration::from_secs(5), "{what}: took {took:?}");
    let written = lines_of(id).len();
    let cap = HandlerLimits::default().max_log_lines;
    assert!(
        written <= cap,
        "{what}: {written} lines reached the host log; cap {cap}"
    );
    written
}

#[tokio::test]
async fn empty_log_flood_is_stopped_at_the_line_budget() {
    let _cpu = CPU.lock().await;
    let written = flood_stops_at_the_line_cap(
        "empty logs",
        "job-logs-empty-flood",
        r#"{"attack":"empty-logs","count":1000000}"#,
    )
    .await;
    assert!(written > 0, "lines before the cap are kept");
}

#[tokio::test]
async fn stdout_newline_flood_is_stopped_at_the_line_budget() {
    let _cpu = CPU.lock().await;
    flood_stops_at_the_line_cap(
        "stdout newlines",
        "job-logs-newline-flood",
        r#"{"attack":"stdout-newlines","count":1000000}"#,
    )
    .await;
}

#[tokio::test]
async fn crlf_in_a_message_stays_one_escaped_line() {
    let id = "job-logs-crlf";
    let (outcome, _) = attack(
        id,
        r#"{"attack":"crlf","text":"ok\r\nFORGED line \u001b[31mred"}"#,
    )
    .await;
    assert_eq!(
        outcome,
        Outcome::Succeeded {
            result: Some("1".into())
        }
    );
    let logs = captured_logs();
    let text = String::from_utf8_lossy(&logs.lock().expect("lock")).to_string();
    assert!(
        !text.lines().any(|l| l.starts_with("FORGED")),
        "a guest forged a host log line:\n{text}"
    );
    assert!(
        !text
            .lines()
            .filter(|l| l.contains("FORGED"))
            .any(|l| l.contains('\u{1b}')),
        "a raw escape reached the host log"
    );
    let mine = lines_of(id);
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert!(
        mine[0].contains(r"ok\r\nFORGED line \u{1b}[31mred"),
        "{}",
        mine[0]
    );
}

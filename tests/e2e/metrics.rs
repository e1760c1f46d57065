//! `/metrics` after a real workload through the binary: the histograms'
//! counts match the runs, attempt outcomes (sandbox aborts included) are
//! counted by kind, the pending and running gauges read the store, deploys
//! and rejections are counted, and Prometheus' own linter (`promtool check
//! metrics`) accepts the text.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::api::http;
use crate::harness::{eventually, Env, Serve};

const ECHO: &str = "[handler]\njob_type = \"echo\"\ntimeout = \"10s\"\n";
const TRAP: &str = "[handler]\njob_type = \"trap\"\ntimeout = \"10s\"\nmax_attempts = 1\n";
const SPIN: &str = "[handler]\njob_type = \"spin\"\ntimeout = \"300ms\"\nmax_attempts = 1\n";
const SLEEP: &str = "[handler]\njob_type = \"sleep\"\ntimeout = \"60s\"\nconcurrency = 1\n";

/// The value of the sample written exactly `series` (name and labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn scrape(serve: &Serve) -> String {
    let (status, body) = http(&serve.listen, "GET", "/metrics", None, None);
    assert_eq!(status, 200, "{body}");
    body.as_str().expect("metrics text").to_string()
}

/// Enqueues through the API; returns the job id.
fn enqueue(serve: &Serve, body: &str) -> String {
    let (status, added) = http(&serve.listen, "POST", "/jobs", Some(body), None);
    assert_eq!(status, 201, "{added}");
    added["id"].as_str().expect("id").to_string()
}

fn wait_done(serve: &Serve, id: &str) -> Value {
    let (status, job) = http(
        &serve.listen,
        "GET",
        &format!("/jobs/{id}/wait?timeout=30s"),
        None,
        None,
    );
    assert_eq!(status, 200, "{job}");
    job
}

/// Waits until the scraped text has `series` at `value`; returns the text.
fn until(serve: &Serve, series: &str, value: f64) -> String {
    eventually(Duration::from_secs(30), series, || {
        let text = scrape(serve);
        (sample(&text, series) == Some(value)).then_some(text)
    })
}

#[test]
fn metrics_answer_questions_after_a_workload() {
    let env = Env::sqlite();
    env.fast_config("");
    env.deploy("echo", "echo", ECHO);
    env.deploy("trap", "trap", TRAP);
    env.deploy("spin", "spin", SPIN);
    env.deploy("sleep", "sleep", SLEEP);
    std::fs::write(env.handlers().join("broken.wasm"), b"not a module").expect("write");
    std::fs::write(
        env.handlers().join("broken.toml"),
        "[handler]\njob_type = \"broken\"\n",
    )
    .expect("write");
    let serve = env.serve("serve", &[]);
    eventually(Duration::from_secs(60), "four deployed handlers", || {
        (serve.output().matches("handler deployed").count() >= 4).then_some(())
    });
    serve.wait_for_log("handler rejected", Duration::from_secs(30));

    let echoes: Vec<String> = (0..5)
        .map(|i| {
            enqueue(
                &serve,
                &format!(r#"{{"job_type":"echo","payload":{{"n":{i}}}}}"#),
            )
        })
        .collect();
    let trap = enqueue(&serve, r#"{"job_type":"trap","payload":{}}"#);
    let spin = enqueue(&serve, r#"{"job_type":"spin","payload":{}}"#);
    enqueue(&serve, r#"{"job_type":"echo","payload":{},"delay":"1h"}"#);
    for _ in 0..2 {
        enqueue(&serve, r#"{"job_type":"sleep","payload":{"ms":60000}}"#);
    }
    for id in &echoes {
        assert_eq!(wait_done(&serve, id)["status"], "succeeded");
    }
    assert_eq!(wait_done(&serve, &trap)["status"], "failed");
    assert_eq!(wait_done(&serve, &spin)["status"], "failed");

    let echo = r#"{job_type="echo"}"#;
    until(&serve, &format!("boxcar_job_run_seconds_count{echo}"), 5.0);
    let spin_timed_out = r#"boxcar_job_attempts_total{job_type="spin",outcome="timed_out"}"#;
    until(&serve, spin_timed_out, 1.0);
    let trapped = r#"boxcar_job_attempts_total{job_type="trap",outcome="trapped"}"#;
    until(&serve, trapped, 1.0);
    let text = until(&serve, r#"boxcar_jobs_running{job_type="sleep"}"#, 1.0);
    let expect = |series: &str, value: f64| {
        assert_eq!(sample(&text, series), Some(value), "{series} in:\n{text}");
    };
    expect(&format!("boxcar_job_run_seconds_count{echo}"), 5.0);
    expect(
        r#"boxcar_job_run_seconds_bucket{job_type="echo",le="+Inf"}"#,
        5.0,
    );
    expect(&format!("boxcar_job_queue_wait_seconds_count{echo}"), 5.0);
    expect(&format!("boxcar_sandbox_overhead_seconds_count{echo}"), 5.0);
    expect(
        r#"boxcar_job_attempts_total{job_type="echo",outcome="succeeded"}"#,
        5.0,
    );
    expect(
        r#"boxcar_job_attempts_total{job_type="echo",outcome="failed"}"#,
        0.0,
    );
    expect(
        r#"boxcar_job_attempts_total{job_type="trap",outcome="trapped"}"#,
        1.0,
    );
    expect(
        r#"boxcar_job_attempts_total{job_type="trap",outcome="succeeded"}"#,
        0.0,
    );
    expect(
        r#"boxcar_job_attempts_total{job_type="spin",outcome="timed_out"}"#,
        1.0,
    );
    expect(r#"boxcar_job_run_seconds_count{job_type="spin"}"#, 1.0);
    expect(
        r#"boxcar_job_queue_wait_seconds_count{job_type="sleep"}"#,
        1.0,
    );
    expect(r#"boxcar_jobs_pending{job_type="echo",when="due"}"#, 0.0);
    expect(
        r#"boxcar_jobs_pending{job_type="echo",when="scheduled"}"#,
        1.0,
    );
    expect(r#"boxcar_jobs_pending{job_type="sleep",when="due"}"#, 1.0);
    expect(
        r#"boxcar_jobs_pending{job_type="sleep",when="scheduled"}"#,
        0.0,
    );
    expect(r#"boxcar_jobs_running{job_type="sleep"}"#, 1.0);
    expect(r#"boxcar_handler_deploys_total{job_type="echo"}"#, 1.0);
    expect("boxcar_handler_rejections_total", 1.0);
    for kind in ["memory", "table", "stack"] {
        let slots = format!(r#"boxcar_sandbox_idle_slots{{kind="{kind}"}}"#);
        let bytes = format!(r#"boxcar_sandbox_idle_resident_bytes{{kind="{kind}"}}"#);
        assert!(
            sample(&text, &slots).is_some_and(|n| n <= 16.0) && sample(&text, &bytes).is_some(),
            "{slots} and {bytes} (within the default warm_slots) in:
{text}"
        );
    }
    assert!(
        sample(&text, r#"boxcar_sandbox_idle_slots{kind="memory"}"#).is_some_and(|n| n >= 1.0),
        "the finished echo jobs left a warm memory slot:
{text}"
    );
    expect(
        r#"boxcar_store_round_trip_seconds_count{op="enqueue"}"#,
        10.0,
    );
    for op in ["claim", "complete", "fail"] {
        let series = format!(r#"boxcar_store_round_trip_seconds_count{{op="{op}"}}"#);
        assert!(
            sample(&text, &series).is_some_and(|n| n >= 1.0),
            "{series} in:\n{text}"
        );
    }
    assert!(
        !text.contains("job_id") && !echoes.iter().any(|id| text.contains(id.as_str())),
        "no job ids in labels:\n{text}"
    );
}

/// The promtool to use: `BOXCAR_PROMTOOL`, else `promtool` on `PATH`;
/// `None` (with a printed reason) when there is none, except in CI.
fn promtool() -> Option<String> {
    let candidate = std::env::var("BOXCAR_PROMTOOL")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "promtool".into());
    let found = Command::new(&candidate)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(candidate);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "promtool `{candidate}` is not runnable but CI=true: .ci/run installs it (bash .ci/promtool)"
    );
    eprintln!("skipping: no promtool (set BOXCAR_PROMTOOL=$(bash .ci/promtool) to run this test)");
    None
}

#[test]
fn scraped_metrics_pass_promtool() {
    let Some(promtool) = promtool() else {
        return;
    };
    let env = Env::sqlite();
    env.fast_config("");
    env.deploy("echo", "echo", ECHO);
    env.deploy("trap", "trap", TRAP);
    let serve = env.serve("serve", &[]);
    eventually(Duration::from_secs(60), "two deployed handlers", || {
        (serve.output().matches("handler deployed").count() >= 2).then_some(())
    });
    let echo = enqueue(&serve, r#"{"job_type":"echo","payload":{"a":"b"}}"#);
    let trap = enqueue(&serve, r#"{"job_type":"trap","payload":{}}"#);
    enqueue(&serve, r#"{"job_type":"echo","payload":{},"delay":"1h"}"#);
    wait_done(&serve, &echo);
    wait_done(&serve, &trap);
    let text = until(
        &serve,
        r#"boxcar_job_attempts_total{job_type="trap",outcome="trapped"}"#,
        1.0,
    );
    assert!(text.contains("boxcar_job_run_seconds_bucket{"), "{text}");

    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}\n{}{}\non:\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

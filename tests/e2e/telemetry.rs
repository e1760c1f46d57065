//! The host's own telemetry through the binary: a log redirected to a file
//! carries no escape sequences; `--log-format json` (or `[log] format`)
//! writes JSON lines whose guest lines carry their job's span fields; and
//! with `[otel]` every job run reaches a small OTLP/HTTP receiver as one
//! span in the producer's trace (from the `traceparent` of the enqueue).

use std::{
    io::{Read, Write},
    sync::Arc,
    time::Duration,
};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use parking_lot::Mutex;
use prost::Message;
use serde_json::Value;

use crate::harness::{eventually, Env};

const FLAKY: &str = "[handler]\njob_type = \"flaky\"\ntimeout = \"10s\"\nmax_attempts = 3\n";

/// Serves flaky, runs one job that logs two lines, stops the host
/// gracefully; returns the job's view and the host's whole log.
fn run_one_logging_job(config: &str, serve_args: &[&str]) -> (Value, String) {
    let env = Env::sqlite();
    env.fast_config(config);
    env.deploy("flaky", "flaky", FLAKY);
    let mut serve = env.serve("serve", serve_args);
    serve.wait_for_log("handler deployed", Duration::from_secs(60));
    let id = env
        .ok(&["enqueue", "flaky", r#"{"succeed_on": 1, "log_lines": 2}"#])
        .trim()
        .to_string();
    let job = eventually(Duration::from_secs(60), "the job to succeed", || {
        let job = env.json(&["job", &id]);
        (job["status"] == "succeeded").then_some(job)
    });
    serve.wait_for_log("attempt 1 line 1", Duration::from_secs(10));
    assert!(serve.terminate().success(), "{}", serve.output());
    (job, serve.output())
}

#[test]
fn a_log_written_to_a_file_has_no_escape_sequences() {
    let (job, log) = run_one_logging_job("", &[]);
    assert!(log.contains("attempt 1 line 0"), "{log}");
    assert!(log.contains(job["id"].as_str().expect("id")), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "escape sequences in a log that is not a terminal:\n{log:?}"
    );
}

/// Every line of `log` as a JSON object.
fn json_lines(log: &str) -> Vec<serde_json::Map<String, Value>> {
    log.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| match serde_json::from_str(line) {
            Ok(Value::Object(object)) => object,
            other => panic!("not a JSON object ({other:?}): {line:?}\n--- log ---\n{log}"),
        })
        .collect()
}

#[test]
fn json_log_lines_carry_the_guest_lines_job() {
    let (job, log) = run_one_logging_job("", &["--log-format", "json"]);
    assert!(!log.contains('\u{1b}'), "{log:?}");
    let lines = json_lines(&log);
    let guest: Vec<_> = lines
        .iter()
        .filter(|l| l["target"] == "boxcar::guest")
        .collect();
    assert_eq!(guest.len(), 2, "{log}");
    for (n, line) in guest.iter().enumerate() {
        assert_eq!(line["message"], format!("attempt 1 line {n}"), "{line:?}");
        assert_eq!(line["job_id"], job["id"], "{line:?}");
        assert_eq!(line["job_type"], "flaky", "{line:?}");
        assert_eq!(line["attempt"], 1, "{line:?}");
        assert_eq!(line["digest"], job["handler_version"], "{line:?}");
        assert_eq!(line["level"], "INFO", "{line:?}");
        assert!(
            line["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{line:?}"
        );
    }
    assert!(
        lines.iter().any(|l| l["message"] == "boxcar host started"),
        "the host's own lines are JSON too:\n{log}"
    );
}

#[test]
fn the_configuration_chooses_json_lines() {
    let (job, log) = run_one_logging_job("[log]\nformat = \"json\"\n", &[]);
    let lines = json_lines(&log);
    assert!(
        lines
            .iter()
            .any(|l| l["target"] == "boxcar::guest" && l["job_id"] == job["id"]),
        "{log}"
    );
}

/// A small OTLP/HTTP (protobuf) receiver on a loopback port: it keeps
/// every span posted to `/v1/traces`.
struct Receiver {
    address: std::net::SocketAddr,
    spans: Arc<Mutex<Vec<Span>>>,
    requests: Arc<Mutex<u32>>,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let requests: Arc<Mutex<u32>> = Arc::default();
        let (kept, counted) = (spans.clone(), requests.clone());
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let (kept, counted) = (kept.clone(), counted.clone());
                async move {
                    *counted.lock() += 1;
                    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                        return (axum::http::StatusCode::BAD_REQUEST, Vec::new());
                    };
                    for resource in request.resource_spans {
                        let service = resource
                            .resource
                            .as_ref()
                            .and_then(|r| text(&r.attributes, "service.name"));
                        assert_eq!(service.as_deref(), Some("boxcar-e2e"));
                        for scope in resource.scope_spans {
                            kept.lock().extend(scope.spans);
                        }
                    }
                    (axum::http::StatusCode::OK, Vec::new())
                }
            }),
        );
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let address = listener.local_addr().expect("address");
        runtime.spawn(async move { axum::serve(listener, app).await });
        Self {
            address,
            spans,
            requests,
            _runtime: runtime,
        }
    }
}

fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.clone()),
            _ => None,
        }
    })
}

fn int(attributes: &[KeyValue], key: &str) -> Option<i64> {
    attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            any_value::Value::IntValue(n) => Some(*n),
            _ => None,
        }
    })
}

/// `POST /jobs` with a `traceparent` header (when given); the new job's id.
fn enqueue_traced(address: &str, body: &str, traceparent: Option<&str>) -> String {
    let mut stream = crate::api::connect(address);
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let header = traceparent
        .map(|t| format!("traceparent: {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST /jobs HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Type: application/json\r\n{header}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let value: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    value["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no job id in {response}"))
        .to_string()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn every_job_run_is_one_span_in_the_producers_trace() {
    let receiver = Receiver::start();
    let env = Env::sqlite();
    env.fast_config(&format!(
        "[otel]\nendpoint = \"http://{}\"\nservice_name = \"boxcar-e2e\"\nexport_interval = \"100ms\"\n",
        receiver.address
    ));
    env.deploy("flaky", "flaky", FLAKY);
    let mut serve = env.serve("serve", &[]);
    serve.wait_for_log("handler deployed", Duration::from_secs(60));
    serve.wait_for_log("HTTP API listening", Duration::from_secs(30));

    let (trace_a, span_a) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let (trace_b, span_b) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let twice = enqueue_traced(
        &serve.listen,
        r#"{"job_type": "flaky", "payload": {"succeed_on": 2, "log_lines": 1}}"#,
        Some(&format!("00-{trace_a}-{span_a}-01")),
    );
    let once = enqueue_traced(
        &serve.listen,
        r#"{"job_type": "flaky", "payload": {"succeed_on": 1}}"#,
        Some(&format!("00-{trace_b}-{span_b}-01")),
    );
    let untraced = enqueue_traced(
        &serve.listen,
        r#"{"job_type": "flaky", "payload": {"succeed_on": 1}}"#,
        None,
    );

    let spans = eventually(Duration::from_secs(30), "4 job-run spans", || {
        let spans = receiver.spans.lock().clone();
        (spans.len() >= 4).then_some(spans)
    });
    assert!(
        *receiver.requests.lock() >= 1,
        "spans were exported while the host ran"
    );
    let of = |id: &str| -> Vec<&Span> {
        let mut runs: Vec<&Span> = spans
            .iter()
            .filter(|s| text(&s.attributes, "boxcar.job.id").as_deref() == Some(id))
            .collect();
        runs.sort_by_key(|s| int(&s.attributes, "boxcar.job.attempt"));
        runs
    };

    let runs = of(&twice);
    assert_eq!(runs.len(), 2, "one span per run: {spans:#?}");
    for (n, run) in runs.iter().enumerate() {
        assert_eq!(hex(&run.trace_id), trace_a, "{run:#?}");
        assert_eq!(hex(&run.parent_span_id), span_a, "{run:#?}");
        assert_eq!(
            int(&run.attributes, "boxcar.job.attempt"),
            Some(n as i64 + 1)
        );
        assert_eq!(
            text(&run.attributes, "boxcar.job.type").as_deref(),
            Some("flaky")
        );
        assert!(text(&run.attributes, "boxcar.job.digest").is_some_and(|d| d.len() > 8));
        assert!(run.end_time_unix_nano >= run.start_time_unix_nano);
    }
    assert_eq!(
        text(&runs[0].attributes, "boxcar.job.outcome").as_deref(),
        Some("retried")
    );
    assert!(
        text(&runs[0].attributes, "boxcar.job.error").is_some_and(|e| e.contains("attempt 1 < 2"))
    );
    assert_eq!(
        text(&runs[1].attributes, "boxcar.job.outcome").as_deref(),
        Some("succeeded")
    );
    assert_ne!(runs[0].span_id, runs[1].span_id);

    let runs = of(&once);
    assert_eq!(runs.len(), 1, "{spans:#?}");
    assert_eq!(hex(&runs[0].trace_id), trace_b);
    assert_eq!(hex(&runs[0].parent_span_id), span_b);
    assert_eq!(
        text(&runs[0].attributes, "boxcar.job.outcome").as_deref(),
        Some("succeeded")
    );

    let runs = of(&untraced);
    assert_eq!(runs.len(), 1, "{spans:#?}");
    assert!(
        runs[0].parent_span_id.is_empty(),
        "a job without a traceparent starts its own trace"
    );
    assert_ne!(hex(&runs[0].trace_id), trace_a);
    assert_ne!(hex(&runs[0].trace_id), trace_b);

    assert!(serve.terminate().success(), "{}", serve.output());
    assert_eq!(
        receiver.spans.lock().len(),
        4,
        "no other span is exported: {:#?}",
        receiver.spans.lock()
    );
}

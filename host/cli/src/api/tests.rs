//! Router-level tests: every endpoint through `oneshot`, no server needed.

use std::sync::Arc;

use axum::{
    body::Body,
    http::{header, Method, Request, StatusCode},
    Router,
};
use boxcar_queue::{connect, Queue, QueueOptions, Registry};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{router, AppState, Metrics, MAX_BODY};

pub(super) async fn app(token: Option<&str>) -> (Router, Queue) {
    app_on(None, token).await
}

/// A router over a memory queue that knows type `mail`, as if bound to
/// `listen` (`None`: no socket, the `Host` check is skipped).
pub(super) async fn app_on(
    listen: Option<std::net::SocketAddr>,
    token: Option<&str>,
) -> (Router, Queue) {
    let store = connect("memory://").await.expect("memory store");
    let queue = Queue::new(store, QueueOptions::default()).expect("queue");
    let registry = Registry::new();
    registry.declare_elsewhere(["mail".to_string()]);
    queue.attach_registry(registry.clone());
    let state = AppState {
        queue: queue.clone(),
        registry,
        deployer: None,
        metrics: Arc::new(Metrics::default()),
        token: token.map(str::to_string),
        listen,
    };
    (router(state), queue)
}

pub(super) async fn call(
    app: &Router,
    method: Method,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    call_raw(app, method, uri, body.map(|b| b.to_string()), None).await
}

async fn call_raw(
    app: &Router,
    method: Method,
    uri: &str,
    body: Option<String>,
    token: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(uri);
    if body.is_some() {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(body.map_or_else(Body::empty, Body::from))
        .expect("request");
    respond(app, request).await
}

/// Runs `request` through the router; the status and the body as JSON (or
/// as a JSON string when it is not JSON).
pub(super) async fn respond(app: &Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = app.clone().oneshot(request).await.expect("response");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}

#[tokio::test]
async fn enqueue_get_list_count_cancel_retry() {
    let (app, _queue) = app(None).await;
    let (status, added) = call(
        &app,
        Method::POST,
        "/jobs",
        Some(json!({"job_type": "mail", "payload": {"to": "a"}, "scope": {"type": "account", "id": "1"}, "delay": "1h"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let id = added["id"].as_str().expect("id").to_string();

    let (status, job) = call(&app, Method::GET, &format!("/jobs/{id}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(job["status"], "pending");
    assert_eq!(job["scope"]["id"], "1");
    assert!(job.get("payload").is_none(), "payloads are never echoed");

    let (status, list) = call(
        &app,
        Method::GET,
        "/jobs?status=pending&type=mail&scope=account:1&limit=5",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list.as_array().map(Vec::len), Some(1));

    let (_, counts) = call(&app, Method::GET, "/counts", None).await;
    assert_eq!(counts["pending"], 1);

    let (status, cancelled) = call(
        &app,
        Method::POST,
        &format!("/jobs/{id}/cancel"),
        Some(json!({"reason": "no"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cancelled["cancelled"], true);

    let retry_one = format!("/jobs/{id}/retry");
    let (status, retried) = call(&app, Method::POST, &retry_one, Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(
        retried,
        json!({"id": id, "retried": false}),
        "a cancelled job is not failed"
    );
    let (status, _) = call(&app, Method::POST, &retry_one, Some(json!({"all": true}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "no fields are accepted");
    let (status, missing) = call(&app, Method::POST, "/jobs/nope/retry", Some(json!({}))).await;
    assert_eq!(
        (status, missing["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found")),
        "{missing}"
    );

    call(
        &app,
        Method::POST,
        "/jobs",
        Some(json!({"job_type": "mail", "scope": {"type": "account", "id": "2"}})),
    )
    .await;
    let (status, scoped) = call(
        &app,
        Method::POST,
        "/scopes/account/2/cancel",
        Some(json!({"pending_only": true})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(scoped["cancelled"], 1);

    let (status, retried) = call(
        &app,
        Method::POST,
        "/jobs/retry-failed",
        Some(json!({"types": ["mail"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(retried["retried"], 0);

    let (status, _) = call(&app, Method::GET, "/handlers", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, health) = call(&app, Method::GET, "/healthz", None).await;
    assert_eq!(
        (status, health["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );
    let (status, metrics) = call(&app, Method::GET, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        metrics
            .as_str()
            .is_some_and(|m| m.contains("boxcar_jobs{status=\"cancelled\"} 2")),
        "{metrics}"
    );
    let (status, page) = call(&app, Method::GET, "/", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page
        .as_str()
        .is_some_and(|p| p.contains("<title>boxcar</title>")));
}

#[tokio::test]
async fn wait_returns_the_finished_job_or_a_timeout() {
    let (app, queue) = app(None).await;
    let (_, added) = call(
        &app,
        Method::POST,
        "/jobs",
        Some(json!({"job_type": "mail"})),
    )
    .await;
    let id = added["id"].as_str().expect("id").to_string();
    let (status, error) = call(
        &app,
        Method::GET,
        &format!("/jobs/{id}/wait?timeout=100ms"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(error["error"], "wait_timeout");
    queue.cancel(&id, "done waiting").await.expect("cancel");
    let (status, job) = call(
        &app,
        Method::GET,
        &format!("/jobs/{id}/wait?timeout=1s"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(job["status"], "cancelled");
    let (status, error) = call(&app, Method::GET, "/jobs/nope/wait?timeout=1s", None).await;
    assert_eq!(
        (status, error["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
}

#[tokio::test]
async fn bad_requests_get_json_errors() {
    let (app, _) = app(None).await;
    let (status, error) =
        call_raw(&app, Method::POST, "/jobs", Some("{not json".into()), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["error"], "bad_json");

    let (status, error) = call(
        &app,
        Method::POST,
        "/jobs",
        Some(json!({"job_type": "nobody"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(error["error"], "unknown_job_type");

    let (status, error) = call(
        &app,
        Method::POST,
        "/jobs",
        Some(json!({"job_type": "mail", "payload": [1]})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error["error"], "invalid_job");

    let (status, error) = call(
        &app,
        Method::POST,
        "/jobs",
        Some(json!({"job_type": "mail", "bogus": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");

    let huge =
        json!({"job_type": "mail", "payload": {"blob": "x".repeat(MAX_BODY + 10)}}).to_string();
    let (status, error) = call_raw(&app, Method::POST, "/jobs", Some(huge), None).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{error}");

    let big_payload =
        json!({"job_type": "mail", "payload": {"blob": "x".repeat(1024 * 1024 + 10)}});
    let (status, error) = call(&app, Method::POST, "/jobs", Some(big_payload)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{error}");
    assert_eq!(error["error"], "payload_too_large");

    let (status, error) = call(&app, Method::GET, "/jobs/does-not-exist", None).await;
    assert_eq!(
        (status, error["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (status, _) = call(&app, Method::GET, "/jobs?status=bogus", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn token_is_required_when_configured() {
    let token = "0123456789abcdef0123";
    let (app, _) = app(Some(token)).await;
    let (status, error) = call_raw(&app, Method::GET, "/counts", None, None).await;
    assert_eq!(
        (status, error["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized"))
    );
    let (status, _) = call_raw(
        &app,
        Method::GET,
        "/counts",
        None,
        Some("wrong-token-wrong-token"),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = call_raw(&app, Method::GET, "/counts", None, Some(token)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call_raw(&app, Method::GET, "/healthz", None, None).await;
    assert_eq!(status, StatusCode::OK, "health checks need no token");
}

#[tokio::test]
async fn schedules_are_listed_with_their_next_run() {
    let (app, queue) = app(None).await;
    let mut spec = boxcar_queue::schedule::ScheduleSpec::new(
        "nightly",
        "mail",
        json!({"secret": "not shown"}),
    );
    spec.cron = Some("17 3 * * *".into());
    spec.tz = Some("Europe/Berlin".into());
    let schedule = spec.validate().expect("valid");
    boxcar_queue::Scheduler::new(queue)
        .reconcile("cfg", &[schedule])
        .await
        .expect("reconcile");
    let (status, body) = call(&app, Method::GET, "/schedules", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body[0]["id"], "nightly");
    assert_eq!(body[0]["cron"], "17 3 * * *");
    assert_eq!(body[0]["tz"], "Europe/Berlin");
    assert_eq!(body[0]["owner"], "cfg");
    assert!(body[0]["next_run_at"].is_string(), "{body}");
    assert!(
        !body.to_string().contains("not shown"),
        "no payload: {body}"
    );
}

#[tokio::test]
async fn counts_show_each_pools_occupancy_and_a_blocked_job_says_why() {
    let store = connect("memory://").await.expect("memory store");
    let queue = Queue::new(store.clone(), QueueOptions::default()).expect("queue");
    let registry = Registry::new();
    registry.declare_elsewhere(["mail".to_string()]);
    let mut smtp = boxcar_queue::PoolConfig::new("smtp", ["mail"]);
    smtp.concurrency = Some(1);
    smtp.rate_per_minute = Some(10);
    registry.set_pools(vec![smtp]).expect("pools");
    queue.attach_registry(registry.clone());
    let state = AppState {
        queue: queue.clone(),
        registry: registry.clone(),
        deployer: None,
        metrics: Arc::new(Metrics::default()),
        token: None,
        listen: None,
    };
    let app = router(state);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let added = queue
            .add(boxcar_queue::NewJob::new("mail", &json!({})))
            .await
            .expect("add");
        ids.push(added.id);
    }
    let claimed = store
        .claim_batch(boxcar_queue::store::ClaimParams {
            worker_id: "elsewhere".into(),
            job_type: "mail".into(),
            limit: 1,
            lease: std::time::Duration::from_secs(60),
            handler_version: None,
            guards: registry.guards_for("mail"),
        })
        .await
        .expect("claim");
    assert_eq!(claimed.claimed.len(), 1);
    let (status, counts) = call(&app, Method::GET, "/counts", None).await;
    assert_eq!(status, StatusCode::OK, "{counts}");
    assert_eq!(
        (&counts["pending"], &counts["running"]),
        (&json!(1), &json!(1))
    );
    let pool = &counts["pools"][0];
    assert_eq!(pool["name"], "smtp", "{counts}");
    assert_eq!(pool["occupied"], 1);
    assert_eq!(pool["concurrency"], 1);
    assert_eq!(pool["spent"], 1);
    assert_eq!(pool["budget_left"], 9);
    assert!(pool["window_resets_at"].is_string(), "{counts}");
    let running = &claimed.claimed[0].id;
    let (_, job) = call(&app, Method::GET, &format!("/jobs/{running}"), None).await;
    assert!(job.get("blocked_by").is_none(), "{job}");
    let pending = ids.iter().find(|id| *id != running).expect("pending id");
    let (status, job) = call(&app, Method::GET, &format!("/jobs/{pending}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(job["status"], "pending");
    let why = job["blocked_by"].as_str().unwrap_or_default();
    assert!(why.contains("pool `smtp`"), "{job}");
}

#[tokio::test]
async fn metrics_show_pending_jobs_per_type_due_and_scheduled_apart() {
    let (app, queue) = app(None).await;
    for delay in [None, None, Some(3600)] {
        let mut job = boxcar_queue::NewJob::new("mail", &json!({}));
        if let Some(secs) = delay {
            job = job.delay(std::time::Duration::from_secs(secs));
        }
        queue.add(job).await.expect("add");
    }
    let (status, metrics) = call(&app, Method::GET, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK);
    let text = metrics.as_str().expect("text");
    for line in [
        "boxcar_jobs_pending{job_type=\"mail\",when=\"due\"} 2",
        "boxcar_jobs_pending{job_type=\"mail\",when=\"scheduled\"} 1",
        "boxcar_jobs_running{job_type=\"mail\"} 0",
        "boxcar_store_round_trip_seconds_count{op=\"enqueue\"} 3",
        "# TYPE boxcar_job_run_seconds histogram",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
    }
}

#[tokio::test]
async fn the_traceparent_header_is_stored_on_the_job_and_checked() {
    const PRODUCER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (app, queue) = app(None).await;
    let post = |traceparent: Option<&'static str>, body: Value| {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri("/jobs")
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent);
        }
        request.body(Body::from(body.to_string())).expect("request")
    };
    let (status, body) = respond(&app, post(Some(PRODUCER), json!({"job_type": "mail"}))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_str().expect("id");
    let job = queue.get(id).await.expect("get").expect("stored");
    assert_eq!(job.traceparent.as_deref(), Some(PRODUCER));
    let (_, view) = call(&app, Method::GET, &format!("/jobs/{id}"), None).await;
    assert_eq!(view["traceparent"], PRODUCER);

    let flow = json!({"job_type": "mail", "children": [{"job_type": "mail"}]});
    let (status, body) = respond(&app, post(Some(PRODUCER), flow)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let child = body["children"][0].as_str().expect("child");
    let child = queue.get(child).await.expect("get").expect("stored");
    assert_eq!(
        child.traceparent.as_deref(),
        Some(PRODUCER),
        "children join the trace"
    );

    let (status, body) = respond(&app, post(None, json!({"job_type": "mail"}))).await;
    assert_eq!(status, StatusCode::CREATED);
    let plain = queue
        .get(body["id"].as_str().expect("id"))
        .await
        .expect("get");
    assert_eq!(plain.expect("stored").traceparent, None);

    let before = queue.count_by_status().await.expect("counts").pending;
    for bad in [
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "garbage",
    ] {
        let (status, body) = respond(&app, post(Some(bad), json!({"job_type": "mail"}))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(body["error"], "invalid_traceparent", "{body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains("W3C trace context"), "{message}");
    }
    assert_eq!(
        queue.count_by_status().await.expect("counts").pending,
        before,
        "a refused traceparent writes nothing"
    );
}

/// The status, a header's value and the body text of a GET.
async fn get_text(app: &Router, uri: &str, token: Option<&str>) -> (StatusCode, String, String) {
    let mut request = Request::builder().uri(uri);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).expect("request"))
        .await
        .expect("response");
    let status = response.status();
    let policy = response
        .headers()
        .get(header::CONTENT_SECURITY_POLICY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, policy, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn dashboard_assets_need_no_token_and_forbid_inline_script() {
    let (app, _) = app(Some("0123456789abcdef0123")).await;
    let (status, policy, page) = get_text(&app, "/", None).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(policy.contains("script-src 'self'"), "{policy}");
    assert!(!policy.contains("unsafe-inline"), "{policy}");
    assert!(page.contains(r#"<script src="/dashboard.js" defer></script>"#));
    assert_eq!(
        page.matches("<script").count(),
        1,
        "the page has no inline script"
    );
    assert!(!page.contains("style="), "no inline style either");
    for (asset, marker) in [
        ("/dashboard.js", "sessionStorage"),
        ("/dashboard.css", "font:"),
    ] {
        let (status, policy, body) = get_text(&app, asset, None).await;
        assert_eq!(status, StatusCode::OK, "{asset}");
        assert!(policy.contains("default-src 'none'"), "{asset}: {policy}");
        assert!(body.contains(marker), "{asset}");
    }
    let (status, _, script) = get_text(&app, "/dashboard.js", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        !script.contains("innerHTML"),
        "data is rendered as text only"
    );
    let (status, _, _) = get_text(&app, "/counts/types", None).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "data still needs the token"
    );
}

#[tokio::test]
async fn live_counts_per_type_and_a_payload_on_request() {
    let token = "0123456789abcdef0123";
    let (app, _) = app(Some(token)).await;
    for delay in [None, None, Some("1h")] {
        let mut body = json!({"job_type": "mail", "payload": {"to": "<b>x</b>"}});
        if let Some(delay) = delay {
            body["delay"] = json!(delay);
        }
        let (status, _) = call_raw(
            &app,
            Method::POST,
            "/jobs",
            Some(body.to_string()),
            Some(token),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let (status, types) = call_raw(&app, Method::GET, "/counts/types", None, Some(token)).await;
    assert_eq!(status, StatusCode::OK, "{types}");
    assert_eq!(
        types,
        json!([{"job_type": "mail", "due": 2, "scheduled": 1, "running": 0}])
    );

    let (_, list) = call_raw(&app, Method::GET, "/jobs?limit=1", None, Some(token)).await;
    let id = list[0]["id"].as_str().expect("id").to_string();
    let (status, _) = call_raw(
        &app,
        Method::GET,
        &format!("/jobs/{id}/payload"),
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, payload) = call_raw(
        &app,
        Method::GET,
        &format!("/jobs/{id}/payload"),
        None,
        Some(token),
    )
    .await;
    assert_eq!(
        (status, payload),
        (StatusCode::OK, json!({"to": "<b>x</b>"}))
    );
    let (status, error) =
        call_raw(&app, Method::GET, "/jobs/nope/payload", None, Some(token)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
}

/// schemathesis sent `TRACE /counts` and got `415 json_required`: the
/// browser rules ran before the method was matched. A method no route
/// serves is a `405` naming the served ones, and a path no route serves a
/// `404`, both with the JSON error body.
#[tokio::test]
async fn unserved_methods_and_paths_get_json_errors() {
    let (app, _) = app(Some("0123456789abcdef0123")).await;
    for (method, uri, allow) in [
        ("TRACE", "/counts", "GET,HEAD"),
        ("DELETE", "/jobs/x", "GET,HEAD"),
        ("PUT", "/jobs", "GET,HEAD,POST"),
        ("TRACE", "/healthz", "GET,HEAD"),
    ] {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .expect("request");
        let response = app.clone().oneshot(request).await.expect("response");
        assert_eq!(
            response.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {uri}"
        );
        let mut allowed: Vec<String> = response
            .headers()
            .get(header::ALLOW)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .split(',')
            .map(|m| m.trim().to_string())
            .collect();
        allowed.sort();
        assert_eq!(allowed.join(","), allow, "{method} {uri}");
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let body: Value = serde_json::from_slice(&bytes).expect("a JSON error");
        assert_eq!(body["error"], "method_not_allowed", "{method} {uri}");
    }
    let (status, body) = call(&app, Method::GET, "/jobs/x/nothing", None).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("no_route")),
        "{body}"
    );
}

/// schemathesis against a server on Postgres: a NUL in a filter
/// (`POST /jobs/retry-failed {"types": ["\u0000"]}`, `GET /jobs?scope=a%00:b`)
/// reached Postgres, which refused it, and the API answered `500`. Such
/// text is now refused first (`400`), and a job id holding one is a `404`.
#[tokio::test]
async fn a_nul_in_a_filter_or_id_is_refused_before_the_store() {
    let (app, _) = app(None).await;
    for uri in ["/jobs?type=a%00", "/jobs?scope=a%00:b", "/jobs?parent=%00"] {
        let (status, body) = call(&app, Method::GET, uri, None).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("bad_query")),
            "{uri}: {body}"
        );
    }
    for (uri, body) in [
        ("/jobs/retry-failed", json!({"types": ["\u{0}"]})),
        (
            "/jobs/retry-failed",
            json!({"scope": {"type": "a", "id": "\u{0}"}}),
        ),
        ("/scopes/a/b/cancel", json!({"reason": "\u{0}"})),
    ] {
        let (status, error) = call(&app, Method::POST, uri, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {error}");
    }
    let (status, _) = call(&app, Method::POST, "/scopes/a%00/b/cancel", Some(json!({}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    for uri in [
        "/jobs/a%00",
        "/jobs/a%00/wait?timeout=1ms",
        "/jobs/a%00/attempts",
        "/jobs/a%00/logs",
        "/jobs/a%00/payload",
    ] {
        let (status, body) = call(&app, Method::GET, uri, None).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_found")),
            "{uri}: {body}"
        );
    }
}

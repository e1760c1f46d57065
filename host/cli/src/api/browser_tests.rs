//! Router tests of the browser rules (`browser.rs`) through `oneshot`: each
//! refused case and each allowed one (same origin, no Origin, token).

use axum::{
    body::Body,
    http::{Method, Request, StatusCode},
    Router,
};
use boxcar_queue::{JobStatus, NewJob, Queue};
use serde_json::{json, Value};

use super::tests::{app_on, respond};

const LISTEN: &str = "127.0.0.1:7878";

async fn app(listen: &str, token: Option<&str>) -> (Router, Queue) {
    app_on(Some(listen.parse().expect("address")), token).await
}

/// Sends `method uri` with `headers` (name, value) and an optional body.
async fn send(
    app: &Router,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .expect("request");
    respond(app, request).await
}

/// One request header: (name, value).
type Header = (&'static str, &'static str);

const JSON: Header = ("content-type", "application/json");
const HOST: Header = ("host", LISTEN);

/// A new failed job (and every other pending `mail` job failed with it),
/// so a `retry-failed` that runs changes something visible.
async fn failed_job(queue: &Queue) -> String {
    let id = queue
        .add(NewJob::new("mail", &json!({})))
        .await
        .expect("add")
        .id;
    let claimed = queue
        .store()
        .claim_batch(boxcar_queue::store::ClaimParams {
            worker_id: "w".into(),
            job_type: "mail".into(),
            limit: 100,
            lease: std::time::Duration::from_secs(60),
            handler_version: None,
            guards: boxcar_queue::ClaimGuards::default(),
        })
        .await
        .expect("claim");
    for job in claimed.claimed {
        let failed = queue
            .store()
            .fail(boxcar_queue::store::FailParams {
                worker_id: "w".into(),
                attempt: job.attempts,
                id: job.id,
                error: "boom".into(),
                code: None,
                details: None,
                ending: Default::default(),
            })
            .await
            .expect("fail");
        assert!(failed);
    }
    assert_eq!(status_of(queue, &id).await, JobStatus::Failed);
    id
}

async fn status_of(queue: &Queue, id: &str) -> JobStatus {
    queue.get(id).await.expect("get").expect("job").status
}

#[tokio::test]
async fn a_body_less_cross_origin_retry_failed_is_refused() {
    let (app, queue) = app(LISTEN, None).await;
    let id = failed_job(&queue).await;
    let refused: [(&[Header], StatusCode, &str); 5] = [
        // What a page's <form> or no-cors fetch sends: no JSON content type.
        (
            &[HOST, ("origin", "http://attacker.example")],
            StatusCode::FORBIDDEN,
            "cross_origin",
        ),
        (
            &[HOST, ("sec-fetch-site", "cross-site")],
            StatusCode::FORBIDDEN,
            "cross_origin",
        ),
        // Another port on localhost is same-site, but not same-origin.
        (
            &[HOST, JSON, ("sec-fetch-site", "same-site")],
            StatusCode::FORBIDDEN,
            "cross_origin",
        ),
        (
            &[HOST, JSON, ("origin", "null")],
            StatusCode::FORBIDDEN,
            "cross_origin",
        ),
        (&[HOST], StatusCode::UNSUPPORTED_MEDIA_TYPE, "json_required"),
    ];
    for (headers, status, code) in refused {
        let (got, body) = send(&app, Method::POST, "/jobs/retry-failed", headers, None).await;
        assert_eq!(
            (got, body["error"].as_str()),
            (status, Some(code)),
            "{headers:?}: {body}"
        );
        assert_eq!(
            status_of(&queue, &id).await,
            JobStatus::Failed,
            "a refused request changed nothing ({headers:?})"
        );
    }
    let (status, body) = send(
        &app,
        Method::POST,
        "/jobs/retry-failed",
        &[HOST, ("content-type", "text/plain")],
        Some("{}"),
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
    assert_eq!(status_of(&queue, &id).await, JobStatus::Failed);
}

#[tokio::test]
async fn same_origin_and_non_browser_requests_pass() {
    let (app, queue) = app(LISTEN, None).await;
    for headers in [
        // curl, the CLI, programs: no Origin, no Sec-Fetch-Site.
        vec![HOST, JSON],
        // The API's own page.
        vec![
            HOST,
            ("content-type", "application/json; charset=utf-8"),
            ("origin", "http://127.0.0.1:7878"),
            ("sec-fetch-site", "same-origin"),
        ],
        vec![
            ("host", "localhost:7878"),
            JSON,
            ("origin", "http://localhost:7878"),
        ],
        // A user typing the request into the address bar.
        vec![HOST, JSON, ("sec-fetch-site", "none")],
    ] {
        let id = failed_job(&queue).await;
        let (status, body) = send(&app, Method::POST, "/jobs/retry-failed", &headers, None).await;
        assert_eq!(status, StatusCode::OK, "{headers:?}: {body}");
        assert!(body["retried"].as_u64() >= Some(1), "{headers:?}: {body}");
        assert_eq!(status_of(&queue, &id).await, JobStatus::Pending);
    }
    let (status, _) = send(&app, Method::GET, "/counts", &[HOST], None).await;
    assert_eq!(status, StatusCode::OK, "reads need no content type");
}

#[tokio::test]
async fn on_loopback_only_loopback_host_names_are_served() {
    let (router_on_loopback, _) = app(LISTEN, None).await;
    for host in [
        "attacker.example:7878",
        "attacker.example",
        "127.0.0.1:9999",
        "10.1.2.3:7878",
    ] {
        for (method, uri) in [
            (Method::GET, "/counts"),
            (Method::GET, "/jobs"),
            (Method::POST, "/jobs"),
        ] {
            let (status, body) = send(
                &router_on_loopback,
                method.clone(),
                uri,
                &[("host", host), JSON],
                Some(r#"{"job_type":"mail"}"#),
            )
            .await;
            assert_eq!(
                (status, body["error"].as_str()),
                (StatusCode::FORBIDDEN, Some("host_not_allowed")),
                "{method} {uri} with Host {host}: {body}"
            );
        }
    }
    let (status, _) = send(&router_on_loopback, Method::GET, "/counts", &[], None).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a request without Host is refused"
    );
    for host in ["127.0.0.1:7878", "localhost:7878", "[::1]:7878"] {
        let (status, body) = send(
            &router_on_loopback,
            Method::POST,
            "/jobs",
            &[("host", host), JSON],
            Some(r#"{"job_type":"mail"}"#),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{host}: {body}");
    }

    // Bound off loopback, any Host is served (a token is required there).
    let token = "0123456789abcdef0123";
    let (router_off_loopback, _) = app("0.0.0.0:7878", Some(token)).await;
    let bearer = format!("Bearer {token}");
    let (status, body) = send(
        &router_off_loopback,
        Method::POST,
        "/jobs",
        &[
            ("host", "boxcar.internal:7878"),
            JSON,
            ("authorization", &bearer),
        ],
        Some(r#"{"job_type":"mail"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = send(
        &router_off_loopback,
        Method::POST,
        "/jobs",
        &[
            ("host", "boxcar.internal:7878"),
            ("authorization", &bearer),
            ("origin", "https://evil.example"),
            JSON,
        ],
        Some(r#"{"job_type":"mail"}"#),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("cross_origin")),
        "a token does not make a cross-origin request acceptable: {body}"
    );
}

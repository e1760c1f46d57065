//! The OpenAPI document against the router: the same paths and methods,
//! the same token rule, and the answers of a walk through every route
//! match the documented status codes and body schemas.

use std::collections::BTreeSet;

use axum::{
    body::Body,
    http::{header, Method, Request, StatusCode},
    Router,
};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::{
    asset_routes, json_routes,
    openapi::DOCUMENT,
    tests::{app, respond},
};

fn document() -> Value {
    serde_json::from_str(DOCUMENT).expect("openapi.json is JSON")
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Every `(path, METHOD)` the document describes.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let paths = doc["paths"].as_object().expect("paths");
    paths
        .iter()
        .flat_map(|(path, item)| {
            METHODS
                .iter()
                .filter(|m| item.get(**m).is_some())
                .map(|m| (path.clone(), m.to_uppercase()))
        })
        .collect()
}

/// `path` with each `{param}` replaced by `x`.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|part| if part.starts_with('{') { "x" } else { part })
        .collect::<Vec<_>>()
        .join("/")
}

/// The methods the router serves at `path`, as its `405` names them for a
/// method no route has (HEAD is implied by GET, and left out).
async fn routed_methods(app: &Router, path: &str) -> BTreeSet<String> {
    let probe = Method::from_bytes(b"PROBE").expect("method");
    let request = Request::builder()
        .method(probe)
        .uri(concrete(path))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::empty())
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("response");
    assert_eq!(
        response.status(),
        StatusCode::METHOD_NOT_ALLOWED,
        "{path} is routed"
    );
    let allow = response
        .headers()
        .get(header::ALLOW)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    allow
        .split(',')
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty() && m != "HEAD")
        .collect()
}

#[tokio::test]
async fn the_document_names_exactly_the_routed_paths_and_methods() {
    let doc = document();
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "OpenAPI 3.1"
    );
    let (app, _) = app(None).await;
    let mut routed = BTreeSet::new();
    for (path, _, _) in json_routes() {
        for method in routed_methods(&app, path).await {
            routed.insert((path.to_string(), method));
        }
    }
    assert_eq!(documented(&doc), routed);
    for (asset, _) in asset_routes() {
        assert!(
            doc["paths"].get(asset).is_none(),
            "{asset} is a dashboard asset, not part of the API"
        );
    }
}

#[tokio::test]
async fn the_document_says_which_routes_need_the_token() {
    let doc = document();
    let (app, _) = app(Some("0123456789abcdef0123")).await;
    for (path, method) in documented(&doc) {
        let operation = &doc["paths"][&path][method.to_lowercase()];
        let public = operation["security"] == json!([]);
        let request = Request::builder()
            .method(method.as_str())
            .uri(concrete(&path))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::empty())
            .expect("request");
        let (status, body) = respond(&app, request).await;
        assert_eq!(
            status == StatusCode::UNAUTHORIZED,
            !public,
            "{method} {path}: {status} {body}"
        );
        if !public {
            assert!(
                operation["responses"].get("401").is_some(),
                "{method} {path} documents its 401"
            );
        }
    }
}

#[tokio::test]
async fn the_document_is_served_without_a_token() {
    let (app, _) = app(Some("0123456789abcdef0123")).await;
    let request = Request::builder()
        .uri("/openapi.json")
        .body(Body::empty())
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers().get(header::CONTENT_TYPE),
        Some(&header::HeaderValue::from_static("application/json"))
    );
    let (_, body) = respond(
        &app,
        Request::builder()
            .uri("/openapi.json")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(body, document());
}

/// The documented JSON schema of `METHOD path`'s answer with `status`.
fn response_schema(doc: &Value, path: &str, method: &str, status: StatusCode) -> Value {
    let mut response = &doc["paths"][path][method.to_lowercase()]["responses"][status.as_str()];
    if let Some(reference) = response["$ref"].as_str() {
        let name = reference.trim_start_matches("#/components/responses/");
        response = &doc["components"]["responses"][name];
    }
    let schema = &response["content"]["application/json"]["schema"];
    assert!(
        !schema.is_null(),
        "{method} {path} documents no JSON answer for {status}"
    );
    schema.clone()
}

/// Asserts that `body` is what the document says `METHOD path` answers
/// with `status`.
fn assert_conforms(path: &str, method: &str, status: StatusCode, body: &Value) {
    let doc = document();
    let schema = response_schema(&doc, path, method, status);
    let mut root = doc.clone();
    root["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
    root["allOf"] = json!([schema]);
    let validator = jsonschema::validator_for(&root).expect("the document's schemas compile");
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {path} -> {status}: {body}\n{}",
        errors.join("\n")
    );
}

/// Calls `METHOD uri` (JSON body when given) and checks the answer against
/// the document's `path` entry; returns the body.
async fn checked(
    app: &Router,
    method: Method,
    path: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method.clone()).uri(uri);
    if method == Method::POST {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let request = request
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .expect("request");
    let (status, body) = respond(app, request).await;
    assert_conforms(path, method.as_str(), status, &body);
    (status, body)
}

#[tokio::test]
async fn answers_match_the_documented_schemas() {
    let (app, queue) = app(None).await;
    let (status, added) = checked(
        &app,
        Method::POST,
        "/jobs",
        "/jobs",
        Some(json!({"job_type": "mail", "payload": {"to": "a"}, "scope": {"type": "account", "id": "1"}, "dedupe_key": "k", "delay": "1h", "priority": 3})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let id = added["id"].as_str().expect("id").to_string();
    let (status, _) = checked(
        &app,
        Method::POST,
        "/jobs",
        "/jobs",
        Some(json!({"job_type": "mail", "dedupe_key": "k"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "deduplicated");
    let (status, _) = checked(
        &app,
        Method::POST,
        "/jobs",
        "/jobs",
        Some(json!({"job_type": "mail", "children": [{"job_type": "mail"}]})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "a flow");
    for (body, expected) in [
        (json!({"job_type": "mail", "payload": [1]}), 400),
        (json!({"job_type": "nobody"}), 422),
        (json!({"job_type": "mail", "bogus": 1}), 400),
    ] {
        let (status, _) = checked(&app, Method::POST, "/jobs", "/jobs", Some(body)).await;
        assert_eq!(status.as_u16(), expected);
    }

    let job = format!("/jobs/{id}");
    for (path, uri) in [
        ("/jobs", "/jobs?limit=5&order=newest".to_string()),
        ("/jobs", "/jobs?after=zz".to_string()),
        ("/jobs/{id}", job.clone()),
        ("/jobs/{id}", "/jobs/nope".to_string()),
        ("/jobs/{id}/wait", format!("{job}/wait?timeout=10ms")),
        ("/jobs/{id}/wait", format!("{job}/wait?timeout=soon")),
        ("/jobs/{id}/attempts", format!("{job}/attempts")),
        ("/jobs/{id}/attempts", "/jobs/nope/attempts".to_string()),
        ("/jobs/{id}/logs", format!("{job}/logs")),
        ("/jobs/{id}/logs", format!("{job}/logs?limit=-1")),
        ("/jobs/{id}/payload", format!("{job}/payload")),
        ("/counts", "/counts".to_string()),
        ("/counts/types", "/counts/types".to_string()),
        ("/handlers", "/handlers".to_string()),
        ("/schedules", "/schedules".to_string()),
        ("/healthz", "/healthz".to_string()),
    ] {
        checked(&app, Method::GET, path, &uri, None).await;
    }
    queue.cancel(&id, "done").await.expect("cancel");
    checked(
        &app,
        Method::GET,
        "/jobs/{id}/wait",
        &format!("{job}/wait"),
        None,
    )
    .await;
    for (path, uri, body) in [
        ("/jobs/{id}/cancel", format!("{job}/cancel"), None),
        (
            "/jobs/{id}/cancel",
            "/jobs/nope/cancel".to_string(),
            Some(json!({"reason": "x"})),
        ),
        (
            "/scopes/{scope_type}/{scope_id}/cancel",
            "/scopes/account/1/cancel".to_string(),
            Some(json!({"pending_only": true})),
        ),
        (
            "/jobs/retry-failed",
            "/jobs/retry-failed".to_string(),
            Some(json!({"types": ["mail"], "limit": 5})),
        ),
        (
            "/jobs/retry-failed",
            "/jobs/retry-failed".to_string(),
            Some(json!({"typo": 1})),
        ),
    ] {
        checked(&app, Method::POST, path, &uri, body).await;
    }
}

/// schemathesis read `GET /jobs/{id}/logs?follow=1` of a finished job and
/// found its events did not match the document (which called the stream a
/// string): each event is `{event, data, id?}` with JSON data.
#[tokio::test]
async fn a_followed_log_matches_the_documented_events() {
    let (app, queue) = app(None).await;
    let added = queue
        .add(boxcar_queue::NewJob::new("mail", &json!({})))
        .await
        .expect("add");
    queue.cancel(&added.id, "done").await.expect("cancel");
    let request = Request::builder()
        .uri(format!("/jobs/{}/logs?follow=1", added.id))
        .body(Body::empty())
        .expect("request");
    let response = app.clone().oneshot(request).await.expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers().get(header::CONTENT_TYPE),
        Some(&header::HeaderValue::from_static("text/event-stream"))
    );
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .expect("the stream ends with the job")
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    let events: Vec<Value> = text
        .split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut event = serde_json::Map::new();
            for line in block.lines() {
                if let Some((field, value)) = line.split_once(':') {
                    event.insert(field.into(), value.trim_start().into());
                }
            }
            Value::Object(event)
        })
        .collect();
    assert_eq!(events.len(), 1, "{text}");
    let doc = document();
    let schema = &doc["paths"]["/jobs/{id}/logs"]["get"]["responses"]["200"]["content"]
        ["text/event-stream"]["schema"];
    let validator = jsonschema::validator_for(schema).expect("the event schema compiles");
    for event in &events {
        assert!(validator.is_valid(event), "{event} against {schema}");
        let data: Value = serde_json::from_str(event["data"].as_str().unwrap_or_default())
            .expect("event data is JSON");
        assert_eq!(data, json!({"status": "cancelled"}));
    }
}

//! `POST /jobs/batch`: arrays and NDJSON, one bad item among good ones,
//! the size bound, and the browser rules' content types.

use axum::{
    body::Body,
    http::{header, Method, Request, StatusCode},
};
use boxcar_queue::JobFilter;
use serde_json::{json, Value};

use super::{
    batch::MAX_BATCH,
    tests::{app, call, respond},
};

fn ndjson(lines: &str) -> Request<Body> {
    Request::builder()
        .method(Method::POST)
        .uri("/jobs/batch")
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(Body::from(lines.to_string()))
        .expect("request")
}

#[tokio::test]
async fn an_array_is_enqueued_in_order_and_a_bad_item_keeps_no_other_out() {
    let (app, queue) = app(None).await;
    let body = json!([
        {"job_type": "mail", "payload": {"n": 1}},
        {"job_type": "mail", "payload": {"n": 2}, "dedupe_key": "k"},
        {"job_type": "", "payload": {}},
        {"job_type": "mail", "payload": {"n": 3}, "delay": "ten seconds"},
        {"job_type": "mail", "unknown_field": 1},
        {"job_type": "mail", "children": [{"job_type": "mail"}]},
        {"job_type": "nobody.handles", "payload": {}},
        {"job_type": "mail", "payload": {"n": 4}, "dedupe_key": "k"},
        "not an object",
    ]);
    let (status, answer) = call(&app, Method::POST, "/jobs/batch", Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["added"], 2, "{answer}");
    assert_eq!(answer["deduplicated"], 1, "{answer}");
    assert_eq!(answer["refused"], 6, "{answer}");
    let jobs = answer["jobs"].as_array().expect("jobs");
    let codes: Vec<&str> = jobs
        .iter()
        .map(|j| j["error"].as_str().unwrap_or("ok"))
        .collect();
    assert_eq!(
        codes,
        [
            "ok",
            "ok",
            "invalid_job",
            "invalid_job",
            "invalid_job",
            "invalid_job",
            "unknown_job_type",
            "ok",
            "invalid_job"
        ],
        "{answer}"
    );
    assert_eq!(
        jobs[7]["id"], jobs[1]["id"],
        "the second `k` is deduplicated"
    );
    assert_eq!(jobs[7]["deduplicated"], true);
    let mut mail = JobFilter::default();
    mail.types = vec!["mail".into()];
    let stored = queue.find(&mail).await.expect("find");
    assert_eq!(stored.len(), 2);
    for (job, n) in [(&jobs[0], 1), (&jobs[1], 2)] {
        let id = job["id"].as_str().expect("id");
        let row = stored.iter().find(|j| j.id == id).expect("stored");
        let payload: Value = serde_json::from_str(&row.payload).expect("json");
        assert_eq!(payload["n"], n);
    }
}

#[tokio::test]
async fn every_item_accepted_is_a_201() {
    let (app, _queue) = app(None).await;
    let body = json!([{"job_type": "mail"}, {"job_type": "mail", "payload": {"a": 1}}]);
    let (status, answer) = call(&app, Method::POST, "/jobs/batch", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["added"], 2);
    assert_eq!(answer["refused"], 0);
}

#[tokio::test]
async fn ndjson_lines_are_items_and_blank_lines_are_skipped() {
    let (app, queue) = app(None).await;
    let lines = "{\"job_type\": \"mail\", \"payload\": {\"n\": 1}}\n\n\
                 {\"job_type\": \"mail\", \"payload\": {\"n\": 2}}\r\n\
                 {not json\n\
                 {\"job_type\": \"mail\"}";
    let (status, answer) = respond(&app, ndjson(lines)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["added"], 3, "{answer}");
    assert_eq!(answer["jobs"][2]["error"], "bad_json", "{answer}");
    let mut mail = JobFilter::default();
    mail.types = vec!["mail".into()];
    assert_eq!(queue.find(&mail).await.expect("find").len(), 3);
}

#[tokio::test]
async fn a_batch_over_the_bound_or_not_an_array_is_refused_whole() {
    let (app, queue) = app(None).await;
    let too_many = Value::Array(vec![json!({"job_type": "mail"}); MAX_BATCH + 1]);
    let (status, answer) = call(&app, Method::POST, "/jobs/batch", Some(too_many)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["error"], "batch_too_large");
    let (status, answer) = call(
        &app,
        Method::POST,
        "/jobs/batch",
        Some(json!({"job_type": "mail"})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["error"], "bad_json");
    let (status, answer) = respond(&app, ndjson("\u{0}\u{ff}")).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["refused"], 1, "{answer}");
    let mut mail = JobFilter::default();
    mail.types = vec!["mail".into()];
    assert!(queue.find(&mail).await.expect("find").is_empty());
}

#[tokio::test]
async fn a_batch_needs_a_json_or_ndjson_content_type() {
    let (app, _queue) = app(None).await;
    let request = Request::builder()
        .method(Method::POST)
        .uri("/jobs/batch")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from("{\"job_type\": \"mail\"}"))
        .expect("request");
    let (status, answer) = respond(&app, request).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{answer}");
    assert_eq!(answer["error"], "json_required");
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_json_413() {
    let (app, _queue) = app(None).await;
    let big = format!("[{}]", "0,".repeat(super::MAX_BODY / 2 + 1) + "0");
    let request = Request::builder()
        .method(Method::POST)
        .uri("/jobs/batch")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(big))
        .expect("request");
    let (status, answer) = respond(&app, request).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
    assert_eq!(answer["error"], "body_too_large", "{answer}");
}

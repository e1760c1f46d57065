//! The jobs list over HTTP: pages by cursor in both orders, every job
//! once; a malformed cursor or order is a `400` with a clear message.

use axum::http::{Method, StatusCode};
use serde_json::json;

use super::tests::{app, call};

#[tokio::test]
async fn the_jobs_list_pages_by_cursor() {
    let (app, _queue) = app(None).await;
    let mut ids = Vec::new();
    for n in 0..5 {
        let (status, added) = call(
            &app,
            Method::POST,
            "/jobs",
            Some(json!({"job_type": "mail", "payload": {"n": n}})),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{added}");
        ids.push(added["id"].as_str().expect("id").to_string());
    }
    for (order, expected) in [
        ("oldest", ids.clone()),
        ("newest", ids.iter().rev().cloned().collect()),
    ] {
        let mut seen = Vec::new();
        let mut uri = format!("/jobs?type=mail&limit=2&order={order}");
        loop {
            let (status, page) = call(&app, Method::GET, &uri, None).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            let page = page.as_array().expect("a list").clone();
            seen.extend(
                page.iter()
                    .map(|j| j["id"].as_str().expect("id").to_string()),
            );
            if page.len() < 2 {
                break;
            }
            let cursor = page[1]["cursor"].as_str().expect("each job has its cursor");
            uri = format!("/jobs?type=mail&limit=2&order={order}&after={cursor}");
        }
        assert_eq!(seen, expected, "{order} first, every job once");
    }
    for bad in ["nothex", "3a", "zz", ""] {
        let (status, error) = call(&app, Method::GET, &format!("/jobs?after={bad}"), None).await;
        assert_eq!(
            (status, error["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some("bad_cursor")),
            "{bad}: {error}"
        );
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("malformed cursor")),
            "{error}"
        );
    }
    let (status, error) = call(&app, Method::GET, "/jobs?order=sideways", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
}

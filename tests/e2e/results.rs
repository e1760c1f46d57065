//! Results and errors that cross the hop: typed declarations
//! shared by a Rust producer and a Rust guest, terminal error codes and
//! details seen by every kind of waiter, expiry before the first start, and
//! progress visible while a job runs.

use std::time::Duration;

use boxcar_example_jobs::{Review, ReviewOutcome, ReviewRequest, CONTENT_REFUSED, REFUSED_WORD};
use boxcar_jobs::{TypedEnqueueError, TypedQueue, TypedWaitError};
use boxcar_queue::{
    connect, EnqueueError, HandlerEventKind, Queue, QueueError, QueueOptions, Registry,
};
use serde_json::json;

use crate::{
    api::http,
    harness::{describe, eventually, Env},
};

boxcar_jobs::declare_job! {
    /// A type no handler serves and no configuration declares.
    Nobody = "nobody.handles.this", payload: ReviewRequest, output: ReviewOutcome
}

const REVIEW: &str = "[handler]\njob_type = \"typed-review\"\ntimeout = \"10s\"\n";

/// A producer-side queue on the test's database that knows the types
/// deployed anywhere (as `boxcar enqueue` does).
async fn producer(env: &Env) -> Queue {
    let store = connect(&env.db).await.expect("connect");
    let queue = Queue::new(store, QueueOptions::default()).expect("queue");
    let registry = Registry::new();
    let deployed = queue.handler_events(1000).await.expect("events");
    registry.declare_elsewhere(
        deployed
            .iter()
            .filter(|e| e.kind == HandlerEventKind::Deployed)
            .filter_map(|e| e.job_type.clone()),
    );
    queue.attach_registry(registry);
    queue
}

#[test]
fn a_typed_declaration_serves_producer_and_guest() {
    let env = Env::sqlite();
    env.fast_config("");
    env.deploy("typed-review", "typed-review", REVIEW);
    let serve = env.serve("serve", &[]);
    serve.wait_for_log("handler deployed", Duration::from_secs(60));

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let queue = producer(&env).await;
        let wait = Duration::from_secs(30);

        let added = queue
            .enqueue_typed::<Review>(&ReviewRequest {
                text: "typed all the way".into(),
            })
            .await
            .expect("enqueue");
        let outcome: ReviewOutcome = queue
            .wait_typed::<Review>(&added.id, wait)
            .await
            .expect("result");
        assert_eq!(
            outcome,
            ReviewOutcome {
                words: 4,
                shouted: "TYPED ALL THE WAY".into()
            }
        );

        let refused = queue
            .enqueue_typed::<Review>(&ReviewRequest {
                text: format!("a {REFUSED_WORD} word"),
            })
            .await
            .expect("enqueue");
        match queue.wait_typed::<Review>(&refused.id, wait).await {
            Err(TypedWaitError::Failed {
                message,
                code,
                details,
                ..
            }) => {
                assert_eq!(message, "the text contains a refused word");
                assert_eq!(code.as_deref(), Some(CONTENT_REFUSED));
                assert_eq!(details, Some(json!({"word": REFUSED_WORD})));
            }
            other => panic!("expected a coded failure, got {other:?}"),
        }

        match queue
            .enqueue_typed::<Nobody>(&ReviewRequest { text: "x".into() })
            .await
        {
            Err(TypedEnqueueError::Queue(QueueError::Enqueue(EnqueueError::UnknownJobType {
                job_type,
            }))) => assert_eq!(job_type, "nobody.handles.this"),
            other => panic!("expected UnknownJobType, got {other:?}"),
        }
    });
}

#[test]
fn error_code_and_details_reach_cli_and_http_waiters() {
    let env = Env::sqlite();
    env.fast_config("");
    env.deploy("typed-review", "typed-review", REVIEW);
    let serve = env.serve("serve", &[]);
    serve.wait_for_log("handler deployed", Duration::from_secs(60));
    let payload = format!(r#"{{"text": "{REFUSED_WORD} text"}}"#);

    let output = env.run(&["--json", "enqueue", "typed-review", &payload, "--wait"]);
    assert_eq!(output.status.code(), Some(3), "{}", describe(&output));
    let job: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("JSON job on stdout");
    assert_eq!(job["status"], "failed");
    assert_eq!(job["last_error"], "the text contains a refused word");
    assert_eq!(job["error_code"], CONTENT_REFUSED);
    assert_eq!(job["error_details"], json!({"word": REFUSED_WORD}));

    let human = env.run(&["enqueue", "typed-review", &payload, "--wait"]);
    assert_eq!(human.status.code(), Some(3), "{}", describe(&human));
    assert!(
        String::from_utf8_lossy(&human.stderr).contains("(code content-refused)"),
        "{}",
        describe(&human)
    );

    let id = env
        .ok(&["enqueue", "typed-review", &payload])
        .trim()
        .to_string();
    let (status, body) = http(
        &serve.listen,
        "GET",
        &format!("/jobs/{id}/wait?timeout=20s"),
        None,
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "failed");
    assert_eq!(body["error_code"], CONTENT_REFUSED);
    assert_eq!(body["error_details"], json!({"word": REFUSED_WORD}));
}

#[test]
fn a_job_past_its_ttl_before_any_worker_expires_without_running() {
    let env = Env::sqlite();
    env.fast_config("handled_elsewhere = [\"echo\"]");
    let id = env
        .ok(&["enqueue", "echo", r#"{"n": 1}"#, "--ttl", "1s"])
        .trim()
        .to_string();
    std::thread::sleep(Duration::from_secs(2));
    env.deploy(
        "echo",
        "echo",
        "[handler]\njob_type = \"echo\"\ntimeout = \"10s\"\n",
    );
    let serve = env.serve("serve", &[]);
    serve.wait_for_log("handler deployed", Duration::from_secs(60));
    let job = eventually(Duration::from_secs(20), "the job to expire", || {
        let job = env.json(&["job", &id]);
        (job["status"] != "pending").then_some(job)
    });
    assert_eq!(job["status"], "failed", "{job}");
    assert!(
        job["last_error"]
            .as_str()
            .is_some_and(|e| e.starts_with("expired")),
        "{job}"
    );
    assert_eq!(job["attempts"], 0, "the handler never ran: {job}");
    assert!(job["started_at"].is_null(), "the handler never ran: {job}");
    assert!(job["result"].is_null(), "{job}");
}

#[test]
fn progress_is_visible_from_cli_and_api_while_the_job_runs() {
    let env = Env::sqlite();
    env.fast_config("");
    env.deploy(
        "progress",
        "progress",
        "[handler]\njob_type = \"progress\"\ntimeout = \"60s\"\n",
    );
    let serve = env.serve("serve", &[]);
    serve.wait_for_log("handler deployed", Duration::from_secs(60));
    let id = env
        .ok(&["enqueue", "progress", r#"{"steps": 40, "step_ms": 250}"#])
        .trim()
        .to_string();
    let seen = eventually(
        Duration::from_secs(20),
        "progress past step 2 (CLI)",
        || {
            let job = env.json(&["job", &id]);
            (job["status"] == "running" && job["progress"]["done"].as_u64() >= Some(2))
                .then_some(job)
        },
    );
    assert_eq!(seen["progress"]["of"], 40, "{seen}");
    let later = eventually(Duration::from_secs(20), "progress to advance (API)", || {
        let (status, job) = http(&serve.listen, "GET", &format!("/jobs/{id}"), None, None);
        assert_eq!(status, 200, "{job}");
        (job["status"] == "running"
            && job["progress"]["done"].as_u64() > seen["progress"]["done"].as_u64())
        .then_some(job)
    });
    assert_eq!(later["progress"]["of"], 40, "{later}");
    env.ok(&["cancel", "--id", &id]);
}

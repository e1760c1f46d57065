//! Python and JavaScript handlers through the real binary: hot-deployed by
//! dropping files, run by the engine with retries, and held to their HTTP
//! grants — a request to a host the manifest does not list fails the job
//! terminally, never reaches the host, and is in the serve log.
//!
//! The components exist only when `boxcar-examples` found componentize-py
//! and componentize-js at build time: without them this test prints why and
//! passes, unless `CI=true`.

use std::io::Read;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::harness::{describe, eventually, Env};

fn built(job_type: &str) -> bool {
    if boxcar_examples::has(job_type) {
        return true;
    }
    let why = format!(
        "`{job_type}` was not built (componentize-py / componentize-js missing at build time)"
    );
    assert!(
        !std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1"),
        "CI=true: {why}"
    );
    eprintln!("SKIP {why}");
    false
}

/// A listener that counts connections and answers nothing useful.
fn counting_listener() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let origin = format!("http://{}", listener.local_addr().expect("addr"));
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            seen.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 1024];
            let _ = (&stream).read(&mut buf);
        }
    });
    (origin, count)
}

#[test]
fn python_and_javascript_handlers_deploy_retry_and_keep_to_their_grants() {
    if !built("py.fetch-title") || !built("js.flaky") {
        return;
    }
    let env = Env::sqlite();
    env.fast_config("");
    let (other_origin, other_hits) = counting_listener();
    env.deploy(
        "js-flaky",
        "js.flaky",
        "[handler]\njob_type = \"js.flaky\"\ntimeout = \"10s\"\nmax_attempts = 3\n[limits]\nmemory = \"256MiB\"\n",
    );
    env.deploy(
        "py-fetch-title",
        "py.fetch-title",
        "[handler]\njob_type = \"py.fetch-title\"\ntimeout = \"10s\"\n[limits]\nmemory = \"256MiB\"\n[capabilities]\nhttp = [\"http://127.0.0.1:9\"]\n",
    );
    let serve = env.serve("serve", &[]);
    // Compiling the two interpreters takes a while in a debug host.
    eventually(Duration::from_secs(180), "both handlers deployed", || {
        (serve.output().matches("handler deployed").count() >= 2).then_some(())
    });

    // JavaScript: fails its first attempt asking for 300 ms, then succeeds.
    let output = env.run(&[
        "--json",
        "enqueue",
        "js.flaky",
        r#"{"succeed_on": 2, "retry_after_ms": 300}"#,
        "--wait",
        "--timeout",
        "30s",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let job: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON job");
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["attempts"], 2, "{job}");
    assert_eq!(job["result"], serde_json::json!({"attempt": 2}), "{job}");

    // Python: a host not on the list is refused before any connection.
    let payload = format!(r#"{{"url": "{other_origin}/title"}}"#);
    let output = env.run(&["--json", "enqueue", "py.fetch-title", &payload, "--wait"]);
    assert_eq!(output.status.code(), Some(3), "{}", describe(&output));
    let job: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON job");
    assert_eq!(job["status"], "failed", "{job}");
    assert_eq!(job["error_code"], "http-refused", "{job}");
    assert_eq!(job["attempts"], 1, "terminal: no retry: {job}");
    assert_eq!(
        other_hits.load(Ordering::SeqCst),
        0,
        "the refused host saw a connection"
    );
    let port = other_origin.rsplit(':').next().expect("port");
    eventually(
        Duration::from_secs(5),
        "the refusal in the serve log",
        || {
            serve
                .output()
                .lines()
                .any(|l| l.contains("refused") && l.contains(port))
                .then_some(())
        },
    );
}

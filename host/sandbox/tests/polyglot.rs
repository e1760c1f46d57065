//! The Python (componentize-py) and JavaScript (componentize-js) example
//! handlers run in the sandbox like the Rust ones: echo succeeds, flaky is
//! retryable with its retry-after, refuse is terminal with code and details,
//! fanout's logs, progress and enqueues reach the host (and a type outside
//! `may_enqueue` is refused), spin is stopped at its deadline, fetch-title's
//! HTTP helper reaches an allowed local server while a disallowed one — asked
//! directly or through a redirect — is refused before any connection. Also prints
//! (does not assert) the per-job instantiate + call time of the echo
//! handlers.
//!
//! The examples exist only when `boxcar-examples` found the toolchains at
//! build time; otherwise each test prints why it skips and passes — unless
//! `CI=true`, where a missing example fails.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use boxcar_queue::{
    ChildJobRequest, ChildSummary, Handler, JobContext, JobRun, JobServices, ServiceError,
};
use boxcar_sandbox::{Capabilities, HandlerLimits, LoadedHandler, Outcome, Sandbox, SandboxConfig};
use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

#[path = "support/http_server.rs"]
mod http_server;
use http_server::{assert_refused, http_caps, TestServer};

/// Compiling a 12–20 MB guest uses every core, and the spin test measures
/// a deadline: loads and timing-sensitive runs take this lock.
static CPU: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Clone, Copy, Debug)]
enum Lang {
    Python,
    Js,
}

impl Lang {
    fn prefix(self) -> &'static str {
        match self {
            Lang::Python => "py",
            Lang::Js => "js",
        }
    }
    fn tool(self) -> &'static str {
        match self {
            Lang::Python => "componentize-py (pip install componentize-py==0.25.1)",
            Lang::Js => "componentize-js (npm ci --prefix example-handlers/js)",
        }
    }
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        Sandbox::new(SandboxConfig {
            cache_dir: Some(
                std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("sandbox-cache"),
            ),
            ..SandboxConfig::default()
        })
        .expect("sandbox builds")
    })
}

/// The limits the examples' manifests ask for (`memory = "256MiB"`).
fn limits() -> HandlerLimits {
    HandlerLimits {
        memory: 256 << 20,
        ..HandlerLimits::default()
    }
}

/// Loads `<lang>.<name>` (compiled once per test binary, cached on disk), or
/// `None` with a printed reason when it was not built. Panics in CI.
async fn example(lang: Lang, name: &str) -> Option<Arc<LoadedHandler>> {
    example_with(lang, name, Capabilities::default()).await
}

/// True when `job_type` was built; otherwise prints why not (panics in CI).
fn built(lang: Lang, job_type: &str) -> bool {
    if !boxcar_examples::has(job_type) {
        let why = format!(
            "`{job_type}` was not built: {} was not found when boxcar-examples was built \
             (see its cargo warnings)",
            lang.tool()
        );
        assert!(!in_ci(), "CI=true: {why}");
        eprintln!("SKIP {why}");
        return false;
    }
    true
}

/// Loads `job_type` with `caps`, not memoised (the compiled code comes from
/// the on-disk cache after the first load).
async fn load_fresh(job_type: &str, caps: Capabilities) -> Arc<LoadedHandler> {
    let _cpu = CPU.lock().await;
    let bytes = boxcar_examples::bytes(job_type);
    sandbox()
        .load(&bytes, limits(), caps)
        .unwrap_or_else(|e| panic!("{job_type} loads: {e}"))
}

/// [`example`] with capabilities (memoised per name, so one set per name).
async fn example_with(lang: Lang, name: &str, caps: Capabilities) -> Option<Arc<LoadedHandler>> {
    let job_type = format!("{}.{name}", lang.prefix());
    if !built(lang, &job_type) {
        return None;
    }
    static LOADED: OnceLock<Mutex<HashMap<String, Arc<LoadedHandler>>>> = OnceLock::new();
    let map = LOADED.get_or_init(Default::default);
    if let Some(h) = map.lock().expect("lock").get(&job_type) {
        return Some(Arc::clone(h));
    }
    let _cpu = CPU.lock().await;
    if let Some(h) = map.lock().expect("lock").get(&job_type) {
        return Some(Arc::clone(h));
    }
    let bytes = boxcar_examples::bytes(&job_type);
    let started = Instant::now();
    let handler = sandbox()
        .load(&bytes, limits(), caps)
        .unwrap_or_else(|e| panic!("{job_type} loads: {e}"));
    eprintln!(
        "loaded {job_type} ({:.1} MB) in {:.2?} (compile or cache hit)",
        bytes.len() as f64 / 1e6,
        started.elapsed()
    );
    map.lock()
        .expect("lock")
        .insert(job_type, Arc::clone(&handler));
    Some(handler)
}

fn job(job_type: &str, payload: &str, timeout: Duration) -> JobRun {
    JobRun {
        id: "job-1".into(),
        job_type: job_type.into(),
        payload: payload.into(),
        attempt: 1,
        max_attempts: 3,
        scope: None,
        schedule_id: None,
        parent_id: None,
        deadline: chrono::Utc::now() + chrono::Duration::from_std(timeout).expect("timeout fits"),
    }
}

/// Services that accept everything and record nothing.
struct Quiet;

impl JobServices for Quiet {
    fn progress(&self, _json: String) -> BoxFuture<'_, Result<(), ServiceError>> {
        Box::pin(async { Ok(()) })
    }
    fn enqueue(&self, _request: ChildJobRequest) -> BoxFuture<'_, Result<String, ServiceError>> {
        Box::pin(async { Ok("child-1".to_string()) })
    }
    fn children(&self) -> BoxFuture<'_, Result<Vec<ChildSummary>, ServiceError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// Records what a job asked of the host.
#[derive(Default)]
struct Recorder {
    enqueued: Mutex<Vec<ChildJobRequest>>,
    progress: Mutex<Vec<String>>,
    /// Refuses other types with `NotAllowed`, as the queue's services do
    /// for types outside `may_enqueue` (the sandbox forwards every call).
    may_enqueue: Vec<String>,
}

impl JobServices for Recorder {
    fn progress(&self, json: String) -> BoxFuture<'_, Result<(), ServiceError>> {
        self.progress.lock().expect("lock").push(json);
        Box::pin(async { Ok(()) })
    }
    fn enqueue(&self, request: ChildJobRequest) -> BoxFuture<'_, Result<String, ServiceError>> {
        if !self.may_enqueue.contains(&request.job_type) {
            return Box::pin(async move { Err(ServiceError::NotAllowed(request.job_type)) });
        }
        let mut all = self.enqueued.lock().expect("lock");
        all.push(request);
        let id = format!("child-{}", all.len());
        Box::pin(async move { Ok(id) })
    }
    fn children(&self) -> BoxFuture<'_, Result<Vec<ChildSummary>, ServiceError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

fn ctx() -> JobContext {
    JobContext {
        cancel: CancellationToken::new(),
        services: Arc::new(Quiet),
        record: Arc::new(boxcar_queue::RunRecord::new("job-1", 1)),
    }
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

async fn echo_returns_its_payload(lang: Lang) {
    let Some(echo) = example(lang, "echo").await else {
        return;
    };
    let job_type = format!("{}.echo", lang.prefix());
    let payload = r#"{"a":[1,2,3],"b":{"c":"d"},"s":"héllo \"quoted\""}"#;
    let outcome = echo
        .run(job(&job_type, payload, Duration::from_secs(10)), ctx())
        .await;
    match outcome {
        Outcome::Succeeded {
            result: Some(result),
        } => assert_eq!(parse(&result), parse(payload)),
        other => panic!("{job_type}: expected Succeeded with a result, got {other:?}"),
    }
    // An uncaught exception (here: the SDK parsing a payload that is not
    // JSON, which the queue would never enqueue) is a crash: retryable,
    // consuming an attempt, naming the exception type.
    let outcome = echo
        .run(job(&job_type, "not json", Duration::from_secs(10)), ctx())
        .await;
    match outcome {
        Outcome::Retryable {
            message,
            retry_after: None,
            consumes_attempt: true,
        } => {
            let expected = match lang {
                Lang::Python => "JSONDecodeError",
                Lang::Js => "SyntaxError",
            };
            assert!(message.contains(expected), "{job_type}: {message}");
        }
        other => panic!("{job_type}: expected a retryable crash, got {other:?}"),
    }
    // Through the queue's Handler trait too.
    let outcome =
        Handler::handle(&*echo, job(&job_type, "{}", Duration::from_secs(10)), ctx()).await;
    assert_eq!(
        outcome,
        Outcome::Succeeded {
            result: Some("{}".into())
        },
        "{job_type}"
    );
}

async fn flaky_retries_with_retry_after(lang: Lang) {
    let Some(flaky) = example(lang, "flaky").await else {
        return;
    };
    let job_type = format!("{}.flaky", lang.prefix());
    let payload = r#"{"succeed_on": 3, "retry_after_ms": 100}"#;
    let outcome = flaky
        .run(job(&job_type, payload, Duration::from_secs(10)), ctx())
        .await;
    match outcome {
        Outcome::Retryable {
            message,
            retry_after,
            consumes_attempt,
        } => {
            assert!(message.contains("attempt 1"), "{job_type}: {message}");
            assert_eq!(retry_after, Some(Duration::from_millis(100)), "{job_type}");
            assert!(consumes_attempt, "{job_type}");
        }
        other => panic!("{job_type}: expected Retryable, got {other:?}"),
    }
    // keep_attempt gives the attempt back; no retry_after means none.
    let payload_keep = r#"{"succeed_on": 3, "keep_attempt": true}"#;
    let outcome = flaky
        .run(job(&job_type, payload_keep, Duration::from_secs(10)), ctx())
        .await;
    assert!(
        matches!(
            outcome,
            Outcome::Retryable {
                retry_after: None,
                consumes_attempt: false,
                ..
            }
        ),
        "{job_type}: {outcome:?}"
    );
    // The attempt it was told to succeed on succeeds.
    let mut third = job(&job_type, payload, Duration::from_secs(10));
    third.attempt = 3;
    match flaky.run(third, ctx()).await {
        Outcome::Succeeded {
            result: Some(result),
        } => {
            assert_eq!(parse(&result), json!({"attempt": 3}), "{job_type}");
        }
        other => panic!("{job_type}: expected Succeeded on attempt 3, got {other:?}"),
    }
}

async fn refuse_is_terminal_with_code_and_details(lang: Lang) {
    let Some(refuse) = example(lang, "refuse").await else {
        return;
    };
    let job_type = format!("{}.refuse", lang.prefix());
    let outcome = refuse
        .run(
            job(&job_type, r#"{"reason": "nsfw"}"#, Duration::from_secs(10)),
            ctx(),
        )
        .await;
    match outcome {
        Outcome::Terminal {
            message,
            code,
            details,
        } => {
            assert!(message.contains("nsfw"), "{job_type}: {message}");
            assert_eq!(code.as_deref(), Some("content-refused"), "{job_type}");
            let details = parse(details.as_deref().expect("details present"));
            assert_eq!(
                details,
                json!({"reason": "nsfw", "job_type": job_type, "attempt": 1}),
                "{job_type}"
            );
        }
        other => panic!("{job_type}: expected Terminal, got {other:?}"),
    }
}

async fn fanout_uses_the_host_interface(lang: Lang) {
    let echo_type = format!("{}.echo", lang.prefix());
    let Some(fanout) = example_with(lang, "fanout", Capabilities::default()).await else {
        return;
    };
    let job_type = format!("{}.fanout", lang.prefix());
    let recorder = Arc::new(Recorder {
        may_enqueue: vec![echo_type.clone()],
        ..Recorder::default()
    });
    let ctx = JobContext {
        cancel: CancellationToken::new(),
        services: recorder.clone(),
        record: Arc::new(boxcar_queue::RunRecord::new("job-1", 1)),
    };
    let payload = r#"{"count": 2, "delay_ms": 50}"#;
    let outcome = fanout
        .run(job(&job_type, payload, Duration::from_secs(10)), ctx)
        .await;
    match outcome {
        Outcome::Succeeded {
            result: Some(result),
        } => assert_eq!(
            parse(&result),
            json!({"ids": ["child-1", "child-2"], "children": 0, "refused": "not-allowed"}),
            "{job_type}"
        ),
        other => panic!("{job_type}: expected Succeeded, got {other:?}"),
    }
    let enqueued = recorder.enqueued.lock().expect("lock");
    assert_eq!(
        enqueued.len(),
        2,
        "{job_type}: the refused type never reaches the services"
    );
    for (i, request) in enqueued.iter().enumerate() {
        assert_eq!(request.job_type, echo_type);
        assert_eq!(
            parse(&request.payload),
            json!({"n": i, "parent": "job-1"}),
            "{job_type}"
        );
        assert_eq!(
            request.dedupe_key.as_deref(),
            Some(format!("fanout-job-1-{i}").as_str())
        );
        assert_eq!(request.delay, Some(Duration::from_millis(50)), "{job_type}");
        assert_eq!(request.priority, Some(5), "{job_type}");
        assert_eq!(request.max_attempts, Some(2), "{job_type}");
        assert!(request.scope.is_none(), "{job_type}");
    }
    let progress: Vec<Value> = recorder
        .progress
        .lock()
        .expect("lock")
        .iter()
        .map(|p| parse(p))
        .collect();
    assert_eq!(
        progress,
        vec![
            json!({"enqueued": 1, "of": 2}),
            json!({"enqueued": 2, "of": 2})
        ],
        "{job_type}"
    );
}

async fn spin_times_out_at_200ms(lang: Lang) {
    let Some(spin) = example(lang, "spin").await else {
        return;
    };
    let job_type = format!("{}.spin", lang.prefix());
    // Loaded before taking the CPU lock (loading takes it too).
    let echo = example(lang, "echo").await;
    let _cpu = CPU.lock().await;
    let started = Instant::now();
    let outcome = spin
        .run(job(&job_type, "{}", Duration::from_millis(200)), ctx())
        .await;
    let took = started.elapsed();
    eprintln!("{job_type}: stopped {took:?} after start (deadline 200 ms)");
    assert_eq!(outcome, Outcome::TimedOut, "{job_type}");
    assert!(
        took >= Duration::from_millis(195),
        "{job_type}: stopped early, {took:?}"
    );
    assert!(
        took < Duration::from_millis(300),
        "{job_type}: took {took:?}"
    );
    // The host is fine afterwards.
    if let Some(echo) = echo {
        let outcome = echo
            .run(
                job(
                    &format!("{}.echo", lang.prefix()),
                    "{}",
                    Duration::from_secs(10),
                ),
                ctx(),
            )
            .await;
        assert_eq!(
            outcome,
            Outcome::Succeeded {
                result: Some("{}".into())
            }
        );
    }
}

async fn fetch_title_obeys_the_allow_list(lang: Lang) {
    let job_type = format!("{}.fetch-title", lang.prefix());
    if !built(lang, &job_type) {
        return;
    }
    let allowed = TestServer::start().await;
    let other = TestServer::start().await;
    let h = load_fresh(&job_type, http_caps(&[allowed.origin()])).await;
    let fetch = |url: String| {
        let payload = json!({ "url": url }).to_string();
        job(&job_type, &payload, Duration::from_secs(10))
    };

    // An allowed host answers.
    let outcome = h.run(fetch(allowed.url("/title")), ctx()).await;
    match &outcome {
        Outcome::Succeeded {
            result: Some(result),
        } => {
            let result = parse(result);
            assert_eq!(result["title"], "Hello boxcar", "{job_type}");
            assert_eq!(result["status"], 200, "{job_type}");
        }
        other => panic!("{job_type}: expected the page title, got {other:?}"),
    }
    assert_eq!(allowed.accepted(), 1, "{job_type}");

    // A host not on the list is refused before any connection.
    let outcome = h.run(fetch(other.url("/title")), ctx()).await;
    assert_refused(&job_type, &outcome);
    assert_eq!(
        other.accepted(),
        0,
        "{job_type}: the refused host saw a connection"
    );

    // A redirect within the list is followed; one off the list is refused.
    let within = allowed.url(&format!("/redirect?to={}", allowed.url("/title")));
    let outcome = h.run(fetch(within), ctx()).await;
    assert!(
        matches!(&outcome, Outcome::Succeeded { result: Some(r) } if parse(r)["title"] == "Hello boxcar"),
        "{job_type}: {outcome:?}"
    );
    let away = allowed.url(&format!("/redirect?to={}", other.url("/title")));
    let outcome = h.run(fetch(away), ctx()).await;
    assert_refused(&job_type, &outcome);
    assert_eq!(
        other.accepted(),
        0,
        "{job_type}: the redirect reached the refused host"
    );
    assert_eq!(allowed.accepted(), 4, "{job_type}");

    // Granted nothing, the same handler reaches nothing.
    let none = load_fresh(&job_type, Capabilities::default()).await;
    let outcome = none.run(fetch(allowed.url("/title")), ctx()).await;
    assert_refused(&job_type, &outcome);
    assert_eq!(allowed.accepted(), 4, "{job_type}");
}

/// Not an assertion: prints the per-job host time (fresh instance +
/// `handle` call) of the echo handler.
async fn measure_echo(lang: Lang) {
    let Some(echo) = example(lang, "echo").await else {
        return;
    };
    let job_type = format!("{}.echo", lang.prefix());
    let _cpu = CPU.lock().await;
    let payload = r#"{"hello":"world"}"#;
    for _ in 0..20 {
        echo.run(job(&job_type, payload, Duration::from_secs(10)), ctx())
            .await;
    }
    let runs = 300;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let j = job(&job_type, payload, Duration::from_secs(10));
        let c = ctx();
        let started = Instant::now();
        let outcome = echo.run(j, c).await;
        times.push(started.elapsed());
        assert!(matches!(outcome, Outcome::Succeeded { .. }), "{outcome:?}");
    }
    times.sort();
    let pct = |p: usize| times[(times.len() * p / 100).min(times.len() - 1)];
    eprintln!(
        "TIMING {job_type}: instantiate+call over {runs} jobs (debug test build, \
         optimised wasmtime): median {:?}, p90 {:?}, min {:?}, max {:?}",
        pct(50),
        pct(90),
        times[0],
        times[times.len() - 1]
    );
}

#[tokio::test]
async fn python_echo_returns_its_payload() {
    echo_returns_its_payload(Lang::Python).await;
}

#[tokio::test]
async fn js_echo_returns_its_payload() {
    echo_returns_its_payload(Lang::Js).await;
}

#[tokio::test]
async fn python_flaky_retries_with_retry_after() {
    flaky_retries_with_retry_after(Lang::Python).await;
}

#[tokio::test]
async fn js_flaky_retries_with_retry_after() {
    flaky_retries_with_retry_after(Lang::Js).await;
}

#[tokio::test]
async fn python_refuse_is_terminal_with_code_and_details() {
    refuse_is_terminal_with_code_and_details(Lang::Python).await;
}

#[tokio::test]
async fn js_refuse_is_terminal_with_code_and_details() {
    refuse_is_terminal_with_code_and_details(Lang::Js).await;
}

#[tokio::test]
async fn python_fanout_uses_the_host_interface() {
    fanout_uses_the_host_interface(Lang::Python).await;
}

#[tokio::test]
async fn js_fanout_uses_the_host_interface() {
    fanout_uses_the_host_interface(Lang::Js).await;
}

#[tokio::test]
async fn python_spin_times_out_at_200ms() {
    spin_times_out_at_200ms(Lang::Python).await;
}

#[tokio::test]
async fn js_spin_times_out_at_200ms() {
    spin_times_out_at_200ms(Lang::Js).await;
}

#[tokio::test]
async fn python_fetch_title_obeys_the_allow_list() {
    fetch_title_obeys_the_allow_list(Lang::Python).await;
}

#[tokio::test]
async fn js_fetch_title_obeys_the_allow_list() {
    fetch_title_obeys_the_allow_list(Lang::Js).await;
}

#[tokio::test]
async fn python_echo_per_job_time() {
    measure_echo(Lang::Python).await;
}

#[tokio::test]
async fn js_echo_per_job_time() {
    measure_echo(Lang::Js).await;
}

//! Capabilities: outbound HTTP under an allow-list against local
//! test servers, preopened directories (no escapes, read-only holds), the
//! per-job scratch directory and the environment.

use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, Instant},
};

use boxcar_sandbox::{Capabilities, DirGrant, DirMode, HandlerLimits, LimitKind, Outcome};

use crate::common::{captured_logs, load_with, scratch_dir};
use crate::http_server::{assert_refused, http_caps, TestServer};
use boxcar_queue::testing::{context, job_run};

pub(crate) fn fetch(url: &str) -> String {
    serde_json::json!({ "url": url }).to_string()
}

pub(crate) fn result_json(outcome: &Outcome) -> serde_json::Value {
    match outcome {
        Outcome::Succeeded { result: Some(r) } => serde_json::from_str(r).expect("JSON result"),
        other => panic!("expected a result, got {other:?}"),
    }
}

#[tokio::test]
async fn allowed_host_answers() {
    let server = TestServer::start().await;
    let h = load_with(
        "fetch-title",
        HandlerLimits::default(),
        http_caps(&[server.origin()]),
    );
    let (ctx, _) = context();
    let outcome = h
        .run(
            job_run(
                "fetch-title",
                &fetch(&server.url("/title")),
                Duration::from_secs(10),
            ),
            ctx,
        )
        .await;
    let result = result_json(&outcome);
    assert_eq!(result["title"], "Hello boxcar");
    assert_eq!(result["status"], 200);
    assert_eq!(server.accepted(), 1);
}

#[tokio::test]
async fn disallowed_host_is_refused_before_connecting_and_logged() {
    let logs = captured_logs();
    let allowed = TestServer::start().await;
    let other = TestServer::start().await;
    let h = load_with(
        "fetch-title",
        HandlerLimits::default(),
        http_caps(&[allowed.origin()]),
    );
    let (ctx, _) = context();
    let mut run = job_run(
        "fetch-title",
        &fetch(&other.url("/title")),
        Duration::from_secs(10),
    );
    run.id = "job-http-denied".into();
    let outcome = h.run(run, ctx).await;
    assert_refused("fetch-title", &outcome);
    assert_eq!(
        other.accepted(),
        0,
        "no connection may reach the refused host"
    );
    let text = String::from_utf8_lossy(&logs.lock().expect("lock")).to_string();
    let line = text
        .lines()
        .find(|l| l.contains("job-http-denied") && l.contains("refused"))
        .unwrap_or_else(|| panic!("the refusal is in the job log; log was:\n{text}"));
    assert!(line.contains(&format!("{}", other.addr.port())), "{line}");

    // A handler granted nothing is refused the same way.
    let none = load_with(
        "fetch-title",
        HandlerLimits::default(),
        Capabilities::default(),
    );
    let (ctx, _) = context();
    let outcome = none
        .run(
            job_run(
                "fetch-title",
                &fetch(&allowed.url("/title")),
                Duration::from_secs(10),
            ),
            ctx,
        )
        .await;
    assert_refused("fetch-title", &outcome);
    assert_eq!(allowed.accepted(), 0);
}

#[tokio::test]
async fn redirect_to_a_disallowed_host_is_refused() {
    let allowed = TestServer::start().await;
    let other = TestServer::start().await;
    let h = load_with(
        "fetch-title",
        HandlerLimits::default(),
        http_caps(&[allowed.origin()]),
    );
    // A redirect within the list is followed.
    let (ctx, _) = context();
    let within = allowed.url(&format!("/redirect?to={}", allowed.url("/title")));
    let outcome = h
        .run(
            job_run("fetch-title", &fetch(&within), Duration::from_secs(10)),
            ctx,
        )
        .await;
    assert_eq!(result_json(&outcome)["title"], "Hello boxcar");
    // A redirect off the list is refused before the other host is reached.
    let (ctx, _) = context();
    let away = allowed.url(&format!("/redirect?to={}", other.url("/title")));
    let outcome = h
        .run(
            job_run("fetch-title", &fetch(&away), Duration::from_secs(10)),
            ctx,
        )
        .await;
    assert_refused("fetch-title", &outcome);
    assert_eq!(other.accepted(), 0);
    assert_eq!(allowed.accepted(), 3);
}

#[tokio::test]
async fn server_that_never_answers_is_cut_off_at_the_job_timeout() {
    let server = TestServer::start().await;
    let h = load_with(
        "fetch-title",
        HandlerLimits::default(),
        http_caps(&[server.origin()]),
    );
    let (ctx, _) = context();
    let started = Instant::now();
    let outcome = h
        .run(
            job_run(
                "fetch-title",
                &fetch(&server.url("/hang")),
                Duration::from_millis(800),
            ),
            ctx,
        )
        .await;
    let took = started.elapsed();
    assert_eq!(outcome, Outcome::TimedOut);
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    assert_eq!(server.accepted(), 1);

    // Cancellation cuts an in-flight request off too.
    let (ctx, _) = context();
    let cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let outcome = h
        .run(
            job_run(
                "fetch-title",
                &fetch(&server.url("/hang")),
                Duration::from_secs(30),
            ),
            ctx,
        )
        .await;
    assert_eq!(outcome, Outcome::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn response_bodies_are_capped() {
    let server = TestServer::start().await;
    let limits = HandlerLimits {
        max_http_body: 16 << 10,
        ..HandlerLimits::default()
    };
    let h = load_with("fetch-title", limits, http_caps(&[server.origin()]));
    for path in ["/big", "/big-declared"] {
        let (ctx, _) = context();
        let outcome = h
            .run(
                job_run(
                    "fetch-title",
                    &fetch(&server.url(path)),
                    Duration::from_secs(10),
                ),
                ctx,
            )
            .await;
        match outcome {
            Outcome::Retryable { message, .. } => {
                assert!(
                    message.contains("larger than the host allows"),
                    "{path}: {message}"
                );
            }
            other => panic!("{path}: expected the body cap, got {other:?}"),
        }
    }
}

/// A host tree: `root/` (granted) beside `outside/secret.txt` (not), with
/// symlinks from the root pointing out; and `ro/` granted read-only.
struct FsFixture {
    _tmp: tempfile::TempDir,
    root: std::path::PathBuf,
    ro: std::path::PathBuf,
    secret: std::path::PathBuf,
}

fn fs_fixture() -> FsFixture {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("root");
    let ro = tmp.path().join("ro");
    let outside = tmp.path().join("outside");
    for d in [&root, &ro, &outside] {
        std::fs::create_dir(d).expect("mkdir");
    }
    std::fs::write(root.join("inside.txt"), "inside").expect("write");
    std::fs::write(ro.join("existing.txt"), "read me").expect("write");
    let secret = outside.join("secret.txt");
    std::fs::write(&secret, "SECRET").expect("write");
    std::os::unix::fs::symlink(&outside, root.join("escape-dir")).expect("symlink");
    std::os::unix::fs::symlink(&secret, root.join("escape-file")).expect("symlink");
    std::os::unix::fs::symlink("../outside/secret.txt", root.join("escape-rel")).expect("symlink");
    FsFixture {
        _tmp: tmp,
        root,
        ro,
        secret,
    }
}

fn fs_caps(fx: &FsFixture) -> Capabilities {
    Capabilities {
        dirs: vec![
            DirGrant {
                host: fx.root.clone(),
                guest: "/data".into(),
                mode: DirMode::ReadWrite,
            },
            DirGrant {
                host: fx.ro.clone(),
                guest: "/ro".into(),
                mode: DirMode::ReadOnly,
            },
        ],
        ..Capabilities::default()
    }
}

async fn probe(caps: Capabilities, ops: serde_json::Value) -> Outcome {
    let h = load_with("fs-probe", HandlerLimits::default(), caps);
    let (ctx, _) = context();
    let payload = serde_json::json!({ "ops": ops }).to_string();
    h.run(job_run("fs-probe", &payload, Duration::from_secs(10)), ctx)
        .await
}

fn reports(outcome: &Outcome) -> Vec<serde_json::Value> {
    match result_json(outcome) {
        serde_json::Value::Array(a) => a,
        other => panic!("expected a list of reports, got {other}"),
    }
}

#[tokio::test]
async fn preopen_escapes_fail() {
    let fx = fs_fixture();
    let secret = fx.secret.display().to_string();
    let escapes = serde_json::json!([
        { "op": "read", "path": "/data/../outside/secret.txt" },
        { "op": "read", "path": "/data/../../../../../../../etc/passwd" },
        { "op": "read", "path": secret },
        { "op": "read", "path": "/etc/passwd" },
        { "op": "read", "path": "/data/escape-dir/secret.txt" },
        { "op": "read", "path": "/data/escape-file" },
        { "op": "read", "path": "/data/escape-rel" },
        { "op": "list", "path": "/data/escape-dir" },
        { "op": "write", "path": "/data/escape-dir/planted.txt", "data": "x" },
        { "op": "list", "path": "/" },
    ]);
    let outcome = probe(fs_caps(&fx), escapes.clone()).await;
    let text = format!("{outcome:?}");
    assert!(!text.contains("SECRET"), "a secret leaked: {text}");
    for (op, report) in escapes
        .as_array()
        .expect("array")
        .iter()
        .zip(reports(&outcome))
    {
        assert_eq!(report["ok"], false, "{op} must fail: {report}");
    }
    assert!(!fx.secret.with_file_name("planted.txt").exists());

    // Inside the root everything works, including a symlink that stays in.
    std::os::unix::fs::symlink("inside.txt", fx.root.join("inner-link")).expect("symlink");
    let inside = serde_json::json!([
        { "op": "read", "path": "/data/inside.txt" },
        { "op": "read", "path": "/data/inner-link" },
        { "op": "read", "path": "/data/sub/../inside.txt" },
        { "op": "write", "path": "/data/new.txt", "data": "written" },
    ]);
    std::fs::create_dir(fx.root.join("sub")).expect("mkdir");
    let outcome = probe(fs_caps(&fx), inside).await;
    let r = reports(&outcome);
    assert!(r.iter().all(|r| r["ok"] == true), "{r:?}");
    assert_eq!(r[0]["value"], "inside");
    assert_eq!(r[1]["value"], "inside");
    assert_eq!(
        std::fs::read_to_string(fx.root.join("new.txt")).expect("written on the host"),
        "written"
    );
}

#[tokio::test]
async fn read_only_dir_cannot_be_written() {
    let fx = fs_fixture();
    let ops = serde_json::json!([
        { "op": "read", "path": "/ro/existing.txt" },
        { "op": "list", "path": "/ro" },
        { "op": "write", "path": "/ro/existing.txt", "data": "overwritten" },
        { "op": "write", "path": "/ro/new.txt", "data": "new" },
        { "op": "mkdir", "path": "/ro/dir" },
        { "op": "remove", "path": "/ro/existing.txt" },
    ]);
    let r = reports(&probe(fs_caps(&fx), ops).await);
    assert_eq!(r[0]["value"], "read me");
    assert_eq!(r[1]["value"], serde_json::json!(["existing.txt"]));
    for report in &r[2..] {
        assert_eq!(report["ok"], false, "{report}");
    }
    assert_eq!(
        std::fs::read_to_string(fx.ro.join("existing.txt")).expect("still there"),
        "read me"
    );
    assert!(!fx.ro.join("new.txt").exists());
    assert!(!fx.ro.join("dir").exists());
}

fn scratch_entries() -> usize {
    std::fs::read_dir(scratch_dir()).map_or(0, |d| d.count())
}

/// Both scratch checks run in one test: they watch the same base directory.
#[tokio::test]
async fn scratch_is_fresh_per_job_gone_after_and_capped() {
    let caps = Capabilities {
        scratch: Some(1 << 20),
        ..Capabilities::default()
    };
    for _ in 0..2 {
        let r = reports(
            &probe(
                caps.clone(),
                serde_json::json!([
                    { "op": "list", "path": "/tmp" },
                    { "op": "write", "path": "/tmp/left-behind.txt", "data": "x" },
                    { "op": "mkdir", "path": "/tmp/sub" },
                    { "op": "list", "path": "/tmp" },
                ]),
            )
            .await,
        );
        assert_eq!(
            r[0]["value"],
            serde_json::json!([]),
            "empty at the start: {r:?}"
        );
        assert_eq!(r[3]["value"], serde_json::json!(["left-behind.txt", "sub"]));
        assert_eq!(
            scratch_entries(),
            0,
            "the job's scratch directory is removed"
        );
    }
    // Without the grant there is no /tmp.
    let r = reports(
        &probe(
            Capabilities::default(),
            serde_json::json!([{ "op": "write", "path": "/tmp/x", "data": "x" }]),
        )
        .await,
    );
    assert_eq!(r[0]["ok"], false);

    // Over the cap: the job is stopped (within one poll) and cleaned up.
    let started = Instant::now();
    let outcome = probe(
        caps,
        serde_json::json!([
            { "op": "fill", "path": "/tmp/big", "bytes": 2 << 20 },
            { "op": "sleep", "ms": 5000 },
        ]),
    )
    .await;
    match outcome {
        Outcome::LimitExceeded {
            which: LimitKind::Other,
            detail,
        } => assert!(detail.contains("scratch"), "{detail}"),
        other => panic!("expected the scratch cap, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(scratch_entries(), 0);
}

#[tokio::test]
async fn guest_sees_exactly_the_declared_env() {
    let env: BTreeMap<String, String> = [
        (
            "API_BASE".to_string(),
            "https://api.example.com".to_string(),
        ),
        (
            "API_TOKEN".to_string(),
            "s3cr3t value=with equals".to_string(),
        ),
    ]
    .into();
    let caps = Capabilities {
        env: env.clone(),
        ..Capabilities::default()
    };
    assert!(
        !format!("{caps:?}").contains("s3cr3t"),
        "Debug must not print env values"
    );
    let h = load_with("env-dump", HandlerLimits::default(), caps);
    let (ctx, _) = context();
    let result = result_json(
        &h.run(job_run("env-dump", "{}", Duration::from_secs(10)), ctx)
            .await,
    );
    let seen: BTreeMap<String, String> =
        serde_json::from_value(result["vars"].clone()).expect("vars");
    assert_eq!(seen, env);

    let h = load_with(
        "env-dump",
        HandlerLimits::default(),
        Capabilities::default(),
    );
    let (ctx, _) = context();
    let result = result_json(
        &h.run(job_run("env-dump", "{}", Duration::from_secs(10)), ctx)
            .await,
    );
    assert_eq!(result["vars"], serde_json::json!({}));
}

#[tokio::test]
async fn unusable_grants_are_refused_at_load() {
    let bytes = boxcar_examples::bytes("fs-probe");
    let sandbox = crate::common::sandbox();
    let missing = Capabilities {
        dirs: vec![DirGrant {
            host: Path::new("/definitely/not/here").into(),
            guest: "/data".into(),
            mode: DirMode::ReadOnly,
        }],
        ..Capabilities::default()
    };
    let dup = Capabilities {
        scratch: Some(1 << 20),
        dirs: vec![DirGrant {
            host: std::env::temp_dir(),
            guest: "/tmp".into(),
            mode: DirMode::ReadOnly,
        }],
        ..Capabilities::default()
    };
    let relative = Capabilities {
        dirs: vec![DirGrant {
            host: std::env::temp_dir(),
            guest: "/data/../etc".into(),
            mode: DirMode::ReadOnly,
        }],
        ..Capabilities::default()
    };
    for (caps, expect) in [
        (missing, "not an existing directory"),
        (dup, "granted twice"),
        (relative, "`..`"),
    ] {
        let err = sandbox
            .load(&bytes, HandlerLimits::default(), caps)
            .err()
            .expect("refused");
        assert!(err.to_string().contains(expect), "{err}");
    }
}

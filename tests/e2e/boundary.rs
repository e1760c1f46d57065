//! Hostile input at the host's boundaries, through the real binary: the
//! `poison` guest's output (NUL, terminal escapes, retry-after of u64::MAX,
//! dedupe squatting), `dirs` grants over the host's own paths, absurd
//! manifest durations, and requests a web page could forge.

use std::{
    io::{Read, Write},
    time::{Duration, Instant},
};

use serde_json::{json, Value};

use crate::{
    api::http,
    harness::{eventually, postgres_schema, Env},
};

const ECHO: &str = "[handler]\njob_type = \"echo\"\ntimeout = \"10s\"\nconcurrency = 8\n";
const POISON: &str = "[handler]\njob_type = \"poison\"\ntimeout = \"10s\"\nmax_attempts = 1\n[capabilities]\nmay_enqueue = [\"echo\"]\n";

/// Starts a host serving `echo` and `poison`; returns it once both deployed.
fn host_with_poison(env: &Env) -> crate::harness::Serve {
    let config = env.fast_config("");
    env.deploy("echo", "echo", ECHO);
    env.deploy("poison", "poison", POISON);
    let serve = env.serve("serve", &["--config", config.to_str().expect("utf-8")]);
    eventually(Duration::from_secs(60), "both handlers deployed", || {
        (serve.output().matches("handler deployed").count() >= 2).then_some(())
    });
    serve.wait_for_log("HTTP API listening", Duration::from_secs(30));
    serve
}

fn enqueue(serve: &crate::harness::Serve, job_type: &str, payload: Value) -> String {
    let body = json!({"job_type": job_type, "payload": payload}).to_string();
    let (status, added) = http(&serve.listen, "POST", "/jobs", Some(&body), None);
    assert_eq!(status, 201, "{added}");
    added["id"].as_str().expect("id").to_string()
}

fn job(env: &Env, id: &str) -> Value {
    env.json(&["job", id])
}

/// One poisoned job of each kind among 100 echo jobs: every echo succeeds
/// on its first attempt, each poisoned job fails with `invalid-output`, and
/// nothing waits for a lease (10 s timeout + 30 s grace) to expire.
fn nul_output_fails_alone(env: &Env) {
    let serve = host_with_poison(env);
    let started = Instant::now();
    let modes = [
        "nul-result",
        "not-json",
        "nul-message",
        "nul-code",
        "nul-details",
        "nul-retry",
    ];
    let mut echoes = Vec::new();
    let mut poisoned = Vec::new();
    for i in 0..100 {
        echoes.push(enqueue(&serve, "echo", json!({ "i": i })));
        if i % 16 == 0 {
            let mode = modes[(i / 16) as usize % modes.len()];
            poisoned.push((mode, enqueue(&serve, "poison", json!({ "mode": mode }))));
        }
    }
    eventually(Duration::from_secs(20), "every job is terminal", || {
        let counts = env.json(&["counts"]);
        (counts["pending"] == 0 && counts["running"] == 0).then_some(())
    });
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    for id in &echoes {
        let echo = job(env, id);
        assert_eq!(echo["status"], "succeeded", "{echo}");
        assert_eq!(echo["attempts"], 1, "{echo}");
    }
    assert_eq!(poisoned.len(), modes.len() + 1);
    for (mode, id) in &poisoned {
        let bad = job(env, id);
        assert_eq!(bad["status"], "failed", "{mode}: {bad}");
        assert_eq!(bad["error_code"], "invalid-output", "{mode}: {bad}");
    }
}

#[test]
fn nul_output_fails_alone_on_sqlite() {
    nul_output_fails_alone(&Env::sqlite());
}

#[test]
fn nul_output_fails_alone_on_postgres() {
    let Some((url, _drop_schema)) = postgres_schema("nulout") else {
        return;
    };
    nul_output_fails_alone(&Env::with_db(url));
}

/// True when `bytes` hold ESC, BEL or a UTF-8 encoded C1 control.
fn has_terminal_control(bytes: &[u8]) -> bool {
    bytes.contains(&0x1b)
        || bytes.contains(&0x07)
        || bytes
            .windows(2)
            .any(|w| w[0] == 0xc2 && (0x80..=0x9f).contains(&w[1]))
}

#[test]
fn terminal_escapes_from_guests_never_reach_the_terminal() {
    let env = Env::sqlite();
    let serve = host_with_poison(&env);
    let id = enqueue(&serve, "poison", json!({"mode": "escape"}));
    let result_id = enqueue(&serve, "poison", json!({"mode": "escape-result"}));
    eventually(Duration::from_secs(10), "the escape jobs finished", || {
        let failed = job(&env, &id)["status"] == "failed";
        (failed && job(&env, &result_id)["status"] == "succeeded").then_some(())
    });
    // A rejected pair whose file name carries an escape sequence.
    let evil = env.handlers().join("\u{1b}]0;owned\u{7}evil");
    std::fs::write(evil.with_extension("wasm"), b"not wasm").expect("write");
    std::fs::write(
        evil.with_extension("toml"),
        "[handler]\njob_type = \"evil\"\n",
    )
    .expect("write");
    serve.wait_for_log("handler rejected", Duration::from_secs(20));

    for args in [
        vec!["jobs"],
        vec!["job", id.as_str()],
        vec!["job", result_id.as_str()],
        vec!["--json", "jobs"],
        vec!["--json", "job", id.as_str()],
        vec!["--json", "job", result_id.as_str()],
        vec!["handlers"],
        vec!["--json", "handlers"],
    ] {
        let output = env.run(&args);
        assert!(output.status.success(), "{args:?}");
        assert!(
            !has_terminal_control(&output.stdout) && !has_terminal_control(&output.stderr),
            "boxcar {args:?} printed a terminal control:\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
    }
    let shown = String::from_utf8_lossy(&env.run(&["job", &id]).stdout).into_owned();
    assert!(
        shown.contains("\\u{1b}[2Jcleared"),
        "escaped, still readable: {shown}"
    );
    let json = job(&env, &id);
    assert!(
        json["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("\u{1b}[2J")),
        "--json keeps the exact text, escaped as JSON: {json}"
    );
    let listing = String::from_utf8_lossy(&env.run(&["handlers"]).stdout).into_owned();
    assert!(listing.contains("\\u{1b}]0;owned\\u{7}evil"), "{listing}");

    let waited = env.run(&["enqueue", "poison", r#"{"mode":"escape"}"#, "--wait"]);
    assert_eq!(waited.status.code(), Some(3));
    assert!(
        !has_terminal_control(&waited.stderr),
        "{}",
        String::from_utf8_lossy(&waited.stderr)
    );
}

#[test]
fn a_retry_after_of_u64_max_is_due_in_thirty_days() {
    let env = Env::sqlite();
    let serve = host_with_poison(&env);
    let body =
        json!({"job_type": "poison", "payload": {"mode": "retry-forever"}, "max_attempts": 2})
            .to_string();
    let (status, added) = http(&serve.listen, "POST", "/jobs", Some(&body), None);
    assert_eq!(status, 201, "{added}");
    let id = added["id"].as_str().expect("id").to_string();
    let pending = eventually(Duration::from_secs(10), "the retry is scheduled", || {
        let j = job(&env, &id);
        (j["attempts"] == 1 && j["status"] == "pending").then_some(j)
    });
    let run_at = chrono::DateTime::parse_from_rfc3339(pending["run_at"].as_str().expect("run_at"))
        .expect("an RFC 3339 time");
    let ahead = run_at.with_timezone(&chrono::Utc) - chrono::Utc::now();
    assert!(
        ahead > chrono::Duration::days(29) && ahead <= chrono::Duration::days(30),
        "run_at {run_at} is 30 days ahead, not in 1970 or never"
    );
}

#[test]
fn a_guest_cannot_squat_a_producers_dedupe_key() {
    let env = Env::sqlite();
    let serve = host_with_poison(&env);
    let squat = |extra: Value| {
        let mut e =
            json!({"job_type": "echo", "dedupe_key": "invoice-42", "delay_ms": 86_400_000u64});
        if let (Some(e), Some(extra)) = (e.as_object_mut(), extra.as_object()) {
            e.extend(extra.clone());
        }
        let id = enqueue(&serve, "poison", json!({"mode": "enqueue", "enqueue": e}));
        eventually(Duration::from_secs(10), "the guest job finished", || {
            let j = job(&env, &id);
            (j["status"] == "succeeded").then_some(j["result"].clone())
        })
    };
    let accepted = squat(json!({}));
    let guest_child = accepted["id"]
        .as_str()
        .expect("the guest's enqueue was accepted")
        .to_string();
    assert_eq!(
        job(&env, &guest_child)["dedupe_key"],
        "boxcar:from:poison/invoice-42"
    );
    let producer = env.json(&["enqueue", "echo", "{}", "--dedupe-key", "invoice-42"]);
    assert_eq!(producer["deduplicated"], false, "{producer}");
    assert_ne!(producer["id"], guest_child);

    for (extra, why) in [
        (
            json!({"delay_ms": 100u64 * 365 * 86_400_000}),
            "enqueue_max_delay",
        ),
        (json!({"priority": i32::MIN}), "enqueue_priority"),
        (json!({"max_attempts": u32::MAX}), "enqueue_max_attempts"),
        (json!({"job_type": "poison"}), "NotAllowed"),
    ] {
        let refused = squat(extra);
        let text = refused["refused"].as_str().unwrap_or_default();
        assert!(text.contains(why), "{refused}");
    }
    let reserved = env.run(&[
        "enqueue",
        "echo",
        "{}",
        "--dedupe-key",
        "boxcar:from:poison/x",
    ]);
    assert_eq!(
        reserved.status.code(),
        Some(2),
        "producers cannot use the guests' namespace"
    );
}

/// Writes `manifest` for the deployed `echo` pair and waits for its rejection.
fn rejected(env: &Env, serve: &crate::harness::Serve, manifest: &str) -> String {
    let before = serve.output().matches("handler rejected").count();
    crate::harness::write_atomically(&env.handlers().join("echo.toml"), manifest.as_bytes());
    eventually(Duration::from_secs(20), "the manifest is rejected", || {
        (serve.output().matches("handler rejected").count() > before).then_some(())
    });
    let listing = env.json(&["handlers"]);
    listing["rejected"][0]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn grants_over_the_hosts_own_paths_and_absurd_durations_are_refused() {
    let mut env = Env::sqlite();
    std::fs::create_dir_all(env.path("db")).expect("db dir");
    env.db = format!("sqlite://{}", env.path("db/boxcar.db").display());
    let config = env.fast_config("");
    env.deploy("echo", "echo", ECHO);
    let serve = env.serve("serve", &["--config", config.to_str().expect("utf-8")]);
    serve.wait_for_log("handler deployed", Duration::from_secs(60));
    let cache = std::env::temp_dir().join("boxcar-e2e-cache").join("boxcar");
    #[cfg(unix)]
    std::os::unix::fs::symlink(&cache, env.path("looks-harmless")).expect("symlink");
    let grant = |host: &std::path::Path| {
        format!(
            "{ECHO}[capabilities]\ndirs = [{{ host = \"{}\", guest = \"/data\", mode = \"rw\" }}]\n",
            host.display()
        )
    };
    let handlers = env.handlers();
    let mut cases = vec![
        (grant(&handlers), "is the handlers directory"),
        (grant(&env.path("db")), "contains the database file"),
        (grant(env.dir.path()), "contains the handlers directory"),
        (grant(&cache), "is the compile cache"),
    ];
    #[cfg(unix)]
    cases.push((grant(&env.path("looks-harmless")), "is the compile cache"));
    cases.push((
        ECHO.replace("timeout = \"10s\"", "timeout = \"1000000years\""),
        "handler.timeout",
    ));
    for (manifest, expected) in cases {
        let reason = rejected(&env, &serve, &manifest);
        assert!(reason.contains(expected), "{expected}: {reason}");
        let result = env.ok(&[
            "enqueue",
            "echo",
            r#"{"still":"serving"}"#,
            "--wait",
            "--timeout",
            "10s",
        ]);
        assert!(
            result.contains("serving"),
            "the previous version keeps serving: {result}"
        );
    }
    assert!(serve.output().contains("boxcar host started"));
}

/// A raw request with the given `Host` and extra header lines.
fn raw(address: &str, request_head: &str) -> u16 {
    let mut stream = crate::api::connect(address);
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(request_head.as_bytes()).expect("write");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line")
}

#[test]
fn forged_browser_requests_are_refused_over_a_real_socket() {
    let env = Env::sqlite();
    env.fast_config("");
    let serve = env.serve("serve", &[]);
    serve.wait_for_log("HTTP API listening", Duration::from_secs(30));
    let listen = &serve.listen;
    let rebinding = format!(
        "GET /counts HTTP/1.1\r\nHost: attacker.example:{}\r\nConnection: close\r\n\r\n",
        listen.rsplit(':').next().unwrap_or("")
    );
    assert_eq!(
        raw(listen, &rebinding),
        403,
        "DNS rebinding: a foreign Host is refused"
    );
    let form = format!("POST /jobs/retry-failed HTTP/1.1\r\nHost: {listen}\r\nOrigin: http://attacker.example\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(
        raw(listen, &form),
        403,
        "a cross-origin body-less POST is refused"
    );
    let no_type = format!("POST /jobs/retry-failed HTTP/1.1\r\nHost: {listen}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(
        raw(listen, &no_type),
        415,
        "state changes need a JSON content type"
    );
    let (status, body) = http(listen, "POST", "/jobs/retry-failed", None, None);
    assert_eq!(status, 200, "curl-like requests pass: {body}");
}

#[test]
fn a_handler_whose_concurrency_does_not_fit_the_instance_pool_is_refused() {
    let env = Env::sqlite();
    let config = env.fast_config("[sandbox]\npool_instances = 12\n");
    env.deploy("echo", "echo", ECHO);
    let serve = env.serve("serve", &["--config", config.to_str().expect("utf-8")]);
    serve.wait_for_log("handler deployed", Duration::from_secs(60));
    let reason = rejected(
        &env,
        &serve,
        &ECHO.replace("concurrency = 8", "concurrency = 100"),
    );
    assert!(
        reason.contains("pool_instances") && reason.contains("concurrency"),
        "the rejection says what to change: {reason}"
    );
    env.deploy(
        "noop",
        "noop",
        "[handler]\njob_type = \"noop\"\ntimeout = \"10s\"\nconcurrency = 4\n",
    );
    eventually(Duration::from_secs(60), "noop fits beside echo", || {
        (serve.output().matches("handler deployed").count() >= 2).then_some(())
    });
    let result = env.ok(&[
        "enqueue",
        "echo",
        r#"{"still":"serving"}"#,
        "--wait",
        "--timeout",
        "10s",
    ]);
    assert!(result.contains("serving"), "echo keeps its share: {result}");
}

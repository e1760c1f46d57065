//! The CLI against a database with no host running: validation, exit codes,
//! inspection, administration.

use crate::harness::{describe, Env};

#[test]
fn unknown_job_type_is_a_usage_error_with_exit_code_2() {
    let env = Env::sqlite();
    let output = env.run(&["enqueue", "nobody.handles.this", "{}"]);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unknown job type `nobody.handles.this`"),
        "{stderr}"
    );
}

#[test]
fn a_bad_payload_is_refused_without_echoing_it() {
    let env = Env::sqlite();
    std::fs::write(env.path("boxcar.toml"), "handled_elsewhere = [\"mail\"]\n").expect("config");
    let output = env.run(&["enqueue", "mail", r#"["s3cr3t-value"]"#]);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("must be a JSON object"), "{stderr}");
    assert!(
        !stderr.contains("s3cr3t"),
        "the payload never appears in errors: {stderr}"
    );
}

#[test]
fn enqueue_inspect_cancel_retry_prune_round_trip() {
    let env = Env::sqlite();
    std::fs::write(env.path("boxcar.toml"), "handled_elsewhere = [\"mail\"]\n").expect("config");
    let id = env
        .ok(&[
            "enqueue",
            "mail",
            r#"{"to":"a"}"#,
            "--scope",
            "account:7",
            "--priority",
            "-1",
            "--delay",
            "1h",
        ])
        .trim()
        .to_string();
    let job = env.json(&["job", &id]);
    assert_eq!(job["status"], "pending");
    assert_eq!(job["scope"]["type"], "account");
    assert_eq!(job["scope"]["id"], "7");
    assert_eq!(job["priority"], -1);
    for key in [
        "id",
        "job_type",
        "status",
        "attempts",
        "max_attempts",
        "last_error",
        "result",
        "progress",
        "scope",
        "handler_version",
        "run_at",
        "started_at",
        "finished_at",
        "created_at",
        "updated_at",
    ] {
        assert!(job.get(key).is_some(), "job --json has {key}: {job}");
    }
    assert!(job["created_at"]
        .as_str()
        .is_some_and(|t| t.contains('.') && t.ends_with('Z')));

    let dup = env.json(&["enqueue", "mail", "{}", "--dedupe-key", "k1"]);
    let again = env.json(&["enqueue", "mail", "{}", "--dedupe-key", "k1"]);
    assert_eq!(dup["id"], again["id"]);
    assert_eq!(again["deduplicated"], true);

    let listed = env.json(&["jobs", "--scope", "account:7"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    let table = env.ok(&["jobs"]);
    assert!(table.starts_with("ID") && table.contains("mail"), "{table}");
    assert_eq!(env.json(&["counts"])["pending"], 2);

    assert_eq!(
        env.json(&["cancel", "--type", "mail", "--dedupe-key", "k1"])["cancelled"],
        1
    );
    assert_eq!(
        env.json(&["cancel", "--scope", "account:7", "--pending-only"])["cancelled"],
        1
    );
    let cancelled = env.json(&["job", &id]);
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(env.json(&["retry-failed"])["retried"], 0);
    assert_eq!(
        env.json(&["retry-failed", "--id", &id])["retried"],
        0,
        "a cancelled job is not failed"
    );
    assert_eq!(env.json(&["prune", "--older-than", "1h"])["pruned"], 0);
    let missing = env.run(&["job", "no-such-id"]);
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn wait_reports_timeout_with_its_own_exit_code() {
    let env = Env::sqlite();
    std::fs::write(env.path("boxcar.toml"), "handled_elsewhere = [\"mail\"]\n").expect("config");
    let output = env.run(&["enqueue", "mail", "{}", "--wait", "--timeout", "300ms"]);
    assert_eq!(output.status.code(), Some(4), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("did not finish"));
}

#[test]
fn check_validates_a_module_and_reports_what_it_gets() {
    let env = Env::sqlite();
    env.deploy(
        "echo",
        "echo",
        "[handler]\njob_type = \"echo\"\n[capabilities]\nmay_enqueue = [\"x\"]\n",
    );
    let module = env.handlers().join("echo.wasm");
    let report = env.json(&["check", module.to_str().expect("utf-8")]);
    assert_eq!(report["job_types"][0], "echo");
    assert_eq!(report["capabilities"]["may_enqueue"][0], "x");
    assert_eq!(report["digest"].as_str().map(str::len), Some(64));

    std::fs::write(
        env.handlers().join("echo.toml"),
        "[handler]\njob_type = \"echo\"\nbogus = 1\n",
    )
    .expect("write");
    let output = env.run(&["check", module.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("bogus"));

    std::fs::write(env.path("junk.wasm"), b"not wasm").expect("write");
    std::fs::write(env.path("junk.toml"), "[handler]\njob_type = \"junk\"\n").expect("write");
    let output = env.run(&["check", "junk.wasm"]);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
}

#[test]
fn a_bad_config_option_is_named_at_start_up() {
    let env = Env::sqlite();
    std::fs::write(
        env.path("boxcar.toml"),
        "[worker]\nmax_backoff = \"1s\"\nbase_backoff = \"10s\"\n",
    )
    .expect("config");
    let output = env.run(&["check"]);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("max_backoff"));
}

#[test]
fn examples_export_writes_droppable_pairs() {
    let env = Env::sqlite();
    let out = env.path("exported");
    env.ok(&["examples", "export", out.to_str().expect("utf-8")]);
    for name in ["echo", "noop", "flaky", "spin"] {
        assert!(out.join(format!("{name}.wasm")).is_file(), "{name}.wasm");
        assert!(out.join(format!("{name}.toml")).is_file(), "{name}.toml");
    }
}

#[test]
fn payload_schema_is_checked_at_enqueue_and_names_the_pointer_not_the_value() {
    let env = Env::sqlite();
    std::fs::write(
        env.path("boxcar.toml"),
        "handlers = \"handlers\"\nhandled_elsewhere = [\"article\"]\n",
    )
    .expect("config");
    std::fs::write(
        env.handlers().join("article.schema.json"),
        r#"{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}"#,
    )
    .expect("schema");
    env.deploy(
        "article",
        "echo",
        "[handler]\njob_type = \"article\"\npayload_schema = \"article.schema.json\"\n",
    );
    let output = env.run(&["enqueue", "article", r#"{"url": 987654321}"#]);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/url"), "names the pointer: {stderr}");
    assert!(!stderr.contains("987654321"), "never the value: {stderr}");
    env.ok(&["enqueue", "article", r#"{"url": "https://example.com"}"#]);
}

#[test]
fn jobs_pages_by_cursor_and_refuses_a_malformed_one() {
    let env = Env::sqlite();
    std::fs::write(env.path("boxcar.toml"), "handled_elsewhere = [\"mail\"]\n").expect("config");
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(
            env.json(&["enqueue", "mail", "{}"])["id"]
                .as_str()
                .expect("id")
                .to_string(),
        );
    }
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut args = vec!["jobs", "--limit", "2"];
        if let Some(a) = &after {
            args.extend(["--after", a.as_str()]);
        }
        let page = env.json(&args);
        let page = page.as_array().expect("array").clone();
        seen.extend(
            page.iter()
                .map(|j| j["id"].as_str().expect("id").to_string()),
        );
        match page.get(1) {
            Some(last) => after = Some(last["cursor"].as_str().expect("cursor").to_string()),
            None => break,
        }
    }
    assert_eq!(seen, ids, "oldest first, every job once");
    let newest = env.json(&["jobs", "--newest", "--limit", "1"]);
    assert_eq!(newest[0]["id"].as_str(), ids.last().map(String::as_str));

    let output = env.run(&["jobs", "--limit", "2"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("next page: --after "), "{stderr}");

    let output = env.run(&["jobs", "--after", "not-a-cursor"]);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("malformed cursor"), "{stderr}");
}

#[test]
fn enqueue_jsonl_takes_a_file_or_stdin_and_reports_refused_lines() {
    let env = Env::sqlite();
    std::fs::write(env.path("boxcar.toml"), "handled_elsewhere = [\"mail\"]\n").expect("config");
    let lines: Vec<String> = (0..25_000)
        .map(|n| format!("{{\"job_type\": \"mail\", \"payload\": {{\"n\": {n}}}}}"))
        .collect();
    let file = env.path("jobs.jsonl");
    std::fs::write(&file, lines.join("\n")).expect("jsonl");
    let summary = env.json(&["enqueue", "--jsonl", file.to_str().expect("utf-8")]);
    assert_eq!(summary["added"], 25_000, "{summary}");
    assert_eq!(summary["refused"], 0, "{summary}");
    assert_eq!(env.json(&["counts"])["pending"], 25_000);

    let mut child = env
        .command()
        .args(["enqueue", "--jsonl", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(
                b"{\"job_type\": \"mail\"}\n{\"job_type\": \"nobody.handles.this\"}\n\n{oops\n{\"job_type\": \"mail\", \"payload\": {\"n\": 1}}\n",
            )
            .expect("write");
    }
    let output = child.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stdout.contains("enqueued 2 jobs (0 deduplicated, 2 refused)"),
        "{stdout}"
    );
    assert!(
        stderr.contains("line 2: ") && stderr.contains("unknown job type"),
        "{stderr}"
    );
    assert!(stderr.contains("line 4: "), "{stderr}");
    assert_eq!(env.json(&["counts"])["pending"], 25_002);

    let output = env.run(&["enqueue", "mail", "--jsonl", "-"]);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
}

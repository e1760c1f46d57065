//! Hot deploy through a running `serve`: drop, replace, reject, remove.

use std::time::Duration;

use crate::harness::{eventually, Env};

const ECHO: &str = "[handler]\njob_type = \"echo\"\ntimeout = \"10s\"\n";

#[test]
fn dropping_echo_into_a_running_serve_deploys_it() {
    let env = Env::sqlite();
    let config = env.fast_config("");
    let serve = env.serve("serve", &["--config", config.to_str().expect("utf-8")]);
    serve.wait_for_log("boxcar host started", Duration::from_secs(30));

    env.deploy("echo", "echo", ECHO);
    serve.wait_for_log("handler deployed", Duration::from_secs(10));
    let started = std::time::Instant::now();
    let result = env.ok(&["enqueue", "echo", r#"{"x":1}"#, "--wait", "--timeout", "5s"]);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    let result: serde_json::Value = serde_json::from_str(result.trim()).expect("JSON result");
    assert_eq!(result["x"], 1);
}

#[test]
fn handlers_lists_grants_but_never_env_values() {
    let env = Env::sqlite();
    env.fast_config("");
    let serve = env.serve("serve", &[]);
    env.deploy(
        "echo",
        "echo",
        "[handler]\njob_type = \"echo\"\n[capabilities]\nmay_enqueue = [\"echo\"]\nenv = { API_TOKEN = \"hunter2-secret\" }\n",
    );
    serve.wait_for_log("handler deployed", Duration::from_secs(30));
    let listing = env.ok(&["handlers"]);
    assert!(
        listing.contains("GRANTS") && listing.contains("env=API_TOKEN"),
        "{listing}"
    );
    assert!(listing.contains("may_enqueue=echo"), "{listing}");
    let json = env.json(&["handlers"]).to_string();
    assert!(
        !listing.contains("hunter2") && !json.contains("hunter2"),
        "env values stay secret"
    );
    assert!(!serve.output().contains("hunter2"), "nor are they logged");
}

#[test]
fn replacing_a_module_lets_the_running_job_finish_on_the_old_version() {
    let env = Env::sqlite();
    let config = env.fast_config("");
    let serve = env.serve("serve", &["--config", config.to_str().expect("utf-8")]);
    let manifest = "[handler]\njob_type = \"slow\"\ntimeout = \"20s\"\nconcurrency = 2\n";
    env.deploy("slow", "sleep", manifest);
    serve.wait_for_log("handler deployed", Duration::from_secs(30));

    let old_job = env
        .ok(&["enqueue", "slow", r#"{"ms": 2500}"#])
        .trim()
        .to_string();
    eventually(Duration::from_secs(5), "the slow job to start", || {
        (env.json(&["job", &old_job])["status"] == "running").then_some(())
    });
    env.deploy("slow", "echo", manifest);
    eventually(
        Duration::from_secs(10),
        "the new version to be deployed",
        || {
            let handlers = env.json(&["handlers"]);
            let digest = handlers["deployed"][0]["digest"]
                .as_str()
                .map(str::to_string);
            (serve.output().matches("handler deployed").count() >= 2).then_some(digest)
        },
    );
    let new_job = env.ok(&[
        "enqueue",
        "slow",
        r#"{"ms": 1}"#,
        "--wait",
        "--timeout",
        "10s",
    ]);
    assert!(
        new_job.contains("\"ms\""),
        "echo returns its payload: {new_job}"
    );

    let old = env.json(&["job", &old_job]);
    eventually(Duration::from_secs(10), "the slow job to finish", || {
        (env.json(&["job", &old_job])["status"] == "succeeded").then_some(())
    });
    let old_done = env.json(&["job", &old_job]);
    assert_eq!(
        old_done["result"]["slept_ms"], 2500,
        "finished on the old (sleep) module: {old_done}"
    );
    let jobs = env.json(&["jobs", "--type", "slow"]);
    let versions: Vec<&str> = jobs
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|j| j["handler_version"].as_str())
        .collect();
    assert_eq!(versions.len(), 2, "{jobs}");
    assert_ne!(
        versions[0], versions[1],
        "old and new jobs record different digests"
    );
    assert_eq!(old["handler_version"], old_done["handler_version"]);
}

#[test]
fn corrupt_module_and_unknown_manifest_key_are_rejected_and_old_version_keeps_serving() {
    let env = Env::sqlite();
    let config = env.fast_config("");
    let serve = env.serve("serve", &["--config", config.to_str().expect("utf-8")]);
    env.deploy("echo", "echo", ECHO);
    serve.wait_for_log("handler deployed", Duration::from_secs(30));

    crate::harness::write_atomically(
        &env.handlers().join("echo.wasm"),
        b"\0asm garbage, not a component",
    );
    serve.wait_for_log("handler rejected", Duration::from_secs(10));
    crate::harness::write_atomically(
        &env.handlers().join("broken.wasm"),
        &boxcar_examples::bytes("noop"),
    );
    crate::harness::write_atomically(
        &env.handlers().join("broken.toml"),
        b"[handler]\njob_type = \"broken\"\nconcurency = 2\n",
    );
    let handlers = eventually(
        Duration::from_secs(10),
        "both rejections to be recorded",
        || {
            let handlers = env.json(&["handlers"]);
            (handlers["rejected"].as_array().map_or(0, Vec::len) >= 2).then_some(handlers)
        },
    );
    let text = handlers.to_string();
    assert!(
        text.contains("concurency"),
        "the unknown key is named: {text}"
    );
    let human = env.ok(&["handlers"]);
    assert!(
        human.contains("rejected") && human.contains("broken"),
        "{human}"
    );

    let result = env.ok(&[
        "enqueue",
        "echo",
        r#"{"still": "serving"}"#,
        "--wait",
        "--timeout",
        "5s",
    ]);
    assert!(result.contains("serving"), "{result}");
}

#[test]
fn removing_the_files_undeploys_the_type() {
    let env = Env::sqlite();
    let config = env.fast_config("handled_elsewhere = [\"echo\"]");
    let serve = env.serve("serve", &["--config", config.to_str().expect("utf-8")]);
    env.deploy("echo", "echo", ECHO);
    serve.wait_for_log("handler deployed", Duration::from_secs(30));
    std::fs::remove_file(env.handlers().join("echo.wasm")).expect("remove");
    serve.wait_for_log("handler removed", Duration::from_secs(10));
    let id = env
        .ok(&[
            "--config",
            config.to_str().expect("utf-8"),
            "enqueue",
            "echo",
            "{}",
        ])
        .trim()
        .to_string();
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        env.json(&["job", &id])["status"],
        "pending",
        "no host serves echo any more"
    );
}

/// Enqueues `payload` for `job_type`, waits, and returns what it printed.
fn run(env: &Env, job_type: &str, payload: &str) -> String {
    env.ok(&["enqueue", job_type, payload, "--wait", "--timeout", "10s"])
}

#[test]
fn a_pair_whose_second_type_fails_to_register_leaves_both_types_on_the_old_version() {
    let env = Env::sqlite();
    let config = env.fast_config("");
    let serve = env.serve("serve", &["--config", config.to_str().expect("utf-8")]);
    // `c` waits for `b`: a version of the pair in which `b` waits for `c`
    // closes a cycle, but only at its second type (`a` waiting for `c` is
    // fine on its own).
    env.deploy(
        "waiter",
        "noop",
        "[handler]\njob_type = \"c\"\nwaits_for = [\"b\"]\n",
    );
    env.deploy(
        "pair",
        "echo",
        "[handler]\njob_types = [\"a\", \"b\"]\ntimeout = \"10s\"\n",
    );
    eventually(Duration::from_secs(30), "both pairs deployed", || {
        (serve.output().matches("handler deployed").count() >= 2).then_some(())
    });
    assert!(run(&env, "a", r#"{"v":1}"#).contains("\"v\""));

    env.deploy(
        "pair",
        "noop",
        "[handler]\njob_types = [\"a\", \"b\"]\ntimeout = \"10s\"\nwaits_for = [\"c\"]\n",
    );
    serve.wait_for_log("handler rejected", Duration::from_secs(30));
    assert!(
        serve.output().contains("waits_for cycle"),
        "{}",
        serve.output()
    );
    for job_type in ["a", "b"] {
        let result = run(&env, job_type, r#"{"still":"echo"}"#);
        assert!(
            result.contains("still"),
            "`{job_type}` is still served by the previous (echo) version: {result}"
        );
    }
    use sha2::Digest;
    let echo = hex::encode(sha2::Sha256::digest(boxcar_examples::bytes("echo")));
    let handlers = env.json(&["handlers"]);
    let mut served: Vec<(String, String)> = handlers["deployed"]
        .as_array()
        .expect("deployed list")
        .iter()
        .filter(|record| record["file"] == "pair")
        .map(|record| {
            (
                record["job_type"].as_str().unwrap_or_default().to_string(),
                record["digest"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    served.sort();
    assert_eq!(
        served,
        [("a".to_string(), echo.clone()), ("b".to_string(), echo)],
        "the deploy records still name the echo version: {handlers}"
    );
}

#[test]
fn a_rescan_does_not_read_a_module_whose_size_and_mtime_are_unchanged() {
    use std::io::Write;

    let env = Env::sqlite();
    let config = env.fast_config("");
    let serve = env.serve("serve", &["--config", config.to_str().expect("utf-8")]);
    env.deploy("echo", "echo", ECHO);
    serve.wait_for_log("handler deployed", Duration::from_secs(30));
    let module = env.handlers().join("echo.wasm");
    let meta = std::fs::metadata(&module).expect("module");
    let modified = meta.modified().expect("mtime");
    // Garbage of the same size, written in place, with the old mtime put
    // back: only a rescan that reads the file again can notice it.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&module)
        .expect("open in place");
    let len = usize::try_from(meta.len()).expect("size");
    file.write_all(&vec![0u8; len]).expect("overwrite");
    file.set_modified(modified).expect("restore mtime");
    drop(file);
    // The write's file event and the periodic rescan (every 5 s) both run.
    std::thread::sleep(Duration::from_secs(7));
    assert!(
        !serve.output().contains("handler rejected"),
        "the unchanged-looking module was read again:\n{}",
        serve.output()
    );
    assert_eq!(serve.output().matches("handler deployed").count(), 1);
    assert!(run(&env, "echo", r#"{"x":1}"#).contains("\"x\""));
}

#[test]
fn a_component_over_one_jobs_pool_share_is_refused_naming_the_key_to_raise() {
    let env = Env::sqlite();
    let config = env.fast_config("");
    let serve = env.serve("serve", &["--config", config.to_str().expect("utf-8")]);
    let example = boxcar_examples::get("many-memories").expect("built");
    let manifest = std::fs::read_to_string(example.manifest_path()).expect("manifest");
    env.deploy("many-memories", "many-memories", &manifest);
    serve.wait_for_log("handler rejected", Duration::from_secs(60));
    let log = serve.output();
    assert!(
        log.contains("job_memories") && !log.contains("not a valid WebAssembly component"),
        "the refusal names the pool share, not an invalid module:\n{log}"
    );
}

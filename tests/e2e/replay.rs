//! `boxcar replay` through the binary: a failed `flaky` job replayed
//! reproduces its failure (from the handlers directory, and from the
//! compile cache once the module file changed), a fixed module given with
//! `--module` succeeds, a guest's enqueues are dry runs, and the database
//! is the same, byte for byte, before and after.

use std::time::Duration;

use serde_json::Value;

use crate::harness::{describe, write_atomically, Env};
use crate::history::finished;

const FLAKY: &str = "[handler]\njob_type = \"flaky\"\ntimeout = \"10s\"\nmax_attempts = 2\n";

/// Every row of every table of the SQLite file at `db`, each column quoted
/// by SQLite itself (`quote()`), so any change of any byte shows.
fn dump(db: &str) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        use sqlx::{Connection, Row};
        let mut conn = sqlx::SqliteConnection::connect(db).await.expect("open");
        let tables: Vec<String> =
            sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                .fetch_all(&mut conn)
                .await
                .expect("tables");
        let mut rows = Vec::new();
        for table in tables {
            let columns: Vec<String> = sqlx::query(&format!("PRAGMA table_info(\"{table}\")"))
                .fetch_all(&mut conn)
                .await
                .expect("columns")
                .iter()
                .map(|r| r.get::<String, _>("name"))
                .collect();
            let quoted: Vec<String> = columns.iter().map(|c| format!("quote(\"{c}\")")).collect();
            let select = format!(
                "SELECT '{table}: ' || {} FROM \"{table}\" ORDER BY 1",
                quoted.join(" || ', ' || ")
            );
            let texts: Vec<String> = sqlx::query_scalar(&select)
                .fetch_all(&mut conn)
                .await
                .expect("rows");
            rows.extend(texts);
        }
        rows
    })
}

#[test]
fn replay_reproduces_a_flaky_failure_and_a_fixed_module_succeeds_without_a_write() {
    let env = Env::sqlite();
    env.fast_config("");
    env.deploy("flaky", "flaky", FLAKY);
    let mut serve = env.serve("serve", &[]);
    serve.wait_for_log("handler deployed", Duration::from_secs(60));
    let id = env
        .ok(&["enqueue", "flaky", r#"{"succeed_on": 5, "log_lines": 2}"#])
        .trim()
        .to_string();
    let job = finished(&env, &id);
    assert_eq!(job["status"], "failed", "{job}");
    let digest = job["handler_version"].as_str().expect("digest").to_string();
    // Nothing else writes from here on.
    assert!(serve.terminate().success());
    let before = dump(&env.db);
    assert!(before
        .iter()
        .any(|r| r.starts_with("boxcar_job_attempts: ")));
    assert!(before.iter().any(|r| r.contains("attempt 2 line 1")));

    let handlers = env.handlers().display().to_string();
    let output = env.run(&["replay", &id, "--handlers", &handlers]);
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    assert_eq!(output.status.code(), Some(3), "{}", describe(&output));
    assert!(text.contains("nothing is written to the queue"), "{text}");
    assert!(
        text.contains("flaky.wasm") && text.contains(&digest),
        "{text}"
    );
    for line in ["#2  info   attempt 2 line 0", "#2  info   attempt 2 line 1"] {
        assert!(text.contains(line), "{text}");
    }
    assert!(
        text.contains("outcome: retryable") && text.contains("flaky: attempt 2 < 5"),
        "{text}"
    );
    println!("replay of the failed job:\n{text}");

    let fix = env.path("fix");
    std::fs::create_dir_all(&fix).expect("fix dir");
    write_atomically(&fix.join("fixed.wasm"), &boxcar_examples::bytes("echo"));
    let fixed = fix.join("fixed.wasm").display().to_string();
    let args = [
        "--json",
        "replay",
        &id,
        "--module",
        &fixed,
        "--handlers",
        &handlers,
    ];
    let output = env.run(&args);
    assert!(output.status.success(), "{}", describe(&output));
    let report: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(report["outcome"], "succeeded", "{report}");
    assert_eq!(report["result"]["succeed_on"], 5, "{report}");
    assert_ne!(report["digest"], digest.as_str(), "{report}");
    assert!(
        report["manifest"]
            .as_str()
            .is_some_and(|m| m.ends_with("flaky.toml")),
        "the deployed manifest of the type: {report}"
    );

    // The module file changes: the recorded digest is found in the cache.
    write_atomically(
        &env.handlers().join("flaky.wasm"),
        &boxcar_examples::bytes("echo"),
    );
    let output = env.run(&["--json", "replay", &id, "--handlers", &handlers]);
    assert_eq!(output.status.code(), Some(3), "{}", describe(&output));
    let report: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(report["outcome"], "retryable", "{report}");
    assert_eq!(report["digest"], digest.as_str(), "{report}");
    assert!(
        report["module"]
            .as_str()
            .is_some_and(|m| m.contains("compile cache")),
        "{report}"
    );
    assert_eq!(report["logs"].as_array().map(Vec::len), Some(2), "{report}");

    let after = dump(&env.db);
    assert_eq!(before, after, "replay changed the database");
}

#[test]
fn a_guests_enqueue_is_a_dry_run_on_replay() {
    let env = Env::sqlite();
    env.fast_config("handled_elsewhere = [\"flood\"]");
    env.deploy(
        "flood",
        "enqueue-flood",
        "[handler]\njob_type = \"flood\"\n[capabilities]\nmay_enqueue = [\"noop\"]\n",
    );
    env.ok(&["migrate"]);
    let id = env
        .ok(&["enqueue", "flood", r#"{"max": 2, "job_type": "noop"}"#])
        .trim()
        .to_string();
    let before = dump(&env.db);
    let handlers = env.handlers().display().to_string();
    let output = env.run(&["replay", &id, "--handlers", &handlers]);
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(output.status.success(), "{}", describe(&output));
    assert_eq!(
        text.matches("dry run: would enqueue noop").count(),
        2,
        "{text}"
    );
    assert!(text.contains(r#""accepted":2"#), "{text}");
    assert!(text.contains("the job has no attempt yet"), "{text}");
    assert_eq!(before, dump(&env.db), "replay changed the database");
    let jobs = env.json(&["jobs"]);
    assert_eq!(jobs.as_array().map(Vec::len), Some(1), "{jobs}");

    let output = env.run(&["replay", "no-such-job", "--handlers", &handlers]);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
}

//! Compile bombs: the module size limit, the compile memory and time
//! budgets of the child compile process, and compiles that do not hold
//! other deploys.

use std::time::{Duration, Instant};

use crate::harness::{eventually, write_atomically, Env};

const ECHO: &str = "[handler]\njob_type = \"echo\"\ntimeout = \"10s\"\n";

/// The last rejection of `name` in the serve log.
fn rejection(log: &str, name: &str) -> Option<String> {
    strip_ansi(log)
        .lines()
        .rev()
        .find(|l| l.contains("handler rejected") && l.contains(&format!("handler={name}")))
        .map(str::to_string)
}

/// `text` without terminal colour sequences (`ESC [ … m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Enqueues `{"v": v}` to echo, waits, returns the `v` it answered.
fn echo(env: &Env, v: i64) -> i64 {
    let payload = format!(r#"{{"v":{v}}}"#);
    let text = env.ok(&["enqueue", "echo", &payload, "--wait", "--timeout", "10s"]);
    let result: serde_json::Value = serde_json::from_str(text.trim()).expect("JSON result");
    result["v"].as_i64().unwrap_or(-1)
}

fn config_with(env: &Env, sandbox: &str) -> String {
    let cache = env.path("cache");
    let path = env.fast_config(&format!(
        "[sandbox]\ncache_dir = \"{}\"\n{sandbox}",
        cache.display()
    ));
    path.display().to_string()
}

#[test]
fn a_module_over_the_size_limit_is_refused_before_compiling() {
    let env = Env::sqlite();
    let config = config_with(&env, "");
    let serve = env.serve("serve", &["--config", &config]);
    serve.wait_for_log("boxcar host started", Duration::from_secs(30));
    // 33 MiB, over the default 32 MiB: refused by size, not parsed.
    write_atomically(&env.handlers().join("huge.wasm"), &vec![0u8; 33 << 20]);
    write_atomically(&env.handlers().join("huge.toml"), ECHO.as_bytes());
    let line = eventually(Duration::from_secs(20), "the size rejection", || {
        rejection(&serve.output(), "huge")
    });
    assert!(
        line.contains("33 MiB, over the 32 MiB module size limit ([sandbox] max_module"),
        "{line}"
    );
    // `boxcar check` says the same and exits 2.
    let output = env.run(&[
        "--config",
        &config,
        "check",
        env.handlers().join("huge.wasm").to_str().expect("utf-8"),
    ]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("module size limit"));
}

#[test]
fn a_compile_over_the_memory_budget_is_refused_and_the_old_version_serves() {
    let env = Env::sqlite();
    let config = config_with(&env, "compile_memory = \"48MiB\"\n");
    let serve = env.serve("serve", &["--config", &config]);
    serve.wait_for_log("boxcar host started", Duration::from_secs(30));
    // The Rust echo compiles within 48 MiB.
    env.deploy("echo", "echo", ECHO);
    serve.wait_for_log("handler deployed", Duration::from_secs(30));
    assert_eq!(echo(&env, 1), 1);

    // A new version whose compile the budget cannot hold.
    write_atomically(&env.handlers().join("echo.wasm"), &slow_component(1500));
    let line = eventually(Duration::from_secs(60), "the budget rejection", || {
        rejection(&serve.output(), "echo")
    });
    assert!(
        line.contains("exceeded the 48 MiB compile memory budget ([sandbox] compile_memory in boxcar.toml); raise it or shrink the module"),
        "{line}"
    );
    // The host is up and the previous version keeps serving.
    assert_eq!(echo(&env, 2), 2);
}

/// A valid component holding one core module of `functions` functions with
/// long bodies that nothing folds away: slow and memory-hungry to compile
/// (about 0.25 s per 100 functions on two cores), quick to generate.
fn slow_component(functions: usize) -> Vec<u8> {
    use std::fmt::Write;
    let mut body = String::new();
    for k in 1..32 {
        let _ = writeln!(
            body,
            "local.get 0 i64.const {} i64.add local.set {k}",
            k * 7919 + 1
        );
    }
    for i in 0..400 {
        let _ = writeln!(
            body,
            "local.get {} local.get {} i64.mul local.get {} i64.xor local.set {}",
            i % 32,
            (i * 7 + 3) % 32,
            (i * 13 + 5) % 32,
            (i * 11 + 1) % 32
        );
    }
    body.push_str("local.get 0\n");
    for k in 1..32 {
        let _ = writeln!(body, "local.get {k} i64.xor");
    }
    let locals = vec!["i64"; 31].join(" ");
    let mut wat = String::from("(component (core module\n");
    for f in 0..functions {
        let _ = writeln!(
            wat,
            "(func $f{f} (param i64) (result i64) (local {locals})\n{body})"
        );
    }
    wat.push_str("))");
    wat::parse_str(&wat).expect("generated component is valid")
}

#[test]
fn a_slow_compile_is_killed_at_its_timeout_and_does_not_hold_other_deploys() {
    let env = Env::sqlite();
    let config = config_with(&env, "compile_timeout = \"10s\"\n");
    let serve = env.serve("serve", &["--config", &config]);
    serve.wait_for_log("boxcar host started", Duration::from_secs(30));

    write_atomically(
        &env.handlers().join("big.wasm"),
        &slow_component(SLOW_FUNCTIONS),
    );
    write_atomically(
        &env.handlers().join("big.toml"),
        b"[handler]\njob_type = \"big\"\n",
    );
    let dropped = Instant::now();
    std::thread::sleep(Duration::from_millis(500));

    // While big compiles, echo deploys and runs.
    env.deploy("echo", "echo", ECHO);
    serve.wait_for_log("handler deployed", Duration::from_secs(9));
    assert_eq!(echo(&env, 3), 3);
    assert!(
        rejection(&serve.output(), "big").is_none(),
        "big settled before echo ran ({:?}); it must still be compiling:\n{}",
        dropped.elapsed(),
        serve.output()
    );

    let line = eventually(Duration::from_secs(30), "the timeout rejection", || {
        rejection(&serve.output(), "big")
    });
    assert!(
        line.contains(
            "took longer than the 10s compile timeout ([sandbox] compile_timeout in boxcar.toml)"
        ),
        "{line}"
    );
    assert!(
        dropped.elapsed() < Duration::from_secs(25),
        "the compile was not stopped at its timeout: {:?}",
        dropped.elapsed()
    );
}

/// Functions in the slow component: compiling it takes well over 10 s.
const SLOW_FUNCTIONS: usize = 5000;

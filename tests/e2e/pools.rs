//! Pool visibility: `boxcar counts` shows each pool's occupancy
//! and budget left, and `boxcar job ID` says what keeps a due job waiting.

use std::time::Duration;

use crate::harness::{eventually, Env};

#[test]
fn counts_show_pool_use_and_job_says_what_blocks_it() {
    let env = Env::sqlite();
    let config = env.fast_config(
        "handlers = \"handlers\"\n[pools.narrow]\nconcurrency = 1\nrate_per_minute = 100\ntypes = [\"slow\"]\n",
    );
    let serve = env.serve("serve", &["--config", config.to_str().expect("utf-8")]);
    env.deploy(
        "slow",
        "sleep",
        "[handler]\njob_type = \"slow\"\ntimeout = \"20s\"\nconcurrency = 2\n",
    );
    serve.wait_for_log("handler deployed", Duration::from_secs(30));
    let first = env
        .ok(&["enqueue", "slow", r#"{"ms": 4000}"#])
        .trim()
        .to_string();
    eventually(Duration::from_secs(10), "the first job to start", || {
        (env.json(&["job", &first])["status"] == "running").then_some(())
    });
    let second = env
        .ok(&["enqueue", "slow", r#"{"ms": 1}"#])
        .trim()
        .to_string();
    std::thread::sleep(Duration::from_millis(300));
    let waiting = env.json(&["job", &second]);
    assert_eq!(waiting["status"], "pending", "{waiting}");
    let why = waiting["blocked_by"].as_str().unwrap_or_default();
    assert!(why.contains("pool `narrow`"), "{waiting}");
    assert!(
        env.json(&["job", &first]).get("blocked_by").is_none(),
        "a running job is not blocked"
    );

    let counts = env.json(&["counts"]);
    assert_eq!(counts["running"], 1, "{counts}");
    assert_eq!(counts["pending"], 1, "{counts}");
    let pool = &counts["pools"][0];
    assert_eq!(pool["name"], "narrow", "{counts}");
    assert_eq!(pool["occupied"], 1, "{counts}");
    assert_eq!(pool["concurrency"], 1, "{counts}");
    assert_eq!(pool["spent"], 1, "{counts}");
    assert_eq!(pool["budget_left"], 99, "{counts}");
    let table = env.ok(&["counts"]);
    assert!(
        table.contains("narrow") && table.contains("1/1") && table.contains("99/100"),
        "{table}"
    );

    eventually(Duration::from_secs(15), "the second job to run", || {
        (env.json(&["job", &second])["status"] == "succeeded").then_some(())
    });
}

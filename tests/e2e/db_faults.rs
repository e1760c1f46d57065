//! Database faults while jobs run: the Postgres server restarted, its
//! backends killed. Two hosts keep running without a restart of their own,
//! every job enqueued before, during and after the fault succeeds, and the
//! LISTEN connection comes back (an idle host with a 30 s poll interval
//! picks a new job up within a second or two, which only a notification
//! can do).

use std::time::{Duration, Instant};

use crate::{
    harness::{eventually, Env, Serve},
    private_postgres::PrivatePostgres,
};

const BATCH: usize = 300;

#[test]
fn postgres_restart_mid_run_loses_nothing_and_listen_comes_back() {
    let Some(server) = PrivatePostgres::start() else {
        return;
    };
    let (env, mut hosts) = two_hosts(&server);
    enqueue_batch(&env, "before", BATCH);
    wait_until_succeeded(&env, 40);
    assert_mid_run(&env);
    server.restart();
    after_the_fault(&env, &mut hosts);
}

#[test]
fn killed_backends_are_replaced_and_nothing_is_lost() {
    let Some(server) = PrivatePostgres::start() else {
        return;
    };
    let (env, mut hosts) = two_hosts(&server);
    enqueue_batch(&env, "before", BATCH);
    wait_until_succeeded(&env, 40);
    assert_mid_run(&env);
    let mut killed = 0;
    for _ in 0..5 {
        killed += server.kill_backends();
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(killed >= 5, "the hosts' connections were killed ({killed})");
    after_the_fault(&env, &mut hosts);
}

/// Two hosts on the private server serving `slow` (100 ms jobs, 2 s lease)
/// and polling only every 30 s.
fn two_hosts(server: &PrivatePostgres) -> (Env, Vec<Serve>) {
    let env = Env::with_db(server.url());
    std::fs::write(
        env.path("boxcar.toml"),
        "[worker]\npoll_interval = \"30s\"\nbase_backoff = \"100ms\"\nmax_backoff = \"1s\"\n",
    )
    .expect("config");
    env.deploy(
        "slow",
        "sleep",
        "[handler]\njob_type = \"slow\"\nconcurrency = 8\ntimeout = \"10s\"\nlease_duration = \"2s\"\n",
    );
    env.ok(&["migrate"]);
    let hosts: Vec<Serve> = ["a", "b"].iter().map(|n| env.serve(n, &[])).collect();
    for host in &hosts {
        host.wait_for_log("handler deployed", Duration::from_secs(60));
    }
    (env, hosts)
}

/// Enqueues `jobs` 100 ms jobs in one flow (one transaction), retrying the
/// producer while the database is unreachable.
fn enqueue_batch(env: &Env, tag: &str, jobs: usize) {
    let children: Vec<serde_json::Value> = (0..jobs)
        .map(|n| serde_json::json!({"job_type": "slow", "payload": {"ms": 100, "n": n}}))
        .collect();
    let file = env.path(&format!("{tag}.json"));
    std::fs::write(&file, serde_json::to_string(&children).expect("json")).expect("write");
    let file = file.to_str().expect("utf-8").to_string();
    eventually(
        Duration::from_secs(30),
        "the enqueue to be accepted",
        || {
            env.run(&["enqueue", "slow", r#"{"ms": 1}"#, "--children", &file])
                .status
                .success()
                .then_some(())
        },
    );
}

fn succeeded(env: &Env) -> Option<u64> {
    let output = env.run(&["--json", "counts"]);
    if !output.status.success() {
        return None;
    }
    serde_json::from_slice::<serde_json::Value>(&output.stdout)
        .ok()?
        .get("succeeded")?
        .as_u64()
}

fn wait_until_succeeded(env: &Env, at_least: u64) {
    eventually(Duration::from_secs(30), "jobs to be running", || {
        succeeded(env).filter(|&n| n >= at_least)
    });
}

/// The fault must land while the first batch is still running.
fn assert_mid_run(env: &Env) {
    let done = succeeded(env).unwrap_or(0);
    assert!(
        done < BATCH as u64,
        "the whole batch finished before the fault ({done}): make the jobs longer"
    );
}

/// The checks shared by every fault: both hosts still up, everything from
/// before and after the fault succeeds, and a fresh job is picked up by
/// notification.
fn after_the_fault(env: &Env, hosts: &mut [Serve]) {
    enqueue_batch(env, "after", BATCH);
    let total = 2 * (BATCH as u64 + 1);
    eventually(
        Duration::from_secs(90),
        "every job from before and after the fault to succeed",
        || succeeded(env).filter(|&n| n == total),
    );
    for host in hosts.iter_mut() {
        assert!(
            host.is_running(),
            "a host exited on a database fault:\n{}",
            host.output()
        );
    }
    let counts = env.json(&["counts"]);
    assert_eq!(counts["failed"], 0, "{counts}");
    assert_eq!(counts["running"], 0, "{counts}");

    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let id = env
        .ok(&["enqueue", "slow", r#"{"ms": 1}"#])
        .trim()
        .to_string();
    eventually(
        Duration::from_secs(10),
        "the fresh job to be picked up by notification",
        || (env.json(&["job", &id])["status"] == "succeeded").then_some(()),
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "pickup after recovery took {:?}: the LISTEN connection did not come back",
        started.elapsed()
    );
}

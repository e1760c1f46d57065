//! `boxcar enqueue … --wait` from another process than the serving host
//! returns when the job ends, not on a poll tick: on SQLite (the host and
//! the waiter notice each other's commits to the file) and on Postgres
//! (LISTEN); the HTTP API's wait stays fast. Each test prints its figures.

use std::time::{Duration, Instant};

use crate::{
    api::http,
    harness::{postgres_schema, Env, Serve},
};

const ECHO: &str = "[handler]\njob_type = \"echo\"\ntimeout = \"10s\"\n";
/// Round trips measured after the warm-up.
const RUNS: usize = 15;
/// The bound on the median round trip of a 1 ms job.
const BOUND_MS: f64 = 50.0;

/// Starts a host serving `echo` with the default configuration (a 500 ms
/// poll interval: only notifications make it fast).
fn echo_host(env: &Env) -> Serve {
    env.deploy("echo", "echo", ECHO);
    let serve = env.serve("serve", &[]);
    serve.wait_for_log("handler deployed", Duration::from_secs(60));
    serve
}

/// Milliseconds `run` took, `RUNS` times after three warm-up runs, sorted.
fn timed(mut run: impl FnMut()) -> Vec<f64> {
    let (all, _, _) = timed_pairs(&mut run, || {});
    all
}

fn millis(run: &mut impl FnMut()) -> f64 {
    let start = Instant::now();
    run();
    start.elapsed().as_secs_f64() * 1000.0
}

/// `first` and `second` run alternately, `RUNS` times each after three
/// warm-ups, so both see the same load (a loaded CI machine drifts between
/// two series run one after the other); returns each one's figures and
/// the pairwise differences `first - second`, all sorted.
fn timed_pairs(
    mut first: impl FnMut(),
    mut second: impl FnMut(),
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    for _ in 0..3 {
        first();
        second();
    }
    let (mut a, mut b, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let (x, y) = (millis(&mut first), millis(&mut second));
        a.push(x);
        b.push(y);
        diff.push(x - y);
    }
    for v in [&mut a, &mut b, &mut diff] {
        v.sort_by(f64::total_cmp);
    }
    (a, b, diff)
}

fn median(sorted: &[f64]) -> f64 {
    sorted[sorted.len() / 2]
}

fn show(what: &str, sorted: &[f64]) {
    let figures: Vec<String> = sorted.iter().map(|ms| format!("{ms:.1}")).collect();
    println!(
        "{what}: median {:.1} ms, min {:.1}, max {:.1} (ms, sorted: {})",
        median(sorted),
        sorted[0],
        sorted[sorted.len() - 1],
        figures.join(" ")
    );
}

/// Measures `enqueue --wait` and a bare command (the process's own cost)
/// alternately, then the HTTP API's enqueue + wait; returns the median of
/// the CLI wait and the median of its excess over the bare command.
fn measure(env: &Env, serve: &Serve, store: &str) -> (f64, f64) {
    let (cli, bare, excess) = timed_pairs(
        || {
            let out = env.ok(&["enqueue", "echo", r#"{"n":1}"#, "--wait"]);
            assert_eq!(out.trim(), r#"{"n":1}"#);
        },
        || {
            env.ok(&["counts"]);
        },
    );
    show(&format!("{store}: boxcar enqueue echo --wait"), &cli);
    show(
        &format!("{store}: boxcar counts (process start-up and one read)"),
        &bare,
    );
    show(
        &format!("{store}: --wait minus counts, run by run"),
        &excess,
    );
    let api = timed(|| {
        let (status, added) = http(
            &serve.listen,
            "POST",
            "/jobs",
            Some(r#"{"job_type":"echo","payload":{}}"#),
            None,
        );
        assert_eq!(status, 201, "{added}");
        let id = added["id"].as_str().expect("id");
        let path = format!("/jobs/{id}/wait?timeout=5s");
        let (status, job) = http(&serve.listen, "GET", &path, None, None);
        assert_eq!(status, 200, "{job}");
        assert_eq!(job["status"], "succeeded", "{job}");
    });
    show(
        &format!("{store}: HTTP POST /jobs + GET /jobs/ID/wait"),
        &api,
    );
    assert!(
        median(&api) < BOUND_MS,
        "the HTTP API's wait took {:.1} ms (median)",
        median(&api)
    );
    (median(&cli), median(&excess))
}

#[test]
fn enqueue_wait_on_sqlite_returns_within_50ms_of_a_1ms_job() {
    let env = Env::sqlite();
    let serve = echo_host(&env);
    let (cli, _) = measure(&env, &serve, "sqlite");
    assert!(
        cli < BOUND_MS,
        "enqueue --wait took {cli:.1} ms (median), over {BOUND_MS} ms"
    );
}

#[test]
fn enqueue_wait_on_postgres_returns_when_the_job_ends() {
    let Some((url, _drop)) = postgres_schema("wait") else {
        return;
    };
    let env = Env::with_db(url);
    let serve = echo_host(&env);
    // A Postgres client's connection set-up alone is tens of milliseconds:
    // the wait must add less than the bound to a bare command's cost.
    let (cli, excess) = measure(&env, &serve, "postgres");
    assert!(
        excess < BOUND_MS,
        "enqueue --wait took {cli:.1} ms (median), {excess:.1} ms over a bare command run beside it (median)"
    );
}

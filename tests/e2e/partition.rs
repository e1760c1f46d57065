//! A network partition between a host and Postgres. Two `boxcar serve`
//! hosts, each in a network namespace of its own whose only way to the
//! (private) server is its own veth link. Host A claims a job; its link is
//! cut while the job runs and stays down for longer than the job's lease.
//! A's run ends while it is cut off, so its completion waits on a stalled
//! connection. Host B takes the job over after the lease and finishes it.
//! When A's link comes back, A's late completion reaches the server and is
//! refused by the fence. Then, from the database, the journal and A's log:
//! - the job ran on both hosts (a journal entry from each, A's complete);
//! - its attempts say `lease_lost` for A's run and `succeeded` for B's,
//!   and there is exactly one success; the stored result is B's;
//! - A logged its completion as rejected, and A, still running, serves new
//!   work once B is gone.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{
    harness::{eventually, write_atomically, Env, Serve},
    netns::Network,
    private_postgres::PrivatePostgres,
};

/// The job's lease. It is renewed every third of it (2 s), and A's run
/// must end before its first renewal: a renewal sent over the cut link
/// stalls the run until the link is back, when the lease is long gone and
/// the run is stopped instead of completed.
const LEASE: Duration = Duration::from_millis(6000);
/// How long the job runs: 0.8 s short of the first renewal.
const RUN: Duration = Duration::from_millis(1200);
/// When A's link is cut, counted from A's run start (seen in the journal):
/// while the run still goes on, 0.9 s before it ends.
const CUT_AFTER: Duration = Duration::from_millis(300);

fn manifest(host: &str, journal: &Path) -> String {
    format!(
        "[handler]\njob_type = \"long\"\nconcurrency = 1\ntimeout = \"20s\"\n\
         lease_duration = \"{}ms\"\nmax_attempts = 5\n\n\
         [capabilities]\ndirs = [{{ host = \"{}\", guest = \"/journal\", mode = \"rw\" }}]\n\
         env = {{ HOST = \"{host}\" }}\n",
        LEASE.as_millis(),
        journal.display()
    )
}

/// A handlers directory of `host`'s own, so its journal runs carry its name.
fn deploy(env: &Env, host: &str, journal: &Path) -> PathBuf {
    let dir = env.path(&format!("handlers-{host}"));
    std::fs::create_dir_all(&dir).expect("handlers dir");
    write_atomically(&dir.join("long.wasm"), &boxcar_examples::bytes("journal"));
    write_atomically(&dir.join("long.toml"), manifest(host, journal).as_bytes());
    dir
}

/// Starts `host` inside its namespace, on the server's address at the root
/// end of its link.
fn start(env: &Env, net: &Network, server: &PrivatePostgres, host: &str) -> Serve {
    let handlers = deploy(env, host, &env.path("journal"));
    let db = server.url_at(&net.link(host).root_ip);
    let serve = env.serve_via(
        host,
        &handlers,
        &net.exec_prefix(host),
        &["--no-api", "--worker-id", host, "--db", &db],
    );
    serve.wait_for_log("handler deployed", Duration::from_secs(60));
    serve
}

/// One run in the journal: its host and whether it got to its end.
#[derive(Debug)]
struct Run {
    job: String,
    host: String,
    finished: bool,
}

fn journal(dir: &Path) -> Vec<Run> {
    let mut runs = Vec::new();
    for entry in std::fs::read_dir(dir).expect("journal dir").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let parts: Vec<&str> = name.split('.').collect();
        let [job, _attempt, host, _start] = parts[..] else {
            panic!("unexpected journal file {name}");
        };
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        runs.push(Run {
            job: job.to_string(),
            host: host.to_string(),
            finished: text.lines().any(|l| l.starts_with("end ")),
        });
    }
    runs
}

fn attempts(job: &Value) -> Vec<(String, String)> {
    job["attempt_history"]
        .as_array()
        .expect("attempt_history")
        .iter()
        .map(|a| {
            (
                a["worker"].as_str().unwrap_or_default().to_string(),
                a["outcome"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_partitioned_hosts_job_is_taken_over_and_its_late_completion_refused() {
    let Some(net) = Network::create(&["a", "b"]) else {
        return;
    };
    let Some(server) = PrivatePostgres::start_reachable(&net.root_ips(), Some(&net.subnet)) else {
        return;
    };
    let env = Env::with_db(server.url());
    env.fast_config("");
    let journal_dir = env.path("journal");
    std::fs::create_dir_all(&journal_dir).expect("journal dir");
    env.ok(&["migrate"]);

    let mut a = start(&env, &net, &server, "a");
    let payload = format!("{{\"ms\": {}}}", RUN.as_millis());
    let id = env.ok(&["enqueue", "long", &payload]).trim().to_string();
    eventually(Duration::from_secs(20), "host a to start the job", || {
        journal(&journal_dir)
            .iter()
            .any(|r| r.job == id && r.host == "a")
            .then_some(())
    });
    std::thread::sleep(CUT_AFTER);
    net.cut("a");
    let cut = Instant::now();
    eprintln!("partition: cut host a's link {CUT_AFTER:?} into its run");

    let mut b = start(&env, &net, &server, "b");
    let done = eventually(
        Duration::from_secs(30),
        "host b to take the job over and finish it",
        || {
            let job = env.json(&["job", &id]);
            (job["status"] == "succeeded").then_some(job)
        },
    );
    let taken_over = cut.elapsed();
    assert!(
        taken_over >= LEASE - CUT_AFTER,
        "the job finished {taken_over:?} after the cut, before a's lease could have run out"
    );
    eprintln!("partition: host b finished the job {taken_over:?} after the cut");
    assert_eq!(done["result"]["host"], "b", "{done}");

    net.restore("a");
    let restored = Instant::now();
    eventually(
        Duration::from_secs(40),
        "host a's late completion to reach the server",
        || {
            let overwritten = env.json(&["job", &id])["result"]["host"] != "b";
            (overwritten || a.output().contains("completion rejected")).then_some(())
        },
    );
    let job = env.json(&["job", &id]);
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(
        job["result"]["host"], "b",
        "a's completion overwrote b's: {job}"
    );
    eprintln!(
        "partition: host a's late completion was refused {:?} after its link came back",
        restored.elapsed()
    );
    assert!(
        a.output()
            .lines()
            .any(|l| l.contains("completion rejected") && l.contains(&id)),
        "the rejected completion is the job's:\n{}",
        a.output()
    );

    let history = attempts(&job);
    assert!(
        history.contains(&("a".into(), "lease_lost".into())),
        "a's attempt is lease_lost: {history:?}"
    );
    let successes: Vec<_> = history.iter().filter(|(_, o)| o == "succeeded").collect();
    assert_eq!(
        successes,
        [&("b".to_string(), "succeeded".to_string())],
        "exactly one success, b's: {history:?}"
    );
    let runs = journal(&journal_dir);
    let of_job = |host: &str| {
        runs.iter()
            .filter(|r| r.job == id && r.host == host)
            .count()
    };
    assert_eq!((of_job("a"), of_job("b")), (1, 1), "{runs:?}");
    assert!(
        runs.iter()
            .any(|r| r.job == id && r.host == "a" && r.finished),
        "a's run got to its end while cut off, so its completion was late: {runs:?}"
    );

    assert!(b.terminate().success(), "b stops cleanly");
    let fresh = env
        .ok(&["enqueue", "long", r#"{"ms": 10}"#])
        .trim()
        .to_string();
    let fresh_job = eventually(
        Duration::from_secs(30),
        "host a to serve new work after its link came back",
        || {
            let job = env.json(&["job", &fresh]);
            (job["status"] == "succeeded").then_some(job)
        },
    );
    assert_eq!(
        attempts(&fresh_job),
        [("a".to_string(), "succeeded".to_string())],
        "{fresh_job}"
    );
    assert!(
        a.is_running(),
        "host a survives the partition:\n{}",
        a.output()
    );
    eprintln!(
        "partition: host a ran new work {:?} after its link came back",
        restored.elapsed()
    );
}

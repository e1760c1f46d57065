//! The containment soak: one `boxcar serve` runs 100 hostile jobs, spread
//! over every `tests/hostile/*.toml` attack, mixed into 1,000 `echo` jobs.
//! Afterwards the host is still up, every echo succeeded on its first
//! attempt, every attack ended as its file says, the host's resident memory
//! is back within 50 MiB of where it was before the first job (every handler
//! deployed), and the configured scratch root holds nothing. The RSS after a
//! warm-up round (every attack once) is printed too, to tell one-off growth
//! from growth per job.

use std::{
    collections::HashMap,
    path::Path,
    time::{Duration, Instant},
};

use serde_json::{json, Value};

use crate::{
    api::http,
    harness::{Env, Serve},
    hostile::{self, Attack},
};

const ECHOES: usize = 1000;
const HOSTILE: usize = 100;
const RSS_SLACK_KIB: u64 = 50 * 1024;
/// How long the host is left idle before its memory is read: longer than
/// `serve`'s 2 s period of returning the C heap's free pages.
const SETTLE: Duration = Duration::from_secs(3);

fn enqueue(serve: &Serve, job_type: &str, payload: &Value) -> String {
    let body = json!({"job_type": job_type, "payload": payload}).to_string();
    let (status, added) = http(&serve.listen, "POST", "/jobs", Some(&body), None);
    assert_eq!(status, 201, "enqueue {job_type}: {added}");
    added["id"].as_str().expect("id").to_string()
}

/// Waits until nothing is pending or running; `false` after `timeout`.
fn drained(serve: &Serve, timeout: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        let (_, counts) = http(&serve.listen, "GET", "/counts", None, None);
        if counts["pending"] == 0 && counts["running"] == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// A `/proc/PID/status` figure of process `pid` (`VmRSS:`, `RssAnon:`,
/// `RssFile:` in KiB; `Threads:` a count).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} line"))
}

/// The resident set size of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// Where the resident memory of `pid` is, for the soak's report: anonymous
/// and file-backed KiB, what the idle pool slots hold (`/metrics`), and the
/// number of threads.
fn rss_parts(serve: &Serve, pid: u32) -> String {
    let (_, metrics) = http(&serve.listen, "GET", "/metrics", None, None);
    let text = metrics.as_str().unwrap_or_default();
    let pool: u64 = text
        .lines()
        .filter(|l| l.starts_with("boxcar_sandbox_idle_resident_bytes{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    format!(
        "anon {} KiB, file {} KiB, idle pool slots {} KiB, {} threads",
        status_kib(pid, "RssAnon:"),
        status_kib(pid, "RssFile:"),
        pool >> 10,
        status_kib(pid, "Threads:")
    )
}

/// Every echo job, by id.
fn echo_jobs(serve: &Serve) -> HashMap<String, Value> {
    let mut jobs = HashMap::new();
    for offset in (0..).step_by(1000) {
        let path = format!("/jobs?type=echo&limit=1000&offset={offset}");
        let (status, page) = http(&serve.listen, "GET", &path, None, None);
        assert_eq!(status, 200, "{page}");
        let page = page.as_array().cloned().unwrap_or_default();
        let done = page.len() < 1000;
        for job in page {
            jobs.insert(job["id"].as_str().unwrap_or_default().to_string(), job);
        }
        if done {
            break;
        }
    }
    jobs
}

/// Runs `attacks` (each with its id) and checks each against its file.
fn attack_failures(serve: &Serve, ran: &[(&Attack, String)]) -> Vec<String> {
    ran.iter()
        .filter_map(|(attack, id)| {
            let (_, job) = http(&serve.listen, "GET", &format!("/jobs/{id}"), None, None);
            attack.check(&job).err()
        })
        .collect()
}

fn echo_failures(serve: &Serve, ids: &[String]) -> Vec<String> {
    let jobs = echo_jobs(serve);
    ids.iter()
        .filter_map(|id| match jobs.get(id) {
            Some(job) if job["status"] == "succeeded" && job["attempts"] == 1 => None,
            Some(job) => Some(format!(
                "echo {id}: status {} after {} attempt(s), last_error {}",
                job["status"], job["attempts"], job["last_error"]
            )),
            None => Some(format!("echo {id}: not listed")),
        })
        .collect()
}

fn scratch_leftovers(scratch: &Path) -> Result<Vec<String>, String> {
    let entries = std::fs::read_dir(scratch).map_err(|e| {
        format!(
            "the scratch root {} was never made ({e}): is [sandbox] scratch_dir honoured?",
            scratch.display()
        )
    })?;
    Ok(entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect())
}

#[test]
fn a_hundred_attacks_among_a_thousand_echoes_leave_the_host_as_it_was() {
    let attacks = hostile::load_all();
    assert!(
        attacks.len() <= HOSTILE,
        "{} attack kinds: raise HOSTILE so that each runs at least once in the soak",
        attacks.len()
    );
    let env = Env::sqlite();
    let scratch = env.path("scratch");
    let config = env.fast_config(&format!(
        "{}scratch_dir = \"{}\"\n",
        hostile::SANDBOX,
        scratch.display()
    ));
    let mut serve = hostile::start(&env, &attacks, &config);
    let pid = serve.pid().expect("serve is running");
    let fixture = hostile::fixture(&env);
    let mut failures = Vec::new();
    std::thread::sleep(SETTLE);
    let at_start = rss_kib(pid);
    let parts_at_start = rss_parts(&serve, pid);

    // Warm-up: every attack once, among echoes, so pools and caches settle.
    let started = Instant::now();
    let mut echoes = Vec::new();
    let mut warm = Vec::new();
    for (i, attack) in attacks.iter().enumerate() {
        echoes.push(enqueue(&serve, "echo", &json!({ "warm": i })));
        warm.push((
            attack,
            enqueue(&serve, &attack.name, &attack.payload(&fixture)),
        ));
    }
    if !drained(&serve, Duration::from_secs(60)) {
        failures.push("the warm-up round did not finish within 60s".to_string());
    }
    failures.extend(attack_failures(&serve, &warm));
    std::thread::sleep(SETTLE);
    let after_warm_up = rss_kib(pid);
    let warmed = started.elapsed();

    // The soak: a hostile job after every tenth echo, cycling the attacks.
    let started = Instant::now();
    let mut ran = Vec::new();
    for i in 0..ECHOES {
        echoes.push(enqueue(&serve, "echo", &json!({ "i": i })));
        if i % (ECHOES / HOSTILE) == ECHOES / HOSTILE / 2 {
            let attack = &attacks[ran.len() % attacks.len()];
            ran.push((
                attack,
                enqueue(&serve, &attack.name, &attack.payload(&fixture)),
            ));
        }
    }
    assert_eq!(ran.len(), HOSTILE);
    let enqueued = started.elapsed();
    if !drained(&serve, Duration::from_secs(150)) {
        let (_, counts) = http(&serve.listen, "GET", "/counts", None, None);
        failures.push(format!(
            "not every job finished within 150s of the soak: {counts}"
        ));
    }
    let soaked = started.elapsed();
    std::thread::sleep(SETTLE);
    let after = rss_kib(pid);
    let parts_after = rss_parts(&serve, pid);
    eprintln!(
        "containment soak: {} attack kinds; warm-up {warmed:?}; enqueue {enqueued:?}; soak {soaked:?}; \
         RSS at start {at_start} KiB ({parts_at_start}), after warm-up {after_warm_up} KiB, \
         after soak {after} KiB ({parts_after})",
        attacks.len()
    );

    if !serve.is_running() {
        failures.push("the host process exited".to_string());
    }
    let echo_failed = echo_failures(&serve, &echoes);
    if !echo_failed.is_empty() {
        failures.push(format!(
            "{} of {} echo jobs did not succeed on their first attempt; first ones:\n  {}",
            echo_failed.len(),
            echoes.len(),
            echo_failed[..echo_failed.len().min(10)].join("\n  ")
        ));
    }
    failures.extend(attack_failures(&serve, &ran));
    if after > at_start + RSS_SLACK_KIB {
        failures.push(format!(
            "RSS grew from {at_start} KiB before the first job ({parts_at_start}; {after_warm_up} KiB after the warm-up round) to {after} KiB after the soak ({parts_after}; more than {RSS_SLACK_KIB} KiB)"
        ));
    }
    match scratch_leftovers(&scratch) {
        Ok(left) if left.is_empty() => {}
        Ok(left) => failures.push(format!(
            "the scratch root {} holds {} leftover(s): {:?}",
            scratch.display(),
            left.len(),
            &left[..left.len().min(10)]
        )),
        Err(e) => failures.push(e),
    }
    assert!(
        failures.is_empty(),
        "containment failed:\n{}",
        failures.join("\n")
    );
}

//! Recurring schedules end to end: three hosts on one database
//! enqueue one job per tick, a host down across several ticks runs one
//! catch-up job, edits in `boxcar.toml` update a schedule in place and
//! removals delete it, invalid declarations are named `<id>: <reason>`.

use std::{collections::BTreeSet, time::Duration};

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::harness::{describe, eventually, postgres_schema, Env};

const EVERY_SECOND: &str = r#"
[[schedules]]
id = "tick"
job_type = "echo"
every = "1s"
payload = { from = "schedule" }
"#;

fn deploy_echo(env: &Env) {
    env.deploy(
        "echo",
        "echo",
        "[handler]\njob_type = \"echo\"\nconcurrency = 4\ntimeout = \"10s\"\n",
    );
}

fn instant(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("not a time: {value}"))
}

/// The scheduled jobs' ticks (their `run_at`), asserting each tick is unique.
fn ticks(env: &Env) -> Vec<DateTime<Utc>> {
    let jobs = env.json(&["jobs", "--type", "echo", "--limit", "1000"]);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for job in jobs.as_array().expect("array") {
        assert_eq!(job["schedule_id"], "tick", "{job}");
        let tick = instant(&job["run_at"]);
        assert!(seen.insert(tick), "tick {tick} was enqueued twice");
        out.push(tick);
    }
    out.sort();
    out
}

fn three_hosts_one_job_per_tick(env: &Env) {
    env.fast_config(EVERY_SECOND);
    deploy_echo(env);
    env.ok(&["migrate"]);
    let hosts: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|name| env.serve(name, &[]))
        .collect();
    for host in &hosts {
        host.wait_for_log("boxcar host started", Duration::from_secs(60));
    }
    let from = Utc::now();
    std::thread::sleep(Duration::from_secs(10));
    let to = Utc::now();
    drop(hosts);
    let all = ticks(env);
    let window: Vec<_> = all.iter().filter(|t| **t >= from && **t < to).collect();
    eprintln!(
        "three hosts: {} jobs due in the 10 s window, {} in all, no tick twice",
        window.len(),
        all.len()
    );
    assert!(
        (9..=11).contains(&window.len()),
        "{} jobs in 10 s, expected 9..=11: {all:?}",
        window.len()
    );
    for pair in all.windows(2) {
        assert!(
            pair[1] - pair[0] >= chrono::Duration::milliseconds(999),
            "ticks closer than the interval: {pair:?}"
        );
    }
}

#[test]
fn three_hosts_enqueue_one_job_per_tick_on_sqlite() {
    three_hosts_one_job_per_tick(&Env::sqlite());
}

#[test]
fn three_hosts_enqueue_one_job_per_tick_on_postgres() {
    let Some((url, _drop_schema)) = postgres_schema("sched3") else {
        return;
    };
    three_hosts_one_job_per_tick(&Env::with_db(url));
}

fn host_down_across_ticks_runs_one_catch_up(env: &Env) {
    env.fast_config(EVERY_SECOND);
    deploy_echo(env);
    let mut host = env.serve("first", &[]);
    host.wait_for_log("boxcar host started", Duration::from_secs(60));
    eventually(Duration::from_secs(10), "a first scheduled job", || {
        (!ticks(env).is_empty()).then_some(())
    });
    let status = host.terminate();
    assert!(status.success(), "graceful exit: {status}");
    let before = ticks(env);
    std::thread::sleep(Duration::from_millis(3500));
    let restarted = Utc::now();
    let again = env.serve("second", &[]);
    again.wait_for_log("boxcar host started", Duration::from_secs(60));
    eventually(Duration::from_secs(10), "the catch-up job", || {
        (ticks(env).len() > before.len()).then_some(())
    });
    std::thread::sleep(Duration::from_millis(1500));
    drop(again);
    let all = ticks(env);
    let new: Vec<_> = all.iter().filter(|t| !before.contains(t)).collect();
    let caught_up: Vec<_> = new.iter().filter(|t| ***t < restarted).collect();
    assert_eq!(
        caught_up.len(),
        1,
        "three ticks were missed while no host ran; expected one catch-up job, then ticks after the restart: before {before:?}, after {new:?}"
    );
    assert!(
        new.len() <= 5,
        "one catch-up plus at most one job per second after the restart: {new:?}"
    );
}

#[test]
fn a_host_down_across_three_ticks_runs_one_catch_up_job_on_sqlite() {
    host_down_across_ticks_runs_one_catch_up(&Env::sqlite());
}

#[test]
fn a_host_down_across_three_ticks_runs_one_catch_up_job_on_postgres() {
    let Some((url, _drop_schema)) = postgres_schema("schedcatch") else {
        return;
    };
    host_down_across_ticks_runs_one_catch_up(&Env::with_db(url));
}

fn schedule_config(env: &Env, cron: Option<&str>) {
    let text = cron.map_or(String::new(), |cron| {
        format!(
            "[[schedules]]\nid = \"nightly\"\njob_type = \"app.reconcile\"\ncron = \"{cron}\"\ntz = \"Europe/Berlin\"\npayload = {{ full = true }}\n"
        )
    });
    std::fs::write(env.path("boxcar.toml"), text).expect("config");
}

fn edits_update_in_place_and_removal_deletes(env: &Env) {
    schedule_config(env, Some("17 3 * * *"));
    let listed = env.json(&["schedules", "--reconcile"]);
    let first = &listed.as_array().expect("array")[0];
    assert_eq!(first["id"], "nightly");
    assert_eq!(first["cron"], "17 3 * * *");
    assert_eq!(first["tz"], "Europe/Berlin");
    let first_next = instant(&first["next_run_at"]);

    // Reconciling the same declaration again changes nothing.
    let same = env.json(&["schedules", "--reconcile"]);
    assert_eq!(same[0]["next_run_at"], first["next_run_at"]);
    assert_eq!(same[0]["updated_at"], first["updated_at"]);

    schedule_config(env, Some("45 4 * * *"));
    let edited = env.json(&["schedules", "--reconcile"]);
    let edited = edited.as_array().expect("array");
    assert_eq!(edited.len(), 1, "updated in place, not added: {edited:?}");
    assert_eq!(edited[0]["id"], "nightly");
    assert_eq!(edited[0]["cron"], "45 4 * * *");
    let next = instant(&edited[0]["next_run_at"]);
    assert_ne!(next, first_next);
    let utc = next.format("%H:%M").to_string();
    assert!(
        utc == "02:45" || utc == "03:45",
        "04:45 in Berlin is 02:45 or 03:45 UTC, got {utc}"
    );
    let table = env.ok(&["schedules"]);
    assert!(
        table.contains("nightly") && table.contains("cron 45 4 * * * (Europe/Berlin)"),
        "{table}"
    );

    schedule_config(env, None);
    let removed = env.json(&["schedules", "--reconcile"]);
    assert_eq!(
        removed,
        serde_json::json!([]),
        "removed from the config, deleted"
    );
}

#[test]
fn editing_a_schedule_updates_it_in_place_and_removing_deletes_it_on_sqlite() {
    edits_update_in_place_and_removal_deletes(&Env::sqlite());
}

#[test]
fn editing_a_schedule_updates_it_in_place_and_removing_deletes_it_on_postgres() {
    let Some((url, _drop_schema)) = postgres_schema("schededit") else {
        return;
    };
    edits_update_in_place_and_removal_deletes(&Env::with_db(url));
}

#[test]
fn invalid_declarations_are_refused_with_id_and_reason() {
    let env = Env::sqlite();
    std::fs::write(
        env.path("boxcar.toml"),
        r#"
[[schedules]]
id = "both"
job_type = "a"
every = "1s"
cron = "* * * * *"

[[schedules]]
id = "bad-zone"
job_type = "a"
cron = "0 3 * * *"
tz = "Mars/Olympus"

[[schedules]]
id = "bad-zone"
job_type = "a"
every = "5m"
"#,
    )
    .expect("config");
    let output = env.run(&["schedules"]);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    for expected in [
        "both: set exactly one of `every` and `cron`, not both",
        "bad-zone: `tz` `Mars/Olympus` is not an IANA time zone name",
        "bad-zone: declared more than once; schedule ids must be unique",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
}

#[test]
fn schedules_are_listed_over_the_api() {
    let env = Env::sqlite();
    env.fast_config(EVERY_SECOND);
    deploy_echo(&env);
    let serve = env.serve("serve", &[]);
    serve.wait_for_log("HTTP API listening", Duration::from_secs(60));
    let (status, body) = crate::api::http(&serve.listen, "GET", "/schedules", None, None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body[0]["id"], "tick");
    assert_eq!(body[0]["every"], "1s");
    assert!(body[0]["next_run_at"].is_string(), "{body}");
}

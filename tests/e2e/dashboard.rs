//! The dashboard in headless Chromium against the real binary: live counts,
//! filters, paging by cursor, a failed job's attempts and logs, cancel and
//! retry from the page, bulk retry, hostile text rendered as text, and the
//! token prompt.
//! Screenshots of the overview, a failed job and the handlers view are
//! written under `target/dashboard-screenshots/`.

use std::time::Duration;

use serde_json::Value;

use crate::{
    api::http,
    harness::{eventually, Env, Serve},
    webdriver::Browser,
};

const FLAKY: &str = "[handler]\njob_type = \"flaky\"\ntimeout = \"10s\"\nmax_attempts = 3\n";

/// A SQLite env with fast polling, the given handlers deployed (name,
/// example, manifest) and `serve` running with `extra` arguments.
fn served(handlers: &[(&str, &str, &str)], extra: &[&str]) -> (Env, Serve) {
    let env = Env::sqlite();
    env.fast_config("");
    for (name, example, manifest) in handlers {
        env.deploy(name, example, manifest);
    }
    let serve = env.serve("serve", extra);
    eventually(Duration::from_secs(60), "every handler deployed", || {
        (serve.output().matches("handler deployed").count() >= handlers.len()).then_some(())
    });
    (env, serve)
}

fn enqueue(env: &Env, args: &[&str]) -> String {
    let mut all = vec!["enqueue"];
    all.extend_from_slice(args);
    env.ok(&all).trim().to_string()
}

fn status(env: &Env, id: &str) -> String {
    env.json(&["job", id])["status"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn wait_status(env: &Env, id: &str, want: &str) {
    eventually(Duration::from_secs(60), &format!("job {id} {want}"), || {
        (status(env, id) == want).then_some(())
    });
}

/// A `flaky` job that fails all of its three attempts, each logging two
/// lines; returns its id once it has failed.
fn failed_flaky(env: &Env) -> String {
    let id = enqueue(
        env,
        &[
            "flaky",
            r#"{"succeed_on": 99, "log_lines": 2}"#,
            "--max-attempts",
            "3",
        ],
    );
    wait_status(env, &id, "failed");
    id
}

/// Replaces the module serving `flaky` with `echo`, which succeeds on any
/// payload (a fixed handler deployed after a bad one).
fn fix_flaky(env: &Env, serve: &Serve) {
    let before = serve.output().matches("handler deployed").count();
    env.deploy("flaky", "echo", FLAKY);
    eventually(Duration::from_secs(60), "the fixed flaky deployed", || {
        (serve.output().matches("handler deployed").count() > before).then_some(())
    });
}

#[test]
fn the_overview_counts_update_without_a_reload() {
    let (env, serve) = served(&[("echo", "echo", "[handler]\njob_type = \"echo\"\n")], &[]);
    let Some(browser) = Browser::start(&serve.listen) else {
        return;
    };
    browser.open("");
    browser.until_text("#count-succeeded b", |t| t == "0");
    browser.script("window.__notReloaded = true;");
    for n in 0..3 {
        enqueue(&env, &["echo", &format!(r#"{{"n": {n}}}"#)]);
    }
    browser.until_text("#count-succeeded b", |t| t == "3");
    assert_eq!(
        browser.script("return window.__notReloaded === true;"),
        Value::Bool(true),
        "the counts changed without a reload"
    );
    enqueue(&env, &["echo", "{}", "--delay", "1h"]);
    let row = browser.until_text("#types tbody tr", |t| t.starts_with("echo"));
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["echo", "0", "1", "0"]
    );
    browser.screenshot("overview");

    browser.open("#handlers");
    let deployed = browser.until_text("#deployed tbody tr", |t| t.contains("echo"));
    assert!(deployed.contains(" ms"), "the timeout is shown: {deployed}");
    browser.screenshot("handlers");
}

#[test]
fn jobs_filter_by_status_and_type() {
    let (env, serve) = served(
        &[
            ("echo", "echo", "[handler]\njob_type = \"echo\"\n"),
            ("flaky", "flaky", FLAKY),
        ],
        &[],
    );
    let Some(browser) = Browser::start(&serve.listen) else {
        return;
    };
    let echoes: Vec<String> = (0..2).map(|_| enqueue(&env, &["echo", "{}"])).collect();
    let failed = enqueue(
        &env,
        &["flaky", r#"{"succeed_on": 9}"#, "--max-attempts", "1"],
    );
    wait_status(&env, &failed, "failed");
    for id in &echoes {
        wait_status(&env, id, "succeeded");
    }

    browser.open("#jobs");
    browser.until("all three jobs listed", |b| {
        (b.texts("#jobs tbody tr").len() == 3).then_some(())
    });
    browser.select("#filter-status", "failed");
    let rows = browser.until("only the failed job", |b| {
        let rows = b.texts("#jobs tbody tr");
        (rows.len() == 1 && rows[0].contains(&failed)).then_some(rows)
    });
    assert!(
        rows[0].contains("flaky") && rows[0].contains("failed"),
        "{rows:?}"
    );
    assert!(browser.url().contains("status=failed"), "{}", browser.url());

    browser.select("#filter-status", "");
    browser.type_into("#filter-type", "echo");
    browser.click("#filter-apply");
    let rows = browser.until("only the echo jobs", |b| {
        let rows = b.texts("#jobs tbody tr");
        (rows.len() == 2 && rows.iter().all(|r| r.contains("echo"))).then_some(rows)
    });
    for id in &echoes {
        assert!(rows.iter().any(|r| r.contains(id.as_str())), "{rows:?}");
    }
}

#[test]
fn a_failed_job_shows_its_three_attempts_and_their_logs() {
    let (env, serve) = served(&[("flaky", "flaky", FLAKY)], &[]);
    let Some(browser) = Browser::start(&serve.listen) else {
        return;
    };
    let id = failed_flaky(&env);
    browser.open("#jobs?status=failed");
    browser.click(&format!("#jobs tr[data-id='{id}'] a.job-link"));
    browser.until_text("#job-status", |t| t == "failed");
    let attempts = browser.until("three attempts", |b| {
        let rows = b.texts("#attempts tbody tr");
        (rows.len() == 3).then_some(rows)
    });
    for (n, row) in attempts.iter().enumerate() {
        assert!(row.starts_with(&(n + 1).to_string()), "{row}");
        assert!(
            row.contains(&format!("flaky: attempt {} < 99", n + 1)),
            "{row}"
        );
    }
    for attempt in 1..=3 {
        let lines = browser.until(&format!("two log lines of attempt {attempt}"), |b| {
            let lines = b.texts(&format!("#logs [data-attempt='{attempt}'] .log-line"));
            (lines.len() == 2).then_some(lines)
        });
        assert!(
            lines[1].contains(&format!("attempt {attempt} line 1")),
            "{lines:?}"
        );
    }
    browser.until_text("#job-error", |t| t.contains("flaky: attempt 3 < 99"));
    assert_eq!(
        browser.text("#replay-command").as_deref(),
        Some(format!("boxcar replay {id}").as_str())
    );
    browser.screenshot("failed-job");
}

#[test]
fn retrying_a_failed_job_from_the_page_makes_it_succeed_and_leaves_the_others_failed() {
    let (env, serve) = served(&[("flaky", "flaky", FLAKY)], &[]);
    let Some(browser) = Browser::start(&serve.listen) else {
        return;
    };
    let id = failed_flaky(&env);
    let other = failed_flaky(&env);
    fix_flaky(&env, &serve);
    browser.open(&format!("#job/{id}"));
    browser.until_text("#job-status", |t| t == "failed");
    browser.click("#job-retry");
    let question = browser.until_text("#retry-question", |t| !t.is_empty());
    assert_eq!(
        question,
        "Retry this job? It gets 3 more attempts; other failed jobs of type flaky stay failed."
    );
    browser.click("#retry-confirm");
    browser.until_text("#job-notice", |t| t == "Retried.");
    browser.until_text("#job-status", |t| t == "succeeded");
    assert_eq!(status(&env, &id), "succeeded");
    assert_eq!(
        status(&env, &other),
        "failed",
        "only the job on the page is retried"
    );
}

#[test]
fn cancelling_a_running_job_from_the_page_stops_it() {
    let (env, serve) = served(
        &[(
            "cooperative-sleep",
            "cooperative-sleep",
            "[handler]\njob_type = \"cooperative-sleep\"\ntimeout = \"120s\"\n",
        )],
        &[],
    );
    let Some(browser) = Browser::start(&serve.listen) else {
        return;
    };
    let id = enqueue(
        &env,
        &["cooperative-sleep", r#"{"ms": 120000, "step_ms": 20}"#],
    );
    browser.open(&format!("#job/{id}"));
    browser.until_text("#job-status", |t| t == "running");
    browser.click("#job-cancel");
    browser.until_text("#job-status", |t| t == "cancelled");
    wait_status(&env, &id, "cancelled");
    let job = env.json(&["job", &id]);
    assert!(
        job["finished_at"].is_string(),
        "a cancelled job is finished: {job}"
    );
}

#[test]
fn bulk_retry_of_failed_jobs_reports_the_count_and_retries_them() {
    let other = "[handler]\njob_type = \"flaky-other\"\ntimeout = \"10s\"\nmax_attempts = 1\n";
    let (env, serve) = served(
        &[("flaky", "flaky", FLAKY), ("flaky-other", "flaky", other)],
        &[],
    );
    let Some(browser) = Browser::start(&serve.listen) else {
        return;
    };
    let payload = r#"{"succeed_on": 9}"#;
    let failed: Vec<String> = (0..3)
        .map(|_| enqueue(&env, &["flaky", payload, "--max-attempts", "1"]))
        .collect();
    let untouched = enqueue(&env, &["flaky-other", payload]);
    for id in failed.iter().chain([&untouched]) {
        wait_status(&env, id, "failed");
    }
    fix_flaky(&env, &serve);

    browser.open("#jobs?status=failed&type=flaky");
    browser.until("three failed flaky jobs listed", |b| {
        (b.texts("#jobs tbody tr").len() == 3).then_some(())
    });
    browser.click("#bulk-retry");
    let question = browser.until_text("#bulk-question", |t| !t.is_empty());
    assert_eq!(question, "Retry 3 failed jobs of type flaky?");
    browser.click("#bulk-confirm");
    browser.until_text("#bulk-result", |t| t == "Retried 3 jobs.");
    for id in &failed {
        wait_status(&env, id, "succeeded");
    }
    assert_eq!(
        status(&env, &untouched),
        "failed",
        "other types are left alone"
    );
}

#[test]
fn hostile_payloads_and_logs_render_as_text() {
    let hostile = "<script>alert(1)</script> <img src=x onerror=alert(2)>";
    let manifest = boxcar_examples::get("log-attack")
        .expect("log-attack")
        .manifest_text;
    let (env, serve) = served(&[("log-attack", "log-attack", manifest)], &[]);
    let Some(browser) = Browser::start(&serve.listen) else {
        return;
    };
    let payload = serde_json::json!({"attack": "crlf", "text": hostile}).to_string();
    let id = enqueue(&env, &["log-attack", &payload]);
    wait_status(&env, &id, "succeeded");

    browser.open(&format!("#job/{id}"));
    browser.until_text("#job-status", |t| t == "succeeded");
    let log = browser.until_text("#logs .log-line", |t| !t.is_empty());
    assert!(log.contains(hostile), "{log}");
    browser.click("#payload-show");
    let shown = browser.until_text("#job-payload", |t| !t.is_empty());
    assert!(shown.contains(hostile), "{shown}");
    let injected = browser.script(
        "return document.querySelectorAll('main script, main img').length + \
         document.scripts.length - 1;",
    );
    assert_eq!(injected, Value::from(0), "no element came from the data");
    assert_eq!(browser.dialog(), None, "no dialog opened");
}

#[test]
fn with_a_token_the_page_asks_for_it_and_then_works() {
    let token = "dashboard-token-0123456789";
    let (_env, serve) = served(
        &[("echo", "echo", "[handler]\njob_type = \"echo\"\n")],
        &["--token", token],
    );
    let Some(browser) = Browser::start(&serve.listen) else {
        return;
    };
    let (status_code, added) = http(
        &serve.listen,
        "POST",
        "/jobs",
        Some(r#"{"job_type": "echo", "payload": {}}"#),
        Some(token),
    );
    assert_eq!(status_code, 201, "{added}");
    browser.open("");
    browser.until("the token prompt", |b| {
        b.text("#auth h2").filter(|t| t.contains("token"))
    });
    browser.type_into("#token", "wrong-token");
    browser.click("#token-save");
    browser.until_text("#auth-error", |t| t.contains("refused"));
    browser.type_into("#token", token);
    browser.click("#token-save");
    browser.until_text("#count-succeeded b", |t| t == "1");
    assert!(!browser.url().contains(token), "{}", browser.url());
    assert_eq!(
        browser.script("return sessionStorage.getItem('boxcar-token');"),
        Value::from(token)
    );
}

#[test]
fn the_jobs_list_pages_forward_and_back_by_cursor() {
    let env = Env::sqlite();
    env.fast_config("handled_elsewhere = [\"mail\"]");
    let serve = env.serve("serve", &[]);
    let Some(browser) = Browser::start(&serve.listen) else {
        return;
    };
    for _ in 0..120 {
        enqueue(&env, &["mail", "{}"]);
    }
    let listed = env.json(&["jobs", "--type", "mail", "--limit", "200"]);
    let ids: Vec<String> = listed
        .as_array()
        .expect("array")
        .iter()
        .map(|j| j["id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(ids.len(), 120);
    let page = |b: &Browser, first: &str, len: usize, info: &str| {
        let rows = b.texts("#jobs tbody tr");
        (rows.len() == len
            && rows[0].contains(first)
            && b.text("#page-info").is_some_and(|t| t == info))
        .then_some(())
    };
    let disabled = |b: &Browser, css: &str| {
        b.script(&format!("return document.querySelector('{css}').disabled")) == Value::Bool(true)
    };
    browser.open("#jobs?type=mail");
    browser.until("the first page", |b| page(b, &ids[0], 50, "rows 1–50"));
    assert!(disabled(&browser, "#page-prev"));
    browser.click("#page-next");
    browser.until("the second page", |b| page(b, &ids[50], 50, "rows 51–100"));
    assert!(browser.url().contains("after="), "{}", browser.url());
    browser.click("#page-next");
    browser.until("the last page", |b| page(b, &ids[100], 20, "rows 101–120"));
    assert!(disabled(&browser, "#page-next"));
    browser.click("#page-prev");
    browser.until("back to the second page", |b| {
        page(b, &ids[50], 50, "rows 51–100")
    });
    browser.click("#page-prev");
    browser.until("back to the first page", |b| {
        page(b, &ids[0], 50, "rows 1–50")
    });
    assert!(!browser.url().contains("after="), "{}", browser.url());
}

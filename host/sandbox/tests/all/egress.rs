//! Egress by address: the host resolves names itself and refuses internal
//! addresses (loopback, private, link-local, ...) unless the allow-list
//! names the address or its range; the classifier's ranges, including the
//! IPv6 forms that embed an IPv4 address.

use std::time::Duration;

use boxcar_sandbox::{internal_address, HandlerLimits};

use crate::capabilities::{fetch, result_json};
use crate::common::captured_logs;
use crate::common::load_with;
use crate::http_server::{assert_refused, http_caps, TestServer};
use boxcar_queue::testing::{context, job_run};

#[test]
fn classifier_knows_internal_ranges() {
    let internal = [
        "127.0.0.1",
        "127.255.0.9",
        "0.0.0.0",
        "0.1.2.3",
        "10.0.0.1",
        "172.16.0.1",
        "172.31.255.254",
        "192.168.1.1",
        "100.64.0.1",
        "100.127.255.254",
        "169.254.169.254",
        "169.254.0.1",
        "224.0.0.1",
        "239.255.255.250",
        "255.255.255.255",
        "192.0.2.1",
        "198.51.100.7",
        "203.0.113.9",
        "198.18.0.1",
        "240.0.0.1",
        "::",
        "::1",
        "fc00::1",
        "fd12:3456::1",
        "fe80::1",
        "ff02::1",
        "2001:db8::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "::ffff:169.254.169.254",
        "::ffff:192.168.0.1",
        "::127.0.0.1",
        "::10.0.0.1",
        "64:ff9b::a00:1",
        "64:ff9b::7f00:1",
        "2002:a00:1::1",
        "2002:7f00:1::",
        "2001:0:4136:e378::1",
    ];
    for ip in internal {
        assert!(
            internal_address(ip.parse().expect("ip")).is_some(),
            "{ip} must be internal"
        );
    }
    let public = [
        "1.1.1.1",
        "8.8.8.8",
        "93.184.215.14",
        "172.32.0.1",
        "172.15.255.255",
        "100.128.0.1",
        "100.63.255.255",
        "192.169.0.1",
        "2606:4700:4700::1111",
        "2a00:1450:4001::200e",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ];
    for ip in public {
        assert_eq!(
            internal_address(ip.parse().expect("ip")),
            None,
            "{ip} is public"
        );
    }
    assert_eq!(
        internal_address("::ffff:169.254.169.254".parse().expect("ip")),
        Some("link-local")
    );
    assert_eq!(
        internal_address("::ffff:127.0.0.1".parse().expect("ip")),
        Some("loopback")
    );
}

/// Runs `fetch-title` granted `origins` against `url`, with job id `id`.
async fn fetch_with(origins: &[String], url: &str, id: &str) -> boxcar_sandbox::Outcome {
    let h = load_with("fetch-title", HandlerLimits::default(), http_caps(origins));
    let (ctx, _) = context();
    let mut run = job_run("fetch-title", &fetch(url), Duration::from_secs(10));
    run.id = id.into();
    h.run(run, ctx).await
}

fn log_line(id: &str) -> String {
    let text = String::from_utf8_lossy(&captured_logs().lock().expect("lock")).to_string();
    text.lines()
        .find(|l| l.contains(id) && l.contains("refused"))
        .unwrap_or_else(|| panic!("the refusal of {id} is in the job log; log was:\n{text}"))
        .to_string()
}

#[tokio::test]
async fn a_listed_name_that_resolves_to_loopback_is_refused() {
    captured_logs();
    let server = TestServer::start().await;
    let port = server.addr.port();
    let outcome = fetch_with(
        &[format!("http://localhost:{port}")],
        &format!("http://localhost:{port}/title"),
        "job-egress-localhost",
    )
    .await;
    assert_refused("localhost", &outcome);
    assert_eq!(server.accepted(), 0, "no connection may reach loopback");
    let line = log_line("job-egress-localhost");
    assert!(line.contains("127.0.0.1 (loopback)"), "{line}");
    assert!(line.contains(&format!("http://127.0.0.1:{port}")), "{line}");
}

#[tokio::test]
async fn a_numeric_name_for_loopback_is_refused() {
    // `2130706433` is a host name to the allow-list, and 127.0.0.1 to the
    // resolver: matching names alone would connect to loopback.
    captured_logs();
    let server = TestServer::start().await;
    let port = server.addr.port();
    let outcome = fetch_with(
        &[format!("http://2130706433:{port}")],
        &format!("http://2130706433:{port}/title"),
        "job-egress-numeric",
    )
    .await;
    assert_refused("numeric loopback", &outcome);
    assert_eq!(server.accepted(), 0);
    assert!(log_line("job-egress-numeric").contains("loopback"));
}

#[tokio::test]
async fn a_listed_name_that_resolves_to_a_private_address_is_refused() {
    // `10.1` resolves (inet_aton form) to 10.0.0.1 without DNS.
    captured_logs();
    let outcome = fetch_with(
        &["http://10.1:8080".to_string()],
        "http://10.1:8080/title",
        "job-egress-private",
    )
    .await;
    assert_refused("private", &outcome);
    assert!(log_line("job-egress-private").contains("10.0.0.1 (private)"));
}

#[tokio::test]
async fn loopback_listed_by_address_or_range_is_reachable() {
    let server = TestServer::start().await;
    let port = server.addr.port();
    let outcome = fetch_with(
        &[format!("http://127.0.0.1:{port}")],
        &format!("http://127.0.0.1:{port}/title"),
        "job-egress-literal",
    )
    .await;
    assert_eq!(result_json(&outcome)["title"], "Hello boxcar");
    assert_eq!(server.accepted(), 1);

    // A range covers a name that resolves into it.
    let outcome = fetch_with(
        &[
            format!("http://localhost:{port}"),
            format!("http://127.0.0.0/8:{port}"),
        ],
        &format!("http://localhost:{port}/title"),
        "job-egress-range",
    )
    .await;
    assert_eq!(result_json(&outcome)["title"], "Hello boxcar");
    assert_eq!(server.accepted(), 2);

    // The range is for its scheme and port only.
    let outcome = fetch_with(
        &[
            format!("http://localhost:{port}"),
            "http://127.0.0.0/8:1".to_string(),
        ],
        &format!("http://localhost:{port}/title"),
        "job-egress-range-port",
    )
    .await;
    assert_refused("range on another port", &outcome);
    assert_eq!(server.accepted(), 2);
}

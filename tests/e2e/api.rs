//! The HTTP API over a real socket, and the token rule off loopback.

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::Duration,
};

use serde_json::Value;

use crate::harness::{describe, Env};

/// Connects to a host's API. A host binds its API only after deploying its
/// handlers, so a refused connection is retried for up to 30 s.
pub(crate) fn connect(address: &str) -> TcpStream {
    let start = std::time::Instant::now();
    loop {
        match TcpStream::connect(address) {
            Ok(stream) => return stream,
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && start.elapsed() < Duration::from_secs(30) =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("connect to {address}: {e}"),
        }
    }
}

/// A minimal HTTP/1.1 request; returns (status, JSON body).
pub(crate) fn http(
    address: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> (u16, Value) {
    let mut stream = connect(address);
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let body = body.unwrap_or("");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (
        status,
        serde_json::from_str(body).unwrap_or(Value::String(body.to_string())),
    )
}

#[test]
fn enqueue_and_wait_over_a_real_socket() {
    let env = Env::sqlite();
    env.fast_config("");
    env.deploy(
        "echo",
        "echo",
        "[handler]\njob_type = \"echo\"\ntimeout = \"10s\"\n",
    );
    let serve = env.serve("serve", &[]);
    serve.wait_for_log("HTTP API listening", Duration::from_secs(30));
    serve.wait_for_log("handler deployed", Duration::from_secs(30));
    let (status, added) = http(
        &serve.listen,
        "POST",
        "/jobs",
        Some(r#"{"job_type":"echo","payload":{"hi":1}}"#),
        None,
    );
    assert_eq!(status, 201, "{added}");
    let id = added["id"].as_str().expect("id");
    let (status, job) = http(
        &serve.listen,
        "GET",
        &format!("/jobs/{id}/wait?timeout=5s"),
        None,
        None,
    );
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["status"], "succeeded");
    assert_eq!(job["result"]["hi"], 1);
    let (status, handlers) = http(&serve.listen, "GET", "/handlers", None, None);
    assert_eq!(status, 200);
    assert_eq!(handlers["deployed"][0]["job_types"][0], "echo");
}

#[test]
fn off_loopback_the_api_needs_a_token() {
    let env = Env::sqlite();
    let output = env.run(&["serve", "--listen", "0.0.0.0:0"]);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("token"));

    let port = crate::harness::free_port();
    let token = "e2e-token-0123456789";
    let mut child = env
        .command()
        .args([
            "serve",
            "--listen",
            &format!("0.0.0.0:{port}"),
            "--token",
            token,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let address = format!("127.0.0.1:{port}");
    let ready = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        TcpStream::connect(&address).is_ok()
    });
    assert!(ready, "serve did not start listening");
    let (status, _) = http(&address, "GET", "/counts", None, None);
    assert_eq!(status, 401);
    let (status, counts) = http(&address, "GET", "/counts", None, Some(token));
    assert_eq!(status, 200, "{counts}");
    let _ = child.kill();
    let _ = child.wait();
}

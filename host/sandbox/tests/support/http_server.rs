//! A tiny HTTP/1.1 test server on 127.0.0.1 for the outbound-HTTP tests
//! (shared by the `all` and `polyglot` test binaries via `#[path]`), and the
//! grants and assertions those tests share. The server counts accepted
//! connections, so a test can prove a refused request never reached it.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use boxcar_sandbox::{Capabilities, HttpOrigin, Outcome};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

/// Capabilities granting exactly `origins` for outbound HTTP.
pub fn http_caps(origins: &[String]) -> Capabilities {
    Capabilities {
        http: origins
            .iter()
            .map(|o| HttpOrigin::parse(o).expect("origin parses"))
            .collect(),
        ..Capabilities::default()
    }
}

/// The outcome of a `fetch-title` run (any language) whose request the
/// host refused: terminal, code `http-refused`, the SDK's refusal message.
pub fn assert_refused(what: &str, outcome: &Outcome) {
    match outcome {
        Outcome::Terminal { message, code, .. } => {
            assert_eq!(code.as_deref(), Some("http-refused"), "{what}: {message}");
            assert!(message.contains("refused by the host"), "{what}: {message}");
        }
        other => panic!("{what}: expected a refused request, got {other:?}"),
    }
}

/// A tiny HTTP/1.1 server on 127.0.0.1 that counts accepted connections.
///
/// Routes: `/title` (an HTML page), `/redirect?to=URL` (302 to URL),
/// `/hang` (reads the request, never answers), `/big` (64 KiB body without
/// a `content-length`), `/big-declared` (declares 64 KiB).
pub struct TestServer {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&head).to_string();
                    let target = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                    let response = if target == "/title" {
                        let body = "<html><head><title>\n  Hello   boxcar </title></head></html>";
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .into_bytes()
                    } else if let Some(to) = target.strip_prefix("/redirect?to=") {
                        format!(
                            "HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        )
                        .into_bytes()
                    } else if target == "/hang" {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        return;
                    } else if target == "/big" {
                        let mut r = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_vec();
                        r.extend(std::iter::repeat_n(b'x', 64 << 10));
                        r
                    } else if target == "/big-declared" {
                        let mut r = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                            64 << 10
                        )
                        .into_bytes();
                        r.extend(std::iter::repeat_n(b'x', 64 << 10));
                        r
                    } else {
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                            .to_vec()
                    };
                    let _ = socket.write_all(&response).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Self {
            addr,
            accepted,
            task,
        }
    }

    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

//! Outbound HTTP (`wasi:http/outgoing-handler`) under the handler's
//! allow-list ([`HttpOrigin`]s from `Capabilities::http`).
//!
//! Invariants:
//! - `wasi:http` is linked for every handler; a handler granted no origins
//!   has every request refused (deny by policy). Linking costs nothing per
//!   job: imports are resolved once, in the `InstancePre`.
//! - Every request — including one a guest makes to follow a redirect; the
//!   host never follows redirects itself — is checked against the list
//!   *before* any DNS lookup or connection. A refused request fails with
//!   `HTTP-request-denied` in the guest and a `warn` line in the job's log.
//! - Connect / first-byte / between-bytes timeouts are clamped to the time
//!   left before the job's deadline; the run itself is dropped at the
//!   deadline or on cancel, which drops the store and aborts the request's
//!   task with it.
//! - A response body longer than `max_http_body` fails with
//!   `HTTP-response-body-size` (up front when `content-length` says so,
//!   otherwise when the stream passes the cap).

use std::{
    fmt,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use wasmtime_wasi_http::{Error as HttpErrorCode, RequestOptions, WasiBody, WasiHttpHooks};

use crate::output::{truncate, Level, LogSink};

/// One allowed destination: `scheme://host[:port]`, where `host` may be a
/// `*.example.com` wildcard (any subdomain of `example.com`, not the apex).
/// The port defaults to the scheme's (80 / 443).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HttpOrigin {
    https: bool,
    host: HostPattern,
    port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum HostPattern {
    Exact(String),
    /// `*.suffix`: stores `.suffix`.
    Subdomains(String),
}

impl HttpOrigin {
    /// Parses `scheme://host[:port]` (an optional trailing `/` is accepted).
    ///
    /// # Errors
    /// A message saying what is wrong, with an example of the right form.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            Err(format!(
                "`{}` {why}; write scheme://host[:port], e.g. https://api.example.com or http://127.0.0.1:8089 or https://*.example.com",
                truncate(text, 200).escape_debug()
            ))
        };
        let Some((scheme, rest)) = text.split_once("://") else {
            return bad("has no scheme");
        };
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return bad("has a scheme other than http or https"),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty() {
            return bad("has no host");
        }
        if authority.contains(['/', '?', '#', '@']) || authority.chars().any(char::is_whitespace) {
            return bad("may hold only a host and port (no path, query, user or spaces)");
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let Some((addr, after)) = v6.split_once(']') else {
                return bad("has an unclosed `[`");
            };
            if addr.is_empty()
                || !addr
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
            {
                return bad("has an invalid IPv6 address");
            }
            let port = match after {
                "" => None,
                p => match p.strip_prefix(':') {
                    Some(p) => Some(p),
                    None => return bad("has text after the IPv6 address"),
                },
            };
            (format!("[{}]", addr.to_ascii_lowercase()), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_ascii_lowercase(), Some(p)),
                None => (authority.to_ascii_lowercase(), None),
            }
        };
        let port = match port {
            None => {
                if https {
                    443
                } else {
                    80
                }
            }
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return bad("has a port that is not 1..=65535"),
            },
        };
        let host = if host.starts_with('[') {
            HostPattern::Exact(host)
        } else {
            let (wild, name) = match host.strip_prefix("*.") {
                Some(name) => (true, name),
                None => (false, host.as_str()),
            };
            let name = name.strip_suffix('.').unwrap_or(name);
            let label_ok = |l: &str| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            };
            if name.is_empty() || !name.split('.').all(label_ok) {
                return bad("has an invalid host name (a `*.` wildcard may only start it)");
            }
            if wild {
                HostPattern::Subdomains(format!(".{name}"))
            } else {
                HostPattern::Exact(name.to_string())
            }
        };
        Ok(Self { https, host, port })
    }

    /// True when a request to `scheme://host:port` is covered.
    fn allows(&self, https: bool, host: &str, port: u16) -> bool {
        if self.https != https || self.port != port {
            return false;
        }
        match &self.host {
            HostPattern::Exact(h) => h == host,
            HostPattern::Subdomains(suffix) => {
                host.len() > suffix.len() && host.ends_with(suffix.as_str())
            }
        }
    }
}

impl fmt::Display for HttpOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        let host = match &self.host {
            HostPattern::Exact(h) => h.as_str(),
            HostPattern::Subdomains(s) => {
                f.write_str(scheme)?;
                f.write_str("://*")?;
                return write!(f, "{s}:{}", self.port);
            }
        };
        write!(f, "{scheme}://{host}:{}", self.port)
    }
}

/// Per-job `wasi:http` hooks: the allow-list check, timeouts and body cap.
pub(crate) struct HttpPolicy {
    pub(crate) allowed: Arc<[HttpOrigin]>,
    pub(crate) max_body: u64,
    pub(crate) deadline: Instant,
    pub(crate) log: Arc<LogSink>,
}

type SendFuture = Box<
    dyn std::future::Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn std::future::Future<Output = Result<(), HttpErrorCode>> + Send>,
                ),
                HttpErrorCode,
            >,
        > + Send,
>;

impl HttpPolicy {
    /// `Some(origin text)` of a request this policy refuses.
    fn refusal(&self, uri: &http::Uri) -> Option<String> {
        let https = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("https") => true,
            Some(s) if s.eq_ignore_ascii_case("http") => false,
            other => return Some(format!("{}://…", other.unwrap_or("?"))),
        };
        let Some(host) = uri.host() else {
            return Some("a request without a host".into());
        };
        let host = host.to_ascii_lowercase();
        let host = host.strip_suffix('.').unwrap_or(&host);
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        if self.allowed.iter().any(|o| o.allows(https, host, port)) {
            return None;
        }
        let scheme = if https { "https" } else { "http" };
        Some(format!("{scheme}://{}:{port}", truncate(host, 256)))
    }
}

impl WasiHttpHooks for HttpPolicy {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn std::future::Future<Output = Result<(), HttpErrorCode>> + Send>,
    ) -> SendFuture {
        drop(fut);
        if let Some(origin) = self.refusal(request.uri()) {
            let line = if self.allowed.is_empty() {
                format!("outbound HTTP to {origin} refused: this handler has no capabilities.http grant")
            } else {
                format!(
                    "outbound HTTP to {origin} refused: not in capabilities.http ({})",
                    self.allowed
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            // Past the log budget the line is dropped; the refusal stands.
            let _ = self.log.log(Level::Warn, &line);
            return Box::new(async { Err(HttpErrorCode::HttpRequestDenied) });
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        let clamp = |d: Option<std::time::Duration>| Some(d.map_or(left, |d| d.min(left)));
        let options = RequestOptions {
            connect_timeout: clamp(options.and_then(|o| o.connect_timeout)),
            first_byte_timeout: clamp(options.and_then(|o| o.first_byte_timeout)),
            between_bytes_timeout: clamp(options.and_then(|o| o.between_bytes_timeout)),
        };
        let max = self.max_body;
        Box::new(async move {
            use http_body_util::BodyExt;

            let (response, io) =
                wasmtime_wasi_http::default_send_request(request, Some(options)).await?;
            let declared = response
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            if declared.is_some_and(|n| n > max) {
                return Err(HttpErrorCode::HttpResponseBodySize(declared));
            }
            let response = response.map(|body| {
                CappedBody {
                    inner: body.boxed_unsync(),
                    left: max,
                    max,
                }
                .boxed_unsync()
            });
            Ok((
                response,
                Box::new(io) as Box<dyn std::future::Future<Output = _> + Send>,
            ))
        })
    }
}

/// A response body that fails once more than `max` bytes came through.
struct CappedBody {
    inner: WasiBody,
    left: u64,
    max: u64,
}

impl Body for CappedBody {
    type Data = Bytes;
    type Error = HttpErrorCode;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpErrorCode>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                let len = u64::try_from(data.len()).unwrap_or(u64::MAX);
                if len > self.left {
                    self.left = 0;
                    return Poll::Ready(Some(Err(HttpErrorCode::HttpResponseBodySize(Some(
                        self.max,
                    )))));
                }
                self.left -= len;
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::HttpOrigin;

    #[test]
    fn origins_parse_and_match() {
        let o = HttpOrigin::parse("https://API.example.com/").expect("parses");
        assert!(o.allows(true, "api.example.com", 443));
        assert!(!o.allows(false, "api.example.com", 443));
        assert!(!o.allows(true, "api.example.com", 8443));
        assert_eq!(o.to_string(), "https://api.example.com:443");
        let w = HttpOrigin::parse("https://*.example.com").expect("parses");
        assert!(w.allows(true, "a.b.example.com", 443));
        assert!(!w.allows(true, "example.com", 443));
        assert!(!w.allows(true, "evilexample.com", 443));
        let l = HttpOrigin::parse("http://127.0.0.1:8089").expect("parses");
        assert!(l.allows(false, "127.0.0.1", 8089));
        assert!(HttpOrigin::parse("http://[::1]:80")
            .expect("v6")
            .allows(false, "[::1]", 80));
        for bad in [
            "api.example.com",
            "ftp://x",
            "https://",
            "https://x/path",
            "https://u@x",
            "https://x:0",
            "https://x:99999",
            "https://a.*.com",
            "https://*",
        ] {
            assert!(HttpOrigin::parse(bad).is_err(), "{bad} should be refused");
        }
    }
}

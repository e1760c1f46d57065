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
//! - Then the host resolves the name itself and keeps only the addresses
//!   the policy allows: public ones, and internal ones (see
//!   [`internal_address`](crate::internal_address)) only when an entry with
//!   the same scheme and port names that address or its range. With none
//!   left the request is refused the same way. The connection goes to a
//!   kept address ([`crate::connect`]), never to a fresh lookup.
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

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use wasmtime_wasi_http::{Error as HttpErrorCode, RequestOptions, WasiBody, WasiHttpHooks};

use crate::{
    connect::{self, Timeouts},
    egress::{internal_address, IpRange},
    output::{truncate, Level, LogSink},
};

/// One allowed destination: `scheme://host[:port]`, where `host` is a name,
/// a `*.example.com` wildcard (any subdomain of `example.com`, not the
/// apex), an IP address (`127.0.0.1`, `[::1]`) or an address range
/// (`10.0.0.0/8`, `[fd00::/8]`). The port defaults to the scheme's
/// (80 / 443). Only an address or range entry makes internal addresses
/// (loopback, private, link-local, ...) reachable.
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
    /// An IP address or range.
    Addr(IpRange),
}

impl HttpOrigin {
    /// Parses `scheme://host[:port]` (an optional trailing `/` is accepted).
    ///
    /// # Errors
    /// A message saying what is wrong, with an example of the right form.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            Err(format!(
                "`{}` {why}; write scheme://host[:port], e.g. https://api.example.com, https://*.example.com, http://127.0.0.1:8089 or http://10.0.0.0/8:8080",
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
        if authority.contains(['?', '#', '@']) || authority.chars().any(char::is_whitespace) {
            return bad("may hold only a host and port (no path, query, user or spaces)");
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let Some((addr, after)) = v6.split_once(']') else {
                return bad("has an unclosed `[`");
            };
            let range = match addr.split_once('/') {
                Some((addr, prefix)) => IpRange::parse(addr, prefix),
                None => addr
                    .parse::<std::net::Ipv6Addr>()
                    .map(|ip| IpRange::single(IpAddr::V6(ip)))
                    .map_err(|_| "has an invalid IPv6 address"),
            };
            let range = match range {
                Ok(r) => r,
                Err(why) => return bad(why),
            };
            let port = match after {
                "" => None,
                p => match p.strip_prefix(':') {
                    Some(p) => Some(p.to_string()),
                    None => return bad("has text after the IPv6 address"),
                },
            };
            (HostPattern::Addr(range), port)
        } else if let Some((addr, rest)) = authority.split_once('/') {
            if addr.parse::<std::net::Ipv4Addr>().is_err() {
                return bad("may hold only a host and port (no path, query, user or spaces)");
            }
            let (prefix, port) = match rest.split_once(':') {
                Some((prefix, port)) => (prefix, Some(port.to_string())),
                None => (rest, None),
            };
            match IpRange::parse(addr, prefix) {
                Ok(r) => (HostPattern::Addr(r), port),
                Err(why) => return bad(why),
            }
        } else {
            let (host, port) = match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_ascii_lowercase(), Some(p.to_string())),
                None => (authority.to_ascii_lowercase(), None),
            };
            if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
                (HostPattern::Addr(IpRange::single(IpAddr::V4(ip))), port)
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
                let pattern = if wild {
                    HostPattern::Subdomains(format!(".{name}"))
                } else {
                    HostPattern::Exact(name.to_string())
                };
                (pattern, port)
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
        Ok(Self { https, host, port })
    }

    /// True when a request to `scheme://host:port` is covered. `host` is
    /// lower case without a trailing dot; an IP literal is matched by
    /// address only.
    fn allows(&self, https: bool, host: &RequestHost, port: u16) -> bool {
        if self.https != https || self.port != port {
            return false;
        }
        match (&self.host, host) {
            (HostPattern::Exact(h), RequestHost::Name(host)) => h == host,
            (HostPattern::Subdomains(suffix), RequestHost::Name(host)) => {
                host.len() > suffix.len() && host.ends_with(suffix.as_str())
            }
            (HostPattern::Addr(range), RequestHost::Ip(ip)) => range.contains(*ip),
            _ => false,
        }
    }

    /// True when this entry names `ip` (or a range holding it) for
    /// `scheme://…:port`.
    fn names_address(&self, https: bool, port: u16, ip: IpAddr) -> bool {
        self.https == https
            && self.port == port
            && matches!(&self.host, HostPattern::Addr(range) if range.contains(ip))
    }
}

impl fmt::Display for HttpOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        match &self.host {
            HostPattern::Exact(h) => write!(f, "{scheme}://{h}:{}", self.port),
            HostPattern::Subdomains(s) => write!(f, "{scheme}://*{s}:{}", self.port),
            HostPattern::Addr(range) => write!(f, "{scheme}://{range}:{}", self.port),
        }
    }
}

/// The host of a request: a name (lower case, no trailing dot) or an IP
/// literal (canonical: an IPv4-mapped IPv6 address is its IPv4 address).
#[derive(Debug)]
enum RequestHost {
    Name(String),
    Ip(IpAddr),
}

impl RequestHost {
    fn of(host: &str) -> Self {
        let host = host.to_ascii_lowercase();
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&host);
        match bare.parse::<IpAddr>() {
            Ok(ip) => Self::Ip(crate::egress::canonical(ip)),
            Err(_) => Self::Name(host.strip_suffix('.').unwrap_or(&host).to_string()),
        }
    }

    /// The form to resolve and to name in TLS: no brackets.
    fn bare(&self) -> String {
        match self {
            Self::Name(n) => n.clone(),
            Self::Ip(ip) => ip.to_string(),
        }
    }
}

impl fmt::Display for RequestHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(n) => f.write_str(truncate(n, 256)),
            Self::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Self::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// Per-job `wasi:http` hooks: the allow-list check, address check,
/// timeouts and body cap.
pub(crate) struct HttpPolicy {
    pub(crate) allowed: Arc<[HttpOrigin]>,
    pub(crate) max_body: u64,
    pub(crate) deadline: Instant,
    pub(crate) log: Arc<LogSink>,
}

type SendFuture = Box<
    dyn std::future::Future<
            Output = Result<(http::Response<WasiBody>, connect::IoFuture), HttpErrorCode>,
        > + Send,
>;

/// A request that passed the name check.
struct Destination {
    https: bool,
    host: RequestHost,
    port: u16,
}

impl Destination {
    fn origin(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.host, self.port)
    }
}

/// Splits resolved addresses into those `allowed` lets the host connect to
/// and the refused ones with the reason.
fn check_addresses(
    allowed: &[HttpOrigin],
    dest: &Destination,
    addrs: Vec<SocketAddr>,
) -> (Vec<SocketAddr>, Vec<(SocketAddr, &'static str)>) {
    let mut ok = Vec::new();
    let mut refused = Vec::new();
    for addr in addrs {
        let ip = crate::egress::canonical(addr.ip());
        match internal_address(ip) {
            Some(why)
                if !allowed
                    .iter()
                    .any(|o| o.names_address(dest.https, dest.port, ip)) =>
            {
                refused.push((SocketAddr::new(ip, addr.port()), why));
            }
            _ => ok.push(SocketAddr::new(ip, addr.port())),
        }
    }
    (ok, refused)
}

impl HttpPolicy {
    /// The destination of a request, or the origin text of one this
    /// policy refuses by name.
    fn destination(&self, uri: &http::Uri) -> Result<Destination, String> {
        let https = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("https") => true,
            Some(s) if s.eq_ignore_ascii_case("http") => false,
            other => return Err(format!("{}://…", other.unwrap_or("?"))),
        };
        let Some(host) = uri.host() else {
            return Err("a request without a host".into());
        };
        let host = RequestHost::of(host);
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let dest = Destination { https, host, port };
        if self
            .allowed
            .iter()
            .any(|o| o.allows(https, &dest.host, port))
        {
            Ok(dest)
        } else {
            Err(dest.origin())
        }
    }

    fn grants(&self) -> String {
        self.allowed
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
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
        let dest = match self.destination(request.uri()) {
            Ok(dest) => dest,
            Err(origin) => {
                let line = if self.allowed.is_empty() {
                    format!("outbound HTTP to {origin} refused: this handler has no capabilities.http grant")
                } else {
                    format!(
                        "outbound HTTP to {origin} refused: not in capabilities.http ({})",
                        self.grants()
                    )
                };
                // Past the log budget the line is dropped; the refusal stands.
                let _ = self.log.log(Level::Warn, &line);
                return Box::new(async { Err(HttpErrorCode::HttpRequestDenied) });
            }
        };
        if let Some(record) = self.log.record() {
            record.note_http_request();
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        let clamp = |d: Option<std::time::Duration>| d.map_or(left, |d| d.min(left));
        let timeouts = Timeouts {
            connect: clamp(options.and_then(|o| o.connect_timeout)),
            first_byte: clamp(options.and_then(|o| o.first_byte_timeout)),
            between_bytes: clamp(options.and_then(|o| o.between_bytes_timeout)),
        };
        let max = self.max_body;
        let allowed = Arc::clone(&self.allowed);
        let log = Arc::clone(&self.log);
        Box::new(async move {
            let host = dest.host.bare();
            let addrs = connect::resolve(&host, dest.port, timeouts.connect).await?;
            let (addrs, refused) = check_addresses(&allowed, &dest, addrs);
            if addrs.is_empty() {
                let list = refused
                    .iter()
                    .map(|(a, why)| format!("{} ({why})", a.ip()))
                    .collect::<Vec<_>>()
                    .join(", ");
                let scheme = if dest.https { "https" } else { "http" };
                let example = refused.first().map_or(String::new(), |(a, _)| {
                    format!(", e.g. {scheme}://{}", SocketAddr::new(a.ip(), dest.port))
                });
                let line = format!(
                    "outbound HTTP to {} refused: {} resolves to {list}, an internal address; capabilities.http reaches internal addresses only when it lists the address or its range{example}",
                    dest.origin(),
                    dest.host,
                );
                let _ = log.log(Level::Warn, &line);
                return Err(HttpErrorCode::HttpRequestDenied);
            }
            let (response, io) =
                connect::send(request, &addrs, &host, dest.https, timeouts).await?;
            let declared = response
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            if declared.is_some_and(|n| n > max) {
                return Err(HttpErrorCode::HttpResponseBodySize(declared));
            }
            let response = response.map(|body| {
                use http_body_util::BodyExt;
                CappedBody {
                    inner: body,
                    left: max,
                    max,
                    log,
                }
                .boxed_unsync()
            });
            Ok((response, io))
        })
    }
}

/// A response body that fails once more than `max` bytes came through;
/// the bytes that did are counted in the run's record.
struct CappedBody {
    inner: WasiBody,
    left: u64,
    max: u64,
    log: Arc<LogSink>,
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
                if let Some(record) = self.log.record() {
                    record.note_http_bytes(len);
                }
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
    use super::{check_addresses, Destination, HttpOrigin, RequestHost};

    #[test]
    fn resolved_addresses_are_kept_only_when_public_or_named() {
        let allowed = [
            HttpOrigin::parse("http://internal.example").expect("name"),
            HttpOrigin::parse("http://10.0.0.0/8").expect("range"),
        ];
        let dest = Destination {
            https: false,
            host: RequestHost::of("internal.example"),
            port: 80,
        };
        let addrs = [
            "10.1.2.3:80",
            "192.168.0.1:80",
            "8.8.8.8:80",
            "[::ffff:169.254.169.254]:80",
            "[::ffff:10.9.9.9]:80",
        ]
        .map(|a| a.parse().expect("addr"))
        .to_vec();
        let (ok, refused) = check_addresses(&allowed, &dest, addrs);
        let ok: Vec<String> = ok.iter().map(ToString::to_string).collect();
        assert_eq!(ok, ["10.1.2.3:80", "8.8.8.8:80", "10.9.9.9:80"]);
        let refused: Vec<String> = refused
            .iter()
            .map(|(a, why)| format!("{a} {why}"))
            .collect();
        assert_eq!(
            refused,
            ["192.168.0.1:80 private", "169.254.169.254:80 link-local"]
        );
        // The range is for its scheme: over https nothing internal is kept.
        let tls = Destination {
            https: true,
            host: RequestHost::of("internal.example"),
            port: 80,
        };
        let (ok, _) = check_addresses(&allowed, &tls, vec!["10.1.2.3:80".parse().expect("addr")]);
        assert!(ok.is_empty());
    }

    fn allows(o: &HttpOrigin, https: bool, host: &str, port: u16) -> bool {
        o.allows(https, &RequestHost::of(host), port)
    }

    #[test]
    fn origins_parse_and_match() {
        let o = HttpOrigin::parse("https://API.example.com/").expect("parses");
        assert!(allows(&o, true, "api.example.com", 443));
        assert!(allows(&o, true, "API.example.com.", 443));
        assert!(!allows(&o, false, "api.example.com", 443));
        assert!(!allows(&o, true, "api.example.com", 8443));
        assert_eq!(o.to_string(), "https://api.example.com:443");
        let w = HttpOrigin::parse("https://*.example.com").expect("parses");
        assert!(allows(&w, true, "a.b.example.com", 443));
        assert!(!allows(&w, true, "example.com", 443));
        assert!(!allows(&w, true, "evilexample.com", 443));
        let l = HttpOrigin::parse("http://127.0.0.1:8089").expect("parses");
        assert!(allows(&l, false, "127.0.0.1", 8089));
        assert!(allows(&l, false, "[::ffff:127.0.0.1]", 8089));
        assert!(!allows(&l, false, "localhost", 8089));
        assert!(allows(
            &HttpOrigin::parse("http://[::1]:80").expect("v6"),
            false,
            "[::1]",
            80
        ));
        let net = HttpOrigin::parse("http://10.0.0.0/8:8080").expect("v4 range");
        assert_eq!(net.to_string(), "http://10.0.0.0/8:8080");
        assert!(allows(&net, false, "10.9.8.7", 8080));
        assert!(!allows(&net, false, "10.9.8.7", 80));
        assert!(net.names_address(false, 8080, "10.1.1.1".parse().expect("ip")));
        assert!(!net.names_address(true, 8080, "10.1.1.1".parse().expect("ip")));
        let net6 = HttpOrigin::parse("https://[fd00::/8]").expect("v6 range");
        assert_eq!(net6.to_string(), "https://[fd00::/8]:443");
        assert!(allows(&net6, true, "[fd12::3]", 443));
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
            "https://10.0.0.1/8",
            "https://10.0.0.0/33",
            "https://[fd00::/8",
            "https://example.com/8",
        ] {
            assert!(HttpOrigin::parse(bad).is_err(), "{bad} should be refused");
        }
    }
}

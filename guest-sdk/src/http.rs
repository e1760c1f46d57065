//! Outbound HTTP over `wasi:http`, for handlers whose manifest grants it
//! (`capabilities.http`, an allow-list of `scheme://host[:port]`).
//!
//! ```no_run
//! let page = boxcar_guest::http::get("https://example.com/")?;
//! let text = page.text()?;
//! # Ok::<(), boxcar_guest::http::HttpError>(())
//! ```
//!
//! Semantics:
//! - The host checks every request against the allow-list before any
//!   connection is made; a refused request is [`HttpError::Denied`] (and a
//!   line in the job's log). The guest cannot see or widen the list.
//! - Redirects (301, 302, 303, 307, 308) are followed here, up to
//!   [`Request::max_redirects`] (default 5). Each hop is a new request, so
//!   the host checks it against the allow-list again: a redirect to a host
//!   not on the list ends in [`HttpError::Denied`].
//! - Response bodies are capped by the host (`limits.max_http_body`);
//!   a longer one is [`HttpError::BodyTooLarge`].
//! - The job's deadline applies: a request still waiting when it passes is
//!   cut off with the job.

use std::fmt;

use wasip2::http::{
    outgoing_handler,
    types::{ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme},
};
use wasip2::io::streams::StreamError;

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The URL is not `http(s)://host[:port][/path][?query]`.
    InvalidUrl(String),
    /// The host refused the request: its origin is not in the handler's
    /// `capabilities.http` allow-list.
    Denied {
        /// The refused URL.
        url: String,
    },
    /// More redirects than [`Request::max_redirects`].
    TooManyRedirects {
        /// The last URL redirected to.
        url: String,
    },
    /// The response body was larger than the host's `max_http_body`.
    BodyTooLarge,
    /// Connecting or waiting for the response took too long.
    Timeout,
    /// Any other failure (connection refused, DNS, TLS, protocol).
    Failed(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidUrl(why) => write!(f, "invalid URL: {why}"),
            Self::Denied { url } => write!(
                f,
                "request to {url} refused by the host: its origin is not in the handler's capabilities.http allow-list"
            ),
            Self::TooManyRedirects { url } => write!(f, "too many redirects (last to {url})"),
            Self::BodyTooLarge => f.write_str(
                "the response body is larger than the host allows (limits.max_http_body)",
            ),
            Self::Timeout => f.write_str("the request timed out"),
            Self::Failed(why) => write!(f, "HTTP request failed: {why}"),
        }
    }
}

impl std::error::Error for HttpError {}

impl HttpError {
    fn from_code(code: &ErrorCode, url: &str) -> Self {
        match code {
            ErrorCode::HttpRequestDenied => Self::Denied {
                url: url.to_string(),
            },
            ErrorCode::HttpResponseBodySize(_) => Self::BodyTooLarge,
            ErrorCode::ConnectionTimeout
            | ErrorCode::ConnectionReadTimeout
            | ErrorCode::ConnectionWriteTimeout
            | ErrorCode::HttpResponseTimeout
            | ErrorCode::DnsTimeout => Self::Timeout,
            other => Self::Failed(format!("{other:?}")),
        }
    }
}

/// A received response.
#[derive(Debug, Clone)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// Header names (lowercase) and values, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The whole body.
    pub body: Vec<u8>,
    /// The URL that answered, after redirects.
    pub url: String,
}

impl Response {
    /// The first value of header `name` (case-insensitive), if it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// True for a 2xx status.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as UTF-8 text.
    ///
    /// # Errors
    /// [`HttpError::Failed`] when the body is not UTF-8.
    pub fn text(&self) -> Result<&str, HttpError> {
        std::str::from_utf8(&self.body)
            .map_err(|e| HttpError::Failed(format!("the response body is not UTF-8: {e}")))
    }

    /// The body decoded as JSON.
    ///
    /// # Errors
    /// [`HttpError::Failed`] when the body is not JSON of type `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, HttpError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            HttpError::Failed(format!("the response body is not the expected JSON: {e}"))
        })
    }
}

/// A request to build and [`send`](Request::send).
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Option<Vec<u8>>,
    max_redirects: u32,
}

/// `GET url`, following redirects.
///
/// # Errors
/// See [`HttpError`].
pub fn get(url: &str) -> Result<Response, HttpError> {
    Request::new("GET", url).send()
}

/// `POST url` with `body` of `content_type`, following redirects.
///
/// # Errors
/// See [`HttpError`].
pub fn post(
    url: &str,
    content_type: &str,
    body: impl Into<Vec<u8>>,
) -> Result<Response, HttpError> {
    Request::new("POST", url)
        .header("content-type", content_type)
        .body(body)
        .send()
}

impl Request {
    /// A request with `method` (e.g. `GET`) to `url`.
    pub fn new(method: &str, url: &str) -> Self {
        Self {
            method: method.to_ascii_uppercase(),
            url: url.to_string(),
            headers: Vec::new(),
            body: None,
            max_redirects: 5,
        }
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    /// Sets the request body.
    #[must_use]
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// Most redirects followed (default 5; 0 returns the 3xx response).
    #[must_use]
    pub fn max_redirects(mut self, n: u32) -> Self {
        self.max_redirects = n;
        self
    }

    /// Sends the request, following redirects.
    ///
    /// # Errors
    /// See [`HttpError`].
    pub fn send(self) -> Result<Response, HttpError> {
        let mut method = self.method.clone();
        let mut body = self.body.clone();
        let mut url = Url::parse(&self.url)?;
        let mut hops = 0;
        loop {
            let response = send_once(&method, &url, &self.headers, body.as_deref())?;
            let location = match response.status {
                301 | 302 | 303 | 307 | 308 => response.header("location").map(str::to_string),
                _ => None,
            };
            let Some(location) = location else {
                return Ok(response);
            };
            if hops >= self.max_redirects {
                if self.max_redirects == 0 {
                    return Ok(response);
                }
                return Err(HttpError::TooManyRedirects { url: location });
            }
            hops += 1;
            url = url.join(&location)?;
            if response.status == 303 || (response.status <= 302 && method == "POST") {
                method = "GET".into();
                body = None;
            }
        }
    }
}

/// A parsed absolute http(s) URL.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Url {
    https: bool,
    authority: String,
    path_query: String,
}

impl Url {
    fn parse(text: &str) -> Result<Self, HttpError> {
        let bad = |why: &str| HttpError::InvalidUrl(format!("`{text}` {why}"));
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| bad("has no scheme (http:// or https://)"))?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(bad("is not http or https")),
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path_query) = rest.split_at(split);
        if authority.is_empty() || authority.contains('@') {
            return Err(bad("has no host (or has user info)"));
        }
        let path_query = match path_query {
            "" => "/".to_string(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_string(),
        };
        Ok(Self {
            https,
            authority: authority.to_string(),
            path_query,
        })
    }

    /// Resolves a `Location` header against this URL.
    fn join(&self, location: &str) -> Result<Self, HttpError> {
        if location.contains("://") {
            return Self::parse(location);
        }
        let scheme = if self.https { "https" } else { "http" };
        if let Some(rest) = location.strip_prefix("//") {
            return Self::parse(&format!("{scheme}://{rest}"));
        }
        let path_query = if location.starts_with('/') {
            location.to_string()
        } else {
            let path = self.path_query.split('?').next().unwrap_or("/");
            let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
            format!("{dir}{location}")
        };
        Self::parse(&format!("{scheme}://{}{path_query}", self.authority))
    }

    fn text(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}{}", self.authority, self.path_query)
    }
}

fn failed(what: &str) -> HttpError {
    HttpError::Failed(what.to_string())
}

fn send_once(
    method: &str,
    url: &Url,
    headers: &[(String, Vec<u8>)],
    body: Option<&[u8]>,
) -> Result<Response, HttpError> {
    let fields = Fields::new();
    for (name, value) in headers {
        fields
            .append(name, value)
            .map_err(|e| HttpError::Failed(format!("header `{name}` refused: {e:?}")))?;
    }
    let request = OutgoingRequest::new(fields);
    let method = match method {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "PATCH" => Method::Patch,
        "OPTIONS" => Method::Options,
        other => Method::Other(other.to_string()),
    };
    request
        .set_method(&method)
        .map_err(|()| failed("invalid method"))?;
    let scheme = if url.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| failed("invalid scheme"))?;
    request
        .set_authority(Some(&url.authority))
        .map_err(|()| HttpError::InvalidUrl(format!("invalid host `{}`", url.authority)))?;
    request
        .set_path_with_query(Some(&url.path_query))
        .map_err(|()| HttpError::InvalidUrl(format!("invalid path `{}`", url.path_query)))?;
    let outgoing = request
        .body()
        .map_err(|()| failed("the request body was already taken"))?;
    let pending = outgoing_handler::handle(request, None::<RequestOptions>)
        .map_err(|e| HttpError::from_code(&e, &url.text()))?;
    write_body(&outgoing, body)?;
    OutgoingBody::finish(outgoing, None).map_err(|e| HttpError::from_code(&e, &url.text()))?;
    pending.subscribe().block();
    let response = match pending.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(e))) => return Err(HttpError::from_code(&e, &url.text())),
        Some(Err(())) | None => return Err(failed("the response was not available")),
    };
    let status = response.status();
    let headers = response
        .headers()
        .entries()
        .into_iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v))
        .collect();
    let incoming = response
        .consume()
        .map_err(|()| failed("the response body was already taken"))?;
    let mut body = Vec::new();
    {
        let stream = incoming
            .stream()
            .map_err(|()| failed("the response body stream was already taken"))?;
        loop {
            match stream.blocking_read(64 << 10) {
                Ok(chunk) => body.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(match wasip2::http::types::http_error_code(&e) {
                        Some(code) => HttpError::from_code(&code, &url.text()),
                        // wasmtime-wasi-http 48 reports body errors of its
                        // own error type, which `http-error-code` cannot
                        // map; recognise the host's body cap by its text.
                        None if e.to_debug_string().contains("body size") => {
                            HttpError::BodyTooLarge
                        }
                        None => HttpError::Failed(e.to_debug_string()),
                    });
                }
            }
        }
    }
    Ok(Response {
        status,
        headers,
        body,
        url: url.text(),
    })
}

fn write_body(outgoing: &OutgoingBody, body: Option<&[u8]>) -> Result<(), HttpError> {
    let Some(body) = body.filter(|b| !b.is_empty()) else {
        return Ok(());
    };
    let stream = outgoing
        .write()
        .map_err(|()| failed("the request body stream was already taken"))?;
    for chunk in body.chunks(4096) {
        stream
            .blocking_write_and_flush(chunk)
            .map_err(|e| HttpError::Failed(format!("writing the request body: {e:?}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Url;

    #[test]
    fn urls_parse_and_join() {
        let u = Url::parse("http://127.0.0.1:8089/a/b?x=1#frag").expect("parses");
        assert_eq!(u.authority, "127.0.0.1:8089");
        assert_eq!(u.path_query, "/a/b?x=1");
        assert_eq!(
            u.join("/c").expect("joins").text(),
            "http://127.0.0.1:8089/c"
        );
        assert_eq!(
            u.join("d").expect("joins").text(),
            "http://127.0.0.1:8089/a/d"
        );
        assert_eq!(
            u.join("https://other.example/").expect("joins").text(),
            "https://other.example/"
        );
        assert_eq!(u.join("//h:1/x").expect("joins").text(), "http://h:1/x");
        assert!(Url::parse("ftp://x").is_err());
        assert!(Url::parse("http://").is_err());
    }
}

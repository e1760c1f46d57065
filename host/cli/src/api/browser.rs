//! Rules against requests a web page makes through the operator's browser.
//!
//! - DNS rebinding: when the API listens on a loopback address, the `Host`
//!   of every request must be a loopback name (`localhost`) or address with
//!   the listening port; a page on `attacker.example` that re-resolves its
//!   name to 127.0.0.1 sends `Host: attacker.example` and is refused.
//! - Cross-site requests: a state-changing request (any method but GET,
//!   HEAD, OPTIONS) is refused when the browser marks it cross-site
//!   (`Sec-Fetch-Site` other than `same-origin` or `none`) or when its
//!   `Origin` is not this API's own (`http(s)://` + the request's `Host`).
//!   Requests without those headers (curl, the CLI, programs) pass.
//! - State-changing requests must say `Content-Type: application/json` (or
//!   `application/x-ndjson`, for a batch): a page cannot send either
//!   cross-origin without a CORS preflight, which this API never grants,
//!   so a forged form or `fetch` never runs.

use std::net::{IpAddr, SocketAddr};

use axum::{
    extract::{Request, State},
    http::{header, HeaderMap, Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};

use super::{ApiError, AppState};

/// Applies the module's rules, then runs the route.
pub async fn enforce(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Err(error) = check(state.listen, request.method(), request.headers()) {
        return error.into_response();
    }
    next.run(request).await
}

fn check(listen: Option<SocketAddr>, method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    let host = header_text(headers, header::HOST);
    if let Some(listen) = listen.filter(|l| l.ip().is_loopback()) {
        if !host.is_some_and(|h| loopback_host(h, listen.port())) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "host_not_allowed",
                format!(
                    "this API listens on {listen}: send `Host: 127.0.0.1:{port}` or `Host: localhost:{port}` (other names are refused against DNS rebinding)",
                    port = listen.port()
                ),
            ));
        }
    }
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    if let Some(site) = header_text(headers, "sec-fetch-site") {
        if !matches!(site, "same-origin" | "none") {
            return Err(cross_origin(&format!("the browser marked it {site}")));
        }
    }
    if let Some(origin) = header_text(headers, header::ORIGIN) {
        let own = host.is_some_and(|host| {
            ["http://", "https://"].iter().any(|scheme| {
                origin
                    .strip_prefix(scheme)
                    .is_some_and(|authority| authority.eq_ignore_ascii_case(host))
            })
        });
        if !own {
            return Err(cross_origin("its Origin is not this API"));
        }
    }
    let json = header_text(headers, header::CONTENT_TYPE).is_some_and(|value| {
        value.split(';').next().is_some_and(|media| {
            let media = media.trim();
            media.eq_ignore_ascii_case("application/json")
                || media.eq_ignore_ascii_case("application/x-ndjson")
        })
    });
    if !json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "json_required",
            "send `Content-Type: application/json` with requests that change state (a body may be empty; a batch may be `application/x-ndjson`)",
        ));
    }
    Ok(())
}

fn cross_origin(why: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "cross_origin",
        format!("cross-origin request refused: {why}; call the API from the same origin, or without a browser"),
    )
}

fn header_text(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `localhost` or a loopback address, with `port` (or no port when it is 80).
fn loopback_host(host: &str, port: u16) -> bool {
    let (name, given_port) = match host.rsplit_once(':') {
        Some((name, p)) if !name.ends_with(':') && p.bytes().all(|b| b.is_ascii_digit()) => {
            (name, p.parse::<u16>().ok())
        }
        _ => (host, Some(80)),
    };
    if given_port != Some(port) {
        return false;
    }
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::loopback_host;

    #[test]
    fn only_loopback_names_with_the_port_pass() {
        for ok in [
            "127.0.0.1:7878",
            "localhost:7878",
            "LOCALHOST:7878",
            "[::1]:7878",
            "127.1.2.3:7878",
        ] {
            assert!(loopback_host(ok, 7878), "{ok}");
        }
        for refused in [
            "attacker.example:7878",
            "127.0.0.1:80",
            "127.0.0.1",
            "localhost.attacker.example:7878",
            "[::1]",
            "10.0.0.1:7878",
            "127.0.0.1:7878:1",
            "",
        ] {
            assert!(!loopback_host(refused, 7878), "{refused}");
        }
        assert!(loopback_host("localhost", 80));
        assert!(loopback_host("[::1]", 80));
    }
}

//! Target for the HTTP API's request bodies and query strings.

use boxcar::fuzzing::{self, ApiAnswer};

use crate::queue;

/// The first byte picks the request (its value modulo 6): `POST /jobs`
/// (bit `0x80` set: the first line of the rest is a `traceparent` header),
/// the query of `GET /jobs`, `…/wait` or `…/logs`, the body of a cancel
/// or of `retry-failed`. The rest is the body or query string. Every
/// refusal must be a `4xx`: input never makes the API answer `5xx`.
pub fn api(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let answer: ApiAnswer = match selector % 6 {
        0 => {
            let (traceparent, body) = if selector & 0x80 != 0 {
                let split = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
                (Some(&rest[..split]), rest.get(split + 1..).unwrap_or(&[]))
            } else {
                (None, rest)
            };
            fuzzing::enqueue_body(queue::shared(), body, traceparent)
        }
        route @ 1..=3 => fuzzing::query(route - 1, &String::from_utf8_lossy(rest)),
        route => fuzzing::optional_body(route == 5, rest),
    };
    if let Err((status, error)) = answer {
        assert!(
            (400..500).contains(&status),
            "status {status} for a request's own fault: {error}"
        );
    }
}

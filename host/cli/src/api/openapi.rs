//! `GET /openapi.json`: the API's OpenAPI 3.1 document.
//!
//! The document is written by hand beside this module (`openapi.json`) and
//! served byte for byte. Invariants: it is valid JSON naming exactly the
//! paths and methods the router serves for [`super::json_routes`] (the unit
//! tests probe the router for each), and every answer the API gives
//! matches it (the end-to-end schemathesis run checks status codes,
//! content types and bodies).

use axum::{
    http::header,
    response::{IntoResponse, Response},
};

/// The document, as served.
pub const DOCUMENT: &str = include_str!("openapi.json");

/// `GET /openapi.json`.
pub(super) async fn document() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT).into_response()
}

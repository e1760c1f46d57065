//! The API's error type: every failure becomes JSON `{error, message}` with
//! the right status code. Internal errors are logged in full and shown to
//! the client only as a generic message — internals never leak.

use axum::{
    extract::rejection::JsonRejection,
    http::StatusCode,
    response::{IntoResponse, Response},
    Json,
};
use boxcar_queue::{EnqueueError, QueueError, StoreError, WaitError};
use serde_json::json;

/// A failed API request.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    /// An error with any status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// A 400 with a specific code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            code,
            message: message.into(),
        }
    }

    /// A 404 for a job id.
    pub fn job_not_found(id: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            message: format!("job `{id}` does not exist"),
        }
    }

    /// A 401 for a missing or wrong bearer token.
    pub fn unauthorized() -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message:
                "send `Authorization: Bearer <token>` with the token configured for this server"
                    .into(),
        }
    }

    /// A 500 whose details go to the log only.
    pub fn internal(error: &dyn std::fmt::Display) -> Self {
        tracing::error!(%error, "API request failed");
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            message: "internal error; the server log has the details".into(),
        }
    }
}

impl ApiError {
    /// The error's JSON body, `{error, message}` (also one item's answer in
    /// a batch).
    pub fn body(&self) -> serde_json::Value {
        json!({"error": self.code, "message": self.message})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::UnknownParent(id) => Self::bad_request(
                "unknown_parent",
                format!("parent job `{id}` does not exist"),
            ),
            other => Self::internal(&other),
        }
    }
}

impl From<EnqueueError> for ApiError {
    fn from(error: EnqueueError) -> Self {
        let code = match &error {
            EnqueueError::UnknownJobType { .. } => "unknown_job_type",
            EnqueueError::PayloadTooLarge { .. } => "payload_too_large",
            EnqueueError::SchemaViolation { .. } => "schema_violation",
            EnqueueError::InvalidTraceparent { .. } => "invalid_traceparent",
            _ => "invalid_job",
        };
        let status = match &error {
            EnqueueError::UnknownJobType { .. } | EnqueueError::SchemaViolation { .. } => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            EnqueueError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        };
        Self {
            status,
            code,
            message: error.to_string(),
        }
    }
}

impl From<QueueError> for ApiError {
    fn from(error: QueueError) -> Self {
        match error {
            QueueError::Enqueue(e) => e.into(),
            QueueError::Store(e) => e.into(),
        }
    }
}

impl From<WaitError> for ApiError {
    fn from(error: WaitError) -> Self {
        match error {
            WaitError::Timeout(id) => Self {
                status: StatusCode::REQUEST_TIMEOUT,
                code: "wait_timeout",
                message: format!("job `{id}` did not finish within the wait timeout; wait again or check it later"),
            },
            WaitError::NotFound(id) => Self::job_not_found(&id),
            WaitError::Store(e) => e.into(),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            return Self {
                status,
                code: "body_too_large",
                message: "request body is over the size limit".into(),
            };
        }
        Self {
            status: StatusCode::BAD_REQUEST,
            code: "bad_json",
            message: format!(
                "request body is not the expected JSON: {}",
                rejection.body_text()
            ),
        }
    }
}

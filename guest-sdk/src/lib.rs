//! # boxcar-guest: write boxcar job handlers in Rust
//!
//! A boxcar handler is a WebAssembly component (target `wasm32-wasip2`)
//! that exports the `boxcar:handler/handler` world from `wit/handler.wit`.
//! This crate wraps the generated bindings so that a handler is a plain
//! function from a typed [`Job`] to a serializable result:
//!
//! - [`handler!`] exports one function as the component's handler. The JSON
//!   payload is decoded into the function's payload type; a payload of the
//!   wrong shape fails the job with a **terminal** error that names the Rust
//!   type and the JSON path (never the payload's text).
//! - The returned value is serialized to JSON and stored as the job's
//!   result; `()` / `None` store no result.
//! - Failures are [`retry`] (with optional [`Retry::after`] floor and
//!   [`Retry::keep_attempt`]) or [`terminal`] (with [`Terminal::code`] and
//!   [`Terminal::details`]). Any `std::error::Error` converts into a
//!   retryable failure, so `?` works.
//! - Host calls: [`info!`] and the other logging macros, [`progress`],
//!   [`cancelled`], [`enqueue`], [`children`].
//! - Outbound HTTP, when the manifest grants it (`capabilities.http`):
//!   [`http::get`], [`http::post`], [`http::Request`]. Granted directories,
//!   the scratch `/tmp` and environment variables are plain `std::fs` /
//!   `std::env`.
//!
//! A fresh instance runs every job: globals do not survive between jobs.
//! Jobs are delivered at least once, so handlers must be idempotent.
//!
//! ## Example
//!
//! `Cargo.toml`:
//!
//! ```toml
//! [package]
//! name = "resize"
//! edition = "2021"
//!
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! boxcar-guest = { path = "../../guest-sdk" }
//! serde = { version = "1", features = ["derive"] }
//! ```
//!
//! `src/lib.rs`:
//!
//! ```
//! use std::time::Duration;
//!
//! use boxcar_guest::{info, retry, terminal, EnqueueOptions, Error, Job};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize)]
//! struct Resize {
//!     url: String,
//!     width: u32,
//! }
//!
//! #[derive(Serialize)]
//! struct Resized {
//!     bytes: usize,
//! }
//!
//! fn resize(job: Job<Resize>) -> Result<Resized, Error> {
//!     info!("resizing to {} px (attempt {})", job.payload.width, job.attempt);
//!     if job.payload.width == 0 {
//!         return Err(terminal("width must be positive").code("bad-width").into());
//!     }
//!     if job.payload.url.is_empty() {
//!         // Upstream busy: try again in 30 s without using up an attempt.
//!         return Err(retry("no source yet").after(Duration::from_secs(30)).keep_attempt().into());
//!     }
//!     for step in 0..3 {
//!         if boxcar_guest::cancelled() {
//!             return Err(retry("cancelled mid-way").into());
//!         }
//!         let _ = boxcar_guest::progress(&serde_json::json!({ "step": step }));
//!     }
//!     let _ = boxcar_guest::enqueue(
//!         "notify",
//!         &serde_json::json!({ "url": job.payload.url }),
//!         EnqueueOptions::default(),
//!     );
//!     Ok(Resized { bytes: 1024 })
//! }
//!
//! boxcar_guest::handler!(resize);
//! # fn main() {}
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2`; the
//! component is `target/wasm32-wasip2/release/resize.wasm`. Deploy it next
//! to a manifest (`resize.toml`) that names its job type and limits.

pub mod bindings;
mod error;
mod host;
pub mod http;
mod job;
mod payload;

pub use error::{retry, terminal, Error, Retry, Terminal};
pub use host::{
    cancelled, children, enqueue, log, progress, Child, EnqueueOptions, HostError, Level,
};
pub use job::{Job, Scope};

/// Typed job declarations shared with Rust producers (crate `boxcar-jobs`).
pub use boxcar_jobs::{declare_job, JobType};

/// Exports `handler` as the handler of the declared job type `J` (a
/// [`JobType`], usually from a crate shared with the producers).
///
/// `handler` is a function `fn(Job<J::Payload>) -> Result<J::Output, Error>`:
/// the compiler holds the guest to the declaration's payload and result
/// types. A job of another type than `J::NAME` fails terminally with code
/// `wrong-job-type` (check the manifest's `job_type`).
///
/// ```
/// use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize)]
/// pub struct Add { a: i64, b: i64 }
/// boxcar_guest::declare_job! { pub Sum = "math.sum", payload: Add, output: i64 }
///
/// fn sum(job: boxcar_guest::Job<Add>) -> Result<i64, boxcar_guest::Error> {
///     Ok(job.payload.a + job.payload.b)
/// }
/// boxcar_guest::typed_handler!(Sum, sum);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! typed_handler {
    ($job:ty, $handler:path) => {
        const _: () = {
            fn __boxcar_typed(
                job: $crate::Job<<$job as $crate::JobType>::Payload>,
            ) -> ::core::result::Result<<$job as $crate::JobType>::Output, $crate::Error> {
                $crate::__private::check_type::<$job, _>(&job)?;
                $handler(job)
            }
            $crate::handler!(__boxcar_typed);
        };
    };
}

/// Exports `handler` as this component's job handler.
///
/// `handler` is a function `fn(Job<P>) -> Result<R, Error>` where `P:
/// DeserializeOwned` and `R: Serialize`. Use it once per crate, at the top
/// level.
///
/// ```
/// fn noop(_job: boxcar_guest::Job<serde_json::Value>) -> Result<(), boxcar_guest::Error> {
///     Ok(())
/// }
/// boxcar_guest::handler!(noop);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! handler {
    ($handler:path) => {
        const _: () = {
            struct BoxcarHandler;

            impl $crate::bindings::Guest for BoxcarHandler {
                fn handle(
                    job: $crate::bindings::boxcar::handler::types::Job,
                ) -> ::core::result::Result<
                    ::core::option::Option<::std::string::String>,
                    $crate::bindings::boxcar::handler::types::JobError,
                > {
                    $crate::__private::run(job, $handler)
                }
            }

    $crate::bindings::__export_handler_world!(BoxcarHandler with_types_in $crate::bindings);
        };
    };
}

/// The SDK's payload decoding, for the fuzz targets (`host/fuzz-targets`);
/// not part of the supported API.
#[doc(hidden)]
pub mod fuzzing {
    /// Decodes `text` as `P` exactly as a handler's payload is decoded, or
    /// the message the job fails with (which never repeats payload text).
    ///
    /// # Errors
    /// The payload does not match `P`.
    pub fn decode<P: serde::de::DeserializeOwned>(text: &str) -> Result<P, String> {
        crate::payload::decode(text)
    }
}

#[doc(hidden)]
pub mod __private {
    use serde::{de::DeserializeOwned, Serialize};

    use crate::bindings::boxcar::handler::types as wit;
    use crate::{terminal, Error, Job, JobType};

    /// Refuses a job whose type is not the declaration's.
    pub fn check_type<J: JobType, P>(job: &Job<P>) -> Result<(), Error> {
        if job.job_type == J::NAME {
            Ok(())
        } else {
            Err(terminal(format!(
                "this handler is declared for job type `{}`, not `{}`; fix the manifest's job_type",
                J::NAME,
                job.job_type
            ))
            .code("wrong-job-type")
            .into())
        }
    }

    /// Decodes the payload, calls the handler, encodes its answer.
    pub fn run<P, R, F>(job: wit::Job, handler: F) -> Result<Option<String>, wit::JobError>
    where
        P: DeserializeOwned,
        R: Serialize,
        F: FnOnce(Job<P>) -> Result<R, Error>,
    {
        let payload = match crate::payload::decode::<P>(&job.payload) {
            Ok(p) => p,
            Err(message) => {
                return Err(Error::from(terminal(message).code("invalid-payload")).into_wit())
            }
        };
        let job = Job::from_wit(job, payload);
        match handler(job) {
            Ok(result) => match serde_json::to_string(&result) {
                Ok(json) if json == "null" => Ok(None),
                Ok(json) => Ok(Some(json)),
                Err(e) => Err(Error::from(terminal(format!(
                    "the handler's result could not be serialized as JSON: {e}"
                )))
                .into_wit()),
            },
            Err(e) => Err(e.into_wit()),
        }
    }
}

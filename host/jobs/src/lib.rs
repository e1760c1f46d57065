//! # boxcar-jobs: declare a job type once, use it on both ends
//!
//! A [`JobType`] names a job type and fixes its payload and result types.
//! The same declaration compiles for the host and for `wasm32-wasip2`, so
//! a Rust producer enqueues a typed payload and waits for a typed result
//! (feature `queue`: [`TypedQueue`] on `boxcar_queue::Queue`), and a Rust
//! guest receives the same payload type (`boxcar_guest::typed_handler!`).
//! Moving a call onto the queue becomes a change of declaration, not of
//! call sites.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! pub struct Resize { pub url: String, pub width: u32 }
//! #[derive(Serialize, Deserialize)]
//! pub struct Resized { pub bytes: u64 }
//!
//! boxcar_jobs::declare_job! {
//!     /// Resizes an image.
//!     pub ResizeImage = "images.resize", payload: Resize, output: Resized
//! }
//!
//! use boxcar_jobs::JobType;
//! assert_eq!(ResizeImage::NAME, "images.resize");
//! ```
//!
//! Invariants: the wire format is the JSON of `Payload` and `Output` (serde);
//! a declaration adds no envelope, so untyped producers and guests in any
//! language interoperate. A name that no handler or declaration knows is
//! refused at enqueue (`UnknownJobType`) by the queue's known-type check.

#[cfg(feature = "queue")]
mod queue;

use serde::{de::DeserializeOwned, Serialize};

#[cfg(feature = "queue")]
pub use queue::{TypedEnqueueError, TypedQueue, TypedWaitError};

/// One job type: its name and the types of its payload and result.
pub trait JobType {
    /// The job type string (what manifests declare as `job_type`).
    const NAME: &'static str;
    /// What producers send and handlers receive.
    type Payload: Serialize + DeserializeOwned + Send + 'static;
    /// What a successful handler returns and waiters receive (`()` for none).
    type Output: Serialize + DeserializeOwned + Send + 'static;
}

/// Declares a [`JobType`]: a unit struct named `$name` for job type `$job`.
///
/// ```
/// boxcar_jobs::declare_job! {
///     pub Echo = "echo", payload: serde_json::Value, output: serde_json::Value
/// }
/// ```
#[macro_export]
macro_rules! declare_job {
    ($(#[$meta:meta])* $vis:vis $name:ident = $job:literal, payload: $payload:ty, output: $output:ty $(,)?) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        $vis struct $name;

        impl $crate::JobType for $name {
            const NAME: &'static str = $job;
            type Payload = $payload;
            type Output = $output;
        }
    };
}

/// The payload of `J` as JSON (what is stored and sent to the guest).
///
/// # Errors
/// The payload's `Serialize` implementation failed (e.g. a map with
/// non-string keys).
pub fn encode_payload<J: JobType>(payload: &J::Payload) -> Result<serde_json::Value, String> {
    serde_json::to_value(payload).map_err(|e| {
        format!(
            "the payload of `{}` could not be serialized as JSON: {e}",
            J::NAME
        )
    })
}

/// The result of `J` from the stored JSON text (`None`: the handler
/// returned no result, read as JSON `null`).
///
/// # Errors
/// The stored result does not have the declared output shape.
pub fn decode_output<J: JobType>(result: Option<&str>) -> Result<J::Output, String> {
    serde_json::from_str(result.unwrap_or("null")).map_err(|e| {
        format!(
            "the result of `{}` does not match its declared output type: {e}",
            J::NAME
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct In {
        n: u32,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Out {
        doubled: u32,
    }

    declare_job! {
        /// Doubles a number.
        Double = "math.double", payload: In, output: Out
    }

    declare_job! { Fire = "fire", payload: In, output: () }

    #[test]
    fn declaration_fixes_name_and_wire_format() {
        assert_eq!(Double::NAME, "math.double");
        assert_eq!(
            encode_payload::<Double>(&In { n: 2 }),
            Ok(serde_json::json!({"n": 2}))
        );
        assert_eq!(
            decode_output::<Double>(Some(r#"{"doubled":4}"#)),
            Ok(Out { doubled: 4 })
        );
        assert_eq!(decode_output::<Fire>(None), Ok(()));
        let wrong = decode_output::<Double>(Some(r#"{"tripled":6}"#)).unwrap_err();
        assert!(
            wrong.starts_with("the result of `math.double` does not match"),
            "{wrong}"
        );
    }
}

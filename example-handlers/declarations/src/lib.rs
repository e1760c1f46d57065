//! Job declarations shared by both ends: the `typed-review` example guest
//! (`example-handlers/rust/typed-review`, built for `wasm32-wasip2`) and
//! the Rust producer tests (host). One declaration, one wire format.

use serde::{Deserialize, Serialize};

/// What a producer asks to have reviewed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewRequest {
    /// The text to review.
    pub text: String,
}

/// The review of an accepted text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewOutcome {
    /// Number of words.
    pub words: u32,
    /// The text in upper case.
    pub shouted: String,
}

/// The word `typed-review` refuses; a text containing it fails terminally
/// with code [`CONTENT_REFUSED`] and details `{"word": REFUSED_WORD}`.
pub const REFUSED_WORD: &str = "forbidden";

/// The error code of a refused text.
pub const CONTENT_REFUSED: &str = "content-refused";

boxcar_jobs::declare_job! {
    /// Reviews a text: counts its words, or refuses it.
    pub Review = "typed-review", payload: ReviewRequest, output: ReviewOutcome
}

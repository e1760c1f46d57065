//! Reviews a text with the shared typed declaration
//! `boxcar_example_jobs::Review`: counts its words, or refuses a text that
//! contains the refused word with a terminal error coded `content-refused`.

use boxcar_example_jobs::{Review, ReviewOutcome, ReviewRequest, CONTENT_REFUSED, REFUSED_WORD};
use boxcar_guest::{terminal, Error, Job};

fn review(job: Job<ReviewRequest>) -> Result<ReviewOutcome, Error> {
    let text = job.payload.text;
    if text.split_whitespace().any(|w| w == REFUSED_WORD) {
        return Err(terminal("the text contains a refused word")
            .code(CONTENT_REFUSED)
            .details(&serde_json::json!({ "word": REFUSED_WORD }))
            .into());
    }
    Ok(ReviewOutcome {
        words: u32::try_from(text.split_whitespace().count()).unwrap_or(u32::MAX),
        shouted: text.to_uppercase(),
    })
}

boxcar_guest::typed_handler!(Review, review);

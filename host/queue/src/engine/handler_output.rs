//! The queue's boundary for what a handler answers: every [`Outcome`] of
//! every handler (WASM or native) passes [`admit`] before the engine turns
//! it into a store write, so nothing a handler says can make that write
//! fail.
//!
//! Rules for the handler's own answer — a violation turns the run into a
//! terminal failure with `error_code` [`INVALID_OUTPUT`] whose message
//! names the field and the rule, never the text:
//! - a result and error details are JSON text of at most [`MAX_JSON_BYTES`].
//!   Valid JSON never holds a raw NUL (U+0000), which no Postgres `text`
//!   column accepts; the escape `\u0000` inside a string is six ASCII
//!   characters and is stored as they are;
//! - a message is at most [`MAX_MESSAGE_BYTES`] and holds no NUL;
//! - an error code is 1 to [`MAX_CODE_BYTES`] bytes of printable characters.
//!
//! Messages the host writes itself about a run (a trap with the guest's
//! stderr, a limit or host error) keep their outcome: a NUL in them becomes
//! U+FFFD and they are cut at [`MAX_MESSAGE_BYTES`].

use crate::handler::Outcome;
use crate::validate::text_problem;

/// `error_code` of a run whose answer broke these rules.
pub const INVALID_OUTPUT: &str = "invalid-output";
/// Largest result or error details, in bytes.
pub const MAX_JSON_BYTES: usize = 16 << 20;
/// Largest message, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 8 << 10;
/// Largest error code, in bytes.
pub const MAX_CODE_BYTES: usize = 256;

/// The outcome as the engine may store it (see the module rules).
pub(crate) fn admit(outcome: Outcome) -> Outcome {
    match outcome {
        Outcome::Succeeded { result } => {
            match result.as_deref().and_then(|r| json_problem("result", r)) {
                Some(problem) => refused(&problem),
                None => Outcome::Succeeded { result },
            }
        }
        Outcome::Retryable {
            message,
            retry_after,
            consumes_attempt,
        } => match message_problem("retry message", &message) {
            Some(problem) => refused(&problem),
            None => Outcome::Retryable {
                message,
                retry_after,
                consumes_attempt,
            },
        },
        Outcome::Terminal {
            message,
            code,
            details,
        } => {
            let problem = message_problem("error message", &message)
                .or_else(|| code.as_deref().and_then(code_problem))
                .or_else(|| {
                    details
                        .as_deref()
                        .and_then(|d| json_problem("error details", d))
                });
            match problem {
                Some(problem) => refused(&problem),
                None => Outcome::Terminal {
                    message,
                    code,
                    details,
                },
            }
        }
        Outcome::Trapped { message } => Outcome::Trapped {
            message: host_text(message),
        },
        Outcome::LimitExceeded { which, detail } => Outcome::LimitExceeded {
            which,
            detail: host_text(detail),
        },
        Outcome::HostError { message } => Outcome::HostError {
            message: host_text(message),
        },
        other @ (Outcome::TimedOut
        | Outcome::Cancelled
        | Outcome::OutOfMemory
        | Outcome::FuelExhausted) => other,
    }
}

fn refused(problem: &str) -> Outcome {
    Outcome::Terminal {
        message: format!(
            "invalid output: {problem}; the handler's answer was not stored (fix the handler)"
        ),
        code: Some(INVALID_OUTPUT.to_string()),
        details: None,
    }
}

fn json_problem(what: &str, text: &str) -> Option<String> {
    if text.len() > MAX_JSON_BYTES {
        return Some(format!(
            "the {what} is {} bytes, over the {MAX_JSON_BYTES}-byte limit",
            text.len()
        ));
    }
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .err()
        .map(|e| format!("the {what} is not JSON text ({e})"))
}

fn message_problem(what: &str, text: &str) -> Option<String> {
    if text.len() > MAX_MESSAGE_BYTES {
        return Some(format!(
            "the {what} is {} bytes, over the {MAX_MESSAGE_BYTES}-byte limit",
            text.len()
        ));
    }
    text.contains('\0')
        .then(|| format!("the {what} contains a NUL character (U+0000)"))
}

fn code_problem(code: &str) -> Option<String> {
    if code.is_empty() {
        return Some("the error code is empty; give printable text such as `not-found`".into());
    }
    text_problem(code, MAX_CODE_BYTES).map(|problem| format!("the error code {problem}"))
}

/// Host-written text that embeds guest text: NUL replaced, length bounded.
pub(crate) fn host_text(text: String) -> String {
    let mut text = if text.contains('\0') {
        text.replace('\0', "\u{FFFD}")
    } else {
        text
    };
    if text.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handler::LimitKind;

    fn code_of(outcome: &Outcome) -> Option<&str> {
        match outcome {
            Outcome::Terminal { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    #[test]
    fn results_must_be_bounded_json_text() {
        for bad in ["{\"a\":\"\0\"}", "not json", "{\"a\":1", "\0"] {
            let outcome = admit(Outcome::Succeeded {
                result: Some(bad.into()),
            });
            assert_eq!(code_of(&outcome), Some(INVALID_OUTPUT), "{bad:?}");
        }
        let escaped = Some("{\"a\":\"\\u0000\"}".to_string());
        assert_eq!(
            admit(Outcome::Succeeded {
                result: escaped.clone()
            }),
            Outcome::Succeeded { result: escaped }
        );
        let huge = Some(format!("\"{}\"", "x".repeat(MAX_JSON_BYTES)));
        let outcome = admit(Outcome::Succeeded { result: huge });
        assert_eq!(code_of(&outcome), Some(INVALID_OUTPUT));
        assert_eq!(
            admit(Outcome::Succeeded { result: None }),
            Outcome::Succeeded { result: None }
        );
    }

    #[test]
    fn error_answers_must_be_storable() {
        let terminal = |message: &str, code: Option<&str>, details: Option<&str>| {
            admit(Outcome::Terminal {
                message: message.into(),
                code: code.map(str::to_string),
                details: details.map(str::to_string),
            })
        };
        for outcome in [
            terminal("bad\0", None, None),
            terminal("ok", Some("a\0b"), None),
            terminal("ok", Some(""), None),
            terminal("ok", Some("\u{1b}[31m"), None),
            terminal("ok", None, Some("{\"k\":\0}")),
            terminal(&"m".repeat(MAX_MESSAGE_BYTES + 1), None, None),
            admit(Outcome::Retryable {
                message: "\0".into(),
                retry_after: None,
                consumes_attempt: true,
            }),
        ] {
            assert_eq!(code_of(&outcome), Some(INVALID_OUTPUT), "{outcome:?}");
            let message = outcome.error_message().unwrap_or_default();
            assert!(!message.contains('\0'), "{message:?}");
        }
        let fine = terminal("refused", Some("content-refused"), Some("{\"r\":1}"));
        assert_eq!(code_of(&fine), Some("content-refused"));
    }

    #[test]
    fn host_messages_keep_their_kind_without_nul() {
        let trapped = admit(Outcome::Trapped {
            message: format!("panic: {}\0", "é".repeat(MAX_MESSAGE_BYTES)),
        });
        let Outcome::Trapped { message } = trapped else {
            panic!("a trap stays a trap: {trapped:?}");
        };
        assert!(!message.contains('\0') && message.len() <= MAX_MESSAGE_BYTES);
        let limit = admit(Outcome::LimitExceeded {
            which: LimitKind::Other,
            detail: "a\0b".into(),
        });
        assert_eq!(
            limit,
            Outcome::LimitExceeded {
                which: LimitKind::Other,
                detail: "a\u{FFFD}b".into()
            }
        );
    }
}

//! The W3C trace context a producer hands over with a job (`traceparent`),
//! so the job's runs can be recorded as children of the producer's span.
//!
//! Invariant: a [`TraceParent`] only exists for text of the form
//! `00-<32 hex>-<16 hex>-<2 hex>` in lower case, whose trace id and parent
//! span id are not all zeros (version 00 of the W3C Trace Context
//! `traceparent` header). A job stores the text as given, after this check.

use std::fmt;

/// A `traceparent` value that is not a version-00 W3C trace context.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("traceparent `{shown}` is not a W3C trace context ({reason}); expected 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags> in lower case, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")]
pub struct InvalidTraceparent {
    /// The value, cut to 80 characters with control characters escaped.
    pub shown: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// A parsed version-00 `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace id (16 bytes, not all zero).
    pub trace_id: [u8; 16],
    /// The producer's span id (8 bytes, not all zero).
    pub parent_id: [u8; 8],
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceParent {
    /// Parses `value`.
    ///
    /// # Errors
    /// [`InvalidTraceparent`] saying what is wrong.
    pub fn parse(value: &str) -> Result<Self, InvalidTraceparent> {
        let invalid = |reason| InvalidTraceparent {
            shown: value
                .chars()
                .take(80)
                .flat_map(char::escape_default)
                .collect(),
            reason,
        };
        if value.len() != 55 {
            return Err(invalid("it must be 55 characters long"));
        }
        let parts: Vec<&str> = value.split('-').collect();
        let [version, trace_id, parent_id, flags] = parts[..] else {
            return Err(invalid("it must have four dash-separated parts"));
        };
        if version != "00" {
            return Err(invalid("only version 00 is accepted"));
        }
        let trace_id: [u8; 16] = hex_bytes(trace_id)
            .ok_or_else(|| invalid("the trace id must be 32 lower-case hexadecimal digits"))?;
        let parent_id: [u8; 8] = hex_bytes(parent_id)
            .ok_or_else(|| invalid("the parent id must be 16 lower-case hexadecimal digits"))?;
        let [flags]: [u8; 1] = hex_bytes(flags)
            .ok_or_else(|| invalid("the flags must be 2 lower-case hexadecimal digits"))?;
        if trace_id == [0; 16] {
            return Err(invalid("the trace id is all zeros"));
        }
        if parent_id == [0; 8] {
            return Err(invalid("the parent id is all zeros"));
        }
        Ok(Self {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// Whether the producer sampled its trace (flag bit 0).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        for b in self.trace_id {
            write!(f, "{b:02x}")?;
        }
        f.write_str("-")?;
        for b in self.parent_id {
            write!(f, "{b:02x}")?;
        }
        write!(f, "-{:02x}", self.flags)
    }
}

/// `N` bytes from exactly `2 * N` lower-case hexadecimal digits.
fn hex_bytes<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let nibble = |d: u8| match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_w3c_example_parses_and_prints_back() {
        let parsed = TraceParent::parse(GOOD).expect("valid");
        assert_eq!(parsed.trace_id[0], 0x4b);
        assert_eq!(parsed.parent_id[7], 0xb7);
        assert!(parsed.sampled());
        assert_eq!(parsed.to_string(), GOOD);
    }

    #[test]
    fn malformed_values_are_refused_with_the_reason() {
        for (value, reason) in [
            ("", "55 characters"),
            (
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "version 00",
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                "trace id",
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "all zeros",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "parent id is all zeros",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
                "flags",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e47360-0f067aa0ba902b7-01",
                "trace id",
            ),
            (
                "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
                "four",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b\u{e9}01",
                "four",
            ),
        ] {
            let error = TraceParent::parse(value).expect_err(value).to_string();
            assert!(error.contains(reason), "{value:?} gave {error}");
        }
    }

    #[test]
    fn control_characters_are_not_echoed() {
        let value = "\u{1b}[31m-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0";
        let error = TraceParent::parse(value).expect_err("bad").to_string();
        assert!(!error.contains('\u{1b}'), "{error}");
    }
}

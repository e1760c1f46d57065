//! Decoding a payload into the handler's type, and describing a mismatch
//! without ever repeating payload text.
//!
//! serde's messages quote the offending value ("invalid type: string
//! \"secret\""); payloads may hold secrets, so only the Rust type, the JSON
//! path and serde's *expectation* (which comes from the type) are kept.
//! The path names the object keys on the way to the mismatch, but never an
//! unknown field's own name: that key is payload text the type does not
//! know (serde's message names it too, and that name is dropped as well).

use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;

/// Decodes `text` as `P`, or explains — without payload text — why not.
pub(crate) fn decode<P: DeserializeOwned>(text: &str) -> Result<P, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value: P = match serde_path_to_error::deserialize(&mut de) {
        Ok(v) => v,
        Err(e) => return Err(describe::<P>(&e)),
    };
    if de.end().is_err() {
        return Err(format!(
            "payload does not match `{}`: trailing characters after the JSON value",
            std::any::type_name::<P>()
        ));
    }
    Ok(value)
}

fn describe<P>(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let ty = std::any::type_name::<P>();
    let inner = e.inner();
    let segments: Vec<&Segment> = e.path().iter().collect();
    let known = if inner.to_string().starts_with("unknown field") {
        &segments[..segments.len().saturating_sub(1)]
    } else {
        &segments[..]
    };
    let path = render_path(known);
    let what = match inner.classify() {
        serde_json::error::Category::Data => redact(&inner.to_string()),
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => format!(
            "not valid JSON (line {}, column {})",
            inner.line(),
            inner.column()
        ),
        serde_json::error::Category::Io => "could not be read".to_string(),
    };
    format!("payload does not match `{ty}` at `{path}`: {what}")
}

/// `segments` as `serde_path_to_error` writes a path (`a.b[2].c`; `.` when
/// there is none).
fn render_path(segments: &[&Segment]) -> String {
    if segments.is_empty() {
        return ".".to_string();
    }
    let mut out = String::new();
    for (i, segment) in segments.iter().enumerate() {
        if i > 0 && !matches!(segment, Segment::Seq { .. }) {
            out.push('.');
        }
        out.push_str(&segment.to_string());
    }
    out
}

/// Keeps the kind of mismatch and serde's expectation, drops the value.
fn redact(message: &str) -> String {
    let message = match message.rfind(" at line ") {
        Some(i) => &message[..i],
        None => message,
    };
    if message.starts_with("missing field") {
        return message.to_string();
    }
    const KINDS: [&str; 6] = [
        "invalid type",
        "invalid value",
        "invalid length",
        "unknown variant",
        "unknown field",
        "duplicate field",
    ];
    let kind = KINDS
        .iter()
        .find(|k| message.starts_with(*k))
        .copied()
        .unwrap_or("invalid data");
    if kind == "duplicate field" {
        return message.to_string();
    }
    match message.rfind(", expected ") {
        Some(i) => format!("{kind}{}", &message[i..]),
        None => kind.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Inner {
        count: u32,
    }

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Outer {
        name: String,
        inner: Inner,
    }

    #[test]
    fn wrong_type_names_type_and_path_but_not_value() {
        let err = decode::<Outer>(r#"{"name":"x","inner":{"count":"hunter2"}}"#)
            .expect_err("must not decode");
        assert!(err.contains("Outer"), "{err}");
        assert!(err.contains("inner.count"), "{err}");
        assert!(err.contains("expected u32"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Strict {
        inner: Inner,
    }

    #[test]
    fn an_unknown_fields_name_is_not_repeated_but_its_parents_path_is() {
        let err =
            decode::<Strict>(r#"{"inner":{"count":1},"hunter2":0}"#).expect_err("must not decode");
        assert!(!err.contains("hunter2"), "{err}");
        assert!(
            err.contains("at `.`: unknown field, expected `inner`"),
            "{err}"
        );
        let err =
            decode::<Vec<Strict>>(r#"[{"inner":{"count":1}},{"inner":{"count":1},"hunter2":0}]"#)
                .expect_err("must not decode");
        assert!(!err.contains("hunter2"), "{err}");
        assert!(err.contains("at `[1]`: unknown field"), "{err}");
    }

    #[test]
    fn missing_field_is_named() {
        let err = decode::<Outer>(r#"{"inner":{"count":1}}"#).expect_err("must not decode");
        assert!(err.contains("missing field `name`"), "{err}");
    }

    #[test]
    fn syntax_error_does_not_echo() {
        let err = decode::<Outer>(r#"{"name": secret"#).expect_err("must not decode");
        assert!(err.contains("not valid JSON"), "{err}");
        assert!(!err.contains("secret"), "{err}");
    }

    #[test]
    fn valid_payload_decodes() {
        let v = decode::<Outer>(r#"{"name":"x","inner":{"count":3}}"#).expect("decodes");
        assert_eq!(v.inner.count, 3);
    }
}

//! Target for the guest SDK's payload decoding (what a Rust handler does
//! with the payload text before its code runs).

use std::collections::BTreeMap;

use boxcar_guest::fuzzing::decode;
use serde::Deserialize;
use serde_json::Value;

/// A handler's payload type with the shapes serde handles differently.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Payload {
    url: String,
    count: u32,
    #[serde(default)]
    tags: Vec<String>,
    kind: Kind,
    nested: Option<Nested>,
    #[serde(default)]
    extra: BTreeMap<String, i64>,
    ratio: Option<f64>,
    pair: Option<(u8, String)>,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum Kind {
    Plain,
    Tagged { level: i16 },
    Wrapped(String),
}

#[derive(Deserialize, Debug)]
#[serde(tag = "type")]
#[allow(dead_code)]
enum Nested {
    A { value: bool },
    B { items: Vec<Option<u64>> },
}

/// Marker that fuzzed string values are replaced with; the decoding error
/// must never contain it (payload text is never repeated).
const SECRET: &str = "s3cr3t";

fn hide_strings(value: &mut Value) {
    match value {
        Value::String(s) => *s = format!("{SECRET}{}", s.len()),
        Value::Array(items) => items.iter_mut().for_each(hide_strings),
        Value::Object(map) => map.values_mut().for_each(hide_strings),
        _ => {}
    }
}

/// The text decoded as several payload types; then, when it is JSON, the
/// same value with every string replaced by a marker, whose decoding
/// error must not show the marker.
pub fn guest_payload(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = decode::<Value>(text);
    let _ = decode::<Vec<Kind>>(text);
    let _ = decode::<Payload>(text);
    let Ok(mut value) = serde_json::from_str::<Value>(text) else {
        return;
    };
    hide_strings(&mut value);
    let hidden = value.to_string();
    for error in [
        decode::<Payload>(&hidden).err(),
        decode::<Vec<Kind>>(&hidden).err(),
        decode::<BTreeMap<String, u16>>(&hidden).err(),
    ]
    .into_iter()
    .flatten()
    {
        assert!(!error.contains(SECRET), "payload text in {error:?}");
    }
}

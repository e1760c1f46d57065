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
/// must never contain it (payload values are never repeated).
const SECRET: &str = "s3cr3t";

/// A key added first to every object: unknown to every struct here, so a
/// decoding error must never contain it (an unknown field's name is
/// payload text); where a map takes it, its value `0` fits. It sorts before
/// every letter, so it comes first whether or not the map keeps insertion
/// order.
const UNKNOWN_KEY: &str = "0unkn0wn";

/// Marks every string value with [`SECRET`], takes [`SECRET`] and
/// [`UNKNOWN_KEY`] out of the keys (keys on the way to a mismatch may be
/// named in its path), and adds [`UNKNOWN_KEY`] to every object.
fn hide_strings(value: &mut Value) {
    match value {
        Value::String(s) => *s = format!("{SECRET}{}", s.len()),
        Value::Array(items) => items.iter_mut().for_each(hide_strings),
        Value::Object(map) => {
            let mut hidden = serde_json::Map::new();
            hidden.insert(UNKNOWN_KEY.to_string(), Value::from(0));
            for (key, mut value) in std::mem::take(map) {
                hide_strings(&mut value);
                let key = key.replace(SECRET, "-").replace(UNKNOWN_KEY, "-");
                hidden.insert(key, value);
            }
            *map = hidden;
        }
        _ => {}
    }
}

/// The text decoded as several payload types; then, when it is JSON, the
/// same value with every string replaced by a marker and an unknown key
/// added to every object, whose decoding errors must show neither.
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
        assert!(
            !error.contains(UNKNOWN_KEY),
            "an unknown field's name in {error:?}"
        );
    }
}

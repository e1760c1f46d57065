//! Parsing of the human units used in configuration and manifests:
//! durations (`"500ms"`, `"30s"`, `"5m"`, `"7d"`) and byte sizes
//! (`"64MiB"`, `"256KiB"`, `"1MB"`).
//!
//! Both deserialize from TOML strings; a bad value is an error that quotes
//! the value and shows a valid example, never a silent default.

use std::{fmt, time::Duration};

use serde::{de, Deserialize, Deserializer};

/// A duration written as a human string, e.g. `"30s"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

/// A byte size written as a human string, e.g. `"64MiB"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

/// Parses a duration such as `"250ms"`, `"30s"`, `"5m"`, `"1h 30m"`, `"7d"`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|error| {
        format!("`{text}` is not a duration ({error}); write it like \"500ms\", \"30s\", \"5m\" or \"7d\"")
    })
}

/// Parses a byte size such as `"64MiB"`, `"256KiB"`, `"1MB"` or `"4096"`.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<bytesize::ByteSize>()
        .map(|size| size.as_u64())
        .map_err(|error| {
            format!("`{text}` is not a byte size ({error}); write it like \"64MiB\" or \"256KiB\"")
        })
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        parse_duration(&text).map(Self).map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte size such as \"64MiB\" or a number of bytes")
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<ByteSize, E> {
                u64::try_from(value)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("byte size {value} is negative")))
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(value))
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<ByteSize, E> {
                parse_bytes(value).map(ByteSize).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", bytesize::ByteSize(self.0).display().iec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_bad_ones_say_how_to_write_them() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        let error = parse_duration("soon").unwrap_err();
        assert!(
            error.contains("`soon`") && error.contains("\"30s\""),
            "{error}"
        );
    }

    #[test]
    fn byte_sizes_parse_binary_units() {
        assert_eq!(parse_bytes("64MiB"), Ok(64 * 1024 * 1024));
        assert_eq!(parse_bytes("256KiB"), Ok(256 * 1024));
        assert!(parse_bytes("lots").unwrap_err().contains("`lots`"));
    }
}

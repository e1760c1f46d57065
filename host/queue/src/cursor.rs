//! Keyset paging of the jobs list: a [`JobCursor`] is the sort key
//! (`created_at`, `id`) of the last job of a page, and the next page is the
//! jobs strictly after it in the list's order.
//!
//! Invariants: a cursor's text form is opaque to callers (lowercase hex of
//! `SECONDS.NANOS:ID`) and round-trips exactly, to the nanosecond (`parse(c.to_string()) == c`);
//! parsing never panics and rejects anything that is not such a text with
//! [`InvalidCursor`]. A cursor names a position, not a row: the row it came
//! from may be gone and paging goes on from where it was.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::job::Job;

/// The longest cursor text accepted (a job id is at most a few hundred
/// bytes; this leaves room and bounds the work of parsing hostile input).
const MAX_TEXT: usize = 4096;

/// Where a page of the jobs list ends: the last row's sort key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobCursor {
    /// The job's creation instant (the list's first sort key).
    pub created_at: DateTime<Utc>,
    /// The job's id (the tie-break among jobs created at the same instant).
    pub id: String,
}

/// A cursor text that no store handed out.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "malformed cursor: {reason}; pass the `cursor` of the last job of the previous page unchanged"
)]
pub struct InvalidCursor {
    reason: &'static str,
}

impl JobCursor {
    /// The position just after `job`.
    pub fn of(job: &Job) -> Self {
        Self {
            created_at: job.created_at,
            id: job.id.clone(),
        }
    }

    /// The position after the last of `page`, when the page is full (a
    /// shorter page is the last one).
    pub fn next_page(page: &[Job], limit: u32) -> Option<Self> {
        if page.len() < limit as usize || limit == 0 {
            return None;
        }
        page.last().map(Self::of)
    }
}

fn invalid(reason: &'static str) -> InvalidCursor {
    InvalidCursor { reason }
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

impl fmt::Display for JobCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plain = format!(
            "{}.{:09}:{}",
            self.created_at.timestamp(),
            self.created_at.timestamp_subsec_nanos(),
            self.id
        );
        for b in plain.bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl FromStr for JobCursor {
    type Err = InvalidCursor;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.is_empty() {
            return Err(invalid("it is empty"));
        }
        if text.len() > MAX_TEXT {
            return Err(invalid("it is too long"));
        }
        if !text.len().is_multiple_of(2) {
            return Err(invalid("it has an odd number of characters"));
        }
        let bytes = text
            .as_bytes()
            .chunks(2)
            .map(|pair| Some(hex_digit(pair[0])? << 4 | hex_digit(pair[1])?))
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| invalid("it is not lowercase hex"))?;
        let plain = String::from_utf8(bytes).map_err(|_| invalid("it does not decode to text"))?;
        let (instant, id) = plain
            .split_once(':')
            .ok_or_else(|| invalid("it has no job id"))?;
        let (secs, nanos) = instant
            .split_once('.')
            .ok_or_else(|| invalid("its instant has no fraction"))?;
        let secs: i64 = secs
            .parse()
            .map_err(|_| invalid("its instant is not a number"))?;
        if nanos.len() != 9 || !nanos.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid("its instant's fraction is not nine digits"));
        }
        let nanos: u32 = nanos
            .parse()
            .map_err(|_| invalid("its instant is not a number"))?;
        let created_at = DateTime::from_timestamp(secs, nanos)
            .ok_or_else(|| invalid("its instant is out of range"))?;
        if id.is_empty() {
            return Err(invalid("its job id is empty"));
        }
        Ok(Self {
            created_at,
            id: id.to_string(),
        })
    }
}

impl Serialize for JobCursor {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for JobCursor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let c = JobCursor {
            created_at: DateTime::from_timestamp(1_764_000_000, 123_456_789).expect("instant"),
            id: "0193-abc:ü".into(),
        };
        let text = c.to_string();
        assert!(text.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(text.parse::<JobCursor>(), Ok(c));
        let before_epoch = JobCursor {
            created_at: DateTime::from_timestamp(-5, 7).expect("instant"),
            id: "x".into(),
        };
        assert_eq!(
            before_epoch.to_string().parse::<JobCursor>(),
            Ok(before_epoch)
        );
        for bad in [
            "",
            "abc",
            "zz",
            "ABCD",
            "3132",
            "3a6964",
            "78783a6964",
            "ff3a",
            "313a",
            "312e313a6964",
            "312e3030303030303030303030303a6964",
        ] {
            assert!(bad.parse::<JobCursor>().is_err(), "{bad} parsed");
        }
        assert!("00".repeat(MAX_TEXT).parse::<JobCursor>().is_err());
        let e = "x".parse::<JobCursor>().expect_err("x");
        assert!(e.to_string().contains("malformed cursor"), "{e}");
    }
}

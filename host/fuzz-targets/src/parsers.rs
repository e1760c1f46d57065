//! Targets for the operator-written inputs: manifests, `boxcar.toml`, the
//! human units, schedule declarations (cron / every / tz / start / end)
//! and payload JSON Schemas.

use arbitrary::{Arbitrary, Unstructured};
use boxcar::fuzzing;
use boxcar_queue::schedule::ScheduleSpec;
use chrono::{DateTime, Utc};

/// A handler manifest (`name.toml`), parsed and validated.
pub fn manifest(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(message) = fuzzing::manifest(text) {
        assert!(!message.is_empty(), "an empty manifest error");
    }
}

/// `boxcar.toml`, parsed and validated (pools, retention, sandbox,
/// telemetry and `[[schedules]]` included).
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(message) = fuzzing::config(text) {
        assert!(!message.is_empty(), "an empty configuration error");
    }
}

/// A duration and a byte size: a refused value is quoted in the message.
pub fn units(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Err(message) = fuzzing::duration(&text) {
        assert!(
            message.contains(&*text),
            "{message:?} does not quote {text:?}"
        );
    }
    if let Err(message) = fuzzing::byte_size(&text) {
        assert!(
            message.contains(&*text),
            "{message:?} does not quote {text:?}"
        );
    }
}

/// Time zones a fuzzed schedule may name besides an arbitrary string.
const ZONES: [&str; 6] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "Pacific/Chatham",
];

/// The numbers and choices of a fuzzed schedule (its cadence is text).
#[derive(Arbitrary, Debug)]
struct ScheduleNumbers {
    zone: Option<u8>,
    other_zone: Option<String>,
    immediately: bool,
    start_ms: Option<i64>,
    end_ms: Option<i64>,
    now_ms: i64,
    steps: u8,
}

fn instant(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
}

/// A schedule declaration: the first line is a cron expression, or
/// `@every <duration>`; the rest picks the zone, the window and "now".
/// Validated, then its first tick and up to 32 next ticks, each of which
/// must be after "now" and inside the window.
pub fn schedule(data: &[u8]) {
    let split = data.iter().position(|b| *b == b'\n').unwrap_or(data.len());
    let (line, rest) = data.split_at(split);
    let line = String::from_utf8_lossy(line);
    let Ok(numbers) = ScheduleNumbers::arbitrary(&mut Unstructured::new(rest)) else {
        return;
    };
    let mut spec = ScheduleSpec::new("fuzz", "fuzz.job", serde_json::json!({}));
    match line.strip_prefix("@every ") {
        Some(every) => match fuzzing::duration(every) {
            Ok(every) => spec.every = Some(every),
            Err(_) => return,
        },
        None => spec.cron = Some(line.into_owned()),
    }
    spec.tz = match numbers.zone {
        Some(i) => ZONES.get(usize::from(i)).map(ToString::to_string),
        None => numbers.other_zone,
    };
    spec.immediately = numbers.immediately;
    spec.start_at = numbers.start_ms.and_then(instant);
    spec.end_at = numbers.end_ms.and_then(instant);
    let Some(mut now) = instant(numbers.now_ms) else {
        return;
    };
    let Ok(schedule) = spec.validate() else {
        return;
    };
    let Some(mut tick) = schedule.first_run(now) else {
        return;
    };
    for _ in 0..numbers.steps % 33 {
        let Some(next) = schedule.next_after(tick, now) else {
            return;
        };
        assert!(
            next > now || next == DateTime::<Utc>::MAX_UTC,
            "tick {next} is not after now {now} (previous {tick})"
        );
        if let Some(end) = spec.end_at {
            assert!(next <= end, "tick {next} is past end_at {end}");
        }
        now = next;
        tick = next;
    }
}

/// A payload JSON Schema (first line) and a payload (the rest): the schema
/// compiled as a manifest's `payload_schema`, the payload checked against
/// it. A failure names a JSON pointer (`/` or starting with `/`).
pub fn payload_schema(data: &[u8]) {
    let split = data.iter().position(|b| *b == b'\n').unwrap_or(data.len());
    let (schema, payload) = data.split_at(split);
    let Ok(schema) = serde_json::from_slice::<serde_json::Value>(schema) else {
        return;
    };
    let payload = serde_json::from_slice::<serde_json::Value>(payload.get(1..).unwrap_or(&[]))
        .unwrap_or(serde_json::Value::Null);
    if let Err(failure) = fuzzing::payload_schema(&schema, &payload) {
        assert!(failure.starts_with('/'), "{failure:?}");
    }
}

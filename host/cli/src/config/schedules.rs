//! `[[schedules]]` of `boxcar.toml`: each declaration checked by the
//! queue's own schedule validation ([`validate_all`]); every refused one is
//! named by its id, all of them in one error.

use boxcar_queue::schedule::{validate_all, Schedule, ScheduleSpec};
use serde::Deserialize;

use crate::units::HumanDuration;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSchedule {
    id: String,
    job_type: String,
    #[serde(default = "empty_object")]
    payload: serde_json::Value,
    every: Option<HumanDuration>,
    cron: Option<String>,
    tz: Option<String>,
    #[serde(default)]
    immediately: bool,
    start_at: Option<toml::Value>,
    end_at: Option<toml::Value>,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// Validates `[[schedules]]`; every refused declaration is listed as
/// `<id>: <reason>`.
pub(super) fn resolve(raw: Vec<RawSchedule>) -> Result<Vec<Schedule>, String> {
    let mut specs = Vec::with_capacity(raw.len());
    let mut errors = Vec::new();
    for r in raw {
        let instant = |key: &str, value: Option<toml::Value>| match value {
            None => Ok(None),
            Some(v) => parse_instant(&v)
                .map(Some)
                .map_err(|reason| format!("{}: `{key}` {reason}", r.id)),
        };
        let start_at = instant("start_at", r.start_at.clone());
        let end_at = instant("end_at", r.end_at.clone());
        match (start_at, end_at) {
            (Ok(start_at), Ok(end_at)) => {
                let mut spec = ScheduleSpec::new(r.id, r.job_type, r.payload);
                spec.every = r.every.map(|d| d.0);
                spec.cron = r.cron;
                spec.tz = r.tz;
                spec.immediately = r.immediately;
                spec.start_at = start_at;
                spec.end_at = end_at;
                specs.push(spec);
            }
            (Err(e), _) | (_, Err(e)) => errors.push(e),
        }
    }
    match validate_all(&specs) {
        Ok(schedules) if errors.is_empty() => Ok(schedules),
        Ok(_) => Err(format!("invalid [[schedules]]: {}", errors.join("; "))),
        Err(invalid) => {
            errors.extend(invalid.iter().map(ToString::to_string));
            Err(format!("invalid [[schedules]]: {}", errors.join("; ")))
        }
    }
}

/// An instant from a TOML offset date-time or an RFC 3339 string.
fn parse_instant(value: &toml::Value) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let text = match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Datetime(d) => d.to_string(),
        _ => return Err("must be a date-time with offset, e.g. 2026-01-01T00:00:00Z".into()),
    };
    chrono::DateTime::parse_from_rfc3339(&text)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|_| format!("`{text}` is not a date-time with offset, e.g. 2026-01-01T00:00:00Z"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{Config, ConfigError};

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("boxcar.toml"), text)
    }

    #[test]
    fn schedules_resolve_and_each_bad_one_is_named() {
        let config = parse(
            r#"
            [[schedules]]
            id = "nightly-reconcile"
            job_type = "app.reconcile"
            cron = "17 3 * * *"
            tz = "Europe/Berlin"
            payload = { full = true }
            [[schedules]]
            id = "tick"
            job_type = "app.tick"
            every = "5m"
            start_at = 2026-01-01T00:00:00Z
            "#,
        )
        .expect("valid");
        assert_eq!(config.schedules.len(), 2);
        assert_eq!(config.schedules[0].def().payload, r#"{"full":true}"#);
        assert_eq!(config.schedules[1].def().every_ms, Some(300_000));

        let error = parse(
            r#"
            [[schedules]]
            id = "both"
            job_type = "a"
            every = "1s"
            cron = "* * * * *"
            [[schedules]]
            id = "zone"
            job_type = "a"
            cron = "* * * * *"
            tz = "Nowhere/Land"
            [[schedules]]
            id = "zone"
            job_type = "a"
            every = "1s"
            [[schedules]]
            id = "when"
            job_type = "a"
            every = "1s"
            start_at = "tomorrow"
            "#,
        )
        .unwrap_err()
        .to_string();
        for expected in [
            "both: set exactly one of `every` and `cron`",
            "zone: `tz` `Nowhere/Land` is not an IANA time zone",
            "zone: declared more than once",
            "when: `start_at` `tomorrow` is not a date-time",
        ] {
            assert!(error.contains(expected), "{error}");
        }
        let error =
            parse("[[schedules]]\nid = \"x\"\njob_type = \"a\"\nevery = \"1s\"\nevry = 1\n")
                .unwrap_err()
                .to_string();
        assert!(error.contains("evry"), "{error}");
    }
}

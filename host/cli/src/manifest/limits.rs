//! `[limits]` of a manifest. The per-job bounds land in the sandbox's own
//! [`HandlerLimits`]: every field has a key, an unset key is the sandbox's
//! default, and the sandbox's form checks apply, named `limits.<key>`. The
//! `enqueue_*` keys land in the queue's [`EnqueueBounds`] (defaults and
//! checks the queue's).
//!
//! Manifest spellings: sizes are units ("64MiB"), `fuel = 0` is unmetered,
//! and an unset `max_log_line` is the default clipped to `max_log`.

use boxcar_queue::bounds::EnqueueBounds;
use boxcar_sandbox::{HandlerLimits, SandboxError};
use serde::Deserialize;

use super::positive;
use crate::units::{ByteSize, HumanDuration};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    memory: Option<ByteSize>,
    fuel: Option<u64>,
    max_result: Option<ByteSize>,
    max_progress: Option<ByteSize>,
    max_log: Option<ByteSize>,
    max_log_lines: Option<i64>,
    max_log_line: Option<ByteSize>,
    max_enqueues: Option<i64>,
    table_elements: Option<i64>,
    tables: Option<i64>,
    instances: Option<i64>,
    max_http_body: Option<ByteSize>,
    enqueue_priority: Option<(i64, i64)>,
    enqueue_max_attempts: Option<i64>,
    enqueue_max_delay: Option<HumanDuration>,
}

/// The sandbox's limits and the queue's enqueue bounds `[limits]` asks for.
pub(super) fn resolve(raw: &RawLimits) -> Result<(HandlerLimits, EnqueueBounds), String> {
    let defaults = HandlerLimits::default();
    let bytes = |value: Option<ByteSize>, default: usize| {
        value.map_or(default, |b| usize::try_from(b.0).unwrap_or(usize::MAX))
    };
    let count = |key: &str, value: Option<i64>, default: usize| {
        positive(&format!("limits.{key}"), value)
            .map(|n| n.map_or(default, |n| usize::try_from(n).unwrap_or(usize::MAX)))
    };
    let max_log = bytes(raw.max_log, defaults.max_log);
    let limits = HandlerLimits {
        memory: raw.memory.map_or(defaults.memory, |b| b.0),
        fuel: raw.fuel.filter(|fuel| *fuel > 0),
        max_result: bytes(raw.max_result, defaults.max_result),
        max_progress: bytes(raw.max_progress, defaults.max_progress),
        max_log,
        max_log_lines: count("max_log_lines", raw.max_log_lines, defaults.max_log_lines)?,
        max_log_line: bytes(raw.max_log_line, defaults.max_log_line.min(max_log.max(1))),
        max_enqueues: positive("limits.max_enqueues", raw.max_enqueues)?
            .map_or(defaults.max_enqueues, |n| {
                u32::try_from(n).unwrap_or(u32::MAX)
            }),
        table_elements: count(
            "table_elements",
            raw.table_elements,
            defaults.table_elements,
        )?,
        tables: count("tables", raw.tables, defaults.tables)?,
        instances: count("instances", raw.instances, defaults.instances)?,
        max_http_body: raw.max_http_body.map_or(defaults.max_http_body, |b| b.0),
    };
    limits.validate_form().map_err(|error| match error {
        SandboxError::Limits(message) => format!("limits.{message}"),
        other => other.to_string(),
    })?;
    Ok((limits, enqueue_bounds(raw)?))
}

/// `[limits] enqueue_*`: the bounds on a guest's enqueues (defaults in
/// [`EnqueueBounds`]).
fn enqueue_bounds(limits: &RawLimits) -> Result<EnqueueBounds, String> {
    let defaults = EnqueueBounds::default();
    let priority = match limits.enqueue_priority {
        None => defaults.priority,
        Some((low, high)) => {
            let fit = |n: i64| {
                i32::try_from(n)
                    .map_err(|_| format!("limits.enqueue_priority: {n} is not a 32-bit priority"))
            };
            fit(low)?..=fit(high)?
        }
    };
    let max_attempts = positive("limits.enqueue_max_attempts", limits.enqueue_max_attempts)?
        .map_or(defaults.max_attempts, |n| {
            u32::try_from(n).unwrap_or(u32::MAX)
        });
    let max_delay = limits.enqueue_max_delay.map_or(defaults.max_delay, |d| d.0);
    let bounds = EnqueueBounds::new(priority, max_attempts, max_delay);
    bounds
        .validate()
        .map_err(|(key, reason)| format!("limits.{key}: {reason}"))?;
    Ok(bounds)
}

#[cfg(test)]
mod tests {
    use crate::manifest::parse_for_test as parse;

    #[test]
    fn every_sandbox_limit_has_a_key() {
        let manifest = parse(
            "[handler]\njob_type = \"a\"\n[limits]\nmemory = \"32MiB\"\nfuel = 9\nmax_result = \"1KiB\"\nmax_progress = \"2KiB\"\nmax_log = \"64KiB\"\nmax_log_lines = 50\nmax_log_line = \"1KiB\"\nmax_enqueues = 7\ntable_elements = 500\ntables = 3\ninstances = 5\nmax_http_body = \"1MiB\"\n",
        )
        .expect("valid");
        let limits = &manifest.limits;
        assert_eq!(
            (
                limits.memory,
                limits.fuel,
                limits.max_result,
                limits.max_progress
            ),
            (32 << 20, Some(9), 1 << 10, 2 << 10)
        );
        assert_eq!(
            (limits.max_log, limits.max_log_lines, limits.max_log_line),
            (64 << 10, 50, 1 << 10)
        );
        assert_eq!(
            (
                limits.max_enqueues,
                limits.table_elements,
                limits.tables,
                limits.instances,
                limits.max_http_body
            ),
            (7, 500, 3, 5, 1 << 20)
        );
    }

    #[test]
    fn manifest_spellings_of_off_and_short_logs() {
        let manifest =
            parse("[handler]\njob_type = \"a\"\n[limits]\nfuel = 0\nmax_log = \"1KiB\"\n")
                .expect("valid");
        assert_eq!(manifest.limits.fuel, None, "fuel = 0 is unmetered");
        assert_eq!(
            manifest.limits.max_log_line,
            1 << 10,
            "an unset line cap fits the log budget"
        );
    }

    #[test]
    fn the_sandboxs_checks_are_named_by_key() {
        for (body, key) in [
            ("max_log_lines = 0", "limits.max_log_lines"),
            (
                "max_log_line = \"2KiB\"\nmax_log = \"1KiB\"",
                "limits.max_log_line",
            ),
            ("tables = 0", "limits.tables"),
            ("instances = -2", "limits.instances"),
            ("table_elements = 0", "limits.table_elements"),
        ] {
            let text = format!("[handler]\njob_type = \"a\"\n[limits]\n{body}\n");
            let error = parse(&text).unwrap_err().to_string();
            assert!(error.contains(key), "{body:?} gave {error}");
        }
    }
}

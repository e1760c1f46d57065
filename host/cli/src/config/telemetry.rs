//! The `[log]` and `[otel]` sections of `boxcar.toml`: how the host writes
//! its own log, and where (if anywhere) it sends a trace span per job run.
//!
//! Invariants: the log format is `text` unless set; OpenTelemetry export is
//! off unless an `[otel]` section names an endpoint, which must be a plain
//! `http://` URL (OTLP over HTTP, protobuf); the traces path `/v1/traces` is
//! appended to an endpoint that does not already end with it.

use std::time::Duration;

use serde::Deserialize;

use crate::units::HumanDuration;

/// How the host's own log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (coloured only on a terminal).
    #[default]
    Text,
    /// One JSON object per line, span fields (job id, type, attempt,
    /// digest) as keys.
    Json,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    format: Option<LogFormat>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOtel {
    endpoint: Option<String>,
    service_name: Option<String>,
    timeout: Option<HumanDuration>,
    export_interval: Option<HumanDuration>,
}

/// Where job-run spans are exported (OTLP over HTTP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtelSettings {
    /// The collector's traces URL, e.g. `http://127.0.0.1:4318/v1/traces`.
    pub traces_url: String,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// How long one export request may take.
    pub timeout: Duration,
    /// How long finished spans wait in a batch before it is sent.
    pub export_interval: Duration,
}

/// The `service.name` when `[otel] service_name` is not set.
pub const DEFAULT_SERVICE_NAME: &str = "boxcar";

pub(super) fn resolve_log(raw: RawLog) -> LogFormat {
    raw.format.unwrap_or_default()
}

pub(super) fn resolve_otel(raw: Option<RawOtel>) -> Result<Option<OtelSettings>, String> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let endpoint = raw.endpoint.ok_or(
        "invalid option `otel.endpoint`: required in an [otel] section, e.g. \"http://127.0.0.1:4318\" (an OTLP/HTTP collector)",
    )?;
    let rest = endpoint.strip_prefix("http://").ok_or_else(|| {
        format!(
            "invalid option `otel.endpoint`: `{endpoint}` is not an http:// URL; boxcar sends OTLP over plain HTTP, to a collector on this host or its network (https is not supported)"
        )
    })?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "invalid option `otel.endpoint`: `{}` is not a URL with a host, e.g. \"http://127.0.0.1:4318\"",
            endpoint.escape_default()
        ));
    }
    let base = endpoint.trim_end_matches('/');
    let traces_url = if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    };
    let service_name = raw
        .service_name
        .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_string());
    if service_name.trim().is_empty() {
        return Err("invalid option `otel.service_name`: must not be blank".into());
    }
    let timeout = raw.timeout.map_or(Duration::from_secs(10), |t| t.0);
    if timeout.is_zero() {
        return Err("invalid option `otel.timeout`: must be positive".into());
    }
    let export_interval = raw.export_interval.map_or(Duration::from_secs(5), |t| t.0);
    if export_interval.is_zero() {
        return Err("invalid option `otel.export_interval`: must be positive".into());
    }
    Ok(Some(OtelSettings {
        traces_url,
        service_name,
        timeout,
        export_interval,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn otel(endpoint: &str) -> Result<Option<OtelSettings>, String> {
        resolve_otel(Some(RawOtel {
            endpoint: Some(endpoint.into()),
            service_name: None,
            timeout: None,
            export_interval: None,
        }))
    }

    #[test]
    fn the_traces_path_is_appended_once() {
        for (given, url) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
            ("http://collector:4318/", "http://collector:4318/v1/traces"),
            ("http://c:4318/v1/traces", "http://c:4318/v1/traces"),
        ] {
            let settings = otel(given).expect("valid").expect("on");
            assert_eq!(settings.traces_url, url);
            assert_eq!(settings.service_name, "boxcar");
        }
        assert_eq!(resolve_otel(None), Ok(None), "off by default");
    }

    #[test]
    fn unusable_endpoints_are_refused() {
        for bad in [
            "https://c:4318",
            "c:4318",
            "http://",
            "http:///v1/traces",
            "http://a b",
        ] {
            let error = otel(bad).expect_err(bad);
            assert!(error.contains("otel.endpoint"), "{bad}: {error}");
        }
    }
}

//! The host's own telemetry: its log on stderr (text or JSON lines) and,
//! for `serve` with an `[otel]` section, one OpenTelemetry span per job run
//! sent to an OTLP/HTTP collector.
//!
//! Invariants:
//! - colour (ANSI escape sequences) only when stderr is a terminal and
//!   `NO_COLOR` is unset: a log read by journald, `docker logs` or a file
//!   carries none;
//! - the log's filter (`BOXCAR_LOG`, else a default per command) does not
//!   decide what is exported: job-run spans reach the exporter whatever
//!   the log shows;
//! - spans close with a line of their own (with their timings) only when
//!   `BOXCAR_LOG` is set, so the default log has no line per job;
//! - [`Telemetry::shutdown`] exports the spans still batched before the
//!   process exits.

mod json;
mod otel;

use std::io::IsTerminal;

use tracing_subscriber::fmt::format::{FmtSpan, JsonFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::cli::{Cli, Command};
use crate::config::{Config, LogFormat};

/// What must outlive the command: the span exporter, if any.
pub struct Telemetry {
    exporter: Option<otel::Exporter>,
}

impl Telemetry {
    /// Exports what is still batched and stops the exporter.
    pub async fn shutdown(self) {
        if let Some(exporter) = self.exporter {
            exporter.shutdown().await;
        }
    }
}

/// Installs the log (and, for `serve` with `[otel]`, the span exporter).
/// A second call leaves the first subscriber in place.
///
/// # Errors
/// The exporter could not be built from the `[otel]` settings.
pub fn init(cli: &Cli, config: &Config) -> anyhow::Result<Telemetry> {
    let default = match cli.command {
        Command::Serve(_) => "info,wasmtime=warn,cranelift=warn",
        _ => "warn",
    };
    let from_env = EnvFilter::try_from_env("BOXCAR_LOG").ok();
    let span_events = if from_env.is_some() {
        FmtSpan::CLOSE
    } else {
        FmtSpan::NONE
    };
    let filter = from_env.unwrap_or_else(|| EnvFilter::new(default));
    let format = cli.log_format.unwrap_or(config.log_format);
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_span_events(span_events);
    let log: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => log.with_ansi(colour()).boxed(),
        LogFormat::Json => log
            .with_ansi(false)
            .fmt_fields(JsonFields::new())
            .event_format(json::JsonLines)
            .boxed(),
    };
    let exporter = match (&cli.command, &config.otel) {
        (Command::Serve(_), Some(settings)) => Some(otel::Exporter::start(settings)?),
        _ => None,
    };
    let spans = exporter.as_ref().map(otel::Exporter::layer);
    let _ = tracing_subscriber::registry()
        .with(log.with_filter(filter))
        .with(spans)
        .try_init();
    Ok(Telemetry { exporter })
}

/// Whether the log may use colour.
fn colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

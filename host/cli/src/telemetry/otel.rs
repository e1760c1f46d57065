//! One OpenTelemetry span per job run, exported over OTLP/HTTP (protobuf)
//! to the collector named in `[otel]`.
//!
//! The engine opens a tracing span per run (target
//! [`boxcar_queue::RUN_SPAN_TARGET`]) with the job's id, type, attempt,
//! module digest and, when the producer gave one, its `traceparent`, and
//! records the outcome when the run ends. [`RunSpans`] turns each such
//! span, when it closes, into an OpenTelemetry span with the same start
//! and end, those fields as `boxcar.job.*` attributes, an error status for
//! a run that did not succeed, and the producer's span as its (remote)
//! parent — so the run appears in the producer's trace. Other tracing
//! spans are not exported.
//!
//! Spans are batched by the SDK's batch processor on its own thread and
//! sent every `[otel] export_interval`; its HTTP requests run on the host's
//! tokio runtime ([`OnRuntime`]). The SDK's `OTEL_BSP_*` variables set the
//! other batch limits.

use std::time::SystemTime;

use boxcar_queue::{TraceParent, RUN_SPAN_TARGET};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::filter::{filter_fn, Filtered};
use tracing_subscriber::layer::Context as LayerContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::config::OtelSettings;

/// The span exporter: an SDK tracer provider with a batching OTLP/HTTP
/// exporter.
pub struct Exporter {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Exporter {
    /// Builds the exporter; call inside the tokio runtime that will carry
    /// its requests.
    ///
    /// # Errors
    /// The endpoint is not a URL the exporter accepts.
    pub fn start(settings: &OtelSettings) -> anyhow::Result<Self> {
        let client = OnRuntime {
            client: opentelemetry_http::hyper::HyperClient::with_default_connector(
                settings.timeout,
                None,
            ),
            runtime: tokio::runtime::Handle::current(),
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(settings.traces_url.clone())
            .with_timeout(settings.timeout)
            .build()
            .map_err(|e| {
                anyhow::anyhow!(
                    "[otel] endpoint `{}`: cannot export spans there: {e}",
                    settings.traces_url
                )
            })?;
        let batches = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_scheduled_delay(settings.export_interval)
                    .build(),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batches)
            .with_resource(
                Resource::builder()
                    .with_service_name(settings.service_name.clone())
                    .build(),
            )
            .build();
        let tracer = provider.tracer("boxcar");
        Ok(Self { provider, tracer })
    }

    /// The tracing layer that exports job-run spans through this exporter.
    pub fn layer<S>(&self) -> Filtered<RunSpans, impl tracing_subscriber::layer::Filter<S>, S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        RunSpans {
            tracer: self.tracer.clone(),
        }
        .with_filter(filter_fn(|meta| {
            meta.is_span() && meta.target() == RUN_SPAN_TARGET
        }))
    }

    /// Exports the spans still batched, then stops.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "exporting the last job-run spans failed"),
            Err(error) => tracing::warn!(%error, "the span exporter's shutdown did not finish"),
        }
    }
}

/// An HTTP client whose requests run on a tokio runtime, whatever thread
/// (the batch processor's own) awaits them.
#[derive(Debug)]
struct OnRuntime {
    client: opentelemetry_http::hyper::HyperClient,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await?
    }
}

/// Turns job-run tracing spans into exported OpenTelemetry spans.
pub struct RunSpans {
    tracer: SdkTracer,
}

/// What a run span carried, gathered until it closes.
#[derive(Default)]
struct RunFields {
    start: Option<SystemTime>,
    job_id: Option<String>,
    job_type: Option<String>,
    attempt: Option<i64>,
    digest: Option<String>,
    traceparent: Option<String>,
    outcome: Option<String>,
    error: Option<String>,
}

impl Visit for RunFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        let slot = match field.name() {
            "job_id" => &mut self.job_id,
            "job_type" => &mut self.job_type,
            "digest" => &mut self.digest,
            "traceparent" => &mut self.traceparent,
            "outcome" => &mut self.outcome,
            "error" => &mut self.error,
            _ => return,
        };
        *slot = Some(value.to_string());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.record_i64(field, i64::try_from(value).unwrap_or(i64::MAX));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        if field.name() == "attempt" {
            self.attempt = Some(value);
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
}

impl RunFields {
    /// The producer's span as a remote parent, when the job named one.
    fn parent(&self) -> Context {
        let Some(parent) = self
            .traceparent
            .as_deref()
            .and_then(|t| TraceParent::parse(t).ok())
        else {
            return Context::new();
        };
        Context::new().with_remote_span_context(SpanContext::new(
            TraceId::from_bytes(parent.trace_id),
            SpanId::from_bytes(parent.parent_id),
            TraceFlags::new(parent.flags),
            true,
            TraceState::default(),
        ))
    }

    fn attributes(&self) -> Vec<KeyValue> {
        let mut out = vec![KeyValue::new("messaging.system", "boxcar")];
        let text = [
            ("boxcar.job.id", &self.job_id),
            ("boxcar.job.type", &self.job_type),
            ("boxcar.job.digest", &self.digest),
            ("boxcar.job.outcome", &self.outcome),
            ("boxcar.job.error", &self.error),
        ];
        for (key, value) in text {
            if let Some(value) = value {
                out.push(KeyValue::new(key, value.clone()));
            }
        }
        if let Some(attempt) = self.attempt {
            out.push(KeyValue::new("boxcar.job.attempt", attempt));
        }
        out
    }
}

impl<S> Layer<S> for RunSpans
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = RunFields {
            start: Some(SystemTime::now()),
            ..RunFields::default()
        };
        attrs.record(&mut fields);
        span.extensions_mut().insert(fields);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(fields) = extensions.get_mut::<RunFields>() {
            values.record(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let removed = span.extensions_mut().remove::<RunFields>();
        let Some(fields) = removed else { return };
        let name = format!(
            "{} process",
            fields.job_type.as_deref().unwrap_or("boxcar.job")
        );
        let mut run = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Consumer)
            .with_start_time(fields.start.unwrap_or_else(SystemTime::now))
            .with_attributes(fields.attributes())
            .start_with_context(&self.tracer, &fields.parent());
        let ended_well = matches!(
            fields.outcome.as_deref(),
            Some("succeeded" | "cancelled" | "released")
        );
        if !ended_well {
            let why = fields
                .error
                .clone()
                .or_else(|| fields.outcome.clone())
                .unwrap_or_else(|| "ended without an outcome".into());
            run.set_status(Status::error(why));
        }
        run.end_with_timestamp(SystemTime::now());
    }
}

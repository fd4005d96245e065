//! Logs and traces: logs to stderr (filtered by `KEEL_LOG` or `RUST_LOG`),
//! and with `--otlp-endpoint`, OpenTelemetry traces exported over OTLP
//! (HTTP, protobuf or JSON) in batches: the engine's `activation` and `step_attempt`
//! spans (the run's own span comes from the engine at the run's end),
//! with the events logged inside them.

use std::io::IsTerminal;

use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::args::Command;

/// The spans exported: one per activation and per step attempt.
const EXPORTED_SPANS: &[&str] = &["activation", "step_attempt"];

/// What must be flushed before the process exits.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the spans not yet sent; waits for the collector's answer.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            eprintln!("warning: exporting the last traces failed: {e}");
        }
    }
}

/// Sets up logging for `command`, and tracing to `otlp_endpoint` if given.
pub fn init(command: &Command, otlp_endpoint: Option<&str>) -> anyhow::Result<Telemetry> {
    let default = match command {
        Command::Worker { .. } | Command::Serve { .. } => "warn,keel_host::engine=info",
        // A one-shot command reports a store it cannot reach once, as its
        // error: the store's own retries stay quiet, and so do the API it
        // serves itself in process about the refusal it answers and the
        // drive it waits on (whose failure is its answer).
        _ => {
            "warn,keel_store=error,tokio_postgres=error,deadpool=error,deadpool_postgres=error,keel_server=error,keel_host::engine::drive=error,tower_http=off"
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("KEEL_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| default.into());
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let Some(endpoint) = otlp_endpoint else {
        tracing_subscriber::registry().with(logs).init();
        return Ok(Telemetry { provider: None });
    };
    // Protobuf, the OTLP default; `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`
    // sends JSON.
    let protocol = match std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").as_deref() {
        Ok("http/json") => Protocol::HttpJson,
        _ => Protocol::HttpBinary,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
        .build()
        .map_err(|e| anyhow::anyhow!("--otlp-endpoint {endpoint}: {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("keel")
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    use opentelemetry::trace::TracerProvider as _;
    // No per-poll timing, code locations, thread names or targets: they
    // cost on every poll of every run and say little a trace does not. No
    // OpenTelemetry context is made current on each poll either: the engine
    // reads a span's context from the span itself (`trace.rs`).
    let traces = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("keel"))
        .with_tracked_inactivity(false)
        .with_context_activation(false)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            if meta.is_event() {
                // keel's own, at info or above: waits, retries, ends.
                *meta.level() <= tracing::Level::INFO && meta.target().starts_with("keel")
            } else {
                EXPORTED_SPANS.contains(&meta.name())
            }
        }));
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .init();
    Ok(Telemetry {
        provider: Some(provider),
    })
}

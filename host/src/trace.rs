//! A run's trace for OpenTelemetry: admission journals the run's trace
//! context ([`Fact::Traced`]: the caller's trace, or a new one, and the
//! run's own span ID), every activation's span continues it whichever
//! worker drives it and however late, and the run's own span is emitted
//! once, when the run ends. With no OpenTelemetry exporter installed
//! (no `tracing-opentelemetry` layer, no global tracer provider) all of it
//! costs a journal entry and nothing else; replay makes no spans.

use std::time::{Duration, UNIX_EPOCH};

use keel_core::{Fact, RunRecord};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The trace context a start records: under the caller's span when
/// `traceparent` (W3C) names one, in a new trace otherwise; `None` when
/// the start names none and `always` is false.
pub(crate) fn admission(traceparent: Option<&str>, always: bool) -> Option<Fact> {
    let caller = traceparent.and_then(parse_traceparent);
    if caller.is_none() && !always {
        return None;
    }
    let trace_id = caller.map_or_else(new_trace_id, |(t, _)| t);
    Some(Fact::Traced {
        trace_id: trace_id.to_string(),
        span_id: new_span_id().to_string(),
        parent_span_id: caller.map(|(_, s)| s.to_string()),
    })
}

/// `(trace ID, span ID)` of a W3C `traceparent` (`00-TRACE-SPAN-FLAGS`);
/// `None` if it is not one.
pub(crate) fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId)> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2
        || version == "ff"
        || flags.len() != 2
        || trace.len() != 32
        || span.len() != 16
    {
        return None;
    }
    let trace = TraceId::from_hex(trace)
        .ok()
        .filter(|t| *t != TraceId::INVALID)?;
    let span = SpanId::from_hex(span)
        .ok()
        .filter(|s| *s != SpanId::INVALID)?;
    Some((trace, span))
}

/// The remote context of span `span_id` in trace `trace_id`.
fn remote(trace_id: &str, span_id: &str) -> Option<Context> {
    let context = SpanContext::new(
        TraceId::from_hex(trace_id).ok()?,
        SpanId::from_hex(span_id).ok()?,
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    Some(Context::new().with_remote_span_context(context))
}

/// Makes `span` (an activation's) a child of the run's span.
pub(crate) fn continue_run(span: &tracing::Span, trace_id: &str, run_span_id: &str) {
    if let Some(parent) = remote(trace_id, run_span_id) {
        let _ = span.set_parent(parent);
    }
}

/// Emits the run's own span, from its admission to `ended_at_ms`, with the
/// span ID its admission journaled, under the caller's span if any.
pub(crate) fn end_run(
    run: &RunRecord,
    (trace_id, span_id, parent_span_id): (&str, &str, Option<&str>),
    ended_at_ms: u64,
) {
    let (Ok(trace), Ok(span)) = (TraceId::from_hex(trace_id), SpanId::from_hex(span_id)) else {
        return;
    };
    let parent = parent_span_id
        .and_then(|p| remote(trace_id, p))
        .unwrap_or_default();
    let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
    let tracer = opentelemetry::global::tracer("keel");
    let mut attributes = vec![
        KeyValue::new("keel.run_id", run.run_id.to_string()),
        KeyValue::new("keel.workflow", run.workflow.clone()),
        KeyValue::new("keel.status", run.status.as_str()),
    ];
    if let Some(error) = &run.error {
        attributes.push(KeyValue::new("keel.error_kind", error.kind.clone()));
    }
    let builder = tracer
        .span_builder(format!("run {}", run.workflow))
        .with_kind(SpanKind::Internal)
        .with_trace_id(trace)
        .with_span_id(span)
        .with_start_time(at(run.created_at_ms))
        .with_attributes(attributes);
    let mut otel = tracer.build_with_context(builder, &parent);
    opentelemetry::trace::Span::end_with_timestamp(&mut otel, at(ended_at_ms));
}

/// The `traceparent` of the current span, when it is exported (a step
/// attempt's, say): what a step's outgoing HTTP request carries, so the
/// service it calls joins the run's trace.
pub(crate) fn current_traceparent() -> Option<String> {
    let context = tracing::Span::current().context();
    let span = context.span();
    let sc = span.span_context();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

fn new_trace_id() -> TraceId {
    TraceId::from_bytes(rand::random::<u128>().max(1).to_be_bytes())
}

fn new_span_id() -> SpanId {
    SpanId::from_bytes(rand::random::<u64>().max(1).to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_names_the_callers_trace_and_span() {
        let (trace, span) =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(trace.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(span.to_string(), "00f067aa0ba902b7");
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-xyz-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
    }

    #[test]
    fn admission_continues_the_callers_trace_or_starts_one_when_asked() {
        let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        match admission(Some(caller), false) {
            Some(Fact::Traced {
                trace_id,
                span_id,
                parent_span_id,
            }) => {
                assert_eq!(trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
                assert_eq!(parent_span_id.as_deref(), Some("00f067aa0ba902b7"));
                assert_eq!(span_id.len(), 16);
                assert_ne!(span_id, "00f067aa0ba902b7");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(admission(None, false), None);
        assert_eq!(admission(Some("garbage"), false), None);
        match admission(None, true) {
            Some(Fact::Traced {
                trace_id,
                parent_span_id: None,
                ..
            }) => assert_eq!(trace_id.len(), 32),
            other => panic!("{other:?}"),
        }
    }
}

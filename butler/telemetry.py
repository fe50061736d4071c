"""OpenTelemetry set-up (called from ``main()``, never at import) and trace helpers."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import NonRecordingSpan, NoOpTracer, SpanContext, TraceFlags, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from butler.config.model import TelemetryConfig
from butler.ids import IDS
from internal.protocol.a2a.types import Envelope

log = logging.getLogger("butler.telemetry")
_PROPAGATOR = TraceContextTextMapPropagator()


def build_tracer_provider(
    config: TelemetryConfig, agent_id: str, exporter: SpanExporter | None = None
) -> TracerProvider:
    """A provider for this instance. Tests pass an in-memory ``exporter``."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": config.service_name or f"butler-{agent_id}"})
    )
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif config.exporter == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    elif config.exporter == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter,
            )
        except ImportError:
            log.warning("telemetry.exporter is otlp but opentelemetry-exporter-otlp-proto-http "
                        "is not installed; spans are not exported")
        else:
            kwargs = {"endpoint": config.otlp_endpoint} if config.otlp_endpoint else {}
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(**kwargs)))
    return provider


def task_tracer(provider: TracerProvider, *, exporting: bool) -> Tracer:
    """With nothing to export, spans need only carry the trace from hop to hop: the
    no-op tracer passes each task's (remote) parent context through untouched, and
    recording spans nobody reads cost a few percent of every task (docs/performance.md)."""
    return provider.get_tracer("butler") if exporting else NoOpTracer()


def trace_of(envelope: Envelope) -> tuple[str, Context | None]:
    """The trace id a task carries, and its remote parent when the caller sent one.

    W3C ``traceparent`` wins; else the reference implementation's bare trace id; else a
    new trace starts here. Without a ``traceparent`` the parent is made only when needed
    (``remote_parent``): most tasks never delegate nor record a span.
    """
    if envelope.traceparent:
        ctx = _PROPAGATOR.extract({"traceparent": envelope.traceparent,
                                   "tracestate": envelope.tracestate or ""})
        span_ctx = trace.get_current_span(ctx).get_span_context()
        if span_ctx.is_valid:
            return format(span_ctx.trace_id, "032x"), ctx
    return envelope.trace_id or IDS.hex128(), None


def remote_parent(trace_id: str) -> Context:
    """A sampled remote parent in trace ``trace_id``, for a task whose caller sent none."""
    remote = SpanContext(
        trace_id=int(trace_id, 16), span_id=IDS.span_id(),
        is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(remote))


def inject_headers(headers: dict[str, str], ctx: Context | None = None) -> None:
    _PROPAGATOR.inject(headers, context=ctx)


def trace_headers(carrier: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate")}

"""OpenTelemetry set-up (called from ``main()``, never at import) and trace helpers."""

from __future__ import annotations

import logging
from dataclasses import dataclass

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
from butler.runtime.ids import IDS
from internal.protocol.a2a.model import Envelope

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
    recording spans nobody reads is work for nothing."""
    return provider.get_tracer("butler") if exporting else NoOpTracer()


@dataclass(frozen=True, slots=True)
class Incoming:
    """A caller's W3C trace headers. They become an OpenTelemetry context only when a span
    or an outbound call needs one: most tasks need neither, so most never pay for the
    extraction."""

    traceparent: str
    tracestate: str

    def context(self) -> Context:
        return _PROPAGATOR.extract({"traceparent": self.traceparent,
                                    "tracestate": self.tracestate})


def trace_of(envelope: Envelope) -> tuple[str, Incoming | None]:
    """The trace id a task carries, and its caller's trace headers when valid.

    W3C ``traceparent`` wins; else the reference implementation's bare trace id; else a
    new trace starts here. Without a ``traceparent`` the parent is made only when needed
    (``remote_parent``).
    """
    if envelope.traceparent:
        incoming = Incoming(envelope.traceparent, envelope.tracestate or "")
        trace_id = _usual_trace_id(envelope.traceparent)
        if trace_id is not None:
            return trace_id, incoming
        # Any other form (another version, spaces): OpenTelemetry decides.
        span_ctx = trace.get_current_span(incoming.context()).get_span_context()
        if span_ctx.is_valid:
            return format(span_ctx.trace_id, "032x"), incoming
    return envelope.trace_id or IDS.hex128(), None


_HEX = frozenset("0123456789abcdef")


def _usual_trace_id(traceparent: str) -> str | None:
    """The trace id of a ``traceparent`` in the form every sender uses (version 00,
    lowercase hex, nothing after the flags), which OpenTelemetry's extraction accepts
    with the same trace id; None for anything else."""
    if len(traceparent) != 55 or not traceparent.startswith("00-") \
            or traceparent[35] != "-" or traceparent[52] != "-":
        return None
    trace_id, span_id = traceparent[3:35], traceparent[36:52]
    if not _HEX.issuperset(trace_id) or not _HEX.issuperset(span_id) \
            or not _HEX.issuperset(traceparent[53:]):
        return None
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return trace_id


def remote_parent(trace_id: str) -> Context:
    """A sampled remote parent in trace ``trace_id``, for a task whose caller sent none."""
    remote = SpanContext(
        trace_id=int(trace_id, 16), span_id=IDS.span_id(),
        is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(remote))


def inject_headers(headers: dict[str, str], ctx: Context | None = None) -> None:
    _PROPAGATOR.inject(headers, context=ctx)

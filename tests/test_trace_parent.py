"""A caller's ``traceparent``: the task's trace id is the one OpenTelemetry's own extraction
finds, for any header, though the usual form is read without it; the parent context is
OpenTelemetry's, made when first needed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from butler.telemetry.traces import trace_of
from internal.protocol.a2a.model import Envelope

HEX = "0123456789abcdef"
USUAL = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def extracted(traceparent: str, tracestate: str = "") -> trace.SpanContext:
    ctx = TraceContextTextMapPropagator().extract(
        {"traceparent": traceparent, "tracestate": tracestate})
    return trace.get_current_span(ctx).get_span_context()


def expected_trace_id(traceparent: str) -> str:
    span_ctx = extracted(traceparent)
    return format(span_ctx.trace_id, "032x") if span_ctx.is_valid else "fallback"


def hex_text(size: int) -> st.SearchStrategy[str]:
    return st.text(HEX, min_size=size, max_size=size)


usual_headers = st.builds(
    lambda version, trace_id, span_id, flags: f"{version}-{trace_id}-{span_id}-{flags}",
    st.sampled_from(["00", "01", "fe", "ff", "0g", "00"]),
    hex_text(32) | st.just("0" * 32), hex_text(16) | st.just("0" * 16), hex_text(2))


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """The usual form, with a few characters replaced, inserted or removed."""
    text = draw(usual_headers)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        char = draw(st.sampled_from(list(HEX + "ABCDEF- \t\n_0")))
        how = draw(st.sampled_from(["replace", "insert", "delete"]))
        if how == "replace":
            text = text[:at] + char + text[at + 1:]
        elif how == "insert":
            text = text[:at] + char + text[at:]
        else:
            text = text[:at] + text[at + 1:]
    return text + draw(st.sampled_from(["", " ", "-00", "-extra", "\t"]))


@given(usual_headers | mutated() | st.text(max_size=80))
def test_the_trace_id_is_the_one_opentelemetry_extracts(traceparent: str) -> None:
    trace_id, incoming = trace_of(Envelope(trace_id="fallback", traceparent=traceparent))
    assert trace_id == expected_trace_id(traceparent)
    assert (incoming is not None) == (trace_id != "fallback")


@given(usual_headers)
def test_the_parent_context_is_the_callers_span(traceparent: str) -> None:
    _, incoming = trace_of(Envelope(traceparent=traceparent, tracestate="k=v"))
    if incoming is None:
        assert not extracted(traceparent).is_valid
        return
    parent = trace.get_current_span(incoming.context()).get_span_context()
    assert parent == extracted(traceparent, "k=v")
    assert parent.is_remote and parent.trace_state.get("k") == "v"


def test_a_usual_header_gives_its_trace_id_and_keeps_the_headers_for_later() -> None:
    trace_id, incoming = trace_of(Envelope(traceparent=USUAL))
    assert trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert incoming is not None and incoming.traceparent == USUAL


def test_without_a_valid_header_a_new_trace_starts() -> None:
    trace_id, incoming = trace_of(Envelope(traceparent="00-" + "0" * 32 + "-00f067aa0ba902b7-01"))
    assert incoming is None
    assert len(trace_id) == 32 and trace_id != "0" * 32

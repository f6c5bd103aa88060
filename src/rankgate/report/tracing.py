"""OpenTelemetry traces of a run: a span per stage, per test and per rank.

On when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set,
as ``dagger call`` sets it, and the optional extra is installed
(``pip install 'rankgate[trace]'``: opentelemetry-sdk and its OTLP/HTTP exporter);
otherwise every function here is a no-op, and a set endpoint without the extra is one
warning. Spans go out over OTLP/HTTP (protobuf), the protocol Dagger's engine receives.

A parent's context crosses into child processes in ``TRACEPARENT`` (W3C trace context,
as Dagger passes it into its containers): a stage span run by the executor is the
parent of the pytest session span in the pytest it starts
(:mod:`rankgate.report.tracing_plugin`), whose test spans hold one span per rank.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

SERVICE = "rankgate"
_state: dict = {}


def enabled() -> bool:
    """Whether spans are exported (endpoint set and the SDK importable)."""
    if "tracer" not in _state:
        _state["tracer"] = _make_tracer()
    return _state["tracer"] is not None


def tracer():
    """The rankgate tracer, or None when tracing is off."""
    return _state["tracer"] if enabled() else None


def parent_context():
    """The context of ``TRACEPARENT`` (the caller's span), or None."""
    if not enabled() or not os.environ.get("TRACEPARENT"):
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {"traceparent": os.environ["TRACEPARENT"]}
    if os.environ.get("TRACESTATE"):
        carrier["tracestate"] = os.environ["TRACESTATE"]
    return TraceContextTextMapPropagator().extract(carrier)


@contextlib.contextmanager
def span(name: str, attributes: dict | None = None) -> Iterator[dict[str, str]]:
    """A span around a block; yields the environment that makes it a child process's parent.

    The yielded dict is empty when tracing is off, else ``{"TRACEPARENT": ...}``. Inside
    the block, :func:`mark` sets the span's outcome.
    """
    t = tracer()
    if t is None:
        yield {}
        return
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    current = trace.get_current_span()
    context = None if current.get_span_context().is_valid else parent_context()
    with t.start_as_current_span(name, context=context, attributes=attributes or {}):
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
        yield {"TRACEPARENT": carrier["traceparent"]} if "traceparent" in carrier else {}


def mark(status: str, **attributes) -> None:
    """Set the current span's outcome (a rankgate status word) and attributes."""
    if tracer() is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    for key, value in attributes.items():
        current.set_attribute(key, value)
    current.set_attribute("rankgate.outcome", status)
    set_status(current, status)


def flush() -> None:
    """Send the spans buffered so far."""
    provider = _state.get("provider")
    if provider is not None:
        provider.force_flush()


def set_status(s, status: str, description: str = "") -> None:
    """Mark a span failed (error) or fine, from a rankgate status word."""
    if not status:
        return
    from opentelemetry.trace import Status, StatusCode

    if status in ("failed", "error", "crashed", "hung", "missing"):
        s.set_status(Status(StatusCode.ERROR, description or status))
    else:
        s.set_status(Status(StatusCode.OK))


def shutdown() -> None:
    """Send what is buffered; call before the process exits."""
    provider = _state.pop("provider", None)
    _state.pop("tracer", None)
    if provider is not None:
        provider.shutdown()


def _make_tracer():
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not endpoint or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    )
    if protocol not in ("", "http/protobuf"):
        _warn(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: rankgate exports http/protobuf only; "
              "no spans sent (unset it or set http/protobuf)")  # fmt: skip
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        _warn(f"OTEL_EXPORTER_OTLP_ENDPOINT is set ({endpoint}) but the OpenTelemetry SDK is "
              "not installed: no spans sent (pip install 'rankgate[trace]')")  # fmt: skip
        return None
    attributes = {"service.name": os.environ.get("OTEL_SERVICE_NAME", SERVICE)}
    if os.environ.get("RANK"):  # in place under a launcher: which rank this process is
        attributes["rankgate.rank"] = int(os.environ["RANK"])
    provider = TracerProvider(resource=Resource.create(attributes))
    # The exporter reads the endpoint (adding /v1/traces), headers and timeout itself.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _state["provider"] = provider
    return provider.get_tracer("rankgate")


def _warn(message: str) -> None:
    print(f"rankgate: tracing: {message}", file=sys.stderr, flush=True)

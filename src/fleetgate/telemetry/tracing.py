"""OpenTelemetry traces with the GenAI semantic conventions, and W3C trace-context propagation.

One request span, ``chat {alias}`` (``gen_ai.operation.name``), continues the caller's trace
when the request carries a W3C ``traceparent`` (and ``tracestate``). Under it: one span per
stage that ran (``tenancy``, ``multimodal``, ``safety``, ...), ``routing`` (candidates and the
strategy's pick) and one ``upstream`` client span per attempt, ``chat {upstream model}``, whose
context is sent to the engine as ``traceparent``. Side services called while a span is current
(guard model, ASR, TTS) get the same header (`trace_headers`, `trace_config`).

Tracing off (``otel_exporter: none``) allocates nothing for a request without ``traceparent``;
one with it is passed through unchanged to the engine and side services, so their spans still
join the caller's trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import aiohttp
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["GenAITracer", "RequestTrace", "TRACE_HEADERS", "trace_config", "trace_headers"]

TRACE_HEADERS = frozenset({"traceparent", "tracestate"})
"""The W3C trace-context request headers (lower case) the gateway accepts and sends on."""

_PROPAGATOR = TraceContextTextMapPropagator()


def trace_headers() -> dict[str, str]:
    """``traceparent``/``tracestate`` of the current span; empty when there is none."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier


async def _inject_on_request(
    session: aiohttp.ClientSession, ctx: SimpleNamespace, params: aiohttp.TraceRequestStartParams
) -> None:
    for name, value in trace_headers().items():
        params.headers[name] = value


def trace_config() -> aiohttp.TraceConfig:
    """An aiohttp trace config that adds the current trace context to every request of a
    session (the side services' shared session), so no call site has to remember it."""
    config = aiohttp.TraceConfig()
    config.on_request_start.append(_inject_on_request)
    return config


class RequestTrace:
    """The trace of one gateway request: its span, the stages' and attempts' spans under it.

    ``tracer`` None: tracing is off and the caller's context is only passed on.
    """

    __slots__ = ("_attempt", "_routing", "_token", "_tracer", "context", "operation", "span")

    def __init__(
        self, tracer: Any, span: Any, context: otel_context.Context, operation: str = "chat"
    ) -> None:
        self._tracer = tracer
        self.operation = operation  # gen_ai.operation.name of the attempts
        self.span = span
        self.context = context  # the request span's context: parent of everything below
        self._routing: Any = None
        self._attempt: Any = None
        self._token: object | None = None

    def activate(self) -> None:
        """Make the request span current in this task (side-service calls inherit it)."""
        if self._token is None:
            self._token = otel_context.attach(self.context)

    def deactivate(self) -> None:
        token, self._token = self._token, None
        if token is not None:
            with contextlib.suppress(ValueError):  # detached in another context: harmless
                otel_context.detach(token)  # type: ignore[arg-type]

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """A span for one stage's work on the way in, current while it runs."""
        if self._tracer is None:
            yield
            return
        span = self._tracer.start_span(
            name, context=self.context, attributes={"fleetgate.stage": name}
        )
        with trace.use_span(span, end_on_exit=True, record_exception=False):
            try:
                yield
            except BaseException as exc:
                _error(span, type(exc).__name__)
                raise

    def routing_started(self, alias: str) -> None:
        """The dispatcher starts choosing a deployment for ``alias``."""
        if self._tracer is not None and self._routing is None:
            self._routing = self._tracer.start_span(
                "routing", context=self.context, attributes={"fleetgate.alias": alias}
            )

    def attempt(self, deployment: str, model: str, api_base: str, number: int) -> Mapping[str, str]:
        """An attempt to ``deployment`` is about to be sent: ends the routing span (and the
        previous attempt's, as retried), starts its client span; returns the headers that
        carry its context to the engine."""
        if self._tracer is None:
            return _headers_of(self.context)
        if self._routing is not None:
            self._routing.set_attribute("fleetgate.deployment", deployment)
            self._routing.end()
            self._routing = None
        if self._attempt is not None:
            _error(self._attempt, "retried")
            self._attempt.end()
        address = api_base.split("://", 1)[-1].split("/", 1)[0]
        host, _, port = address.rpartition(":") if ":" in address else (address, "", "")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": self.operation,
            "gen_ai.request.model": model,
            "server.address": host,
            "fleetgate.deployment": deployment,
            "fleetgate.attempt": number,
        }
        if port.isdigit():
            attributes["server.port"] = int(port)
        self._attempt = self._tracer.start_span(
            f"{self.operation} {model}",
            context=self.context,
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        return _headers_of(trace.set_span_in_context(self._attempt))

    def upstream_done(self, error: str | None = None) -> None:
        """The chosen attempt's exchange ended (its stream read to the end, or failed)."""
        if self._routing is not None:
            if error is not None:
                _error(self._routing, error)
            self._routing.end()
            self._routing = None
        if self._attempt is not None:
            if error is not None:
                _error(self._attempt, error)
            self._attempt.end()
            self._attempt = None

    def finish(self, attributes: Mapping[str, Any], error: str | None = None) -> None:
        """Ends every span still open, the request span last; the answering attempt gets the
        response's ``gen_ai.*`` attributes too."""
        if self._attempt is not None:
            for key, value in attributes.items():
                if value is not None and key.startswith("gen_ai."):
                    self._attempt.set_attribute(key, value)
        self.upstream_done(error)
        self.deactivate()
        if self._tracer is None:
            return
        for key, value in attributes.items():
            if value is not None:
                self.span.set_attribute(key, value)
        if error is not None:
            _error(self.span, error)
        self.span.end()


def _headers_of(ctx: otel_context.Context) -> dict[str, str]:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=ctx)
    return carrier


def _error(span: Any, error: str) -> None:
    span.set_attribute("error.type", error)
    span.set_status(Status(StatusCode.ERROR, error))


class GenAITracer:
    """Wraps an OpenTelemetry tracer provider owned by one app (no global provider is set)."""

    def __init__(self, exporter: str = "none", endpoint: str | None = None) -> None:
        self.enabled = exporter != "none"
        self._provider: Any = None
        self._tracer: Any = None
        self.memory: Any = None
        if not self.enabled:
            return
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        provider = TracerProvider(resource=Resource.create({"service.name": "fleetgate"}))
        if exporter == "memory":
            self.memory = InMemorySpanExporter()
            provider.add_span_processor(SimpleSpanProcessor(self.memory))
        elif exporter == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif exporter == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
            except ImportError as exc:
                raise RuntimeError(
                    "otel_exporter 'otlp' needs the otlp extra: pip install 'fleetgate[otlp]'"
                ) from exc
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        self._provider = provider
        self._tracer = provider.get_tracer("fleetgate")

    def request(
        self,
        operation: str,
        model: str,
        attributes: Mapping[str, Any],
        headers: Mapping[str, str],
    ) -> RequestTrace | None:
        """The trace of a new request (``headers``: its lower-case request headers); None
        when tracing is off and the caller sent no ``traceparent``."""
        parent = _PROPAGATOR.extract(headers) if "traceparent" in headers else None
        if self._tracer is None:
            if parent is None:
                return None
            span_context = trace.get_current_span(parent).get_span_context()
            if not span_context.is_valid:
                return None
            return RequestTrace(None, NonRecordingSpan(span_context), parent)
        attrs: dict[str, Any] = {"gen_ai.operation.name": operation, "gen_ai.request.model": model}
        attrs.update({k: v for k, v in attributes.items() if v is not None})
        span = self._tracer.start_span(
            f"{operation} {model}", context=parent, kind=SpanKind.SERVER, attributes=attrs
        )
        return RequestTrace(self._tracer, span, trace.set_span_in_context(span), operation)

    def shutdown(self) -> None:
        if self._provider is not None:
            self._provider.shutdown()

"""OpenTelemetry traces with the GenAI semantic conventions; off by default.

One span per request, ``chat {model}`` (``gen_ai.operation.name``), with the request's model,
the answering deployment, token usage and finish. When tracing is off nothing is allocated.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GenAITracer"]


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
                    "otel_exporter 'otlp' needs: pip install opentelemetry-exporter-otlp-proto-http"
                ) from exc
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        self._provider = provider
        self._tracer = provider.get_tracer("fleetgate")

    def start(self, operation: str, model: str, attributes: dict[str, Any]) -> Any:
        """Start a client span; returns None when tracing is off."""
        if self._tracer is None:
            return None
        from opentelemetry.trace import SpanKind

        attrs = {"gen_ai.operation.name": operation, "gen_ai.request.model": model}
        attrs.update({k: v for k, v in attributes.items() if v is not None})
        return self._tracer.start_span(
            f"{operation} {model}", kind=SpanKind.CLIENT, attributes=attrs
        )

    @staticmethod
    def finish(span: Any, attributes: dict[str, Any], error: str | None = None) -> None:
        if span is None:
            return
        for key, value in attributes.items():
            if value is not None:
                span.set_attribute(key, value)
        if error is not None:
            from opentelemetry.trace import Status, StatusCode

            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    def shutdown(self) -> None:
        if self._provider is not None:
            self._provider.shutdown()

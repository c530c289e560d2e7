"""One request's facts, gathered along the path and recorded after it (off the hot path)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from fleetgate.hooks import Outcome
from fleetgate.providers.base import Endpoint
from fleetgate.routing.deployment import Deployment
from fleetgate.telemetry.access_log import AccessLog
from fleetgate.telemetry.metrics import GatewayMetrics
from fleetgate.telemetry.tracing import GenAITracer
from fleetgate.tenancy.principal import Principal

__all__ = ["Exchange", "record_exchange", "usage_counts"]


@dataclass(slots=True)
class Exchange:
    request_id: str
    endpoint: Endpoint
    alias: str
    principal: Principal
    started: float
    stream: bool
    deployment: Deployment | None = None
    status: int = 200
    error_type: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    first_token_at: float | None = None
    last_token_at: float | None = None
    chunks: int = 0
    upstream_s: float = 0.0
    overhead_s: float = 0.0
    attempts: int = 0
    finish_reason: str | None = None
    span: Any = None
    response_text: str | None = None
    client_request_id: str | None = None  # the caller's x-request-id, for correlation only
    upstream_done: bool = False  # the upstream stream reached its end ([DONE])

    def outcome(self) -> Outcome:
        dep = self.deployment
        return Outcome(
            status=self.status,
            error_type=self.error_type,
            alias=self.alias,
            deployment=dep.id if dep is not None else None,
            version=dep.version if dep is not None else None,
            upstream_model=dep.config.model if dep is not None else None,
            price=dep.config.price if dep is not None else None,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cached_tokens=self.cached_tokens,
            latency_s=time.perf_counter() - self.started,
            ttft_s=None if self.first_token_at is None else self.first_token_at - self.started,
            finish_reason=self.finish_reason,
            attempts=self.attempts,
            response_text=self.response_text,
        )

    def take_usage(self, usage: Any) -> None:
        counts = usage_counts(usage)
        if counts is not None:
            self.prompt_tokens, self.completion_tokens, self.cached_tokens = counts


def usage_counts(usage: Any) -> tuple[int, int, int] | None:
    """(prompt, completion, cached prompt) tokens of an OpenAI ``usage`` object."""
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens") or 0
    completion = usage.get("completion_tokens") or 0
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") or 0 if isinstance(details, dict) else 0
    if not all(isinstance(v, int) for v in (prompt, completion, cached)):
        return None
    return prompt, completion, cached


def record_exchange(
    ex: Exchange, metrics: GatewayMetrics, access_log: AccessLog, tracer: GenAITracer
) -> None:
    """Metrics, access log and trace for a finished request."""
    end = time.perf_counter()
    dep = ex.deployment
    dep_id = dep.id if dep is not None else ""
    version = dep.version if dep is not None else ""
    labels = (ex.alias, dep_id, version)
    metrics.requests.labels(*labels, str(ex.status)).inc()
    metrics.overhead.labels(ex.alias).observe(ex.overhead_s)
    if ex.status < 400 and dep is not None:
        metrics.e2e.labels(*labels).observe(end - ex.started)
        if ex.prompt_tokens:
            metrics.tokens.labels(*labels, "input").inc(ex.prompt_tokens)
        if ex.completion_tokens:
            metrics.tokens.labels(*labels, "output").inc(ex.completion_tokens)
        if ex.first_token_at is not None:
            metrics.ttft.labels(*labels).observe(ex.first_token_at - ex.started)
            if ex.last_token_at is not None and ex.completion_tokens > 1:
                tpot = (ex.last_token_at - ex.first_token_at) / (ex.completion_tokens - 1)
                metrics.tpot.labels(*labels).observe(tpot)
    elif ex.error_type is not None:
        metrics.errors.labels(str(ex.status), ex.error_type).inc()
    access_log.record(
        {
            "ts": time.time(),
            "request_id": ex.request_id,
            "client_request_id": ex.client_request_id,
            "endpoint": ex.endpoint.value,
            "key": ex.principal.key_id,
            "team": ex.principal.team_id,
            "alias": ex.alias,
            "deployment": dep_id or None,
            "version": version or None,
            "status": ex.status,
            "error": ex.error_type,
            "stream": ex.stream,
            "attempts": ex.attempts,
            "prompt_tokens": ex.prompt_tokens,
            "completion_tokens": ex.completion_tokens,
            "latency_ms": round((end - ex.started) * 1000, 3),
            "overhead_ms": round(ex.overhead_s * 1000, 3),
        }
    )
    if ex.span is not None:
        tracer.finish(
            ex.span,
            {
                "gen_ai.response.model": dep.config.model if dep is not None else None,
                "gen_ai.usage.input_tokens": ex.prompt_tokens,
                "gen_ai.usage.output_tokens": ex.completion_tokens,
                "gen_ai.response.finish_reasons": (ex.finish_reason,) if ex.finish_reason else None,
                "fleetgate.deployment": dep_id or None,
                "http.response.status_code": ex.status,
            },
            error=ex.error_type,
        )

"""The record of a finished request: metrics, access log and trace (queued, off the hot path)."""

from __future__ import annotations

import time

from fleetgate.contract.request import GatewayRequest
from fleetgate.telemetry.access_log import AccessLog
from fleetgate.telemetry.metrics import GatewayMetrics

__all__ = ["record_exchange"]


def record_exchange(req: GatewayRequest, metrics: GatewayMetrics, access_log: AccessLog) -> None:
    """Metrics, access log and trace for a request whose outcome
    (`fleetgate.contract.request.Outcome`) is final."""
    out = req.outcome
    dep_id = out.deployment or ""
    version = out.version or ""
    labels = (out.alias, dep_id, version)
    metrics.requests.labels(*labels, str(out.status)).inc()
    metrics.overhead.labels(out.alias).observe(out.overhead_s)
    if out.status < 400 and out.deployment is not None:
        metrics.e2e.labels(*labels).observe(out.latency_s)
        if out.prompt_tokens:
            metrics.tokens.labels(*labels, "input").inc(out.prompt_tokens)
        if out.completion_tokens:
            metrics.tokens.labels(*labels, "output").inc(out.completion_tokens)
        if out.ttft_s is not None:
            metrics.ttft.labels(*labels).observe(out.ttft_s)
            first, last = out.first_token_at, out.last_token_at
            if first is not None and last is not None and out.completion_tokens > 1:
                tpot = (last - first) / (out.completion_tokens - 1)
                metrics.tpot.labels(*labels).observe(tpot)
    elif out.error_type is not None:
        metrics.errors.labels(str(out.status), out.error_type).inc()
    access_log.record(
        {
            "ts": time.time(),
            "request_id": req.request_id,
            "client_request_id": req.headers.get("x-request-id"),
            "endpoint": req.endpoint._value_,  # the value, without the enum's descriptor
            "key": req.principal.key_id,
            "team": req.principal.team_id,
            "alias": out.alias,
            "deployment": dep_id or None,
            "version": version or None,
            "status": out.status,
            "error": out.error_type,
            "stream": req.stream,
            "attempts": out.attempts,
            "prompt_tokens": out.prompt_tokens,
            "completion_tokens": out.completion_tokens,
            "latency_ms": round(out.latency_s * 1000, 3),
            "overhead_ms": round(out.overhead_s * 1000, 3),
        }
    )
    if out.span is not None:
        out.span.finish(
            {
                "gen_ai.response.model": out.upstream_model,
                "gen_ai.usage.input_tokens": out.prompt_tokens,
                "gen_ai.usage.output_tokens": out.completion_tokens,
                "gen_ai.response.finish_reasons": (
                    (out.finish_reason,) if out.finish_reason else None
                ),
                "fleetgate.deployment": dep_id or None,
                "http.response.status_code": out.status,
            },
            error=out.error_type,
        )

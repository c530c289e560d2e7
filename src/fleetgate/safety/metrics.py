"""Prometheus metrics of the safety layer, registered once on the app's Registry."""

from __future__ import annotations

from fleetgate.safety.base import CheckPoint, Verdict
from fleetgate.telemetry.registry import Counter, Gauge, Histogram, Registry

__all__ = ["SafetyMetrics"]


class SafetyMetrics:
    """Counters for checks, streams and the audit queue. Create one per Registry."""

    def __init__(self, registry: Registry) -> None:
        self.verdicts: Counter = registry.counter(
            "fleetgate_safety_verdicts_total",
            "Safety check verdicts by stage, check and action.",
            ["stage", "check", "action"],
        )
        self.check_errors: Counter = registry.counter(
            "fleetgate_safety_check_errors_total",
            "Safety checks that could not decide (endpoint down, timeout, bad answer).",
            ["stage", "check"],
        )
        self.stream_stops: Counter = registry.counter(
            "fleetgate_safety_stream_stops_total", "Streams stopped by moderation.", ["check"]
        )
        self.audit: Counter = registry.counter(
            "fleetgate_safety_audit_total", "Audited exchanges by result.", ["result"]
        )
        self.audit_shed: Counter = registry.counter(
            "fleetgate_safety_audit_shed_total",
            "Exchanges dropped because the audit queue was full.",
        )
        self.audit_violations: Counter = registry.counter(
            "fleetgate_safety_audit_violations_total",
            "Audit violations by category.",
            ["category"],
        )
        self.alerts: Counter = registry.counter(
            "fleetgate_safety_alerts_total", "Alert webhook deliveries by result.", ["result"]
        )
        self.suspensions: Counter = registry.counter(
            "fleetgate_safety_key_suspensions_total", "Keys suspended after repeated violations."
        )
        self.cascade_decisions: Counter = registry.counter(
            "fleetgate_safety_cascade_decisions_total",
            "Decisions of each stage of a cascade check (block, mask, allow, escalate, error).",
            ["check", "stage", "decision"],
        )
        self.cascade_seconds: Histogram = registry.histogram(
            "fleetgate_safety_cascade_seconds",
            "Time spent in each stage of a cascade check.",
            ["check", "stage"],
        )
        self.audit_queue_depth: Gauge = registry.gauge(
            "fleetgate_safety_audit_queue_depth", "Exchanges waiting in the audit queue."
        )

    def record(self, stage: CheckPoint, verdict: Verdict) -> None:
        if verdict.error:
            self.check_errors.labels(stage.value, verdict.check).inc()
        self.verdicts.labels(stage.value, verdict.check, verdict.action.value).inc()
